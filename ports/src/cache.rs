//! The content cache port: what was fetched, kept for a while, bounded by bytes.

use std::sync::Arc;

use async_trait::async_trait;
use quarry_domain::{Content, Digest, Principal, ResourceVersion, ServerName, Timestamp};

use crate::ResourceKey;

/// Content as the cache keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedContent {
    /// The content, shared: a hit hands out the same bytes rather than a copy of them (made
    /// under the cache's lock, and a megabyte's worth for a large resource).
    pub content: Arc<Content>,
    /// SHA-256 of the content's bytes when it was fetched: a hit is re-hashed against it, so a
    /// corrupted entry is detected instead of served.
    pub digest: Digest,
    /// The version the content is, when versions are kept.
    pub version: Option<ResourceVersion>,
    /// `None` for content any principal may see; the principal it was fetched for when the
    /// upstream marked it private. Only that principal may be served it.
    pub partition: Option<Principal>,
    /// When it was fetched from the upstream.
    pub cached_at: Timestamp,
    /// When it stops being fresh.
    pub expires_at: Timestamp,
}

impl CachedContent {
    /// Bytes this entry accounts for: content, MIME type, partition, version and a fixed
    /// overhead per entry.
    pub fn weight(&self) -> u64 {
        const ENTRY_OVERHEAD: u64 = 160;
        self.content.len()
            + self
                .content
                .mime_type
                .as_ref()
                .map_or(0, |m| m.len() as u64)
            + self
                .partition
                .as_ref()
                .map_or(0, |p| p.as_str().len() as u64)
            + self.version.as_ref().map_or(0, |v| {
                (v.version.to_string().len() + v.etag.len() + v.checksum.len()) as u64
            })
            + ENTRY_OVERHEAD
    }

    /// True while fresh at `now`.
    pub fn is_fresh(&self, now: Timestamp) -> bool {
        now < self.expires_at
    }
}

/// Cache occupancy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct CacheStats {
    /// Entries held.
    pub entries: u64,
    /// Bytes accounted (keys and entries).
    pub bytes: u64,
    /// The byte budget.
    pub capacity_bytes: u64,
    /// Entries dropped to make room, since the cache was made.
    pub evictions: u64,
    /// True while a shared cache cannot be reached: requests go to the upstreams meanwhile
    /// (and the figures above are zero, unknown).
    pub degraded: bool,
}

/// A content cache.
///
/// Contract: [`ContentCache::get`] never returns an entry that is not fresh at `now`; expired
/// entries may be kept (until evicted) for [`ContentCache::get_stale`], which serves degraded
/// mode. The cache never holds more than its byte budget; an entry larger than the whole budget
/// is not stored, and storing it drops the key's previous entry.
///
/// A cache never fails its caller: it is an optimisation, and every answer it cannot give is a
/// miss. A backend that cannot be reached (a shared cache over the network) answers `get` and
/// `get_stale` with `None`, drops `put`s, and `purge` counts 0; the adapter logs each failure.
/// Entries it could not invalidate expire by their TTL; callers compare invalidation epochs
/// ([`crate::InvalidationBus`]) so that a read racing a change is not cached in the first place.
/// Whatever a backend returns is checked by the caller against the entry's digest before use.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait ContentCache: Send + Sync + std::fmt::Debug {
    /// The entry for `key` if it is fresh at `now`; counts as a use for LRU.
    async fn get(&self, key: &ResourceKey, now: Timestamp) -> Option<CachedContent>;

    /// The entry for `key` however old, for serving stale content while the upstream is down.
    async fn get_stale(&self, key: &ResourceKey) -> Option<CachedContent>;

    /// Stores `entry`, evicting least-recently-used entries to stay within the byte budget.
    async fn put(&self, key: ResourceKey, entry: CachedContent);

    /// Drops the entry for `key`, if any.
    async fn invalidate(&self, key: &ResourceKey);

    /// Drops every entry, or every entry of one server; returns how many were dropped.
    async fn purge(&self, server: Option<ServerName>) -> u64;

    /// Current occupancy.
    async fn stats(&self) -> CacheStats;
}
