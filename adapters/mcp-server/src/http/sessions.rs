//! Sessions of the HTTP transport (MCP 2025-11-25), with ids of 244 random bits (two version 4
//! UUIDs from the system's random source, 64 hex digits) instead of one UUID's 122. Every session
//! is recorded in the session store port ([`Shared`]): the agent that opened it, the client's
//! `initialize` parameters and what it subscribed to, under the SHA-256 of its id. A replica
//! asked for a session it does not hold takes it over from that record (rmcp replays the
//! `initialize` handshake; the handler subscribes again), so a session outlives the replica that
//! opened it.
//!
//! A session lives in rmcp's local session manager once rmcp has served it (its channels and
//! tasks, some 60 KiB). One whose `initialize` was answered outside rmcp (`http::direct`) is
//! only a line in [`Sessions::opened_here`] while all it sends is reads, which are answered
//! outside rmcp too; its first other request hands it to rmcp, by the same replay as a takeover.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::Stream;
use quarry_domain::Principal;
use quarry_ports::{Clock, ContentHasher, SessionRecord, SessionStore, StoreError};
use rmcp::{
    model::{ClientJsonRpcMessage, InitializeRequestParams, ServerJsonRpcMessage},
    transport::{
        WorkerTransport,
        streamable_http_server::session::{
            RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
            local::{
                LocalSessionManager, LocalSessionManagerError, LocalSessionWorker,
                create_local_session,
            },
            store::{self, SessionState},
        },
    },
};
use tokio_util::sync::CancellationToken;

/// Sessions of one HTTP transport.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    pub(crate) local: LocalSessionManager,
    /// The sessions opened outside rmcp and not yet handed to it.
    opened_here: Mutex<HashMap<String, OpenedSession>>,
    /// The sessions rmcp is taking over, until it has replayed their `initialize`: rmcp holds
    /// them already, but a request let through to one before the replay would reach a session
    /// still waiting for `initialize`, which ends it. Meanwhile [`SessionManager::has_session`]
    /// says no, so that such a request waits for the takeover in progress, as rmcp makes
    /// requests for a session it does not hold yet wait.
    restoring: Mutex<std::collections::HashSet<String>>,
    /// The sessions a request is handing to rmcp, or having it take over: one request each
    /// ([`Sessions::hand_over`]), under a number of its own.
    handing: Mutex<HashMap<String, u64>>,
    handings: std::sync::atomic::AtomicU64,
    /// Told each time a hand-over ends.
    handed: tokio::sync::Notify,
}

/// A session opened outside rmcp: when it was last used, and its client's `initialize`
/// parameters, which rmcp replays when it is handed the session (from here, not from the store:
/// a session in use goes on while the store is out of reach).
#[derive(Debug)]
struct OpenedSession {
    used: Instant,
    initialize: InitializeRequestParams,
}

fn fresh_id() -> SessionId {
    let (a, b) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    format!("{}{}", a.simple(), b.simple()).into()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Sessions {
    /// A new session, opened outside rmcp with these `initialize` parameters: its id.
    pub(crate) fn open_here(&self, initialize: InitializeRequestParams) -> SessionId {
        let id = fresh_id();
        let opened = OpenedSession {
            used: Instant::now(),
            initialize,
        };
        lock(&self.opened_here).insert(id.to_string(), opened);
        id
    }

    /// Forgets a session opened outside rmcp: rmcp serves it now, or it is closed.
    fn forget_opened_here(&self, id: &str) {
        lock(&self.opened_here).remove(id);
    }

    /// Whether `id` is a session opened outside rmcp and unused for `idle`: then it is
    /// forgotten now, as rmcp forgets its own.
    pub(crate) fn idled_out_here(&self, id: &str, idle: Duration) -> bool {
        let mut opened = lock(&self.opened_here);
        let idled = opened
            .get(id)
            .is_some_and(|session| session.used.elapsed() >= idle);
        if idled {
            opened.remove(id);
        }
        idled
    }

    /// Whether `id` is a session opened outside rmcp (and not yet handed to it): then it is used
    /// now.
    pub(crate) fn use_opened_here(&self, id: &str) -> bool {
        lock(&self.opened_here)
            .get_mut(id)
            .map(|session| session.used = Instant::now())
            .is_some()
    }

    /// Forgets the sessions opened outside rmcp and unused for `idle`: their ids.
    pub(crate) fn expire_opened_here(&self, idle: Duration) -> Vec<String> {
        let mut opened = lock(&self.opened_here);
        let idled: Vec<String> = opened
            .iter()
            .filter(|(_, session)| session.used.elapsed() >= idle)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &idled {
            opened.remove(id);
        }
        idled
    }

    /// Of `ids`, those no part of this process holds: rmcp neither serves them nor is taking
    /// them over, and they were not opened outside it (rmcp ended them, idle or closed).
    pub(crate) async fn not_held(&self, mut ids: Vec<String>) -> Vec<String> {
        {
            let rmcp = self.local.sessions.read().await;
            ids.retain(|id| !rmcp.contains_key(id.as_str()));
        }
        let restoring = lock(&self.restoring);
        ids.retain(|id| !restoring.contains(id));
        drop(restoring);
        let opened = lock(&self.opened_here);
        ids.retain(|id| !opened.contains_key(id));
        ids
    }

    /// Of `ids`, those rmcp serves (taken over, if it was, and not opened outside it).
    pub(crate) async fn held_by_rmcp(&self, mut ids: Vec<String>) -> Vec<String> {
        {
            let rmcp = self.local.sessions.read().await;
            ids.retain(|id| rmcp.contains_key(id.as_str()));
        }
        let restoring = lock(&self.restoring);
        ids.retain(|id| !restoring.contains(id));
        ids
    }

    /// Closes the session `id` rmcp serves, as a `DELETE` would: whether it did.
    pub(crate) async fn close_in_rmcp(&self, id: &str) -> bool {
        let id: SessionId = id.into();
        if lock(&self.restoring).contains(id.as_ref())
            || !self.local.sessions.read().await.contains_key(&id)
        {
            return false;
        }
        match self.close_session(&id).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("an unused session could not be closed: {e}");
                false
            }
        }
    }

    /// The sessions open on this replica: rmcp's and those opened outside it.
    pub(crate) async fn open(&self) -> usize {
        let rmcp = self.local.sessions.read().await.len();
        rmcp + lock(&self.opened_here).len()
    }
}

impl SessionManager for Sessions {
    type Error = LocalSessionManagerError;
    type Transport = WorkerTransport<LocalSessionWorker>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let id = fresh_id();
        let (handle, worker) = create_local_session(id.clone(), self.local.session_config.clone());
        self.local.sessions.write().await.insert(id.clone(), handle);
        Ok((id, WorkerTransport::spawn(worker)))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        let answered = self.local.initialize_session(id, message).await;
        // Served from here on, whatever the replay's outcome (a failed one closes it).
        lock(&self.restoring).remove(id.as_ref());
        self.handed_over(id);
        answered
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        if lock(&self.restoring).contains(id.as_ref()) {
            return Ok(false);
        }
        self.local.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.forget_opened_here(id);
        lock(&self.restoring).remove(id.as_ref());
        self.local.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.local.create_stream(id, message).await
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.local.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.local.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.local.resume(id, last_event_id).await
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        // A session opened outside rmcp is rmcp's from now on.
        self.forget_opened_here(&id);
        // Marked before rmcp's local manager holds it, so that no request sees it held early.
        let fresh = lock(&self.restoring).insert(id.to_string());
        let outcome = self.local.restore_session(id.clone()).await;
        if fresh && !matches!(outcome, Ok(RestoreOutcome::Restored(_))) {
            lock(&self.restoring).remove(id.as_ref());
        }
        outcome
    }
}

/// What every replica knows of the sessions: the session store port, keyed by the SHA-256 of
/// each id (the store holds nothing a client could present). A record unused for `idle` is
/// gone, as the session is.
#[derive(Debug, Clone)]
pub(crate) struct Shared {
    store: Arc<dyn SessionStore>,
    hasher: Arc<dyn ContentHasher>,
    clock: Arc<dyn Clock>,
    idle: Duration,
}

impl Shared {
    pub(crate) fn new(
        store: Arc<dyn SessionStore>,
        hasher: Arc<dyn ContentHasher>,
        clock: Arc<dyn Clock>,
        idle: Duration,
    ) -> Self {
        Self {
            store,
            hasher,
            clock,
            idle,
        }
    }

    fn key(&self, id: &str) -> String {
        self.hasher.sha256(id.as_bytes()).hex()
    }

    /// How long an unused session lasts.
    pub(crate) fn idle(&self) -> Duration {
        self.idle
    }

    /// How often a session in use says so to the store, and sends a request through rmcp's
    /// session worker (`guard::HeldHere`): often enough that it never looks idle to another
    /// replica, nor to rmcp's idle timer.
    pub(crate) fn touch_every(&self) -> Duration {
        (self.idle / 4)
            .max(Duration::from_secs(1))
            .min(self.idle / 2)
    }

    /// The session `id`, unless it is unknown or has been idle too long.
    pub(crate) async fn find(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let found = self.store.find(&self.key(id)).await?;
        let now = self.clock.now();
        let idle = chrono::Duration::from_std(self.idle).unwrap_or(chrono::TimeDelta::MAX);
        Ok(found.filter(|r| r.last_used + idle >= now))
    }

    /// Records the session `owner` just opened with these `initialize` parameters.
    pub(crate) async fn open(
        &self,
        id: &str,
        owner: &Principal,
        initialize: &serde_json::Value,
    ) -> Result<(), StoreError> {
        self.store
            .open(
                &self.key(id),
                owner,
                &initialize.to_string(),
                self.clock.now(),
            )
            .await
    }

    /// The session was used now (in the background: the request does not wait).
    pub(crate) fn touch(&self, id: &str) {
        let (store, key, now) = (self.store.clone(), self.key(id), self.clock.now());
        tokio::spawn(async move {
            if let Err(e) = store.touch(&key, now).await {
                tracing::warn!("a session's use could not be recorded: {e}");
            }
        });
    }

    /// The session subscribed to `uri` (`on`) or no longer does.
    pub(crate) async fn subscribed(&self, id: &str, uri: &str, on: bool) {
        let key = self.key(id);
        let done = if on {
            self.store.subscribe(&key, uri).await
        } else {
            self.store.unsubscribe(&key, uri).await
        };
        if let Err(e) = done {
            tracing::warn!(
                "a subscription could not be recorded (it holds on this replica only): {e}"
            );
        }
    }

    /// Forgets the sessions idle too long, every so often, until `stop`.
    pub(crate) fn keep_expiring(&self, stop: CancellationToken) {
        let me = self.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval((me.idle / 2).min(Duration::from_secs(60)));
            loop {
                tokio::select! {
                    _ = every.tick() => {}
                    () = stop.cancelled() => return,
                }
                let idle = chrono::Duration::from_std(me.idle).unwrap_or(chrono::TimeDelta::MAX);
                match me.store.expire(me.clock.now() - idle).await {
                    Ok(0) => {}
                    Ok(n) => tracing::debug!(sessions = n, "idle sessions forgotten"),
                    Err(e) => tracing::warn!("idle sessions could not be forgotten: {e}"),
                }
            }
        });
    }

    /// rmcp's view of these sessions, for taking one over (or being handed one of `sessions`
    /// opened outside it).
    pub(crate) fn for_rmcp(&self, sessions: Arc<Sessions>) -> Arc<dyn store::SessionStore> {
        Arc::new(Restore(self.clone(), sessions))
    }
}

/// What rmcp reads to take a session over: its `initialize` parameters.
#[derive(Debug)]
struct Restore(Shared, Arc<Sessions>);

#[async_trait::async_trait]
impl store::SessionStore for Restore {
    async fn load(&self, id: &str) -> Result<Option<SessionState>, store::SessionStoreError> {
        let opened_here = lock(&self.1.opened_here)
            .get(id)
            .map(|session| session.initialize.clone());
        if let Some(params) = opened_here {
            tracing::debug!("a session opened outside rmcp is handed to it");
            return Ok(Some(SessionState::new(params)));
        }
        let Some(record) = self.0.find(id).await? else {
            return Ok(None);
        };
        let params = serde_json::from_str(&record.initialize)?;
        tracing::info!(
            "taking over a session another process opened (a replica, or this gateway before a restart)"
        );
        Ok(Some(SessionState::new(params)))
    }

    /// Nothing: the session guard records a new session, with the agent that opened it, which
    /// rmcp does not know.
    async fn store(
        &self,
        _id: &str,
        _state: &SessionState,
    ) -> Result<(), store::SessionStoreError> {
        Ok(())
    }

    async fn delete(&self, id: &str) -> Result<(), store::SessionStoreError> {
        Ok(self.0.store.close(&self.0.key(id)).await?)
    }
}

mod hand_over;

#[cfg(test)]
mod tests;
