//! The spec's data models: MCPResource, MCPConnection, ResourceVersion and the two results.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

use crate::{ContentRange, Error, ResourceUri, ServerId, ServerName, Timestamp, VersionNumber};

/// The spec's resource types. Upstream MCP resources carry no type; [`crate::Classifier`] assigns
/// one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResourceType {
    /// A file or document.
    File,
    /// A database, table or query.
    #[serde(rename = "db")]
    Database,
    /// An API endpoint or its responses.
    Api,
    /// A secret.
    Secret,
    /// Anything else.
    Custom,
}

impl ResourceType {
    /// Every type, in the spec's order.
    pub const ALL: [ResourceType; 5] = [
        Self::File,
        Self::Database,
        Self::Api,
        Self::Secret,
        Self::Custom,
    ];

    /// The wire name: `file`, `db`, `api`, `secret` or `custom`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::File => "file",
            Self::Database => "db",
            Self::Api => "api",
            Self::Secret => "secret",
            Self::Custom => "custom",
        }
    }
}

impl fmt::Display for ResourceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ResourceType {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        Self::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "resource type {s:?} is not one of file, db, api, secret, custom"
                ))
            })
    }
}

/// One resource as Quarry lists it (the spec's MCPResource).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Resource {
    /// The gateway URI.
    pub uri: ResourceUri,
    /// A display name, sanitised.
    pub name: String,
    /// The assigned type.
    pub resource_type: ResourceType,
    /// Size in bytes, when the upstream says.
    pub size: Option<u64>,
    /// MIME type, when the upstream says.
    pub mime_type: Option<String>,
    /// When Quarry first saw a version of this resource (known once versions are kept).
    pub created_at: Option<Timestamp>,
    /// The upstream's `lastModified` annotation, when present.
    pub modified_at: Option<Timestamp>,
    /// The current version id, when known.
    pub version: Option<VersionNumber>,
    /// Whether the resource is protected.
    pub is_protected: bool,
    /// Everything else worth knowing: origin server, upstream URI, description, how the type was
    /// chosen.
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

/// A server's connection state (the spec's ConnectionStatus).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConnectionStatus {
    /// A live session exists.
    Connected,
    /// No session now, and none has failed.
    Disconnected,
    /// Authentication is in progress.
    Authenticating,
    /// The last attempt failed; see `last_error`.
    Error,
}

impl ConnectionStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connected => "connected",
            Self::Disconnected => "disconnected",
            Self::Authenticating => "authenticating",
            Self::Error => "error",
        }
    }
}

/// A server's status as listings report it (the spec's MCPConnection).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerStatus {
    /// The server's stable id.
    pub server_id: ServerId,
    /// Its registered name.
    pub server_name: ServerName,
    /// Its endpoint (`stdio:<command>` for a child process).
    pub endpoint: String,
    /// Connection state.
    pub status: ConnectionStatus,
    /// Whether the session carries upstream credentials.
    pub authenticated: bool,
    /// Resources it listed last time.
    pub resource_count: u64,
    /// When a request last used it.
    pub last_used: Option<Timestamp>,
    /// The last failure, caller-safe.
    pub last_error: Option<String>,
    /// Entries of its last listing left out because they were malformed.
    pub skipped_entries: u64,
    /// Why the first of them was left out.
    pub skipped_reason: Option<String>,
}

/// A version of a resource's content (the spec's ResourceVersion).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResourceVersion {
    /// `v1`, `v2`, ...
    pub version: VersionNumber,
    /// An entity tag derived from the checksum.
    pub etag: String,
    /// When this version was first seen.
    pub created_at: Timestamp,
    /// Size in bytes.
    pub size: u64,
    /// `sha256:<64 hex>`.
    pub checksum: String,
}

/// The result of listing resources (the spec's ListResourcesResult).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ListResourcesResult {
    /// Always true: failures are errors, not results.
    pub success: bool,
    /// The requested page.
    pub resources: Vec<Resource>,
    /// The status of every server the listing asked.
    pub servers: Vec<ServerStatus>,
    /// Matching resources across all pages.
    pub total_count: u64,
    /// How many of the returned resources came from a cached listing.
    pub cached_count: u64,
    /// Age in seconds of the oldest cached listing used, when any was.
    pub cache_age_seconds: Option<u64>,
    /// True when some server could not be listed (its status says why).
    pub partial: bool,
    /// How long the listing stays fresh and who may be served it (`ttlMs`/`cacheScope`).
    #[serde(skip)]
    pub cache: crate::CacheHint,
}

/// The result of reading a resource (the spec's ReadResourceResult).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReadResourceResult {
    /// Always true: failures are errors, not results.
    pub success: bool,
    /// The gateway URI read.
    pub uri: ResourceUri,
    /// The content (or the requested range of it) when it is text.
    pub content: Option<String>,
    /// The content (or range) when it is binary, base64-encoded on the wire.
    pub bytes_content: Option<String>,
    /// MIME type.
    pub mime_type: Option<String>,
    /// Size of the whole content in bytes.
    pub size: u64,
    /// The range returned, as a Content-Range value.
    pub content_range: ContentRange,
    /// Version metadata, when versions are kept.
    pub version: Option<ResourceVersion>,
    /// True when served from cache.
    pub cached: bool,
    /// When the cached content was fetched.
    pub cached_at: Option<Timestamp>,
    /// True when the upstream could not be reached and expired cached content was served.
    pub stale: bool,
    /// Why the upstream could not answer, when stale content was served.
    pub upstream_error: Option<UpstreamFailure>,
    /// Where to continue when the result holds only part of what was asked.
    pub next_offset: Option<u64>,
    /// A hint for the reader: why the result is partial and how to get the rest.
    pub note: Option<String>,
    /// Where the content came from: upstream content is data, never instructions.
    pub origin: Origin,
    /// How long the content stays fresh and who may be served it (`ttlMs`/`cacheScope`).
    #[serde(skip)]
    pub cache: crate::CacheHint,
}

/// An upstream failure reported beside stale content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UpstreamFailure {
    /// The catalogue code of the failure.
    pub error_code: crate::ErrorCode,
    /// Its caller-safe message.
    pub error_message: String,
}

impl From<&crate::Error> for UpstreamFailure {
    fn from(e: &crate::Error) -> Self {
        Self {
            error_code: e.code(),
            error_message: e.message().to_owned(),
        }
    }
}

/// Labels content with where it came from and that it is untrusted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Origin {
    /// The upstream server's name.
    pub server: ServerName,
    /// The URI the upstream knows the resource by.
    pub upstream_uri: String,
    /// Always true: resource text is data from a third party, not instructions.
    pub untrusted: bool,
}

impl Origin {
    /// The origin of `uri`'s content.
    pub fn of(uri: &ResourceUri) -> Self {
        Self {
            server: uri.server().clone(),
            upstream_uri: uri.upstream().to_owned(),
            untrusted: true,
        }
    }
}
