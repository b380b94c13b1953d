//! The URIs agents subscribed to at one upstream: remembered, and asked of every new session
//! (a new session knows nothing of what the old ones were subscribed to), and asked again once
//! the server answers after a stream that carried announcements was lost.

use std::{
    sync::{Arc, Weak},
    time::Duration,
};

use async_trait::async_trait;
use quarry_domain::ServerName;
use quarry_ports::{UpstreamObserver, UpstreamSession};

use super::{Upstream, lock};
use crate::invalidation::Invalidator;

/// How long to wait, at most, between two checks that a server whose announcements went unheard
/// answers again (the first is at once, then after 1 s, 2 s, 4 s, …).
const CHECK_AT_MOST: Duration = Duration::from_secs(30);

/// What one upstream's sessions announce: told to the invalidator. When announcements may have
/// gone unheard, what is cached of the server is dropped as soon as the server answers, and the
/// URIs agents watch are asked for again. While it does not answer, its content stays cached, to
/// be served stale; the session that replaces dead ones drops it once the server is back.
#[derive(Debug)]
pub(super) struct Heard {
    invalidator: Arc<Invalidator>,
    upstream: Weak<Upstream>,
}

impl Heard {
    pub(super) fn new(invalidator: Arc<Invalidator>, upstream: Weak<Upstream>) -> Arc<Self> {
        Arc::new(Self {
            invalidator,
            upstream,
        })
    }
}

#[async_trait]
impl UpstreamObserver for Heard {
    async fn resource_updated(&self, server: &ServerName, upstream_uri: &str) {
        self.invalidator
            .resource_updated(server, upstream_uri)
            .await;
    }

    async fn resources_changed(&self, server: &ServerName) {
        self.invalidator.resources_changed(server).await;
    }

    async fn unheard(&self, server: &ServerName) {
        // Reads in flight keep nothing: the stream lost may have been the one covering them.
        self.invalidator.unheard(server).await;
        // A server being closed or unregistered is not asked again.
        let Some(upstream) = self
            .upstream
            .upgrade()
            .filter(|u| !u.retired.is_cancelled())
        else {
            return;
        };
        let invalidator = self.invalidator.clone();
        tokio::spawn(async move {
            let mut wait = Duration::ZERO;
            loop {
                tokio::select! {
                    biased;
                    () = upstream.retired.cancelled() => return,
                    () = tokio::time::sleep(wait) => {}
                }
                if let Ok(lease) = upstream.lease_unchecked().await
                    && upstream.still_answers(&lease.session(), None).await
                {
                    invalidator.forget_server(upstream.name()).await;
                    upstream.resubscribe(lease.session().as_ref()).await;
                    return;
                }
                tracing::debug!(server = %upstream.name(), "a server whose announcements went unheard does not answer yet");
                wait = (wait * 2).clamp(Duration::from_secs(1), CHECK_AT_MOST);
            }
        });
    }
}

/// The most distinct URIs of one server agents may subscribe to.
pub(crate) const MAX_WATCHED: usize = 10_000;

impl Upstream {
    /// Remembers that agents want changes to `uri` announced; false when the server already
    /// has [`MAX_WATCHED`] such URIs.
    pub(crate) fn watched(&self, uri: &str) -> bool {
        let mut watched = lock(&self.watched);
        watched.contains(uri) || (watched.len() < MAX_WATCHED && watched.insert(uri.to_owned()))
    }

    /// Subscribes a new session to every watched URI.
    pub(super) async fn resubscribe(&self, session: &dyn UpstreamSession) {
        let watched: Vec<String> = lock(&self.watched).iter().cloned().collect();
        for uri in watched {
            if let Err(e) = session.subscribe(&uri).await {
                tracing::debug!(server = %self.name(), "subscribing a new session failed: {e}");
            }
        }
    }
}
