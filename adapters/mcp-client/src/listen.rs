//! Hearing of changes from a modern (2026-07-28) upstream, which has no `resources/subscribe`:
//! `subscriptions/listen` streams, each read by a task that tells the application's observer.
//! The streams end with their session.
//!
//! A stream is a request held open (over HTTP, a POST and its connection), so a session does not
//! open one per URI: the URIs share streams of up to [`PER_STREAM`] each. A URI joins the newest
//! stream by replacing it: the stream with the larger list is opened and acknowledged first, and
//! only then is the one it replaces cancelled, so no change falls between the two. URIs asked for
//! while a stream is being opened wait and join the next one together (as a group commit does),
//! so a burst of first reads of many URIs opens a few streams, not one each.

use std::{
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use quarry_domain::ServerName;
use quarry_ports::{UpstreamError, UpstreamObserver};
use rmcp::{
    RoleClient,
    model::{ServerNotification, SubscriptionFilter},
    service::{Peer, Subscription},
};
use tokio::{sync::oneshot, task::AbortHandle};

use crate::errors::from_service;

/// How many URIs one stream carries at most. Each join resends the stream's whole list, so the
/// bound keeps a join's request small (a few KiB) while 10,000 URIs still take under 100 streams.
pub(crate) const PER_STREAM: usize = 128;

/// Whether the upstream took a URI: `Ok(true)` when its stream's acknowledgment names it.
type Outcome = Result<bool, UpstreamError>;

/// A session's listening streams.
#[derive(Debug)]
pub(crate) struct Listens {
    server: ServerName,
    observer: Arc<dyn UpstreamObserver>,
    state: Mutex<State>,
    /// Held by the one caller opening a stream; the others queue behind it.
    opening: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct State {
    /// Streams that are full, and the one for list changes.
    fixed: Vec<AbortHandle>,
    /// The stream URIs join, and the URIs it carries.
    newest: Option<AbortHandle>,
    carried: Vec<String>,
    /// URIs waiting for a stream, in the order asked, each with where its outcome goes.
    waiting: Vec<(String, oneshot::Sender<Outcome>)>,
    /// The session ended: no stream is opened any more.
    closed: bool,
}

impl Listens {
    pub(crate) fn new(server: ServerName, observer: Arc<dyn UpstreamObserver>) -> Arc<Self> {
        Arc::new(Self {
            server,
            observer,
            state: Mutex::new(State::default()),
            opening: tokio::sync::Mutex::new(()),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens the stream that hears of changes to the resource list, for the life of the session.
    pub(crate) async fn list_changes(
        &self,
        peer: &Peer<RoleClient>,
        timeout: Duration,
    ) -> Result<(), UpstreamError> {
        let filter = SubscriptionFilter::builder()
            .resources_list_changed()
            .build();
        let stream = open(peer, filter, timeout).await?;
        let task = self.spawn(stream);
        let mut state = self.state();
        if state.closed {
            task.abort();
        } else {
            state.fixed.push(task);
        }
        Ok(())
    }

    /// Listens for changes to `uri` (within `timeout` of its turn to open a stream). `Ok(false)`:
    /// the upstream acknowledged the stream without the URI.
    pub(crate) async fn subscribe(
        &self,
        peer: &Peer<RoleClient>,
        uri: &str,
        timeout: Duration,
    ) -> Result<bool, UpstreamError> {
        let (tx, mut rx) = oneshot::channel();
        self.state().waiting.push((uri.to_owned(), tx));
        loop {
            let _turn = self.opening.lock().await;
            match rx.try_recv() {
                Ok(outcome) => return outcome,
                // Whoever took this URI into a stream was cancelled before it told the outcome.
                Err(oneshot::error::TryRecvError::Closed) => {
                    return Err(UpstreamError::Unreachable(
                        "the stream being opened for this resource was abandoned".into(),
                    ));
                }
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            // Still waiting: this caller opens the next stream, for every URI waiting (up to the
            // bound), its own among them unless more than a stream's worth were asked before it.
            self.join_waiting(peer, timeout).await;
        }
    }

    /// Opens one stream for the URIs waiting, and tells each its outcome. Called holding
    /// `opening`, so the newest stream and its list change under one opener at a time.
    async fn join_waiting(&self, peer: &Peer<RoleClient>, timeout: Duration) {
        let (mut uris, joining, replaces) = {
            let mut state = self.state();
            if state.closed {
                for (_, tx) in state.waiting.drain(..) {
                    let _ = tx.send(Err(UpstreamError::Unreachable("the session ended".into())));
                }
                return;
            }
            // A full newest stream stays as it is; the waiting URIs start a new one.
            let replaces = state.carried.len() < PER_STREAM;
            let base = if replaces {
                state.carried.clone()
            } else {
                Vec::new()
            };
            let take = state.waiting.len().min(PER_STREAM - base.len());
            let joining: Vec<_> = state.waiting.drain(..take).collect();
            (base, joining, replaces)
        };
        uris.extend(joining.iter().map(|(uri, _)| uri.clone()));
        let filter = SubscriptionFilter::builder()
            .resource_subscriptions(uris.clone())
            .build();
        match open(peer, filter, timeout).await {
            Ok(stream) => {
                let accepted = stream
                    .acknowledged()
                    .resource_subscriptions
                    .clone()
                    .unwrap_or_default();
                let task = self.spawn(stream);
                let mut state = self.state();
                if state.closed {
                    task.abort();
                } else {
                    let previous = state.newest.replace(task);
                    state.carried = uris;
                    match previous {
                        // Acknowledged, so the stream it replaces can go.
                        Some(previous) if replaces => previous.abort(),
                        Some(previous) => state.fixed.push(previous),
                        None => {}
                    }
                }
                drop(state);
                for (uri, tx) in joining {
                    let _ = tx.send(Ok(accepted.contains(&uri)));
                }
            }
            // The streams already open stay as they were.
            Err(e) => {
                for (_, tx) in joining {
                    let _ = tx.send(Err(e.clone()));
                }
            }
        }
    }

    /// Reads `stream` in a task of its own, telling the observer what it announces.
    fn spawn(&self, mut stream: Subscription) -> AbortHandle {
        let (server, observer) = (self.server.clone(), self.observer.clone());
        tokio::spawn(async move {
            while let Ok(Some(notification)) = stream.next().await {
                match notification {
                    ServerNotification::ResourceUpdatedNotification(n) => {
                        observer.resource_updated(&server, &n.params.uri).await;
                    }
                    ServerNotification::ResourceListChangedNotification(_) => {
                        observer.resources_changed(&server).await;
                    }
                    _ => {}
                }
            }
            tracing::debug!(server = %server, "an upstream subscription stream ended");
        })
        .abort_handle()
    }

    /// Ends every stream (their requests are cancelled) and opens no more.
    pub(crate) fn close(&self) {
        let mut state = self.state();
        state.closed = true;
        let newest = state.newest.take();
        for task in state.fixed.drain(..).chain(newest) {
            task.abort();
        }
        state.carried.clear();
    }
}

impl Drop for Listens {
    fn drop(&mut self) {
        self.close();
    }
}

/// Sends a `subscriptions/listen` for `filter` and waits for its acknowledgment.
async fn open(
    peer: &Peer<RoleClient>,
    filter: SubscriptionFilter,
    timeout: Duration,
) -> Result<Subscription, UpstreamError> {
    tokio::time::timeout(timeout, peer.listen(filter))
        .await
        .map_err(|_| {
            UpstreamError::Timeout(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX))
        })?
        .map_err(|e| from_service(e, false))
}
