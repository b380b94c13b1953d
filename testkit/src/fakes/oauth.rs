//! An OAuth client that talks to no server: an authorization server in memory, whose refresh
//! tokens rotate (only the newest works), counting its token requests.

use std::{
    sync::{
        Mutex,
        atomic::{AtomicU32, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use quarry_domain::{OAuthCredential, Secret, ServerSpec};
use quarry_ports::{Browser, Challenge, OAuthClient, OAuthFailure};

/// Tokens `access-N` / `refresh-N`, where N counts the token requests; the newest refresh
/// token alone is accepted.
#[derive(Debug, Default)]
pub struct FakeOAuth {
    issued: AtomicU32,
    newest_refresh: Mutex<Option<String>>,
    /// How long each token request takes (so concurrent callers overlap).
    pub delay: Duration,
    /// Seconds since the epoch that issued tokens expire at (None: no expiry given).
    pub expires_at: Option<i64>,
}

impl FakeOAuth {
    /// An authorization server whose current refresh token is `refresh`.
    pub fn with_refresh_token(refresh: &str, delay: Duration, expires_at: Option<i64>) -> Self {
        Self {
            issued: AtomicU32::new(0),
            newest_refresh: Mutex::new(Some(refresh.to_owned())),
            delay,
            expires_at,
        }
    }

    /// Token requests answered so far.
    pub fn token_requests(&self) -> u32 {
        self.issued.load(Ordering::SeqCst)
    }

    /// Revokes the grant: no refresh token works any more.
    pub fn revoke(&self) {
        *self
            .newest_refresh
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
    }
}

fn secret(s: String) -> Option<Secret> {
    Secret::parse("token", s).ok()
}

#[async_trait]
impl OAuthClient for FakeOAuth {
    async fn renew(
        &self,
        _spec: &ServerSpec,
        credential: &OAuthCredential,
        _challenge: Option<&Challenge>,
    ) -> Result<OAuthCredential, OAuthFailure> {
        tokio::time::sleep(self.delay).await;
        let n = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
        let mut newest = self
            .newest_refresh
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let presented = credential.refresh_token.as_ref().map(Secret::expose);
        if newest.is_none() || presented != newest.as_deref() {
            return Err(OAuthFailure::NeedsLogin(
                "the token endpoint answered HTTP 400 (invalid_grant)".into(),
            ));
        }
        let mut next = credential.clone();
        next.access_token = secret(format!("access-{n}"));
        next.refresh_token = secret(format!("refresh-{n}"));
        next.expires_at = self.expires_at;
        *newest = Some(format!("refresh-{n}"));
        Ok(next)
    }

    async fn authorize(
        &self,
        _spec: &ServerSpec,
        _credential: &OAuthCredential,
        _challenge: Option<&Challenge>,
        _browser: &dyn Browser,
    ) -> Result<OAuthCredential, OAuthFailure> {
        Err(OAuthFailure::Unavailable("the fake signs no one in".into()))
    }
}
