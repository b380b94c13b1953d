//! The registered upstream servers, each with a pool of sessions, a circuit breaker and (when
//! serving) a supervisor that reconnects on a backoff schedule and checks health.
//!
//! A request leases a session: the least-loaded live one, or a new one while every live session
//! is busy and the pool has room; the number of requests in flight per server is bounded. After
//! `circuit_threshold` consecutive failures the circuit opens: requests fail fast (E003) until the
//! next attempt the backoff schedule allows (1 s, 2 s, 4 s ... at most 30 s, with jitter). Dead
//! sessions are closed (their child processes reaped) as soon as they are noticed.

use std::{
    ops::Deref,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use quarry_domain::{
    ConnectionStatus, Error, ErrorCode, ServerName, ServerSelector, ServerStatus, Timestamp,
};
use quarry_ports::{UpstreamConnector, UpstreamError, UpstreamObserver, UpstreamSession};
use tokio::{
    sync::{OwnedSemaphorePermit, Semaphore},
    time::Instant,
};
use tokio_util::sync::CancellationToken;

use crate::config::{ServerSettings, Supervision};

/// Requests one session carries before the pool opens another.
const PER_SESSION: usize = 8;

/// A session lent to one request; returns its slot when dropped.
pub(crate) struct Lease {
    session: Arc<dyn UpstreamSession>,
    /// True when the session replaces sessions that all died: whatever the server announced
    /// in between was missed. (Not for the first session, nor for one that grows the pool.)
    pub(crate) is_new: bool,
    in_flight: Arc<AtomicUsize>,
    _permit: OwnedSemaphorePermit,
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
}

#[derive(Debug, Clone, Default)]
struct StatusRecord {
    connected: bool,
    resource_count: u64,
    last_used: Option<Timestamp>,
    last_error: Option<String>,
}

#[derive(Debug, Default)]
struct Health {
    /// Consecutive failures of the server (not of one resource).
    failures: u32,
    /// When the next connection attempt is due, after a failure.
    next_attempt: Option<Instant>,
}

/// One registered server.
#[derive(Debug)]
pub(crate) struct Upstream {
    pub(crate) settings: ServerSettings,
    supervision: Supervision,
    pool: tokio::sync::Mutex<Vec<Pooled>>,
    permits: Arc<Semaphore>,
    health: Mutex<Health>,
    status: Mutex<StatusRecord>,
    /// Wakes the supervisor when a failure changes the schedule.
    wake: tokio::sync::Notify,
    /// Cancelled when the server is unregistered: its supervisor stops.
    retired: CancellationToken,
    /// Set once the server has had a session.
    ever_connected: std::sync::atomic::AtomicBool,
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

impl Upstream {
    fn new(settings: ServerSettings, supervision: Supervision) -> Self {
        let capacity = settings.pool_size as usize * PER_SESSION;
        Self {
            settings,
            supervision,
            pool: tokio::sync::Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(capacity)),
            health: Mutex::new(Health::default()),
            status: Mutex::new(StatusRecord::default()),
            wake: tokio::sync::Notify::new(),
            retired: CancellationToken::new(),
            ever_connected: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The server's name.
    pub(crate) fn name(&self) -> &ServerName {
        &self.settings.spec.name
    }

    /// The delay before connection attempt number `failures` + 1, jittered.
    fn backoff(&self, failures: u32) -> Duration {
        let nominal = self.settings.retry.delay_before(failures.max(1));
        let jitter = self.supervision.jitter;
        if jitter <= 0.0 {
            return nominal;
        }
        // A cheap, well-spread pseudo-random number from the name and the attempt: the jitter
        // only has to keep many gateways from retrying in step.
        let mut x = u64::from(failures).wrapping_add(0x9e37_79b9_7f4a_7c15);
        for b in self.name().as_str().bytes() {
            x = (x ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        x ^= x >> 33;
        let unit = (x % 2001) as f64 / 1000.0 - 1.0;
        nominal.mul_f64((1.0 + jitter * unit).max(0.0))
    }

    fn circuit_open_until(&self) -> Option<Instant> {
        let h = lock(&self.health);
        (h.failures >= self.supervision.circuit_threshold)
            .then_some(h.next_attempt)
            .flatten()
            .filter(|at| Instant::now() < *at)
    }

    /// A session for one request. Fails fast while the circuit is open.
    pub(crate) async fn lease(
        &self,
        connector: &dyn UpstreamConnector,
        observer: Arc<dyn UpstreamObserver>,
    ) -> Result<Lease, UpstreamError> {
        if let Some(until) = self.circuit_open_until() {
            let failures = lock(&self.health).failures;
            return Err(UpstreamError::CircuitOpen(format!(
                "circuit open after {failures} consecutive failures; next attempt in {:.1} s",
                until
                    .saturating_duration_since(Instant::now())
                    .as_secs_f64()
            )));
        }
        self.lease_unchecked(connector, observer).await
    }

    async fn lease_unchecked(
        &self,
        connector: &dyn UpstreamConnector,
        observer: Arc<dyn UpstreamObserver>,
    ) -> Result<Lease, UpstreamError> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| UpstreamError::Unreachable("the gateway is shutting down".into()))?;
        let mut pool = self.pool.lock().await;
        let (dead, live): (Vec<Pooled>, Vec<Pooled>) =
            pool.drain(..).partition(|p| p.session.is_closed());
        *pool = live;
        for gone in dead {
            // The process (if any) has exited or the connection dropped: reap it now.
            tokio::spawn(async move { gone.session.close().await });
        }
        let least = pool
            .iter()
            .min_by_key(|p| p.in_flight.load(Ordering::SeqCst));
        let reuse = least.filter(|p| {
            p.in_flight.load(Ordering::SeqCst) < PER_SESSION
                || pool.len() >= self.settings.pool_size as usize
        });
        let (session, in_flight, is_new) = match reuse {
            Some(p) => (p.session.clone(), p.in_flight.clone(), false),
            None => match connector.connect(&self.settings.spec, observer).await {
                Ok(session) => {
                    let in_flight = Arc::new(AtomicUsize::new(0));
                    let replaces_dead =
                        pool.is_empty() && self.ever_connected.swap(true, Ordering::SeqCst);
                    pool.push(Pooled {
                        session: session.clone(),
                        in_flight: in_flight.clone(),
                    });
                    lock(&self.status).connected = true;
                    (session, in_flight, replaces_dead)
                }
                // The caller records the failure (once), as it does for failed requests.
                Err(e) => return Err(e),
            },
        };
        in_flight.fetch_add(1, Ordering::SeqCst);
        Ok(Lease {
            session,
            is_new,
            in_flight,
            _permit: permit,
        })
    }

    /// Records a successful use: the server is healthy.
    pub(crate) fn used(&self, now: Timestamp) {
        {
            let mut r = lock(&self.status);
            r.last_used = Some(now);
            r.connected = true;
            r.last_error = None;
        }
        let mut h = lock(&self.health);
        h.failures = 0;
        h.next_attempt = None;
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
        let failures = {
            let mut h = lock(&self.health);
            h.failures = h.failures.saturating_add(1);
            h.failures
        };
        let next = Instant::now() + self.backoff(failures);
        lock(&self.health).next_attempt = Some(next);
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

    /// Live sessions in the pool.
    pub(crate) async fn pooled(&self) -> usize {
        self.pool
            .lock()
            .await
            .iter()
            .filter(|p| !p.session.is_closed())
            .count()
    }

    /// Waits up to `drain` for requests in flight to finish, then ends every session.
    pub(crate) async fn close(&self, drain: Duration) {
        self.retired.cancel();
        let all = self.settings.pool_size * PER_SESSION as u32;
        let drained = tokio::time::timeout(drain, self.permits.acquire_many(all)).await;
        if drained.is_err() {
            tracing::warn!(server = %self.name(), "requests still in flight after {drain:?}; closing anyway");
        }
        self.permits.close();
        let sessions: Vec<Pooled> = self.pool.lock().await.drain(..).collect();
        futures::future::join_all(sessions.iter().map(|p| p.session.close())).await;
        lock(&self.status).connected = false;
    }

    /// Keeps the server connected while serving: connects at once, reconnects on the backoff
    /// schedule after a failure, and pings live sessions every health interval (a session that
    /// does not answer is closed and counts as a failure).
    pub(crate) async fn supervise(
        self: Arc<Self>,
        connector: Arc<dyn UpstreamConnector>,
        observer: Arc<dyn UpstreamObserver>,
        on_new_session: impl Fn(ServerName) + Send + 'static,
        stop: CancellationToken,
    ) {
        loop {
            let live = self.pooled().await;
            let due = if live == 0 {
                lock(&self.health).next_attempt.unwrap_or_else(Instant::now)
            } else {
                Instant::now() + self.supervision.health_interval
            };
            tokio::select! {
                () = stop.cancelled() => return,
                () = self.retired.cancelled() => return,
                () = tokio::time::sleep_until(due) => {}
                () = self.wake.notified() => continue,
            }
            if self.pooled().await == 0 {
                match self
                    .lease_unchecked(connector.as_ref(), observer.clone())
                    .await
                {
                    Ok(lease) => {
                        tracing::info!(server = %self.name(), "connected");
                        if lease.is_new {
                            on_new_session(self.name().clone());
                        }
                        lock(&self.health).failures = 0;
                        lock(&self.health).next_attempt = None;
                        lock(&self.status).last_error = None;
                    }
                    Err(e) => {
                        tracing::warn!(server = %self.name(), "connection attempt failed: {e}");
                        self.failed(&e);
                    }
                }
            } else {
                let sessions: Vec<Arc<dyn UpstreamSession>> = self
                    .pool
                    .lock()
                    .await
                    .iter()
                    .map(|p| p.session.clone())
                    .collect();
                for session in sessions {
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

/// Every registered server: those of the configuration file, and those added at runtime.
#[derive(Debug)]
pub(crate) struct Upstreams {
    servers: std::sync::RwLock<Vec<Arc<Upstream>>>,
    configured: Vec<ServerName>,
    supervision: Supervision,
}

impl Upstreams {
    pub(crate) fn new(settings: Vec<ServerSettings>, supervision: Supervision) -> Self {
        let configured = settings.iter().map(|s| s.spec.name.clone()).collect();
        Self {
            servers: std::sync::RwLock::new(
                settings
                    .into_iter()
                    .map(|s| Arc::new(Upstream::new(s, supervision)))
                    .collect(),
            ),
            configured,
            supervision,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<Upstream>>> {
        self.servers.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Vec<Arc<Upstream>>> {
        self.servers.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Every server.
    pub(crate) fn all(&self) -> Vec<Arc<Upstream>> {
        self.read().clone()
    }

    /// True for a server of the configuration file.
    pub(crate) fn is_configured(&self, name: &ServerName) -> bool {
        self.configured.contains(name)
    }

    /// Adds a server.
    ///
    /// # Errors
    /// E001 when the name is taken, exactly or but for letter case, or the id is.
    pub(crate) fn insert(&self, settings: ServerSettings) -> Result<Arc<Upstream>, Error> {
        let mut servers = self.write();
        let name = &settings.spec.name;
        if let Some(taken) = servers
            .iter()
            .find(|u| u.name() == name || u.name().collides_with(name))
        {
            return Err(Error::invalid(format!(
                "a server named '{}' is already registered{}",
                taken.name(),
                if taken.name() == name {
                    ""
                } else {
                    " (names must differ by more than letter case)"
                }
            )));
        }
        if let Some(taken) = servers
            .iter()
            .find(|u| u.settings.spec.id == settings.spec.id)
        {
            return Err(Error::invalid(format!(
                "server '{}' already has the id {}",
                taken.name(),
                settings.spec.id
            )));
        }
        let upstream = Arc::new(Upstream::new(settings, self.supervision));
        servers.push(upstream.clone());
        servers.sort_by(|a, b| a.name().cmp(b.name()));
        Ok(upstream)
    }

    /// Takes a server out of the registry (its sessions are the caller's to close).
    pub(crate) fn take(&self, name: &ServerName) -> Option<Arc<Upstream>> {
        let mut servers = self.write();
        let at = servers.iter().position(|u| u.name() == name)?;
        Some(servers.remove(at))
    }

    /// The server with exactly this name.
    ///
    /// # Errors
    /// E003 when no server has this name.
    pub(crate) fn by_name(&self, name: &ServerName) -> Result<Arc<Upstream>, Error> {
        self.read()
            .iter()
            .find(|u| u.name() == name)
            .cloned()
            .ok_or_else(|| not_registered(name.as_str()))
    }

    /// The servers a listing selects.
    ///
    /// # Errors
    /// E003 when a selector names no registered server.
    pub(crate) fn select(
        &self,
        selector: Option<&ServerSelector>,
    ) -> Result<Vec<Arc<Upstream>>, Error> {
        let all = self.all();
        match selector {
            None => Ok(all),
            Some(sel) => {
                let found: Vec<_> = all
                    .into_iter()
                    .filter(|u| sel.selects(&u.settings.spec.name, &u.settings.spec.id))
                    .collect();
                if found.is_empty() {
                    Err(not_registered(sel.as_str()))
                } else {
                    Ok(found)
                }
            }
        }
    }

    /// Drains and closes every server's sessions.
    pub(crate) async fn close_all(&self, drain: Duration) {
        let all = self.all();
        futures::future::join_all(all.iter().map(|u| u.close(drain))).await;
    }
}

fn not_registered(name: &str) -> Error {
    let shown: String = name.chars().take(128).collect();
    Error::new(
        ErrorCode::E003,
        format!("server '{shown}' is not registered"),
    )
}
