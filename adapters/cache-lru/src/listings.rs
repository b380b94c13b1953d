//! Every server's cached listing, in this process's memory.

use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard},
};

use async_trait::async_trait;
use quarry_domain::{ServerName, Timestamp};
use quarry_ports::{CachedListing, ListingCache};

/// Listings by server, held in this process.
#[derive(Debug, Default)]
pub struct InMemoryListingCache {
    entries: Mutex<HashMap<ServerName, CachedListing>>,
}

impl InMemoryListingCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<ServerName, CachedListing>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl ListingCache for InMemoryListingCache {
    async fn get(&self, server: &ServerName, now: Timestamp) -> Option<CachedListing> {
        self.lock()
            .get(server)
            .filter(|l| now < l.expires_at)
            .cloned()
    }

    async fn put(&self, server: &ServerName, listing: CachedListing) {
        self.lock().insert(server.clone(), listing);
    }

    async fn drop_listings(&self, server: Option<ServerName>) -> u64 {
        let mut entries = self.lock();
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
