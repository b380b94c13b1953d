//! The session guard, before rmcp: a session is its opener's (on this replica as the owners map
//! says, else as the session store does, for a session another process opened), at most
//! `max_sessions` are open, and a new one is recorded in the session store with its owner.
//! A read on a session this process holds, which rmcp has seen lately, is marked [`HeldHere`],
//! so that `http::direct` may answer it without rmcp; so is one on a session opened outside rmcp
//! (`http::direct` answered its `initialize`), whose requests are marked [`NotInRmcp`].

use std::{
    sync::{Arc, Mutex},
    time::Instant,
};

use axum::{
    body::Body,
    extract::{Request, State},
    http::{HeaderValue, Method, StatusCode, header},
    middleware::Next,
    response::Response,
};
use futures::StreamExt;
use quarry_domain::Principal;
use tokio_util::sync::CancellationToken;

use super::{Guard, SESSION_ID, refuse};
use crate::handler::Caller;

/// The `initialize` parameters of a request that opens a session.
#[derive(Debug, Clone)]
pub(super) struct Initialize(pub(super) serde_json::Value);

/// In a request's extensions: its body is one `resources/read` request, or one `tools/call` of
/// `read_mcp_resource` (as `message.rs` reads it), so that the session guard looks for
/// [`HeldHere`] only where `http::direct` could use it.
#[derive(Debug, Clone, Copy)]
pub(super) struct OneRead;

/// In a request's extensions: a [`OneRead`] whose session is its caller's, held by this process's
/// rmcp, which saw one of its requests within `Shared::touch_every`. rmcp's idle timer counts
/// only the requests that pass through its session worker, so a session whose reads were all
/// answered outside it would expire in use: every `touch_every` one request goes through it.
#[derive(Debug, Clone, Copy)]
pub(super) struct HeldHere;

/// In a request's extensions: its session was opened outside rmcp (`http::direct` answered its
/// `initialize`) and rmcp has not served it yet. A read on it is [`HeldHere`] too; its
/// `notifications/initialized` is acknowledged outside rmcp; anything else hands it to rmcp,
/// which takes it over from its record as it would another replica's.
#[derive(Debug, Clone, Copy)]
pub(super) struct NotInRmcp;

/// What the guard found of the session a request names.
enum Found {
    /// Its caller's, known to this process, and rmcp saw it lately.
    SeenLately,
    /// For rmcp to answer: its caller's but due to pass through rmcp, or one to take over from
    /// the session store, or unknown everywhere.
    ForRmcp,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `caller` may use the session `id`: its owner as this replica knows it, else as the
/// session store does (a session another replica opened, which rmcp then takes over). Refused
/// as if it did not exist when another agent's. A request that makes the guard record the
/// session's use (every `touch_every`) is for rmcp, so that its idle timer sees the session.
async fn owned(g: &Guard, id: &str, caller: &Principal) -> Result<Found, Response> {
    let known = lock(&g.owners).get(id).cloned();
    match known {
        Some((owner, _)) if owner != *caller => {
            Err(refuse(StatusCode::NOT_FOUND, "no such session"))
        }
        Some((owner, touched)) => {
            if touched.elapsed() >= g.shared.touch_every() {
                lock(&g.owners).insert(id.to_owned(), (owner, std::time::Instant::now()));
                g.shared.touch(id);
                return Ok(Found::ForRmcp);
            }
            Ok(Found::SeenLately)
        }
        None => match g.shared.find(id).await {
            Ok(Some(record)) if record.owner == *caller => {
                lock(&g.owners).insert(id.to_owned(), (record.owner, std::time::Instant::now()));
                g.shared.touch(id);
                Ok(Found::ForRmcp)
            }
            Ok(Some(_)) => Err(refuse(StatusCode::NOT_FOUND, "no such session")),
            // Unknown everywhere: rmcp says 404.
            Ok(None) => Ok(Found::ForRmcp),
            Err(e) => {
                tracing::warn!("the session store cannot be reached: {e}");
                let mut r = refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "sessions cannot be looked up now (the store is unreachable); try again",
                );
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                Err(r)
            }
        },
    }
}

/// Sessions belong to the agent that opened them, and there are at most `max_sessions`; a new
/// one is recorded in the session store.
pub(super) async fn sessions(
    State(g): State<Arc<Guard>>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(caller) = request.extensions().get::<Caller>().cloned() else {
        return next.run(request).await;
    };
    let asked = request
        .headers()
        .get(SESSION_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let deleting = request.method() == Method::DELETE;
    let streaming = request.method() == Method::GET;
    match &asked {
        Some(id) => {
            // Unused here for its idle time: the store decides, as for a session another
            // replica opened (404, unless another replica served it meanwhile). Its owner is
            // forgotten first, so that the owner's check does not record a use of it.
            if g.sessions.idled_out_here(id, g.shared.idle()) {
                lock(&g.owners).remove(id);
            }
            let found = match owned(&g, id, &caller.principal).await {
                Err(refused) => return refused,
                Ok(found) => found,
            };
            let read = request.extensions().get::<OneRead>().is_some();
            if g.sessions.use_opened_here(id) {
                request.extensions_mut().insert(NotInRmcp);
                if read {
                    request.extensions_mut().insert(HeldHere);
                }
            } else if matches!(found, Found::SeenLately)
                && read
                // rmcp's worker may have ended (closed, or a shutdown): then rmcp answers.
                && g.sessions
                    .local
                    .sessions
                    .read()
                    .await
                    .contains_key(id.as_str())
            {
                request.extensions_mut().insert(HeldHere);
            }
        }
        None if request.method() == Method::POST => {
            let open = g.sessions.open().await;
            if open >= g.max_sessions {
                let mut r = refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "too many sessions are open (http.max_sessions); try again later",
                );
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
                return r;
            }
        }
        None => {}
    }
    let initialize = request.extensions().get::<Initialize>().cloned();
    let answered_here = request.extensions().get::<HeldHere>().is_some();
    // One request at a time hands a session to rmcp; the others then find it served.
    let _handing = match &asked {
        Some(id) if !answered_here && !deleting => g.sessions.hand_over(id).await,
        _ => None,
    };
    let response = next.run(request).await;
    let opened = response
        .headers()
        .get(SESSION_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    match (&asked, opened, initialize) {
        (None, Some(opened), Some(Initialize(params))) => {
            lock(&g.owners).insert(
                opened.clone(),
                (caller.principal.clone(), std::time::Instant::now()),
            );
            if let Err(e) = g.shared.open(&opened, &caller.principal, &params).await {
                tracing::warn!(
                    "a new session could not be recorded (it will not outlive this replica): {e}"
                );
            }
        }
        (Some(id), _, _) if deleting && response.status().is_success() => {
            lock(&g.owners).remove(id);
        }
        (Some(id), _, _) if response.status() == StatusCode::NOT_FOUND => {
            // Expired or closed: forget it.
            lock(&g.owners).remove(id);
        }
        (Some(id), _, _)
            if streaming
                && response.status() == StatusCode::OK
                && response
                    .headers()
                    .get(header::CONTENT_TYPE)
                    .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream")) =>
        {
            // Its client listens, for as long as the stream is open.
            let listening = Listening::new(&g, id);
            let (parts, body) = response.into_parts();
            let stream = body.into_data_stream().map(move |chunk| {
                let _listening = &listening;
                chunk
            });
            return Response::from_parts(parts, Body::from_stream(stream));
        }
        (Some(id), _, _) if !answered_here && response.status().is_success() => {
            // The caller passed the owner's check; had the sweep forgotten the owner meanwhile
            // (a request that waited long for its turn, on which rmcp took the session over
            // again), it is known again.
            let mut owners = lock(&g.owners);
            if !owners.contains_key(id) {
                owners.insert(id.clone(), (caller.principal, std::time::Instant::now()));
            }
        }
        _ => {}
    }
    response
}

/// The `GET` streams open on a session, and when one was last open.
#[derive(Debug)]
pub(super) struct Listened {
    open: usize,
    last: Instant,
}

/// A `GET` stream open on a session, counted in `Guard::listening` while it lives.
struct Listening {
    guard: Arc<Guard>,
    id: String,
}

impl Listening {
    fn new(guard: &Arc<Guard>, id: &str) -> Self {
        let mut listening = lock(&guard.listening);
        let listened = listening.entry(id.to_owned()).or_insert(Listened {
            open: 0,
            last: Instant::now(),
        });
        listened.open += 1;
        listened.last = Instant::now();
        drop(listening);
        Self {
            guard: guard.clone(),
            id: id.to_owned(),
        }
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        if let Some(listened) = lock(&self.guard.listening).get_mut(&self.id) {
            listened.open -= 1;
            listened.last = Instant::now();
        }
    }
}

impl Guard {
    /// Every so often until `stop`, says to the session store that the sessions whose clients
    /// listen on a `GET` stream are in use (no request passes the owner's check for them), and
    /// forgets what this process keeps of sessions no longer in use: those opened outside rmcp
    /// and unused for their idle time, and their owners; and the owners of sessions rmcp has
    /// ended (idle, without a DELETE or a request to hear 404 from), which would otherwise stay
    /// for the life of the process. A session is unused when no request of it has passed the
    /// guard, and no `GET` stream of it has been open, for the idle time. One rmcp still holds
    /// although unused, kept alive by what its handler sends (the changes it subscribed to, for
    /// a client that went away), is closed first: rmcp counts what it sends as use. A session
    /// in use keeps its owner, whatever the store says.
    pub(super) fn keep_forgetting(self: &Arc<Self>, stop: CancellationToken) {
        let me = self.clone();
        tokio::spawn(async move {
            let idle = me.shared.idle();
            let mut every = tokio::time::interval(me.shared.touch_every());
            loop {
                tokio::select! {
                    _ = every.tick() => {}
                    () = stop.cancelled() => return,
                }
                let idled = me.sessions.expire_opened_here(idle);
                if !idled.is_empty() {
                    let mut owners = lock(&me.owners);
                    for id in &idled {
                        owners.remove(id);
                    }
                    drop(owners);
                    tracing::debug!(
                        sessions = idled.len(),
                        "idle sessions opened outside rmcp forgotten"
                    );
                }
                me.touch_listened(idle);
                me.forget_unused(idle).await;
            }
        });
    }

    /// The sessions with a `GET` stream open are in use: in the store (so that a replica, this
    /// one too once rmcp's timer closed a quiet one, can take them over from their record), and
    /// here until `idle` after their last stream closes.
    ///
    /// A session's line here is dropped `idle` after its last stream closed: it says nothing
    /// any more then.
    fn touch_listened(&self, idle: std::time::Duration) {
        let mut listening = lock(&self.listening);
        listening.retain(|_, l| l.open > 0 || l.last.elapsed() < idle);
        let listened: Vec<String> = listening
            .iter_mut()
            .filter(|(_, listened)| listened.open > 0)
            .map(|(id, listened)| {
                listened.last = Instant::now();
                id.clone()
            })
            .collect();
        drop(listening);
        for id in &listened {
            self.shared.touch(id);
        }
    }

    /// Whether the session `id` has had no request through the guard, and no `GET` stream
    /// open, for `idle`.
    fn unused(&self, id: &str, idle: std::time::Duration) -> bool {
        let stale = lock(&self.owners)
            .get(id)
            .is_some_and(|(_, touched)| touched.elapsed() >= idle);
        stale
            && lock(&self.listening)
                .get(id)
                .is_none_or(|l| l.open == 0 && l.last.elapsed() >= idle)
    }

    /// Closes the sessions unused for `idle` that rmcp still holds, and forgets the owners of
    /// those unused that nothing here holds any more.
    async fn forget_unused(&self, idle: std::time::Duration) {
        let candidates: Vec<String> = lock(&self.owners)
            .iter()
            .filter(|(_, (_, touched))| touched.elapsed() >= idle)
            .map(|(id, _)| id.clone())
            .collect();
        let stale: Vec<String> = candidates
            .into_iter()
            .filter(|id| self.unused(id, idle))
            .collect();
        if stale.is_empty() {
            return;
        }
        let mut closed = 0_usize;
        for id in self.sessions.held_by_rmcp(stale.clone()).await {
            // Checked again just before: a request or a stream may have come meanwhile.
            if self.unused(&id, idle) && self.sessions.close_in_rmcp(&id).await {
                closed += 1;
            }
        }
        if closed > 0 {
            tracing::debug!(
                sessions = closed,
                "sessions unused for their idle time closed (rmcp kept them on what it sent)"
            );
        }
        let ended = self.sessions.not_held(stale).await;
        let mut forgotten = 0_usize;
        for id in &ended {
            // Still unused: a request let through since is its owner's again.
            if self.unused(id, idle) && lock(&self.owners).remove(id).is_some() {
                forgotten += 1;
            }
        }
        if forgotten > 0 {
            tracing::debug!(
                sessions = forgotten,
                "owners of sessions rmcp has ended forgotten"
            );
        }
    }
}
