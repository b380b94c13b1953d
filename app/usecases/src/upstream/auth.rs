//! One upstream's side of its credential: sessions replaced when it changes, and a session of
//! its own for a connection test.

use std::sync::Arc;

use quarry_domain::{OAuthCredential, UpstreamAuth};
use quarry_ports::{AccessTokens, Browser, OAuthFailure, UpstreamError, UpstreamSession};

use super::{Upstream, lock};
use crate::tokens::ServerTokens;

impl Upstream {
    /// What the connector says of `auth` beyond its shape (a certificate and key that match).
    pub(crate) fn check_auth(&self, auth: &UpstreamAuth) -> Result<(), UpstreamError> {
        self.wiring.connector.check_auth(auth)
    }

    /// Requests to this server in flight now.
    pub(crate) async fn in_flight(&self) -> usize {
        self.pool.in_flight().await
    }

    /// Its credential changed: sessions opened before end (once their requests are done), and
    /// the next request opens one with the new credential.
    pub(crate) async fn credential_changed(&self) {
        self.pool.replace_all().await;
        *lock(&self.tokens) = None;
        let mut r = lock(&self.status);
        r.authenticated = false;
        r.last_error = None;
        drop(r);
        self.breaker.succeeded();
    }

    /// A fresh session outside the pool, with the stored credential: for a connection test.
    pub(crate) async fn open_alone(&self) -> Result<Arc<dyn UpstreamSession>, UpstreamError> {
        let spec = &self.settings.spec;
        let auth = self.wiring.vault.credential(spec).await?;
        let tokens = self
            .tokens_for(auth.as_ref())
            .map(|t| t as Arc<dyn AccessTokens>);
        let observer = self.heard.clone();
        self.wiring
            .connector
            .connect(spec, auth.as_ref(), tokens, observer)
            .await
    }

    /// The token holder for `auth` when it is an OAuth credential: the one its sessions share,
    /// made from the stored credential the first time.
    pub(crate) fn tokens_for(&self, auth: Option<&UpstreamAuth>) -> Option<Arc<ServerTokens>> {
        let Some(UpstreamAuth::OAuth2(credential)) = auth else {
            *lock(&self.tokens) = None;
            return None;
        };
        let mut held = lock(&self.tokens);
        let tokens = held.get_or_insert_with(|| {
            Arc::new(ServerTokens::stored(
                self.settings.spec.clone(),
                (**credential).clone(),
                self.wiring.oauth.clone(),
                self.wiring.clock.clone(),
                self.wiring.vault.clone(),
            ))
        });
        Some(tokens.clone())
    }

    /// True while its OAuth tokens can be had only through a new sign-in.
    pub(crate) fn needs_sign_in(&self) -> bool {
        lock(&self.tokens).as_ref().is_some_and(|t| t.needs_login())
    }

    /// The authorization-code flow for this server with `credential`'s client.
    pub(crate) async fn sign_in(
        &self,
        credential: &OAuthCredential,
        browser: &dyn Browser,
    ) -> Result<OAuthCredential, OAuthFailure> {
        self.wiring
            .oauth
            .authorize(&self.settings.spec, credential, None, browser)
            .await
    }
}
