//! The upstream port: sessions with the MCP servers Quarry aggregates.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use quarry_domain::{
    CacheHint, Content, Error, ErrorCode, ServerName, ServerSpec, Timestamp, UpstreamAuth,
};

/// Why an upstream call failed. Adapters map their library's errors to these once, at the seam.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    /// The server could not be reached, or the session died.
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// Recent attempts failed and the next is not due yet: failed fast without trying.
    #[error("unavailable: {0}")]
    CircuitOpen(String),
    /// No answer within the deadline.
    #[error("timed out after {0} ms")]
    Timeout(u64),
    /// A TLS connection cannot be made as configured (a TLS version the server does not speak,
    /// a certificate not trusted, an unreadable CA file): retrying does not help.
    #[error("cannot connect over TLS: {0}")]
    Tls(String),
    /// The server refused Quarry's credentials (or demands some and none are configured), or the
    /// stored credential cannot be opened. The server is up: this counts toward no circuit.
    #[error("authentication failed: {0}")]
    Unauthorized(String),
    /// The server says it has no such resource.
    #[error("not found: {0}")]
    NotFound(String),
    /// The server does not implement the method.
    #[error("method not supported by the server")]
    MethodNotFound,
    /// The content is larger than the configured limit.
    #[error("content of {size} bytes exceeds the {limit}-byte limit")]
    TooLarge {
        /// The size seen (at least).
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The server answered with an error of its own (not "not found": that is
    /// [`UpstreamError::NotFound`]). The server is up: this counts toward no circuit.
    #[error("the server answered with error {code}: {message}")]
    Server {
        /// The JSON-RPC error code.
        code: i32,
        /// Its message, bounded and sanitised.
        message: String,
    },
    /// The server broke the protocol (bad base64, wrong result type, unreadable content).
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// The server's answer to this one request could not be parsed (a lone surrogate escape,
    /// say). The server answered: this counts toward no circuit.
    #[error("protocol violation: {0}")]
    BadResponse(String),
}

impl UpstreamError {
    /// The caller-facing error for a failure on `server`.
    pub fn into_error(self, server: &str) -> Error {
        let code = match &self {
            Self::Unreachable(_) | Self::CircuitOpen(_) | Self::Tls(_) => ErrorCode::E003,
            Self::Timeout(_) => ErrorCode::E009,
            Self::Unauthorized(_) => ErrorCode::E005,
            Self::NotFound(_) => ErrorCode::E002,
            Self::MethodNotFound => ErrorCode::E002,
            Self::TooLarge { .. } => ErrorCode::E008,
            Self::Server { .. } => ErrorCode::E013,
            Self::Protocol(_) | Self::BadResponse(_) => ErrorCode::E003,
        };
        Error::new(code, format!("server '{server}': {self}"))
    }
}

/// A resource as an upstream lists it, before it gets a gateway URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamResource {
    /// The upstream's URI for it.
    pub uri: String,
    /// Its name.
    pub name: String,
    /// Its title, if any.
    pub title: Option<String>,
    /// Its description, if any.
    pub description: Option<String>,
    /// Its MIME type, if any.
    pub mime_type: Option<String>,
    /// Its size in bytes, if given.
    pub size: Option<u64>,
    /// Its `lastModified` annotation, if given and valid.
    pub last_modified: Option<Timestamp>,
}

/// A resource template as an upstream lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTemplate {
    /// The RFC 6570 template.
    pub uri_template: String,
    /// Its name.
    pub name: String,
    /// Its description, if any.
    pub description: Option<String>,
    /// Its MIME type, if uniform.
    pub mime_type: Option<String>,
}

/// Everything one upstream lists.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UpstreamListing {
    /// The resources, in the upstream's order.
    pub resources: Vec<UpstreamResource>,
    /// True when the page bound stopped the listing before the upstream's last page.
    pub truncated: bool,
    /// Entries left out because they were malformed (a page is never dropped for one entry).
    pub skipped: u64,
    /// Why the first of them was left out.
    pub skip_reason: Option<String>,
    /// What the upstream said of how long the listing stays fresh and who may share it (MCP
    /// 2026-07-28 `ttlMs`/`cacheScope`, the shortest and narrowest of its pages), if it said.
    pub hint: Option<CacheHint>,
}

/// Content as an upstream returned it, with the upstream's caching hints (MCP 2026-07-28).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// The content.
    pub content: Content,
    /// How long the upstream says the result stays fresh (`ttlMs`), if it says.
    pub ttl: Option<Duration>,
    /// True when the upstream marked the result private (`cacheScope: "private"`): it must not be
    /// served to another principal.
    pub private: bool,
}

/// Told what upstreams announce: resources that changed, listings that changed.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait UpstreamObserver: Send + Sync + std::fmt::Debug {
    /// `notifications/resources/updated` for `upstream_uri` from `server`.
    async fn resource_updated(&self, server: &ServerName, upstream_uri: &str);

    /// `notifications/resources/list_changed` from `server`.
    async fn resources_changed(&self, server: &ServerName);

    /// What `server` announces may have gone unheard: a stream that carried its announcements
    /// ended (the server ended it, or the session it was on died). Whatever is held of the
    /// server may be out of date, and the URIs subscribed to must be asked for again.
    async fn unheard(&self, server: &ServerName);
}

/// A live session with one upstream server.
///
/// Contract: every method returns within the server's configured timeout
/// ([`UpstreamError::Timeout`] otherwise); a server without resources, or that answers
/// "method not found" to listing, lists nothing rather than failing; once the session has died,
/// calls fail fast with [`UpstreamError::Unreachable`] and [`UpstreamSession::is_closed`] is true.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait UpstreamSession: Send + Sync + std::fmt::Debug {
    /// Lists every resource, following cursors up to the server's page bound.
    async fn list_resources(&self) -> Result<UpstreamListing, UpstreamError>;

    /// Lists every resource template, following cursors up to the server's page bound.
    async fn list_templates(&self) -> Result<Vec<UpstreamTemplate>, UpstreamError>;

    /// Reads one resource. Content larger than `max_bytes` is [`UpstreamError::TooLarge`].
    async fn read(&self, uri: &str, max_bytes: u64) -> Result<Fetched, UpstreamError>;

    /// Asks the server to announce changes to `uri`. Returns false when the server does not offer
    /// subscriptions; subscribing twice to one URI is harmless.
    async fn subscribe(&self, uri: &str) -> Result<bool, UpstreamError>;

    /// Checks that the server still answers (MCP `ping`), within the server's timeout.
    async fn ping(&self) -> Result<(), UpstreamError>;

    /// True once the session can no longer carry requests.
    fn is_closed(&self) -> bool;

    /// Ends the session and releases what it holds (a child process is stopped and reaped).
    async fn close(&self);
}

/// Opens sessions with upstream servers.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait UpstreamConnector: Send + Sync + std::fmt::Debug {
    /// Connects to `spec` and completes the MCP handshake within its timeout, sending `auth`
    /// with every request (HTTP), and for an OAuth server the token `tokens` holds (asking it
    /// for another once when the server refuses one). What the server announces on the session
    /// goes to `observer`.
    ///
    /// # Errors
    /// [`UpstreamError::Unreachable`] when the process cannot start or the endpoint cannot be
    /// reached; [`UpstreamError::Timeout`] when the handshake takes too long;
    /// [`UpstreamError::Unauthorized`] when the server refuses the credentials (or demands
    /// some).
    async fn connect<'a>(
        &self,
        spec: &ServerSpec,
        auth: Option<&'a UpstreamAuth>,
        tokens: Option<Arc<dyn crate::AccessTokens>>,
        observer: Arc<dyn UpstreamObserver>,
    ) -> Result<Arc<dyn UpstreamSession>, UpstreamError>;

    /// Checks what a credential holds beyond its shape before it is stored (a client
    /// certificate and key that parse and match). Most credentials have nothing more to check.
    ///
    /// # Errors
    /// [`UpstreamError::Unauthorized`] saying what is wrong (never the secret).
    fn check_auth(&self, _auth: &UpstreamAuth) -> Result<(), UpstreamError> {
        Ok(())
    }
}
