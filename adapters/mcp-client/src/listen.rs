//! Hearing of changes from a modern (2026-07-28) upstream, which has no `resources/subscribe`:
//! `subscriptions/listen` streams, each read by a task that tells the application's observer.
//!
//! Over HTTP a listen stream is not tied to the session that opened it, so the sessions of one
//! server share one set of streams ([`Shared`]): a URI is asked for once per server, not once per
//! pooled session. A child process over stdio is a server of its own, so each stdio session has
//! its own streams, which end with it.
//!
//! A stream that ends by itself (the server ended it, or the session it was opened on died)
//! leaves the URIs it carried unheard: every stream is then dropped, every URI is to be asked
//! again, and the observer is told ([`UpstreamObserver::unheard`]) that what it holds of the
//! server may be out of date.
//!
//! A stream is a request held open (over HTTP, a POST and its connection), so a session does not
//! open one per URI: the URIs share streams of up to [`PER_STREAM`] each. A URI joins the newest
//! stream by replacing it: the stream with the larger list is opened and acknowledged first, and
//! only then is the one it replaces cancelled, so no change falls between the two. URIs asked for
//! while a stream is being opened wait and join the next one together (as a group commit does),
//! so a burst of first reads of many URIs opens a few streams, not one each.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex, MutexGuard, Weak},
    time::Duration,
};

use quarry_domain::{Endpoint, ServerName, ServerSpec};
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

/// The streams that carry resource URIs, for one session or for every session of a server.
#[derive(Debug)]
pub(crate) struct Listens {
    server: ServerName,
    observer: Arc<dyn UpstreamObserver>,
    state: Mutex<State>,
    /// Held by the one caller opening a stream; the others queue behind it.
    opening: tokio::sync::Mutex<()>,
    /// This, for the tasks reading its streams.
    me: Weak<Listens>,
    /// Shared by the sessions of a server, rather than one session's own.
    shared: bool,
}

#[derive(Debug, Default)]
struct State {
    /// URIs asked for: each is asked of the server once (until a stream is lost).
    subscribed: HashSet<String>,
    /// Counts the streams lost: a stream opened before the last loss tells no other.
    generation: u64,
    /// Streams that are full.
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
    fn new(server: ServerName, observer: Arc<dyn UpstreamObserver>, shared: bool) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            server,
            observer,
            state: Mutex::new(State::default()),
            opening: tokio::sync::Mutex::new(()),
            me: me.clone(),
            shared,
        })
    }

    /// A session using these streams closed: streams of its own end with it (its replacement
    /// starts afresh); shared ones opened on it end by themselves, and are asked for again.
    pub(crate) fn session_closed(&self) {
        if !self.shared {
            self.close();
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Listens for changes to `uri` (within `timeout` of its turn to open a stream), unless it
    /// was asked for already. `Ok(false)`: the upstream acknowledged the stream without the URI.
    pub(crate) async fn subscribe(
        &self,
        peer: &Peer<RoleClient>,
        uri: &str,
        timeout: Duration,
    ) -> Result<bool, UpstreamError> {
        let (tx, mut rx) = oneshot::channel();
        {
            let mut state = self.state();
            if !state.subscribed.insert(uri.to_owned()) {
                return Ok(true);
            }
            state.waiting.push((uri.to_owned(), tx));
        }
        // Asked again later unless this ends with the stream's acknowledgment (a caller that
        // gives up, a failure).
        let mut asking = Asking {
            listens: self,
            uri,
            done: false,
        };
        let outcome = self.wait_turn(peer, &mut rx, timeout).await;
        asking.done = outcome.is_ok();
        outcome
    }

    /// Waits for `rx`'s outcome, opening the next stream whenever this caller's turn comes first.
    async fn wait_turn(
        &self,
        peer: &Peer<RoleClient>,
        rx: &mut oneshot::Receiver<Outcome>,
        timeout: Duration,
    ) -> Outcome {
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
                let mut state = self.state();
                if state.closed {
                    drop(stream);
                } else {
                    let task = self.spawn(stream, state.generation);
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

    /// Reads `stream` in a task of its own, telling the observer what it announces, and that
    /// the stream was lost if it ends by itself (a stream replaced or closed is aborted instead).
    fn spawn(&self, stream: Subscription, generation: u64) -> AbortHandle {
        let me = self.me.clone();
        let (server, observer) = (self.server.clone(), self.observer.clone());
        tokio::spawn(async move {
            hear(stream, &server, observer.as_ref()).await;
            if me.upgrade().is_some_and(|me| me.lost(generation)) {
                tracing::debug!(server = %server, "an upstream subscription stream ended: its resources are asked for again");
                observer.unheard(&server).await;
            }
        })
        .abort_handle()
    }

    /// A stream opened in `generation` ended by itself: unless another was lost since, every
    /// stream is dropped and every URI is to be asked for again. True when this was news.
    fn lost(&self, generation: u64) -> bool {
        let mut state = self.state();
        if state.closed || state.generation != generation {
            return false;
        }
        state.generation += 1;
        let newest = state.newest.take();
        for task in state.fixed.drain(..).chain(newest) {
            task.abort();
        }
        state.carried.clear();
        state.subscribed.clear();
        true
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
        state.subscribed.clear();
    }
}

impl Drop for Listens {
    fn drop(&mut self) {
        self.close();
    }
}

/// A URI being asked for: forgotten unless its stream acknowledged it.
struct Asking<'a> {
    listens: &'a Listens,
    uri: &'a str,
    done: bool,
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.listens.state().subscribed.remove(self.uri);
        }
    }
}

/// Tells `observer` what `stream` announces, until it ends.
async fn hear(mut stream: Subscription, server: &ServerName, observer: &dyn UpstreamObserver) {
    while let Ok(Some(notification)) = stream.next().await {
        match notification {
            ServerNotification::ResourceUpdatedNotification(n) => {
                observer.resource_updated(server, &n.params.uri).await;
            }
            ServerNotification::ResourceListChangedNotification(_) => {
                observer.resources_changed(server).await;
            }
            _ => {}
        }
    }
}

/// How long after a list-change stream ended by itself it is opened again.
const REOPEN_AFTER: Duration = Duration::from_secs(1);

/// Hears of changes to `server`'s resource list on a stream of the session's own, for as long as
/// the session lives (run as a task, aborted when the session closes). A stream that ends by
/// itself leaves list changes unheard meanwhile: the observer drops what it listed, and the
/// stream is opened again a moment later. A stream the server refuses is not asked again.
pub(crate) async fn list_changes(
    peer: Peer<RoleClient>,
    server: ServerName,
    observer: Arc<dyn UpstreamObserver>,
    timeout: Duration,
) {
    let filter = SubscriptionFilter::builder()
        .resources_list_changed()
        .build();
    loop {
        match open(&peer, filter.clone(), timeout).await {
            Ok(stream) => hear(stream, &server, observer.as_ref()).await,
            Err(e) => {
                tracing::debug!(server = %server, "listening for list changes failed: {e}");
                return;
            }
        }
        observer.resources_changed(&server).await;
        if peer.is_transport_closed() {
            return;
        }
        tracing::debug!(server = %server, "an upstream list-change stream ended: it is opened again");
        tokio::time::sleep(REOPEN_AFTER).await;
    }
}

/// The URI streams of each HTTP server, shared by its sessions that tell the same observer (held
/// while any of them is); a stdio session's are its own.
#[derive(Debug, Clone, Default)]
pub(crate) struct Shared(Arc<Mutex<HashMap<SharedKey, Weak<Listens>>>>);

/// A server's name and URL, and the address of the observer its sessions tell.
type SharedKey = (ServerName, String, usize);

impl Shared {
    /// The streams for a new session with `spec`'s server whose announcements go to `observer`.
    pub(crate) fn streams(
        &self,
        spec: &ServerSpec,
        observer: Arc<dyn UpstreamObserver>,
    ) -> Arc<Listens> {
        let Endpoint::Http { url } = &spec.endpoint else {
            return Listens::new(spec.name.clone(), observer, false);
        };
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|_, held| held.strong_count() > 0);
        let key = (
            spec.name.clone(),
            url.clone(),
            Arc::as_ptr(&observer).cast::<()>() as usize,
        );
        if let Some(held) = all.get(&key).and_then(Weak::upgrade) {
            return held;
        }
        let fresh = Listens::new(spec.name.clone(), observer, true);
        all.insert(key, Arc::downgrade(&fresh));
        fresh
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
