//! One request at a time hands a session to rmcp, or has it take one over.

use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::SessionManager;

use super::{Sessions, lock};

/// A request's turn to hand a session to rmcp (`Sessions::hand_over`), until rmcp has replayed
/// its handshake or the request is done.
#[derive(Debug)]
pub(crate) struct HandOver {
    sessions: Arc<Sessions>,
    id: String,
    number: u64,
}

impl Drop for HandOver {
    fn drop(&mut self) {
        let mut handing = lock(&self.sessions.handing);
        if handing.get(&self.id) != Some(&self.number) {
            return;
        }
        // Given up halfway through a takeover (its request dropped by a hang-up or the time
        // bound before rmcp replayed the handshake): what rmcp made of the session is closed
        // before the next request's turn, which then takes it over afresh instead of finding
        // it half made (rmcp would answer it 500, and every later one, for good).
        let abandoned = lock(&self.sessions.restoring).contains(&self.id);
        if abandoned && let Ok(runtime) = tokio::runtime::Handle::try_current() {
            drop(handing);
            let (sessions, id, number) = (self.sessions.clone(), self.id.clone(), self.number);
            runtime.spawn(async move {
                if let Err(e) = sessions.close_session(&id.as_str().into()).await {
                    tracing::warn!("a session taken over halfway could not be closed: {e}");
                }
                let mut handing = lock(&sessions.handing);
                if handing.get(&id) == Some(&number) {
                    handing.remove(&id);
                }
                drop(handing);
                sessions.handed.notify_waiters();
            });
            return;
        }
        handing.remove(&self.id);
        drop(handing);
        self.sessions.handed.notify_waiters();
    }
}

impl Sessions {
    /// Whether rmcp serves the session `id`, its handshake replayed if it took it over.
    async fn served_by_rmcp(&self, id: &str) -> bool {
        !lock(&self.restoring).contains(id) && self.local.sessions.read().await.contains_key(id)
    }

    /// For a request that goes to rmcp on the session `id`: `None` if rmcp serves it, else the
    /// request's turn to have rmcp take it over (from here or from the store), once no other
    /// request has it. rmcp makes a request wait for a takeover already under way, but one that
    /// found the session missing just before another request's takeover ended starts a second
    /// one, of a session rmcp now holds, and gets a 500; with one request at a time, the
    /// others find it served when their turn comes.
    pub(crate) async fn hand_over(self: &Arc<Self>, id: &str) -> Option<HandOver> {
        // Nearly always: served already, and nothing to wait for.
        if self.served_by_rmcp(id).await {
            return None;
        }
        loop {
            let handed = self.handed.notified();
            tokio::pin!(handed);
            handed.as_mut().enable();
            if self.served_by_rmcp(id).await {
                return None;
            }
            {
                let mut handing = lock(&self.handing);
                if !handing.contains_key(id) {
                    let number = self
                        .handings
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    handing.insert(id.to_owned(), number);
                    return Some(HandOver {
                        sessions: self.clone(),
                        id: id.to_owned(),
                        number,
                    });
                }
            }
            handed.await;
        }
    }

    /// rmcp has replayed the handshake of the session `id` (or failed to, and closed it): the
    /// next request waiting to hand it over goes on.
    pub(super) fn handed_over(&self, id: &str) {
        if lock(&self.handing).remove(id).is_some() {
            self.handed.notify_waiters();
        }
    }
}
