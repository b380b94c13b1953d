//! OAuth 2 toward upstreams: the protocol (an adapter speaks it) and the tokens of one server
//! (the use cases hold them, so refreshes are single-flight and persisted before use).

use async_trait::async_trait;
use quarry_domain::{OAuthCredential, Secret, ServerSpec};

use crate::UpstreamError;

/// What a server said when it refused a request's token (`WWW-Authenticate`, RFC 6750).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Challenge {
    /// True for 403 `insufficient_scope` (the token is valid but needs more scope); false for
    /// 401 (missing, expired or revoked).
    pub insufficient_scope: bool,
    /// The scopes the server says the request needs, if it says.
    pub scope: Option<String>,
    /// Where its protected-resource metadata is (RFC 9728), if it says.
    pub resource_metadata: Option<String>,
}

/// The access token a connection sends, asked for on every request.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait AccessTokens: Send + Sync + std::fmt::Debug {
    /// The token to send now, renewed first when it is about to expire; None when there is
    /// none yet (the server's refusal then says how to get one).
    ///
    /// # Errors
    /// [`UpstreamError::Unauthorized`] when a token is needed and cannot be had.
    async fn current(&self) -> Result<Option<Secret>, UpstreamError>;

    /// The server refused `sent` (None: the request went without a token) with `challenge`:
    /// a token to retry with. Callers refused the same token share one renewal.
    ///
    /// # Errors
    /// [`UpstreamError::Unauthorized`] when no better token can be had (the request fails
    /// with E005 and the server's status says what to do).
    async fn refused(
        &self,
        sent: Option<Secret>,
        challenge: Challenge,
    ) -> Result<Secret, UpstreamError>;
}

/// Why tokens could not be obtained.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OAuthFailure {
    /// A person has to act: the grant was revoked or expired, consent or more scope is needed,
    /// or no refresh token exists. The message says why, never a secret.
    #[error("{0}")]
    NeedsLogin(String),
    /// The authorization server or its metadata cannot be used (unreachable, refused by the
    /// address rules, malformed, or not the issuer it claims to be).
    #[error("{0}")]
    Unavailable(String),
}

/// A person's part of the authorization-code flow: visiting the authorization URL.
#[async_trait]
pub trait Browser: Send + Sync {
    /// Shows `url` to whoever approves the request (or visits it, for a server that approves
    /// without a person). The authorization server then redirects to Quarry's loopback listener.
    ///
    /// # Errors
    /// A message when the URL cannot be shown or visited.
    async fn open(&self, url: &str) -> Result<(), String>;
}

/// The OAuth 2 protocol as the MCP authorization spec describes it for clients.
#[async_trait]
pub trait OAuthClient: Send + Sync + std::fmt::Debug {
    /// New tokens for `credential` without a person: the refresh-token grant, or client
    /// credentials (asking for the `challenge`'s scope too when it says more is needed).
    /// Discovery fills in the issuer, token endpoint and resource the credential lacks.
    /// A rotated refresh token is in the result.
    ///
    /// # Errors
    /// [`OAuthFailure::NeedsLogin`] when only a person can fix it; [`OAuthFailure::Unavailable`]
    /// otherwise.
    async fn renew(
        &self,
        spec: &ServerSpec,
        credential: &OAuthCredential,
        challenge: Option<&Challenge>,
    ) -> Result<OAuthCredential, OAuthFailure>;

    /// The authorization-code flow: discovery (from `challenge`, or from the server's own
    /// refusal when None), a client id (pre-registered, a metadata document, or dynamic
    /// registration), PKCE S256, `state` and an exact loopback redirect URI, the issuer
    /// checked; `browser` is shown the authorization URL. Returns the credential with tokens.
    ///
    /// # Errors
    /// [`OAuthFailure`] saying which step failed.
    async fn authorize(
        &self,
        spec: &ServerSpec,
        credential: &OAuthCredential,
        challenge: Option<&Challenge>,
        browser: &dyn Browser,
    ) -> Result<OAuthCredential, OAuthFailure>;
}
