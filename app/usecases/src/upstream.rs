//! One registered upstream server: its pool of sessions, its circuit breaker, its status, and
//! the one entry point through which use cases reach it ([`Upstream::call`]).
//!
//! `call` owns everything a request to an upstream involves: the circuit check (fail fast while
//! open), leasing a session (connecting when the pool needs one), announcing a session that
//! replaced dead ones (what was cached for the server may be stale), the deadline, recording
//! success or failure, and retrying a dead connection on the server's schedule.

mod circuit;
mod pool;
mod supervisor;

use std::{
    future::Future,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use quarry_domain::{
    Backoff, ConnectionStatus, ServerName, ServerSettings, ServerStatus, Timestamp,
};
use quarry_ports::{Clock, UpstreamConnector, UpstreamError, UpstreamObserver, UpstreamSession};
use tokio_util::sync::CancellationToken;

use self::{
    circuit::Breaker,
    pool::{Fresh, Lease, Pool},
};
use crate::{Supervision, invalidation::Invalidator};

/// What an upstream needs from the rest of the gateway.
#[derive(Debug, Clone)]
pub(crate) struct Wiring {
    pub(crate) connector: Arc<dyn UpstreamConnector>,
    pub(crate) invalidator: Arc<Invalidator>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) supervision: Supervision,
}

/// How one call treats failures.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attempts {
    /// Retries of a call whose connection failed (reads follow the server's policy; listings
    /// do not wait, they report the server as failed).
    pub(crate) retries: u32,
    /// A deadline for each attempt, connection included, beyond the session's own per-request
    /// timeout.
    pub(crate) deadline: Option<Duration>,
}

#[derive(Debug, Clone, Default)]
struct StatusRecord {
    connected: bool,
    resource_count: u64,
    last_used: Option<Timestamp>,
    last_error: Option<String>,
}

/// One registered server.
#[derive(Debug)]
pub(crate) struct Upstream {
    pub(crate) settings: ServerSettings,
    wiring: Wiring,
    pool: Pool,
    breaker: Breaker,
    status: Mutex<StatusRecord>,
    /// Wakes the supervisor when a failure changes the schedule.
    wake: tokio::sync::Notify,
    /// Cancelled when the server is unregistered: its supervisor stops.
    retired: CancellationToken,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A failure of the server itself, as opposed to an answer about one resource.
fn is_server_failure(e: &UpstreamError) -> bool {
    matches!(
        e,
        UpstreamError::Unreachable(_) | UpstreamError::Timeout(_) | UpstreamError::Protocol(_)
    )
}

fn timeout_error(deadline: Duration) -> UpstreamError {
    UpstreamError::Timeout(u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX))
}

impl Upstream {
    pub(crate) fn new(settings: ServerSettings, wiring: Wiring) -> Self {
        let backoff = Backoff {
            policy: settings.retry,
            jitter: wiring.supervision.jitter,
        };
        Self {
            pool: Pool::new(settings.pool_size),
            breaker: Breaker::new(
                wiring.supervision.circuit_threshold,
                backoff,
                settings.name().as_str(),
            ),
            settings,
            wiring,
            status: Mutex::new(StatusRecord::default()),
            wake: tokio::sync::Notify::new(),
            retired: CancellationToken::new(),
        }
    }

    /// The server's name.
    pub(crate) fn name(&self) -> &ServerName {
        self.settings.name()
    }

    /// Runs `op` on a session of this server: fails fast while the circuit is open, records the
    /// outcome, retries a dead connection as `attempts` says.
    pub(crate) async fn call<T, F, Fut>(
        &self,
        attempts: Attempts,
        op: F,
    ) -> Result<T, UpstreamError>
    where
        F: Fn(Arc<dyn UpstreamSession>) -> Fut,
        Fut: Future<Output = Result<T, UpstreamError>>,
    {
        let mut retry = 0;
        loop {
            let attempt = async {
                let lease = self.lease().await?;
                op(lease.session()).await
            };
            let outcome = match attempts.deadline {
                Some(d) => tokio::time::timeout(d, attempt)
                    .await
                    .unwrap_or_else(|_| Err(timeout_error(d))),
                None => attempt.await,
            };
            match outcome {
                Ok(value) => {
                    self.used();
                    return Ok(value);
                }
                Err(e) => {
                    self.failed(&e);
                    if matches!(e, UpstreamError::Unreachable(_)) && retry < attempts.retries {
                        retry += 1;
                        let delay = self.settings.retry.delay_before(retry);
                        tracing::info!(server = %self.name(), attempt = retry, ?delay, "retrying after: {e}");
                        tokio::time::sleep(delay).await;
                        continue;
                    }
                    return Err(e);
                }
            }
        }
    }

    /// A session for one request. Fails fast while the circuit is open.
    async fn lease(&self) -> Result<Lease, UpstreamError> {
        if let Some((failures, until)) = self.breaker.open_until(self.wiring.clock.monotonic()) {
            let wait = until.saturating_sub(self.wiring.clock.monotonic());
            return Err(UpstreamError::CircuitOpen(format!(
                "circuit open after {failures} consecutive failures; next attempt in {:.1} s",
                wait.as_secs_f64()
            )));
        }
        self.lease_unchecked().await
    }

    /// A session, connecting if the pool needs one, whatever the circuit says.
    async fn lease_unchecked(&self) -> Result<Lease, UpstreamError> {
        let observer: Arc<dyn UpstreamObserver> = self.wiring.invalidator.clone();
        // A failure to connect is recorded by the caller (once), as for failed requests.
        let connect = || self.wiring.connector.connect(&self.settings.spec, observer);
        let (lease, fresh) = self.pool.lease(connect).await?;
        if fresh != Fresh::Reused {
            lock(&self.status).connected = true;
        }
        if fresh == Fresh::ReplacesDead {
            // Announcements may have been missed while no session was up.
            self.wiring.invalidator.forget_server(self.name()).await;
        }
        Ok(lease)
    }

    /// Records a successful use: the server is healthy.
    pub(crate) fn used(&self) {
        let now = self.wiring.clock.now();
        {
            let mut r = lock(&self.status);
            r.last_used = Some(now);
            r.connected = true;
            r.last_error = None;
        }
        self.breaker.succeeded();
    }

    /// Records how many resources the server listed.
    pub(crate) fn listed(&self, count: u64) {
        lock(&self.status).resource_count = count;
    }

    /// Records a failure. A failure of the server (unreachable, timed out, broken protocol)
    /// counts toward the circuit and schedules the next attempt; an answer about one resource
    /// (not found, too large, not supported) is no failure of the server.
    pub(crate) fn failed(&self, error: &UpstreamError) {
        if !is_server_failure(error) {
            if let UpstreamError::Server { .. } = error {
                lock(&self.status).last_error = Some(error.to_string());
            }
            return;
        }
        {
            let mut r = lock(&self.status);
            r.last_error = Some(error.to_string());
            if matches!(error, UpstreamError::Unreachable(_)) {
                r.connected = false;
            }
        }
        self.breaker.failed(self.wiring.clock.monotonic());
        self.wake.notify_one();
    }

    /// The status as listings report it.
    pub(crate) fn status(&self) -> ServerStatus {
        let r = lock(&self.status).clone();
        let spec = &self.settings.spec;
        let status = match (r.connected, &r.last_error) {
            (true, _) => ConnectionStatus::Connected,
            (false, Some(_)) => ConnectionStatus::Error,
            (false, None) => ConnectionStatus::Disconnected,
        };
        ServerStatus {
            server_id: spec.id.clone(),
            server_name: spec.name.clone(),
            endpoint: spec.endpoint.display_uri(),
            status,
            authenticated: false,
            resource_count: r.resource_count,
            last_used: r.last_used,
            last_error: r.last_error,
        }
    }

    /// Waits up to `drain` for requests in flight to finish, then ends every session.
    pub(crate) async fn close(&self, drain: Duration) {
        self.retired.cancel();
        if !self.pool.close(drain).await {
            tracing::warn!(server = %self.name(), "requests still in flight after {drain:?}; closing anyway");
        }
        lock(&self.status).connected = false;
    }
}
