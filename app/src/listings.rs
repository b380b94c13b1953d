//! Cached listings: what each server listed, kept apart from content (SR-002.4) with the same
//! TTL, dropped when the server announces `list_changed`.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
};

use quarry_domain::{ResourceType, ServerName, Timestamp};
use quarry_ports::UpstreamResource;

/// A listed resource with what listing order and filters need, computed once per fetch.
#[derive(Debug, Clone)]
pub(crate) struct ListedEntry {
    pub(crate) resource: UpstreamResource,
    pub(crate) gateway_uri: String,
    pub(crate) resource_type: ResourceType,
}

/// One server's cached listing.
#[derive(Debug, Clone)]
pub(crate) struct CachedListing {
    pub(crate) resources: Arc<Vec<ListedEntry>>,
    pub(crate) truncated: bool,
    pub(crate) fetched_at: Timestamp,
    pub(crate) expires_at: Timestamp,
}

/// Every server's cached listing.
#[derive(Debug, Default)]
pub(crate) struct ListingCache {
    entries: Mutex<HashMap<ServerName, CachedListing>>,
}

impl ListingCache {
    fn lock(&self) -> MutexGuard<'_, HashMap<ServerName, CachedListing>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The server's listing if fresh at `now`.
    pub(crate) fn get(&self, server: &ServerName, now: Timestamp) -> Option<CachedListing> {
        self.lock()
            .get(server)
            .filter(|l| now < l.expires_at)
            .cloned()
    }

    pub(crate) fn put(&self, server: ServerName, listing: CachedListing) {
        self.lock().insert(server, listing);
    }

    /// Drops one server's listing, or all; returns how many were dropped.
    pub(crate) fn drop_listings(&self, server: Option<&ServerName>) -> u64 {
        let mut entries = self.lock();
        match server {
            Some(s) => u64::from(entries.remove(s).is_some()),
            None => {
                let n = entries.len() as u64;
                entries.clear();
                n
            }
        }
    }
}
