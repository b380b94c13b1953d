//! Turning upstream announcements into cache invalidation.
//!
//! `notifications/resources/updated` drops the resource's cached content; `list_changed` drops the
//! server's cached listing. Each invalidation bumps the server's epoch, so a fetch that was in
//! flight while the change was announced does not put its (possibly older) content back.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use async_trait::async_trait;
use quarry_domain::ServerName;
use quarry_ports::{ContentCache, ResourceKey, UpstreamObserver};

use crate::listings::ListingCache;

/// The application's observer of upstream notifications.
#[derive(Debug)]
pub(crate) struct Invalidator {
    cache: Arc<dyn ContentCache>,
    listings: Arc<ListingCache>,
    epochs: Mutex<HashMap<ServerName, u64>>,
}

impl Invalidator {
    pub(crate) fn new(cache: Arc<dyn ContentCache>, listings: Arc<ListingCache>) -> Self {
        Self {
            cache,
            listings,
            epochs: Mutex::new(HashMap::new()),
        }
    }

    /// The server's invalidation epoch: capture it before a fetch, compare after.
    pub(crate) fn epoch(&self, server: &ServerName) -> u64 {
        self.epochs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(server)
            .copied()
            .unwrap_or(0)
    }

    fn advance(&self, server: &ServerName) {
        *self
            .epochs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(server.clone())
            .or_insert(0) += 1;
    }

    /// Everything cached for `server` may be out of date (its session was replaced, so
    /// announcements may have been missed).
    pub(crate) async fn forget_server(&self, server: &ServerName) {
        self.advance(server);
        self.cache.purge(Some(server.clone())).await;
        self.listings.drop_listings(Some(server));
    }
}

#[async_trait]
impl UpstreamObserver for Invalidator {
    async fn resource_updated(&self, server: &ServerName, upstream_uri: &str) {
        self.advance(server);
        self.cache
            .invalidate(&ResourceKey::new(server.clone(), upstream_uri))
            .await;
    }

    async fn resources_changed(&self, server: &ServerName) {
        self.advance(server);
        self.listings.drop_listings(Some(server));
    }
}
