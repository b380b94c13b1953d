//! The OAuth tokens of one upstream server, as its connections ask for them.
//!
//! Renewals are single-flight: they happen under one lock per server, and a caller whose
//! refused token was already replaced gets the replacement without a second token request. A
//! renewed credential (a rotated refresh token with it) is sealed into the vault before its
//! token is handed out (UC-6), so a crash leaves the old or the new refresh token stored, never
//! neither. Before renewing, the stored credential is read again: another process (`quarry auth
//! login`, a replica) may have renewed it already.
//!
//! When only a person can help (the grant was revoked, more consent is needed), requests fail
//! at once with E005 naming `quarry auth login`, until the stored credential changes.

use std::sync::{
    Arc,
    atomic::{AtomicBool, AtomicU32, Ordering},
};

use quarry_domain::{OAuthCredential, OAuthGrant, Secret, ServerSpec, UpstreamAuth};
use quarry_ports::{
    AccessTokens, Browser, Challenge, Clock, OAuthClient, OAuthFailure, UpstreamError,
};

use crate::vault::Vault;

/// A token due to expire within this many seconds is renewed before it is sent.
const RENEW_MARGIN_SECS: i64 = 60;
/// At most this many sign-ins for one connection (a server that keeps asking for more scope
/// must not loop).
const MAX_SIGN_INS: u32 = 3;

/// One server's tokens.
pub struct ServerTokens {
    spec: ServerSpec,
    oauth: Arc<dyn OAuthClient>,
    clock: Arc<dyn Clock>,
    /// Where renewed credentials are kept (none: held in memory only, for a probe).
    vault: Option<Vault>,
    /// Signs a person in when a token is refused (a probe or `quarry auth login`); a serving
    /// gateway has none and says what to run instead.
    browser: Option<Arc<dyn Browser>>,
    credential: tokio::sync::Mutex<OAuthCredential>,
    needs_login: AtomicBool,
    sign_ins: AtomicU32,
    renewals: AtomicU32,
}

impl std::fmt::Debug for ServerTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTokens")
            .field("server", &self.spec.name)
            .field("needs_login", &self.needs_login)
            .finish_non_exhaustive()
    }
}

impl ServerTokens {
    pub(crate) fn stored(
        spec: ServerSpec,
        credential: OAuthCredential,
        oauth: Arc<dyn OAuthClient>,
        clock: Arc<dyn Clock>,
        vault: Vault,
    ) -> Self {
        Self::build(spec, credential, oauth, clock, Some(vault), None)
    }

    /// Tokens held in memory only, signing in through `browser` when the server asks: for
    /// probing a server before it is registered.
    pub fn interactive(
        spec: ServerSpec,
        credential: OAuthCredential,
        oauth: Arc<dyn OAuthClient>,
        clock: Arc<dyn Clock>,
        browser: Arc<dyn Browser>,
    ) -> Self {
        Self::build(spec, credential, oauth, clock, None, Some(browser))
    }

    fn build(
        spec: ServerSpec,
        credential: OAuthCredential,
        oauth: Arc<dyn OAuthClient>,
        clock: Arc<dyn Clock>,
        vault: Option<Vault>,
        browser: Option<Arc<dyn Browser>>,
    ) -> Self {
        Self {
            spec,
            oauth,
            clock,
            vault,
            browser,
            credential: tokio::sync::Mutex::new(credential),
            needs_login: AtomicBool::new(false),
            sign_ins: AtomicU32::new(0),
            renewals: AtomicU32::new(0),
        }
    }

    /// True while only a person can provide a token.
    pub(crate) fn needs_login(&self) -> bool {
        self.needs_login.load(Ordering::Relaxed)
    }

    /// When the access token expires (Unix seconds), unless a renewal holds the credential now.
    pub(crate) fn expires_at(&self) -> Option<i64> {
        self.credential.try_lock().ok().and_then(|c| c.expires_at)
    }

    /// How many token requests this holder made (renewals and sign-ins).
    pub fn token_requests(&self) -> u32 {
        self.renewals.load(Ordering::Relaxed) + self.sign_ins.load(Ordering::Relaxed)
    }

    fn now(&self) -> i64 {
        self.clock.now().timestamp()
    }

    fn login_needed(&self, why: &str) -> UpstreamError {
        self.needs_login.store(true, Ordering::Relaxed);
        let server = &self.spec.name;
        UpstreamError::Unauthorized(format!(
            "'{server}' needs a new OAuth sign-in ({why}): run `quarry auth login {server}`"
        ))
    }

    /// The stored credential, when it is an OAuth one other than `held`.
    async fn stored_other(&self, held: &OAuthCredential) -> Option<OAuthCredential> {
        let vault = self.vault.as_ref()?;
        match vault.credential(&self.spec).await {
            Ok(Some(UpstreamAuth::OAuth2(stored))) if *stored != *held => Some(*stored),
            _ => None,
        }
    }

    /// Renews `held` (under the lock), persisting the result before it is used.
    async fn renew(
        &self,
        held: &mut OAuthCredential,
        challenge: Option<&Challenge>,
    ) -> Result<Secret, UpstreamError> {
        if let Some(stored) = self.stored_other(held).await {
            let refreshed_elsewhere = stored.access_token != held.access_token
                && !stored.needs_renewal(self.now(), RENEW_MARGIN_SECS);
            *held = stored;
            if refreshed_elsewhere && challenge.is_none_or(|c| !c.insufficient_scope) {
                self.needs_login.store(false, Ordering::Relaxed);
                return held
                    .access_token
                    .clone()
                    .ok_or_else(|| self.login_needed("no token"));
            }
        }
        let interactive = self.browser.as_ref().filter(|_| {
            held.grant == OAuthGrant::AuthorizationCode
                && (challenge.is_some_and(|c| c.insufficient_scope) || !held.renews_alone())
        });
        let renewed = match interactive {
            Some(browser) => {
                if self.sign_ins.fetch_add(1, Ordering::Relaxed) >= MAX_SIGN_INS {
                    return Err(UpstreamError::Unauthorized(format!(
                        "'{}' still refuses after {MAX_SIGN_INS} sign-ins",
                        self.spec.name
                    )));
                }
                self.oauth
                    .authorize(&self.spec, held, challenge, browser.as_ref())
                    .await
            }
            None => {
                if !held.renews_alone() && held.access_token.is_none() && self.browser.is_none() {
                    return Err(self.login_needed("no one has signed in yet"));
                }
                self.renewals.fetch_add(1, Ordering::Relaxed);
                self.oauth.renew(&self.spec, held, challenge).await
            }
        };
        let renewed = match renewed {
            Ok(c) => c,
            Err(OAuthFailure::NeedsLogin(why)) => return Err(self.login_needed(&why)),
            Err(OAuthFailure::Unavailable(why)) => {
                return Err(UpstreamError::Unauthorized(format!(
                    "no token for '{}': {why}",
                    self.spec.name
                )));
            }
        };
        if let Some(vault) = &self.vault {
            let auth = UpstreamAuth::OAuth2(Box::new(renewed.clone()));
            if let Err(e) = vault.put(&self.spec, &auth).await {
                // The renewed token works; the next renewal stores it again.
                tracing::error!(server = %self.spec.name, "the renewed OAuth token cannot be stored: {}", e.message());
            }
        }
        *held = renewed;
        self.needs_login.store(false, Ordering::Relaxed);
        tracing::info!(server = %self.spec.name, "OAuth token renewed");
        held.access_token
            .clone()
            .ok_or_else(|| self.login_needed("the authorization server gave no token"))
    }
}

impl ServerTokens {
    /// Renews now, whatever the token's expiry says (`mcp_auth_refresh`).
    pub(crate) async fn renew_now(&self) -> Result<(), UpstreamError> {
        let mut held = self.credential.lock().await;
        let mut forced = held.clone();
        forced.expires_at = Some(i64::MIN);
        *held = forced;
        self.renew(&mut held, None).await.map(|_| ())
    }
}

#[async_trait::async_trait]
impl AccessTokens for ServerTokens {
    async fn current(&self) -> Result<Option<Secret>, UpstreamError> {
        let mut held = self.credential.lock().await;
        if self.needs_login() {
            // Fail fast, unless someone has signed in since.
            match self.stored_other(&held).await {
                Some(stored) => {
                    *held = stored;
                    self.needs_login.store(false, Ordering::Relaxed);
                }
                None => return Err(self.login_needed("the last renewal was refused")),
            }
        }
        if !held.needs_renewal(self.now(), RENEW_MARGIN_SECS) {
            return Ok(held.access_token.clone());
        }
        if held.access_token.is_none() && self.browser.is_some() && !held.renews_alone() {
            // The server's refusal tells the sign-in what to ask for.
            return Ok(None);
        }
        self.renew(&mut held, None).await.map(Some)
    }

    async fn refused(
        &self,
        sent: Option<Secret>,
        challenge: Challenge,
    ) -> Result<Secret, UpstreamError> {
        let mut held = self.credential.lock().await;
        if !challenge.insufficient_scope
            && held.access_token.is_some()
            && held.access_token != sent
            && !held.needs_renewal(self.now(), RENEW_MARGIN_SECS)
        {
            // Another caller renewed it while this one waited.
            return held
                .access_token
                .clone()
                .ok_or_else(|| self.login_needed("no token"));
        }
        self.renew(&mut held, Some(&challenge)).await
    }
}
