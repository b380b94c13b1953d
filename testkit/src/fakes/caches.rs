//! Fakes of the three cache ports, each with a switch that takes its backend "down": the cache
//! then behaves as the port contracts say an unreachable shared cache must.

use std::{
    collections::HashMap,
    sync::{
        Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
};

use async_trait::async_trait;
use quarry_domain::{ServerName, Timestamp};
use quarry_ports::{
    CacheStats, CachedContent, CachedListing, ContentCache, InvalidationBus, ListingCache,
    ResourceKey,
};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Content in a map, evicted oldest-stored first to stay within its budget.
#[derive(Debug)]
pub struct FakeContentCache {
    /// Entries in the order they were stored.
    entries: Mutex<Vec<(ResourceKey, CachedContent)>>,
    capacity: u64,
    down: AtomicBool,
    /// `put`s that reached the backend.
    pub puts: AtomicU64,
    evictions: AtomicU64,
}

impl FakeContentCache {
    /// A cache of `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        Self {
            entries: Mutex::new(Vec::new()),
            capacity,
            down: AtomicBool::new(false),
            puts: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    /// Takes the backend down (every answer a miss, every write dropped) or back up.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    fn is_down(&self) -> bool {
        self.down.load(Ordering::SeqCst)
    }

    fn bytes(entries: &[(ResourceKey, CachedContent)]) -> u64 {
        entries.iter().map(|(k, e)| k.weight() + e.weight()).sum()
    }
}

#[async_trait]
impl ContentCache for FakeContentCache {
    async fn get(&self, key: &ResourceKey, now: Timestamp) -> Option<CachedContent> {
        self.get_stale(key).await.filter(|e| e.is_fresh(now))
    }

    async fn get_stale(&self, key: &ResourceKey) -> Option<CachedContent> {
        if self.is_down() {
            return None;
        }
        lock(&self.entries)
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, e)| e.clone())
    }

    async fn put(&self, key: ResourceKey, entry: CachedContent) {
        if self.is_down() {
            return;
        }
        self.puts.fetch_add(1, Ordering::SeqCst);
        let mut entries = lock(&self.entries);
        entries.retain(|(k, _)| k != &key);
        if key.weight() + entry.weight() > self.capacity {
            return;
        }
        entries.push((key, entry));
        while Self::bytes(&entries) > self.capacity {
            entries.remove(0);
            self.evictions.fetch_add(1, Ordering::SeqCst);
        }
    }

    async fn invalidate(&self, key: &ResourceKey) {
        if !self.is_down() {
            lock(&self.entries).retain(|(k, _)| k != key);
        }
    }

    async fn purge(&self, server: Option<ServerName>) -> u64 {
        if self.is_down() {
            return 0;
        }
        let mut entries = lock(&self.entries);
        let before = entries.len();
        entries.retain(|(k, _)| server.as_ref().is_some_and(|s| &k.server != s));
        (before - entries.len()) as u64
    }

    async fn stats(&self) -> CacheStats {
        let entries = lock(&self.entries);
        CacheStats {
            entries: entries.len() as u64,
            bytes: Self::bytes(&entries),
            capacity_bytes: self.capacity,
            evictions: self.evictions.load(Ordering::SeqCst),
            degraded: false,
        }
    }
}

/// Listings in a map, with a down switch and a count of listings stored.
#[derive(Debug, Default)]
pub struct FakeListingCache {
    entries: Mutex<HashMap<ServerName, CachedListing>>,
    down: AtomicBool,
    /// `put`s that reached the backend.
    pub puts: AtomicU64,
}

impl FakeListingCache {
    /// Takes the backend down or back up.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }
}

#[async_trait]
impl ListingCache for FakeListingCache {
    async fn get(&self, server: &ServerName, now: Timestamp) -> Option<CachedListing> {
        if self.down.load(Ordering::SeqCst) {
            return None;
        }
        lock(&self.entries)
            .get(server)
            .filter(|l| now < l.expires_at)
            .cloned()
    }

    async fn put(&self, server: &ServerName, listing: CachedListing) {
        if !self.down.load(Ordering::SeqCst) {
            self.puts.fetch_add(1, Ordering::SeqCst);
            lock(&self.entries).insert(server.clone(), listing);
        }
    }

    async fn drop_listings(&self, server: Option<ServerName>) -> u64 {
        if self.down.load(Ordering::SeqCst) {
            return 0;
        }
        let mut entries = lock(&self.entries);
        match server {
            Some(s) => u64::from(entries.remove(&s).is_some()),
            None => {
                let n = entries.len() as u64;
                entries.clear();
                n
            }
        }
    }
}

/// Epochs in a map, with a down switch (then the bus cannot tell, and says so).
#[derive(Debug, Default)]
pub struct FakeInvalidationBus {
    epochs: Mutex<HashMap<ServerName, u64>>,
    down: AtomicBool,
}

impl FakeInvalidationBus {
    /// Takes the bus down or back up.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }
}

#[async_trait]
impl InvalidationBus for FakeInvalidationBus {
    async fn epoch(&self, server: &ServerName) -> Option<u64> {
        if self.down.load(Ordering::SeqCst) {
            return None;
        }
        Some(lock(&self.epochs).get(server).copied().unwrap_or(0))
    }

    async fn advance(&self, server: &ServerName) -> Option<u64> {
        if self.down.load(Ordering::SeqCst) {
            return None;
        }
        let mut epochs = lock(&self.epochs);
        let e = epochs.entry(server.clone()).or_insert(0);
        *e += 1;
        Some(*e)
    }
}
