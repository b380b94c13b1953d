//! Serving agents over streamable HTTP (rmcp's `StreamableHttpService` under axum), guarded in
//! front of rmcp: the `Host` must be allowlisted (loopback names by default) and an `Origin`, when
//! present, too (none is by default, and `null` never is) — else 403 before anything else runs;
//! credentials only in the `Authorization` header; with API keys configured, a request without a
//! known one is 401 and each key names its agent; a session belongs to the agent that opened it
//! (its id with another agent's key is 404, as an unknown one is), at most `max_sessions` are
//! open (503 past that), and one unused for `session_idle` is closed. Sessions are recorded in the
//! session store, so another replica on the same store takes one over (`http/sessions.rs`).
//! Stopping drains what is in flight.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    extract::{ConnectInfo, Request, State},
    http::{HeaderValue, Method, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use quarry_domain::Principal;
use quarry_ports::{AgentGateways, Clock, ContentHasher, SessionStore};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::{
    ServerOptions,
    handler::{Caller, GatewayServer},
};

mod auth;
mod bounds;
mod direct;
mod guard;
mod message;
mod serve;
mod sessions;
mod tls;

use auth::Authenticator;
pub(crate) use auth::Granted;
pub use auth::ResourceServerOptions;
pub(crate) use bounds::{Claim, Hold};

use guard::{HeldHere, Initialize, NotInRmcp, OneRead, sessions};
use sessions::Sessions;
pub(crate) use sessions::Shared;
use tls::{Peer, TlsListener};

/// How long stopping waits for requests in flight before it ends the sessions.
const DRAIN: Duration = Duration::from_secs(5);

/// The session header of streamable HTTP.
const SESSION_ID: &str = "mcp-session-id";

/// How the HTTP transport serves.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Where to listen.
    pub addr: SocketAddr,
    /// `Host` values accepted: names, or `name:port`.
    pub allowed_hosts: Vec<String>,
    /// `Origin` values accepted (`scheme://host[:port]`); empty refuses every `Origin`.
    pub allowed_origins: Vec<String>,
    /// Sessions open at once, at most.
    pub max_sessions: usize,
    /// An unused session is closed after this long.
    pub session_idle: Duration,
    /// The largest request body.
    pub max_body_bytes: usize,
    /// Requests one agent may have in flight at once (an answer streamed as events counts until
    /// its stream ends).
    pub max_requests_per_agent: usize,
    /// Requests handed to the MCP layer at once, across agents: more wait their turn (within
    /// `request_timeout`), holding no more than their connection and their body meanwhile.
    pub max_requests_in_flight: usize,
    /// Connections served at once: past it, a new connection waits its turn, and meanwhile every
    /// connection served closes after its current exchange (`http/serve.rs`).
    pub max_connections: usize,
    /// HTTPS: the certificate chain and the private key (PEM files); none serves plain HTTP.
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// API keys by the SHA-256 (lowercase hex) of the key, and the agent each names. With none
    /// and no resource server, every request is the default agent's (allowed on loopback only).
    pub api_keys: HashMap<String, Principal>,
    /// Bearer tokens from an authorization server, checked as a resource server does.
    pub oauth: Option<ResourceServerOptions>,
    /// The longest a request may take, start to end of its answer.
    pub request_timeout: Duration,
    /// Where sessions are recorded for every replica (and every restart) to take over.
    pub sessions: Arc<dyn SessionStore>,
    /// The time sessions are used at.
    pub clock: Arc<dyn Clock>,
}

/// The HTTP transport, listening.
#[derive(Debug)]
pub struct HttpServer {
    /// Where it listens (the port chosen when 0 was asked).
    pub addr: SocketAddr,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl HttpServer {
    /// Stops accepting, answers what is in flight, ends the sessions.
    pub async fn stop(self) {
        self.stop.cancel();
        match self.task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("the HTTP transport failed: {e}"),
            Err(e) => tracing::warn!("the HTTP transport ended abnormally: {e}"),
        }
    }
}

/// What the guards share.
#[derive(Debug)]
struct Guard {
    hosts: Vec<String>,
    origins: Vec<String>,
    /// `https` with TLS, else `http`: a page of Quarry's own origin is `{scheme}://{Host}`.
    scheme: &'static str,
    auth: Authenticator,
    max_body: usize,
    request_timeout: Duration,
    /// Who opened each session this replica serves, and when the store last heard of its use.
    owners: Mutex<HashMap<String, (Principal, std::time::Instant)>>,
    /// The `GET` streams open on each session, and when one last was: a session its client
    /// listens on is in use.
    listening: Mutex<HashMap<String, guard::Listened>>,
    sessions: Arc<Sessions>,
    /// Every replica's sessions.
    shared: Shared,
    max_sessions: usize,
    /// Each agent's requests in flight.
    in_flight: Mutex<HashMap<Principal, Arc<tokio::sync::Semaphore>>>,
    per_agent: usize,
    /// Requests in the MCP layer at once, across agents (`max_requests_in_flight`).
    admission: Arc<tokio::sync::Semaphore>,
}

fn refuse(status: StatusCode, why: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{why}\n"),
    )
        .into_response()
}

impl Guard {
    /// Whether `host` (a `Host` header) is allowlisted, with or without its port.
    fn host_allowed(&self, host: &str) -> bool {
        let bare = match host.rsplit_once(':') {
            // `[::1]:8080`, `localhost:8080`; a bare IPv6 literal has more colons.
            Some((name, port))
                if port.bytes().all(|b| b.is_ascii_digit()) && !name.ends_with(':') =>
            {
                name
            }
            _ => host,
        };
        let bare = bare.trim_start_matches('[').trim_end_matches(']');
        self.hosts
            .iter()
            .any(|h| h.eq_ignore_ascii_case(host) || h.eq_ignore_ascii_case(bare))
    }

    fn origin_allowed(&self, origin: &str) -> bool {
        origin != "null" && self.origins.iter().any(|o| o.eq_ignore_ascii_case(origin))
    }

    /// Whether `origin` is Quarry's own (this scheme and the allowlisted `Host` the request
    /// names): a page it served itself, which no rebinding can fake once the Host is checked.
    fn same_origin(&self, origin: &str, host: &str) -> bool {
        origin
            .strip_prefix(self.scheme)
            .and_then(|rest| rest.strip_prefix("://"))
            .is_some_and(|h| !host.is_empty() && h.eq_ignore_ascii_case(host))
    }
}

/// Host, Origin and credentials, in that order, before anything else sees the request.
async fn guard(State(g): State<Arc<Guard>>, mut request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !g.host_allowed(host) {
        return refuse(
            StatusCode::FORBIDDEN,
            "this Host is not served here (http.allowed_hosts)",
        );
    }
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("null");
        if g.same_origin(origin, host) {
            // Quarry's own origin is as good as none: rmcp, which only knows the allowlist,
            // is not shown it.
            request.headers_mut().remove(header::ORIGIN);
        } else if !g.origin_allowed(origin) {
            return refuse(
                StatusCode::FORBIDDEN,
                "this Origin is not allowed (http.allowed_origins)",
            );
        }
    }
    if request.uri().path() == "/healthz" {
        return next.run(request).await;
    }
    if request.uri().path().starts_with(auth::METADATA_PATH) {
        return g.auth.metadata(request.uri().path()).unwrap_or_else(|| {
            refuse(StatusCode::NOT_FOUND, "no protected-resource metadata here")
        });
    }
    let query = request
        .uri()
        .query()
        .unwrap_or_default()
        .to_ascii_lowercase();
    if ["access_token", "api_key", "token"]
        .iter()
        .any(|k| query.contains(&format!("{k}=")))
    {
        return refuse(
            StatusCode::BAD_REQUEST,
            "credentials go in the Authorization header only, never in the URL",
        );
    }
    let (principal, scopes) = match g.auth.identify(request.headers()).await {
        Ok(found) => found,
        Err(challenge) => return challenge,
    };
    let posted = request.method() == Method::POST;
    let (mut request, message) = if posted {
        match bounds::read_message(request, g.max_body).await {
            Ok(read) => read,
            Err(refused) => return refused,
        }
    } else {
        (request, None)
    };
    if let (Some(granted), Some(message)) = (&scopes, &message)
        && let Some(refused) = g.auth.uncovered(granted, message)
    {
        return refused;
    }
    let address = request
        .extensions()
        .get::<ConnectInfo<Peer>>()
        .map(|c| c.0.0);
    let permits = g
        .in_flight
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(principal.clone())
        .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(g.per_agent)))
        .clone();
    let Ok(permit) = permits.try_acquire_owned() else {
        let mut r = refuse(
            StatusCode::TOO_MANY_REQUESTS,
            "too many requests in flight for this agent (http.max_requests_per_agent)",
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return r;
    };
    request.extensions_mut().insert(Caller {
        principal,
        address,
        scopes,
    });
    // The handler keeps the hold too, so a request whose answer is no longer wanted (a hang-up,
    // the time bound) counts until its work ends.
    let limit = posted.then_some(g.request_timeout);
    let hold = bounds::Hold::new(permit, limit);
    request
        .extensions_mut()
        .insert(bounds::Claim(Arc::downgrade(&hold)));
    // One message, not a batch: what rmcp admits, times and opens a session for.
    let single = message
        .filter(|m| !m.batch)
        .and_then(|m| m.calls.into_iter().next());
    if let Some(params) = single.as_ref().and_then(|c| c.initialize.clone()) {
        request.extensions_mut().insert(Initialize(params));
    }
    // A request on a 2025-11-25 session: rmcp begins its answer as an event stream at once, and
    // the direct path answers a read where rmcp would have; cut before that (waiting for its
    // turn), it gets the JSON-RPC error the stream would have ended with, not a 504.
    if single.as_ref().is_some_and(|c| c.is_request()) && request.headers().contains_key(SESSION_ID)
    {
        hold.cut_as_a_stream_would_be();
    }
    if single.as_ref().is_some_and(|c| {
        c.is_request()
            && match c.method.as_deref() {
                Some("resources/read") => true,
                Some("tools/call") => c.tool.as_deref() == Some(crate::catalogue::READ_TOOL),
                _ => false,
            }
    }) {
        request.extensions_mut().insert(OneRead);
    }
    // A POST is one request and is bounded in time; a GET is a stream the client keeps open.
    // A request waits its turn to enter rmcp, which gives each request it holds its own
    // channels and tasks (tens of KiB): ten thousand at once would otherwise hold them all.
    // Not a notification or a response (cheap, and a response may be what a request holding a
    // turn waits for), nor a 2026-07-28 subscription, which stays open as long as its client
    // listens.
    let admission = single
        .as_ref()
        .filter(|c| c.is_request() && c.method.as_deref() != Some("subscriptions/listen"))
        .map(|_| g.admission.clone());
    let id = single.and_then(|c| c.id);
    bounds::within(next.run(request), limit, id, hold, admission).await
}

/// Serves MCP at `/mcp` on `http.addr`, each caller through its gateway among `agents` (the
/// default agent, `options.principal`, when no API keys are configured), and `extra` (the
/// operator's routes) beside it, behind the same guards.
///
/// # Errors
/// When the address cannot be bound.
pub async fn serve_http(
    agents: Arc<dyn AgentGateways>,
    hasher: Arc<dyn ContentHasher>,
    options: ServerOptions,
    http: HttpOptions,
    extra: Router,
) -> Result<HttpServer, String> {
    let tls = match &http.tls {
        Some((cert, key)) => Some(tls::server_config(cert, key)?),
        None => None,
    };
    let listener =
        serve::listen(http.addr).map_err(|e| format!("cannot listen on {}: {e}", http.addr))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let stop = CancellationToken::new();
    let ended = CancellationToken::new();
    let mut manager = Sessions::default();
    manager.local.session_config.keep_alive = Some(http.session_idle);
    let manager = Arc::new(manager);
    let shared = Shared::new(http.sessions, hasher.clone(), http.clock, http.session_idle);
    shared.keep_expiring(stop.clone());
    let default_gateway = agents.for_agent(&options.principal).await;
    let guard_state = Arc::new(Guard {
        hosts: http.allowed_hosts.clone(),
        origins: http.allowed_origins.clone(),
        scheme: if tls.is_some() { "https" } else { "http" },
        auth: Authenticator {
            keys: http.api_keys,
            default: options.principal.clone(),
            hasher,
            oauth: http.oauth,
        },
        max_body: http.max_body_bytes,
        request_timeout: http.request_timeout,
        owners: Mutex::new(HashMap::new()),
        listening: Mutex::new(HashMap::new()),
        sessions: manager.clone(),
        shared: shared.clone(),
        max_sessions: http.max_sessions,
        in_flight: Mutex::new(HashMap::new()),
        per_agent: http.max_requests_per_agent,
        admission: Arc::new(tokio::sync::Semaphore::new(http.max_requests_in_flight)),
    });
    guard_state.keep_forgetting(stop.clone());
    let handler =
        GatewayServer::for_agents(default_gateway, agents, options).with_sessions(shared.clone());
    let direct_reads = Arc::new(direct::Direct {
        server: Arc::new(handler.clone()),
        sessions: manager.clone(),
    });
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(http.allowed_hosts)
        .with_allowed_origins(http.allowed_origins)
        .enforce_origin_validation()
        .with_max_request_body_bytes(http.max_body_bytes)
        // A 2026-07-28 request whose handler sends nothing before its result is answered with
        // one JSON body, not an event stream of one event; one that sends notifications first
        // (a listen stream) still streams.
        .with_json_response(true)
        .with_cancellation_token(ended.clone());
    config.sse_keep_alive = Some(Duration::from_secs(15));
    config.session_store = Some(shared.for_rmcp(manager.clone()));
    let service: StreamableHttpService<GatewayServer, Sessions> =
        StreamableHttpService::new(move || Ok(handler.for_session()), manager, config);
    let router = Router::new()
        .nest_service("/mcp", service)
        .merge(extra)
        // Innermost: what reaches it has passed the guard and the session checks, within the
        // request's time bound and turn.
        .layer(axum::middleware::from_fn_with_state(
            direct_reads,
            direct::reads,
        ))
        .layer(axum::middleware::from_fn_with_state(
            guard_state.clone(),
            sessions,
        ))
        .layer(axum::middleware::from_fn_with_state(guard_state, guard));
    let task = match tls {
        Some(config) => {
            let listener =
                TlsListener::new(listener, config, stop.clone()).map_err(|e| e.to_string())?;
            tokio::spawn(serve::serve(
                listener,
                router,
                http.max_connections,
                stop.clone(),
                ended,
                DRAIN,
            ))
        }
        None => tokio::spawn(serve::serve(
            tls::PlainListener(listener),
            router,
            http.max_connections,
            stop.clone(),
            ended,
            DRAIN,
        )),
    };
    tracing::info!(%addr, "serving MCP over streamable HTTP at /mcp");
    Ok(HttpServer { addr, stop, task })
}
