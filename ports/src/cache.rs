//! The content cache port: what was fetched, kept for a while, bounded by bytes.

use async_trait::async_trait;
use quarry_domain::{Content, ServerName, Timestamp};

/// What identifies cached content: everything that changes what a caller may see.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// The upstream server.
    pub server: ServerName,
    /// The URI the upstream knows the resource by.
    pub upstream_uri: String,
}

impl CacheKey {
    /// The key of `upstream_uri` on `server`.
    pub fn new(server: ServerName, upstream_uri: impl Into<String>) -> Self {
        Self {
            server,
            upstream_uri: upstream_uri.into(),
        }
    }

    /// Bytes this key accounts for in a byte-bounded cache.
    pub fn weight(&self) -> u64 {
        (self.server.as_str().len() + self.upstream_uri.len()) as u64
    }
}

/// Content as the cache keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedContent {
    /// The content.
    pub content: Content,
    /// When it was fetched from the upstream.
    pub cached_at: Timestamp,
    /// When it stops being fresh.
    pub expires_at: Timestamp,
    /// SHA-256 of the content's bytes when it was fetched: a hit is re-hashed against it, so a
    /// corrupted entry is detected instead of served.
    pub sha256: [u8; 32],
}

impl CachedContent {
    /// Bytes this entry accounts for: content, MIME type and a fixed overhead per entry.
    pub fn weight(&self) -> u64 {
        const ENTRY_OVERHEAD: u64 = 64;
        self.content.len()
            + self
                .content
                .mime_type
                .as_ref()
                .map_or(0, |m| m.len() as u64)
            + ENTRY_OVERHEAD
    }
}

/// Cache occupancy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// Entries held.
    pub entries: u64,
    /// Bytes accounted (keys and entries).
    pub bytes: u64,
    /// The byte budget.
    pub capacity_bytes: u64,
}

/// A content cache.
///
/// Contract: a `get` never returns an entry whose `expires_at` is at or before `now`; the cache
/// never holds more than its byte budget; an entry larger than the whole budget is not stored.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait ContentCache: Send + Sync + std::fmt::Debug {
    /// The fresh entry for `key` at `now`, if any. Expired entries are dropped, not returned.
    async fn get(&self, key: &CacheKey, now: Timestamp) -> Option<CachedContent>;

    /// Stores `entry`, evicting least-recently-used entries to stay within the byte budget.
    async fn put(&self, key: CacheKey, entry: CachedContent);

    /// Drops the entry for `key`, if any.
    async fn invalidate(&self, key: &CacheKey);

    /// Drops every entry, or every entry of one server; returns how many were dropped.
    async fn purge(&self, server: Option<ServerName>) -> u64;

    /// Current occupancy.
    async fn stats(&self) -> CacheStats;
}
