//! The URIs agents subscribed to at one upstream: remembered, and asked of every new session
//! (a new session knows nothing of what the old ones were subscribed to), and asked again once
//! the server answers after a stream that carried announcements was lost.

use std::{
    sync::{
        Arc, Weak,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
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
/// gone unheard, what is cached of the server is dropped as soon as one of its live sessions
/// answers a ping, and the URIs agents watch are asked for again. While none answers, its content
/// stays cached, to be served stale; when none is left, the session that replaces them drops it
/// once the server is back.
#[derive(Debug)]
pub(super) struct Heard {
    invalidator: Arc<Invalidator>,
    upstream: Weak<Upstream>,
    check: Arc<Check>,
}

/// The one check at a time of a server whose announcements went unheard. When several of its
/// sessions lose their subscriptions at once (the server restarted under a full pool), one
/// check asks for the watched URIs again, not one per session; a loss told while a check is
/// under way makes it go round once more.
#[derive(Debug, Default)]
struct Check {
    /// Losses told so far.
    losses: AtomicU64,
    /// A check is under way.
    running: AtomicBool,
    /// Losses told before the last session that replaced dead ones was opened: that session
    /// dropped what was cached and asked for the watched URIs, so a check of them asks nothing.
    replaced: AtomicU64,
}

impl Check {
    /// Counts a loss; true when the caller is to start the check (none is under way).
    fn lost(&self) -> bool {
        self.losses.fetch_add(1, Ordering::SeqCst);
        !self.running.swap(true, Ordering::SeqCst)
    }

    /// Every loss told so far is covered by a session that replaces dead ones.
    fn replaced(&self) {
        self.replaced
            .fetch_max(self.losses.load(Ordering::SeqCst), Ordering::SeqCst);
    }

    /// Every loss up to `covered` (a count of [`Check::losses`]) is covered by a session that
    /// replaced dead ones.
    fn covered_by_replacement(&self, covered: u64) -> bool {
        self.replaced.load(Ordering::SeqCst) >= covered
    }

    /// The check dealt with every loss up to `covered` (a count of [`Check::losses`]): true when
    /// it is done, false when a loss told since is left to it.
    fn settled(&self, covered: u64) -> bool {
        self.running.store(false, Ordering::SeqCst);
        // A loss told after `covered` either saw the check still running (and left it to this
        // one: take it up again) or started a check of its own.
        self.losses.load(Ordering::SeqCst) == covered || self.running.swap(true, Ordering::SeqCst)
    }
}

impl Heard {
    pub(super) fn new(invalidator: Arc<Invalidator>, upstream: Weak<Upstream>) -> Arc<Self> {
        Arc::new(Self {
            invalidator,
            upstream,
            check: Arc::default(),
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
        if !self.check.lost() {
            return;
        }
        let (invalidator, check) = (self.invalidator.clone(), self.check.clone());
        tokio::spawn(async move {
            let mut wait = Duration::ZERO;
            loop {
                let covered = check.losses.load(Ordering::SeqCst);
                tokio::select! {
                    biased;
                    () = upstream.retired.cancelled() => return,
                    () = tokio::time::sleep(wait) => {}
                }
                if check.covered_by_replacement(covered) {
                    if check.settled(covered) {
                        return;
                    }
                    wait = Duration::ZERO;
                    continue;
                }
                let live = upstream.pool.live().await;
                if live.is_empty() {
                    // No session is left to ask. The one that replaces them drops what is
                    // cached and asks for the watched URIs (`Fresh::ReplacesDead`), and the
                    // supervisor opens it at once or on the circuit's schedule: this check
                    // connects nothing itself, so a server that stays down is tried no more
                    // often than the schedule says, and a server back at once is asked for
                    // each watched URI once.
                    upstream.wake.notify_one();
                    if check.settled(covered) {
                        return;
                    }
                    wait = Duration::ZERO;
                    continue;
                }
                if let Some(session) = upstream.first_answering(live).await {
                    invalidator.forget_server(upstream.name()).await;
                    upstream.resubscribe(session.as_ref()).await;
                    if check.settled(covered) {
                        return;
                    }
                    wait = Duration::ZERO;
                    continue;
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

    /// A session that replaces dead ones was opened: announcements may have been missed while
    /// no session was up, so what is cached of the server is dropped (and the caller asks the
    /// new session for the watched URIs), which covers every loss told so far.
    pub(super) async fn replaced_dead(&self) {
        self.heard.check.replaced();
        self.wiring.invalidator.forget_server(self.name()).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_check_at_a_time_and_a_loss_told_meanwhile_is_taken_up_again() {
        let check = Check::default();
        assert!(check.lost(), "the first loss starts the check");
        let covered = check.losses.load(Ordering::SeqCst);
        assert!(!check.lost(), "a second check while one is under way");
        assert!(
            !check.settled(covered),
            "the loss told meanwhile was dropped"
        );
        let covered = check.losses.load(Ordering::SeqCst);
        assert!(check.settled(covered));
        assert!(
            check.lost(),
            "a loss after the check is done starts another"
        );
    }

    #[test]
    fn a_replacement_covers_the_losses_told_before_it_and_no_later_one() {
        let check = Check::default();
        check.lost();
        check.lost();
        check.replaced();
        assert!(check.covered_by_replacement(check.losses.load(Ordering::SeqCst)));
        check.lost();
        assert!(
            !check.covered_by_replacement(check.losses.load(Ordering::SeqCst)),
            "a loss told after the replacement needs its own check"
        );
    }
}
