//! One registered upstream server: its pool of sessions, its circuit breaker, its status, and
//! the one entry point through which use cases reach it ([`Upstream::call`]).
//!
//! `call` owns everything a request to an upstream involves: the circuit check (fail fast while
//! open), leasing a session (connecting when the pool needs one), announcing a session that
//! replaced dead ones (what was cached for the server may be stale), the deadline, recording
//! success or failure, and retrying a dead connection on the server's schedule.

mod auth;
mod circuit;
mod gauges;
mod health;
mod pool;
mod supervisor;
mod watched;

pub(crate) use watched::MAX_WATCHED;

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
use crate::{Supervision, invalidation::Invalidator, tokens::ServerTokens, vault::Vault};

/// What an upstream needs from the rest of the gateway.
#[derive(Debug, Clone)]
pub(crate) struct Wiring {
    pub(crate) connector: Arc<dyn UpstreamConnector>,
    pub(crate) oauth: Arc<dyn quarry_ports::OAuthClient>,
    pub(crate) vault: Vault,
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
    /// A deadline for the whole call, retries and their delays included.
    pub(crate) total: Option<Duration>,
}

#[derive(Debug, Clone, Default)]
struct StatusRecord {
    connected: bool,
    /// The last session opened carried a credential.
    authenticated: bool,
    resource_count: u64,
    last_used: Option<Timestamp>,
    last_error: Option<String>,
    skipped_entries: u64,
    skipped_reason: Option<String>,
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
    /// This upstream, for checks that outlive the request that started them.
    me: std::sync::Weak<Upstream>,
    /// Its OAuth tokens, shared by its sessions (one renewal at a time), while its credential
    /// is an OAuth one.
    tokens: Mutex<Option<Arc<ServerTokens>>>,
    /// Upstream URIs agents subscribed to: asked of every new session.
    watched: Mutex<std::collections::BTreeSet<String>>,
    /// Who its sessions tell what they hear (one for all of them, so that they share streams).
    heard: Arc<watched::Heard>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A failure of the server itself, as opposed to an answer about one resource.
fn is_server_failure(e: &UpstreamError) -> bool {
    matches!(
        e,
        UpstreamError::Unreachable(_)
            | UpstreamError::Timeout(_)
            | UpstreamError::Protocol(_)
            | UpstreamError::Tls(_)
    )
}

fn timeout_error(deadline: Duration) -> UpstreamError {
    UpstreamError::Timeout(u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX))
}

impl Upstream {
    pub(crate) fn new(settings: ServerSettings, wiring: Wiring) -> Arc<Self> {
        let backoff = Backoff {
            policy: settings.retry,
            jitter: wiring.supervision.jitter,
        };
        let invalidator = wiring.invalidator.clone();
        Arc::new_cyclic(|me| Self {
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
            me: me.clone(),
            tokens: Mutex::new(None),
            watched: Mutex::default(),
            heard: watched::Heard::new(invalidator, me.clone()),
        })
    }

    /// The server's name.
    pub(crate) fn name(&self) -> &ServerName {
        self.settings.name()
    }

    /// Runs `op` on a session of this server: fails fast while the circuit is open, records the
    /// outcome, retries a dead connection as `attempts` says, all within `attempts.total`.
    ///
    /// A connection that cannot be made is retried on the server's schedule; a session that died
    /// during the request is retried at most once (on a new session: the request may be what
    /// kills it). A request that timed out on a session is no failure of the server until the
    /// session fails a ping too: until then the session takes no new requests. A request whose
    /// connection broke off while the session lives on (HTTP) is none either when a ping answers.
    pub(crate) async fn call<T, F, Fut>(
        &self,
        attempts: Attempts,
        op: F,
    ) -> Result<T, UpstreamError>
    where
        F: Fn(Arc<dyn UpstreamSession>) -> Fut,
        Fut: Future<Output = Result<T, UpstreamError>>,
    {
        let clock = &self.wiring.clock;
        let started = clock.monotonic();
        let mut retries = 0;
        let mut deaths = 0;
        loop {
            // Each attempt gets what is left of the call's time (and at most its own deadline).
            let left = attempts
                .total
                .map(|total| total.saturating_sub(clock.monotonic().saturating_sub(started)));
            let deadline = match (attempts.deadline, left) {
                (Some(own), Some(left)) => Some(own.min(left)),
                (own, left) => own.or(left),
            };
            let (outcome, session) = self.attempt(&op, deadline).await;
            let e = match outcome {
                Ok(value) => {
                    self.used();
                    return Ok(value);
                }
                Err(e) => e,
            };
            match (&e, session) {
                (UpstreamError::Timeout(_), Some(session)) => {
                    // Said in the status, counted toward the circuit only if the session is
                    // dead too.
                    lock(&self.status).last_error = Some(e.to_string());
                    self.check_after_timeout(session).await;
                    return Err(e);
                }
                (UpstreamError::Unreachable(_), Some(session)) => {
                    deaths += 1;
                    // A session that lives on (HTTP: the request's connection broke off) and
                    // still answers a ping within the call's time lost only this request.
                    let left = attempts.total.map(|total| {
                        total.saturating_sub(clock.monotonic().saturating_sub(started))
                    });
                    if self.still_answers(&session, left).await {
                        lock(&self.status).last_error = Some(e.to_string());
                    } else {
                        self.failed(&e);
                    }
                }
                _ => self.failed(&e),
            }
            let retry = matches!(e, UpstreamError::Unreachable(_))
                && retries < attempts.retries
                && deaths <= 1;
            if !retry {
                return Err(e);
            }
            retries += 1;
            crate::audited::note_retry();
            let delay = if deaths > 0 {
                Duration::ZERO
            } else {
                self.settings.retry.delay_before(retries)
            };
            // Retry only within the call's time: past it, the last failure is the answer.
            let elapsed = clock.monotonic().saturating_sub(started);
            if attempts.total.is_some_and(|total| elapsed + delay >= total) {
                return Err(e);
            }
            tracing::info!(server = %self.name(), attempt = retries, ?delay, "retrying after: {e}");
            tokio::time::sleep(delay).await;
        }
    }

    /// One try: a lease and `op` on its session, the two within `deadline`. The session is
    /// returned when the request reached one, also when it then timed out (so the session can be
    /// checked).
    async fn attempt<T, F, Fut>(
        &self,
        op: &F,
        deadline: Option<Duration>,
    ) -> (Result<T, UpstreamError>, Option<Arc<dyn UpstreamSession>>)
    where
        F: Fn(Arc<dyn UpstreamSession>) -> Fut,
        Fut: Future<Output = Result<T, UpstreamError>>,
    {
        let clock = &self.wiring.clock;
        let started = clock.monotonic();
        let leased = match deadline {
            Some(d) => tokio::time::timeout(d, self.lease())
                .await
                .unwrap_or_else(|_| Err(timeout_error(d))),
            None => self.lease().await,
        };
        let lease = match leased {
            Ok(lease) => lease,
            Err(e) => return (Err(e), None),
        };
        let session = lease.session();
        let result = match deadline {
            Some(d) => {
                let left = d.saturating_sub(clock.monotonic().saturating_sub(started));
                tokio::time::timeout(left, op(session.clone()))
                    .await
                    .unwrap_or_else(|_| Err(timeout_error(d)))
            }
            None => op(session.clone()).await,
        };
        drop(lease);
        (result, Some(session))
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
        let observer: Arc<dyn UpstreamObserver> = self.heard.clone();
        // A failure to connect is recorded by the caller (once), as for failed requests. The
        // credential is read (and opened) only when a session is opened.
        let connect = || async {
            let spec = &self.settings.spec;
            let auth = self.wiring.vault.credential(spec).await?;
            let tokens = self
                .tokens_for(auth.as_ref())
                .map(|t| t as Arc<dyn quarry_ports::AccessTokens>);
            let session = self
                .wiring
                .connector
                .connect(spec, auth.as_ref(), tokens, observer)
                .await?;
            lock(&self.status).authenticated = auth.is_some();
            Ok(session)
        };
        let (lease, fresh) = self.pool.lease(connect).await?;
        if fresh != Fresh::Reused {
            lock(&self.status).connected = true;
        }
        if fresh == Fresh::ReplacesDead {
            self.replaced_dead().await;
        }
        if fresh != Fresh::Reused {
            self.resubscribe(lease.session().as_ref()).await;
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
    /// Records what the server's last listing gave: how many resources, and how many entries
    /// were left out as malformed (and why the first was).
    pub(crate) fn listed(&self, count: u64, skipped: u64, reason: Option<String>) {
        let mut r = lock(&self.status);
        r.resource_count = count;
        r.skipped_entries = skipped;
        r.skipped_reason = reason;
    }

    /// Records a failure. A failure of the server (unreachable, timed out, broken protocol)
    /// counts toward the circuit and schedules the next attempt; an answer about one resource
    /// (not found, too large, not supported) is no failure of the server.
    pub(crate) fn failed(&self, error: &UpstreamError) {
        if !is_server_failure(error) {
            if let UpstreamError::Server { .. }
            | UpstreamError::BadResponse(_)
            | UpstreamError::Unauthorized(_) = error
            {
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
        let open = self
            .breaker
            .open_until(self.wiring.clock.monotonic())
            .is_some();
        let signing_in = self.needs_sign_in();
        let status = match (r.connected, &r.last_error) {
            // A person has to sign in again before requests can succeed.
            _ if signing_in => ConnectionStatus::Authenticating,
            // Requests fail fast while the circuit is open, whatever sessions are left.
            _ if open => ConnectionStatus::Error,
            (true, _) => ConnectionStatus::Connected,
            (false, Some(_)) => ConnectionStatus::Error,
            (false, None) => ConnectionStatus::Disconnected,
        };
        ServerStatus {
            server_id: spec.id.clone(),
            server_name: spec.name.clone(),
            endpoint: spec.endpoint.display_uri(),
            status,
            authenticated: r.authenticated && r.connected,
            resource_count: r.resource_count,
            last_used: r.last_used,
            last_error: r.last_error,
            skipped_entries: r.skipped_entries,
            skipped_reason: r.skipped_reason,
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
