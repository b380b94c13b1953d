//! The version store port: the history of every resource's content.

use async_trait::async_trait;
use quarry_domain::{
    Content, Digest, ResourceVersion, ServerName, Timestamp, VersionNumber, VersionSelector,
};

use crate::ResourceKey;

/// Why a store call failed. Every store port says which of these each method returns; callers
/// see E012 for all but what a port's contract gives a meaning (the detail goes to the log,
/// never to the caller).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The thing named does not exist (where a method's contract says absence is an error).
    #[error("store: not found: {0}")]
    NotFound(String),
    /// The write conflicts with what is stored (a unique name or id taken).
    #[error("store: conflict: {0}")]
    Conflict(String),
    /// The backend cannot be reached or refused the operation (I/O, locks, a full disk). May
    /// succeed when tried again.
    #[error("store: unavailable: {0}")]
    Unavailable(String),
    /// What is stored cannot be read back as what was written (a damaged row, a bad migration).
    #[error("store: corrupt data: {0}")]
    Corrupt(String),
}

/// What recording a fetched content did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// The version the content is.
    pub version: ResourceVersion,
    /// True when the digest was new for this resource (a new version was created).
    pub is_new: bool,
}

/// First and latest version of one resource, for listings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionSummary {
    /// The resource's upstream URI.
    pub upstream_uri: String,
    /// The version seen most recently.
    pub latest: VersionNumber,
    /// When its first version was seen.
    pub first_seen: Timestamp,
}

/// Keeps versions.
///
/// Contract: version numbers of a resource start at 1 and only grow; a digest maps to exactly one
/// version of a resource (content that returns to an earlier digest is that earlier version
/// again, which becomes the latest); the content of the newest versions is kept within the
/// retention limits, older versions keep their metadata only; the latest content is always kept.
/// Unknown resources and versions are not errors (`None`, or empty).
///
/// # Errors
/// Every method: [`StoreError::Unavailable`] when the backend cannot be reached,
/// [`StoreError::Corrupt`] when a stored row cannot be read back. Concurrent `record`s of one
/// resource never both take number n.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait VersionStore: Send + Sync + std::fmt::Debug {
    /// Records that `content`, whose digest is `digest`, was fetched for `key` at `now`.
    async fn record(
        &self,
        key: &ResourceKey,
        digest: Digest,
        content: &Content,
        now: Timestamp,
    ) -> Result<Recorded, StoreError>;

    /// A version and its content (`None` once retention dropped it), or `None` if unknown.
    async fn find(
        &self,
        key: &ResourceKey,
        selector: &VersionSelector,
    ) -> Result<Option<(ResourceVersion, Option<Content>)>, StoreError>;

    /// Every version of `key`, oldest first.
    async fn history(&self, key: &ResourceKey) -> Result<Vec<ResourceVersion>, StoreError>;

    /// The latest version and first sighting of each of `uris` (upstream URIs of `server`) that
    /// has versions; the others are left out. A listing asks for the resources of its page only,
    /// so its cost does not grow with everything the store holds for the server.
    async fn summaries(
        &self,
        server: &ServerName,
        uris: &[String],
    ) -> Result<Vec<VersionSummary>, StoreError>;
}
