//! What a 2025-11-25 session's subscriptions cover, and their loss.
//!
//! `resources/subscribe` binds a URI to one upstream session. A session that ends (its process
//! exited or its connection dropped, or Quarry closed it) takes its subscriptions with it, and so
//! does one the server forgot (HTTP 404 for its id: a restarted server; rmcp then opens a new
//! session at the same request, and the session goes on as if nothing happened). Either way the
//! server announces their changes to nobody from then on, while their content may still be
//! cached. [`Coverage`] holds the URIs a session asked for; when they are lost, the observer is
//! told ([`UpstreamObserver::unheard`]) once, and each URI is asked for again as it is read.
//!
//! A 2026-07-28 session asks for nothing here: its streams are `listen.rs`'s, which tell the
//! observer of their own loss.

use std::{
    collections::HashSet,
    sync::{Arc, Mutex, MutexGuard},
};

use quarry_domain::ServerName;
use quarry_ports::UpstreamObserver;

/// The URIs one session subscribed to, and whom to tell when they are lost.
#[derive(Debug)]
pub(crate) struct Coverage {
    server: ServerName,
    observer: Arc<dyn UpstreamObserver>,
    subscribed: Mutex<HashSet<String>>,
}

impl Coverage {
    pub(crate) fn new(server: ServerName, observer: Arc<dyn UpstreamObserver>) -> Arc<Self> {
        Arc::new(Self {
            server,
            observer,
            subscribed: Mutex::new(HashSet::new()),
        })
    }

    fn subscribed(&self) -> MutexGuard<'_, HashSet<String>> {
        self.subscribed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True when `uri` was not asked for yet: the caller subscribes to it, and calls
    /// [`Coverage::release`] if that fails.
    pub(crate) fn claim(&self, uri: &str) -> bool {
        self.subscribed().insert(uri.to_owned())
    }

    /// Subscribing to `uri` failed: it is asked for again next time.
    pub(crate) fn release(&self, uri: &str) {
        self.subscribed().remove(uri);
    }

    /// The session's subscriptions are gone. When there were any, the observer hears of it; a
    /// second loss before anything was asked for again tells nobody.
    pub(crate) async fn lost(&self, why: &str) {
        let had = std::mem::take(&mut *self.subscribed());
        if had.is_empty() {
            return;
        }
        tracing::debug!(server = %self.server, subscriptions = had.len(), "{why}: the resources it was subscribed to are asked for again");
        self.observer.unheard(&self.server).await;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;

    use super::*;

    /// Counts what it is told went unheard.
    #[derive(Debug, Default)]
    pub(crate) struct Counted(pub(crate) AtomicUsize);

    #[async_trait]
    impl UpstreamObserver for Counted {
        async fn resource_updated(&self, _: &ServerName, _: &str) {}
        async fn resources_changed(&self, _: &ServerName) {}
        async fn unheard(&self, _: &ServerName) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    pub(crate) fn counted() -> (Arc<Counted>, Arc<Coverage>) {
        let counted = Arc::new(Counted::default());
        let server = ServerName::parse("notes").unwrap();
        (counted.clone(), Coverage::new(server, counted))
    }

    #[tokio::test]
    async fn a_loss_is_told_once_and_only_when_something_was_subscribed() {
        let (told, coverage) = counted();
        coverage.lost("the session ended").await;
        assert_eq!(told.0.load(Ordering::SeqCst), 0, "nothing was subscribed");
        assert!(coverage.claim("fixture://counter"));
        assert!(!coverage.claim("fixture://counter"), "asked for once");
        coverage.lost("the session ended").await;
        coverage.lost("the session ended").await;
        assert_eq!(told.0.load(Ordering::SeqCst), 1);
        assert!(coverage.claim("fixture://counter"), "asked for again");
    }

    #[tokio::test]
    async fn a_released_uri_is_asked_for_again_and_covers_nothing() {
        let (told, coverage) = counted();
        assert!(coverage.claim("fixture://counter"));
        coverage.release("fixture://counter");
        assert!(coverage.claim("fixture://counter"));
        coverage.release("fixture://counter");
        coverage.lost("the session ended").await;
        assert_eq!(told.0.load(Ordering::SeqCst), 0);
    }
}
