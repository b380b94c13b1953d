//! The version store port: the history of every resource's content.

use async_trait::async_trait;
use quarry_domain::{Content, Digest, ResourceVersion, ServerName, Timestamp, VersionSelector};

use crate::ResourceKey;

/// The store failed; callers see E012, the detail goes to the log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("version store: {0}")]
pub struct StoreError(pub String);

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
    pub latest: String,
    /// When its first version was seen.
    pub first_seen: Timestamp,
}

/// Keeps versions.
///
/// Contract: version numbers of a resource start at 1 and only grow; a digest maps to exactly one
/// version of a resource (content that returns to an earlier digest is that earlier version
/// again, which becomes the latest); the content of the newest versions is kept within the
/// retention limits, older versions keep their metadata only.
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

    /// The latest version and first sighting of every resource of `server` that has versions.
    async fn summaries(&self, server: &ServerName) -> Result<Vec<VersionSummary>, StoreError>;
}
