//! The in-memory content cache: least-recently-used eviction bounded by bytes, with TTL.
//!
//! Accounting is exact: every entry is charged for its key, its content, its MIME type and a fixed
//! overhead, and the sum never exceeds the budget. An entry bigger than the whole budget is not
//! stored. An expired entry is never returned as fresh; it stays (until evicted) so that degraded
//! mode can serve it, marked stale, while its upstream is down.

use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use lru::LruCache;
use quarry_domain::{ServerName, Timestamp};
use quarry_ports::{CacheStats, CachedContent, ContentCache, ResourceKey};

/// A byte-bounded LRU cache held in this process.
#[derive(Debug)]
pub struct LruContentCache {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    entries: LruCache<ResourceKey, CachedContent>,
    bytes: u64,
    capacity: u64,
    evictions: u64,
}

fn charge(key: &ResourceKey, entry: &CachedContent) -> u64 {
    key.weight() + entry.weight()
}

impl Inner {
    fn remove(&mut self, key: &ResourceKey) -> bool {
        match self.entries.pop(key) {
            Some(old) => {
                self.bytes -= charge(key, &old);
                true
            }
            None => false,
        }
    }
}

impl LruContentCache {
    /// A cache holding at most `capacity_bytes`.
    pub fn new(capacity_bytes: u64) -> Self {
        Self {
            inner: Mutex::new(Inner {
                entries: LruCache::unbounded(),
                bytes: 0,
                capacity: capacity_bytes,
                evictions: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the accounting half-done (every update is
        // a single step after the fallible work), so a poisoned lock is still consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl ContentCache for LruContentCache {
    async fn get(&self, key: &ResourceKey, now: Timestamp) -> Option<CachedContent> {
        let mut inner = self.lock();
        if !inner.entries.peek(key)?.is_fresh(now) {
            return None;
        }
        inner.entries.get(key).cloned()
    }

    async fn get_stale(&self, key: &ResourceKey) -> Option<CachedContent> {
        self.lock().entries.get(key).cloned()
    }

    async fn put(&self, key: ResourceKey, entry: CachedContent) {
        let mut inner = self.lock();
        inner.remove(&key);
        let cost = charge(&key, &entry);
        if cost > inner.capacity {
            return;
        }
        while inner.bytes + cost > inner.capacity {
            match inner.entries.pop_lru() {
                Some((k, v)) => {
                    inner.bytes -= charge(&k, &v);
                    inner.evictions += 1;
                }
                None => break,
            }
        }
        inner.bytes += cost;
        inner.entries.put(key, entry);
    }

    async fn invalidate(&self, key: &ResourceKey) {
        self.lock().remove(key);
    }

    async fn purge(&self, server: Option<ServerName>) -> u64 {
        let mut inner = self.lock();
        let doomed: Vec<ResourceKey> = inner
            .entries
            .iter()
            .filter(|(k, _)| server.as_ref().is_none_or(|s| &k.server == s))
            .map(|(k, _)| k.clone())
            .collect();
        for key in &doomed {
            inner.remove(key);
        }
        doomed.len() as u64
    }

    async fn stats(&self) -> CacheStats {
        let inner = self.lock();
        CacheStats {
            entries: inner.entries.len() as u64,
            bytes: inner.bytes,
            capacity_bytes: inner.capacity,
            evictions: inner.evictions,
            degraded: false,
        }
    }
}

#[cfg(test)]
mod tests;
