//! Whether a session that failed one request is still alive: a ping decides if the failure was
//! about that request (the session stays) or about the session (it is replaced, and that counts
//! toward the circuit).

use std::{sync::Arc, time::Duration};

use quarry_ports::UpstreamSession;

use super::Upstream;

impl Upstream {
    /// True when `session` is open and answers a ping within `within`.
    pub(super) async fn still_answers(
        &self,
        session: &Arc<dyn UpstreamSession>,
        within: Option<Duration>,
    ) -> bool {
        if session.is_closed() {
            return false;
        }
        match within {
            Some(d) => matches!(tokio::time::timeout(d, session.ping()).await, Ok(Ok(()))),
            None => session.ping().await.is_ok(),
        }
    }

    /// The first of `sessions` that answers a ping, asked one after the other.
    pub(super) async fn first_answering(
        &self,
        sessions: Vec<Arc<dyn UpstreamSession>>,
    ) -> Option<Arc<dyn UpstreamSession>> {
        for session in sessions {
            if self.still_answers(&session, None).await {
                return Some(session);
            }
        }
        None
    }

    /// A request on `session` went past its deadline: the session takes no new requests while a
    /// ping (in the background, so the caller is answered now) tells whether it still answers.
    /// If it does, the timeout was about one resource; if not, the session is replaced and that
    /// counts as a failure of the server.
    pub(super) async fn check_after_timeout(&self, session: Arc<dyn UpstreamSession>) {
        self.pool.set_suspect(&session, true).await;
        let Some(me) = self.me.upgrade() else { return };
        tokio::spawn(async move {
            match session.ping().await {
                Ok(()) => me.pool.set_suspect(&session, false).await,
                Err(e) => {
                    tracing::warn!(server = %me.name(), "a session that timed out fails its ping too; replacing it: {e}");
                    me.pool.evict(&session).await;
                    me.failed(&e);
                }
            }
        });
    }
}
