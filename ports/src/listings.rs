//! The listing cache port (what each server listed, kept apart from content: SR-002.4) and the
//! invalidation bus (upstream announcements as epochs every replica can compare).

use std::sync::Arc;

use async_trait::async_trait;
use quarry_domain::{CacheScope, ResourceType, ServerName, Timestamp};

use crate::UpstreamResource;

/// A listed resource with what listing order and filters need, computed once per fetch.
///
/// A listing can hold hundreds of thousands of entries, so the gateway URI is kept as the text
/// [`quarry_domain::ResourceUri`] formatted, not as a second copy of the upstream URI and server name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedEntry {
    /// The resource as the upstream listed it.
    pub resource: UpstreamResource,
    /// Its gateway URI, as [`quarry_domain::ResourceUri::as_str`] gives it.
    pub gateway_uri: String,
    /// Its type, by the classification rules.
    pub resource_type: ResourceType,
}

/// One server's listing as cached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedListing {
    /// The entries, in the upstream's order.
    pub resources: Arc<Vec<ListedEntry>>,
    /// True when the upstream's listing was cut short (page bound, repeated cursor).
    pub truncated: bool,
    /// When it was fetched.
    pub fetched_at: Timestamp,
    /// When it stops being fresh.
    pub expires_at: Timestamp,
    /// Who may be served it: private when the upstream said so.
    pub scope: CacheScope,
}

/// Every server's cached listing.
///
/// Contract: [`ListingCache::get`] never returns a listing that is not fresh at `now`; `put`
/// replaces the server's listing; `drop_listings` returns how many listings it dropped.
/// A backend that cannot be reached behaves as an empty cache (a miss on `get`, `put` dropped,
/// nothing to drop) and logs: listing afresh is always correct, only slower.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait ListingCache: Send + Sync + std::fmt::Debug {
    /// The server's listing if fresh at `now`.
    async fn get(&self, server: &ServerName, now: Timestamp) -> Option<CachedListing>;

    /// Stores the server's listing.
    async fn put(&self, server: &ServerName, listing: CachedListing);

    /// Drops one server's listing, or every listing; returns how many were dropped.
    async fn drop_listings(&self, server: Option<ServerName>) -> u64;
}

/// Per-server invalidation epochs: every announced change of a server (a resource updated, its
/// listing changed, its session replaced) advances its epoch. A fetch captures the epoch before
/// it starts and caches its result only if the epoch is unchanged when it ends, so content that a
/// change overtook is never cached.
///
/// Contract: a server's epoch starts at 0 and only grows; `advance` makes it strictly larger and
/// returns the new value; epochs of other servers are unaffected. Shared by every replica where
/// the adapter is shared. A backend that cannot be reached answers `epoch` with `None` (the
/// caller then caches nothing) and `advance` with `None` (the adapter logs).
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait InvalidationBus: Send + Sync + std::fmt::Debug {
    /// The server's current epoch; `None` when the backend cannot tell.
    async fn epoch(&self, server: &ServerName) -> Option<u64>;

    /// Announces a change of the server; returns its new epoch (`None` when the backend could
    /// not be reached).
    async fn advance(&self, server: &ServerName) -> Option<u64>;
}
