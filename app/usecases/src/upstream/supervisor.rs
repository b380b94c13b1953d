//! Keeping one server connected while serving: connect at once, reconnect on the backoff
//! schedule after a failure, and ping live sessions every health interval (a session that does
//! not answer is closed and counts as a failure).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::{Upstream, lock};

impl Upstream {
    /// Supervises the server until `stop` is cancelled or the server is unregistered.
    pub(crate) async fn supervise(self: Arc<Self>, stop: CancellationToken) {
        let clock = self.wiring.clock.clone();
        loop {
            let live = self.pool.live().await;
            let now = clock.monotonic();
            let due = if live.is_empty() {
                self.breaker.next_attempt().unwrap_or(now)
            } else {
                now + self.wiring.supervision.health_interval
            };
            tokio::select! {
                () = stop.cancelled() => return,
                () = self.retired.cancelled() => return,
                () = tokio::time::sleep(due.saturating_sub(now)) => {}
                () = self.wake.notified() => continue,
            }
            let live = self.pool.live().await;
            if live.is_empty() {
                match self.lease_unchecked().await {
                    Ok(_lease) => {
                        tracing::info!(server = %self.name(), "connected");
                        self.breaker.succeeded();
                        lock(&self.status).last_error = None;
                    }
                    Err(e) => {
                        tracing::warn!(server = %self.name(), "connection attempt failed: {e}");
                        self.failed(&e);
                    }
                }
            } else {
                for session in live {
                    // A session already known dead was counted when it died; it is reaped at
                    // the next lease.
                    if session.is_closed() {
                        continue;
                    }
                    if let Err(e) = session.ping().await {
                        tracing::warn!(server = %self.name(), "health check failed: {e}");
                        session.close().await;
                        self.failed(&e);
                    }
                }
            }
        }
    }
}
