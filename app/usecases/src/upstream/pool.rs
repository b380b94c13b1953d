//! One server's pool of sessions and the bound on its requests in flight.
//!
//! A request leases the least-loaded live session, or a new one while every live session
//! carries [`PER_SESSION`] requests and the pool has room. Dead sessions leave the pool as soon as
//! a lease notices them, and are closed (their processes reaped) in the background.

use std::{
    future::Future,
    ops::Deref,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use quarry_ports::{UpstreamError, UpstreamSession};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Requests one session carries before the pool opens another.
pub(crate) const PER_SESSION: usize = 8;

/// A session lent to one request; returns its slot when dropped.
pub(crate) struct Lease {
    session: Arc<dyn UpstreamSession>,
    in_flight: Arc<AtomicUsize>,
    _permit: OwnedSemaphorePermit,
}

impl Lease {
    /// The session, to move into a request.
    pub(crate) fn session(&self) -> Arc<dyn UpstreamSession> {
        self.session.clone()
    }
}

impl Deref for Lease {
    type Target = dyn UpstreamSession;
    fn deref(&self) -> &Self::Target {
        self.session.as_ref()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Debug)]
struct Pooled {
    session: Arc<dyn UpstreamSession>,
    in_flight: Arc<AtomicUsize>,
    /// Set while a request on the session has gone past its deadline and a ping has not yet
    /// shown the session alive: it takes no new requests.
    suspect: bool,
}

/// What kind of session a lease got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fresh {
    /// One already in the pool.
    Reused,
    /// A new one: the first, or one that grows the pool.
    New,
    /// A new one replacing sessions that all died: whatever the server announced in between
    /// was missed.
    ReplacesDead,
}

/// The sessions of one server.
#[derive(Debug)]
pub(crate) struct Pool {
    size: usize,
    sessions: tokio::sync::Mutex<Vec<Pooled>>,
    permits: Arc<Semaphore>,
    ever_connected: AtomicBool,
}

impl Pool {
    pub(crate) fn new(size: u32) -> Self {
        let size = size.max(1) as usize;
        Self {
            size,
            sessions: tokio::sync::Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(size * PER_SESSION)),
            ever_connected: AtomicBool::new(false),
        }
    }

    /// Waits for room for one more request in flight, then lends it the least-loaded live
    /// session, or a new one from `connect` while every live session is busy and the pool has
    /// room. The pool is locked while connecting, so concurrent requests never open more
    /// sessions than the pool holds. The second value says what kind of session was lent.
    pub(crate) async fn lease<F, Fut>(&self, connect: F) -> Result<(Lease, Fresh), UpstreamError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Arc<dyn UpstreamSession>, UpstreamError>>,
    {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| UpstreamError::Unreachable("the gateway is shutting down".into()))?;
        let mut sessions = self.sessions.lock().await;
        let (dead, live): (Vec<Pooled>, Vec<Pooled>) =
            sessions.drain(..).partition(|p| p.session.is_closed());
        *sessions = live;
        for gone in dead {
            // The process (if any) has exited or the connection dropped: reap it now.
            tokio::spawn(async move { gone.session.close().await });
        }
        let usable = sessions.iter().filter(|p| !p.suspect).count();
        let least = sessions
            .iter()
            .filter(|p| !p.suspect)
            .min_by_key(|p| p.in_flight.load(Ordering::SeqCst));
        if let Some(p) = least
            .filter(|p| p.in_flight.load(Ordering::SeqCst) < PER_SESSION || usable >= self.size)
        {
            return Ok((Self::lend(p, permit), Fresh::Reused));
        }
        let session = connect().await?;
        let fresh = if sessions.is_empty() && self.ever_connected.swap(true, Ordering::SeqCst) {
            Fresh::ReplacesDead
        } else {
            Fresh::New
        };
        sessions.push(Pooled {
            session,
            in_flight: Arc::new(AtomicUsize::new(0)),
            suspect: false,
        });
        let Some(p) = sessions.last() else {
            unreachable!("just pushed")
        };
        Ok((Self::lend(p, permit), fresh))
    }

    fn lend(p: &Pooled, permit: OwnedSemaphorePermit) -> Lease {
        p.in_flight.fetch_add(1, Ordering::SeqCst);
        Lease {
            session: p.session.clone(),
            in_flight: p.in_flight.clone(),
            _permit: permit,
        }
    }

    /// Takes `session` out of rotation (`true`) or puts it back (`false`).
    pub(crate) async fn set_suspect(&self, session: &Arc<dyn UpstreamSession>, suspect: bool) {
        for p in self.sessions.lock().await.iter_mut() {
            if Arc::ptr_eq(&p.session, session) {
                p.suspect = suspect;
            }
        }
    }

    /// Removes `session` from the pool and ends it (its process is stopped and reaped).
    pub(crate) async fn evict(&self, session: &Arc<dyn UpstreamSession>) {
        self.sessions
            .lock()
            .await
            .retain(|p| !Arc::ptr_eq(&p.session, session));
        session.close().await;
    }

    /// Requests in flight on every session.
    pub(crate) async fn in_flight(&self) -> usize {
        self.sessions
            .lock()
            .await
            .iter()
            .map(|p| p.in_flight.load(Ordering::SeqCst))
            .sum()
    }

    /// Takes every session out of the pool, so the next request opens a new one; each ends once
    /// its requests in flight are done (they hold it).
    pub(crate) async fn replace_all(&self) {
        let old: Vec<Pooled> = self.sessions.lock().await.drain(..).collect();
        for p in old {
            tokio::spawn(async move {
                while p.in_flight.load(Ordering::SeqCst) > 0 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                p.session.close().await;
            });
        }
    }

    /// The most sessions the pool opens.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// Live sessions.
    pub(crate) async fn live(&self) -> Vec<Arc<dyn UpstreamSession>> {
        self.sessions
            .lock()
            .await
            .iter()
            .filter(|p| !p.session.is_closed())
            .map(|p| p.session.clone())
            .collect()
    }

    /// Waits up to `drain` for requests in flight to finish, then ends every session. Returns
    /// false when requests were still in flight.
    pub(crate) async fn close(&self, drain: Duration) -> bool {
        let all = u32::try_from(self.size * PER_SESSION).unwrap_or(u32::MAX);
        let drained = tokio::time::timeout(drain, self.permits.acquire_many(all))
            .await
            .is_ok();
        self.permits.close();
        let sessions: Vec<Pooled> = self.sessions.lock().await.drain(..).collect();
        futures::future::join_all(sessions.iter().map(|p| p.session.close())).await;
        drained
    }
}
