//! Turning upstream announcements into cache invalidation.
//!
//! `notifications/resources/updated` drops the resource's cached content; `list_changed` drops the
//! server's cached listing; a session that replaced dead ones, or a stream of announcements lost
//! (once the server answers), drops everything cached for the server. Each advances the server's epoch on the invalidation bus, so a fetch that was in
//! flight while the change was announced does not put its (possibly older) content back.

use std::sync::Arc;

use async_trait::async_trait;
use quarry_domain::{ResourceUri, ServerName};
use quarry_ports::{
    ChangeFeed, ContentCache, InvalidationBus, ListingCache, ResourceChange, ResourceKey,
    UpstreamObserver,
};
use tokio::sync::broadcast;

use crate::watch::{FEED_DEPTH, Feed};

/// The application's observer of upstream notifications.
#[derive(Debug)]
pub(crate) struct Invalidator {
    cache: Arc<dyn ContentCache>,
    listings: Arc<dyn ListingCache>,
    bus: Arc<dyn InvalidationBus>,
    /// What upstreams announced, for the agents subscribed to it.
    changes: broadcast::Sender<ResourceChange>,
}

impl Invalidator {
    pub(crate) fn new(
        cache: Arc<dyn ContentCache>,
        listings: Arc<dyn ListingCache>,
        bus: Arc<dyn InvalidationBus>,
    ) -> Self {
        Self {
            cache,
            listings,
            bus,
            changes: broadcast::channel(FEED_DEPTH).0,
        }
    }

    /// The changes announced from now on.
    pub(crate) fn feed(&self) -> Box<dyn ChangeFeed> {
        Box::new(Feed(self.changes.subscribe()))
    }

    /// The server's invalidation epoch: capture it before a fetch, compare after. `None` when
    /// the bus cannot tell (then nothing is cached).
    pub(crate) async fn epoch(&self, server: &ServerName) -> Option<u64> {
        self.bus.epoch(server).await
    }

    /// True when a fetch that began at epoch `before` may cache its result.
    pub(crate) async fn unchanged_since(&self, server: &ServerName, before: Option<u64>) -> bool {
        before.is_some() && self.epoch(server).await == before
    }

    /// Everything cached for `server` may be out of date (its session was replaced, so
    /// announcements may have been missed, or it was unregistered).
    pub(crate) async fn forget_server(&self, server: &ServerName) {
        self.bus.advance(server).await;
        self.cache.purge(Some(server.clone())).await;
        self.listings.drop_listings(Some(server.clone())).await;
        let _ = self
            .changes
            .send(ResourceChange::ListChanged(server.clone()));
    }
}

#[async_trait]
impl UpstreamObserver for Invalidator {
    async fn resource_updated(&self, server: &ServerName, upstream_uri: &str) {
        self.bus.advance(server).await;
        self.cache
            .invalidate(&ResourceKey::new(server.clone(), upstream_uri))
            .await;
        // No session listening is no error; a URI that makes no gateway URI is no resource.
        if let Ok(uri) = ResourceUri::new(server.clone(), upstream_uri) {
            let _ = self.changes.send(ResourceChange::Updated(uri));
        }
    }

    async fn resources_changed(&self, server: &ServerName) {
        self.bus.advance(server).await;
        self.listings.drop_listings(Some(server.clone())).await;
    }

    /// Fetches in flight keep nothing; what to do with what is cached is the upstream's call
    /// (`upstream/watched.rs`): dropped once the server answers, kept for stale serving until.
    async fn unheard(&self, server: &ServerName) {
        self.bus.advance(server).await;
    }
}
