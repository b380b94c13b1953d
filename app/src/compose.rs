//! The composition root: the only place that knows every adapter and picks one per port, and
//! that wires the MCP server and the operator's endpoints to the gateway (the policy side is in
//! `compose/policy.rs`).

use std::{future::Future, sync::Arc};

use quarry_crypto_ring::{KeySource, RingCipher, RingHasher};
use quarry_domain::{Error, ErrorCode};
use quarry_mcp_client::{OAuthHttp, RmcpConnector};
use quarry_mcp_server::ServerOptions;
use quarry_operator_http::OperatorHttp;
use quarry_ports::{ContentHasher, Operations};
use quarry_usecases::{Ports, ResourceService, ServiceOptions};

use crate::{
    clock::SystemClock,
    config::{Settings, VaultKey},
};

mod agents;
mod audit;
mod backends;
mod inbound;
mod policy;
mod telemetry;

pub use agents::{Agents, agents};
pub(crate) use audit::keep_audit_retention;
pub use audit::{audit_log, audit_trail};
use backends::Store;
pub use policy::{lint_policy, policy_engine, policy_program, policy_worker};
pub use telemetry::{TraceExport, trace_export};

/// How long `quarry auth login` waits for the person to approve the sign-in.
const LOGIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// Builds the resource service the settings describe: rmcp upstreams, the caches and the store
/// the configuration chose (`compose/backends.rs`), ring's SHA-256, the system clock. Servers registered at runtime are loaded.
///
/// # Errors
/// E012 when the HTTP client for upstreams cannot be built or the store cannot be opened (the
/// message names the file and the key that sets it), or the registry cannot be read.
pub async fn build(settings: &Settings) -> Result<Arc<ResourceService>, Error> {
    let ports = ports(settings).await?;
    service(settings, ports).await
}

/// The line `http.api_keys` takes for `key`: its SHA-256, never the key.
pub fn api_key_digest(key: &str) -> String {
    format!("sha256:{}", hasher().sha256(key.trim().as_bytes()).hex())
}

/// SHA-256.
pub fn hasher() -> Arc<dyn ContentHasher> {
    Arc::new(RingHasher)
}

/// The adapters the settings choose, one per port (benchmarks swap one to watch it).
///
/// # Errors
/// As [`build`].
pub async fn ports(settings: &Settings) -> Result<Ports, Error> {
    Ok(ports_and_store(settings).await?.0)
}

/// The ports, and the store behind them (whose sessions the HTTP transport keeps).
async fn ports_and_store(settings: &Settings) -> Result<(Ports, Store), Error> {
    let mut connector = RmcpConnector::new(settings.max_resource_bytes).map_err(|e| {
        tracing::error!("{e}");
        Error::internal()
    })?;
    if settings.telemetry.is_some() {
        connector = connector.with_trace(Arc::new(quarry_telemetry_otlp::W3cTraceContext));
    }
    settings
        .backends
        .check_vault_key(&settings.vault_key)
        .map_err(Error::invalid)?;
    let store = Store::open(settings).await?;
    let caches = backends::caches(settings)?;
    let cipher = Arc::new(RingCipher::new(key_source(&settings.vault_key)?, |path| {
        // Said once, on stderr (stdout may be the MCP transport).
        eprintln!(
            "quarry: created the vault key file {} (mode 0600); credentials stored under it cannot be read without it, so back it up",
            path.display()
        );
    }));
    let audit = settings.audit_enabled.then(|| store.audit());
    let stored = store.ports();
    let ports = Ports {
        connector: Arc::new(connector),
        cache: caches.content,
        listings: caches.listings,
        bus: caches.bus,
        versions: stored.versions,
        registry: stored.registry,
        idempotency: stored.idempotency,
        hasher: Arc::new(RingHasher),
        clock: Arc::new(SystemClock::new()),
        credentials: stored.credentials,
        cipher,
        oauth: Arc::new(OAuthHttp::new(LOGIN_TIMEOUT)),
        audit,
    };
    Ok((ports, store))
}

/// A browser that visits the authorization URL itself (for servers that approve without a
/// person).
pub fn visitor() -> Arc<dyn quarry_ports::Browser> {
    Arc::new(quarry_mcp_client::Visitor)
}

/// Probes the server `spec` names without registering it: connects (signing in through
/// `browser`, or with client credentials, as `credential` says and the server demands), lists,
/// and calls `call_tool` if given. Returns what it found and how many token requests it made.
///
/// # Errors
/// The connection's failure (E005 when authentication fails).
pub async fn probe(
    settings: &Settings,
    spec: &quarry_domain::ServerSpec,
    credential: quarry_domain::OAuthCredential,
    browser: Arc<dyn quarry_ports::Browser>,
    call_tool: Option<&str>,
) -> Result<(quarry_mcp_client::Probe, u32), Error> {
    let connector = RmcpConnector::new(settings.max_resource_bytes).map_err(|e| {
        tracing::error!("{e}");
        Error::internal()
    })?;
    let tokens = Arc::new(quarry_usecases::ServerTokens::interactive(
        spec.clone(),
        credential,
        Arc::new(OAuthHttp::new(LOGIN_TIMEOUT)),
        Arc::new(SystemClock::new()),
        browser,
    ));
    let found = connector
        .probe(spec, Some(tokens.clone()), call_tool)
        .await
        .map_err(|e| e.into_error(spec.name.as_str()))?;
    Ok((found, tokens.token_requests()))
}

/// The cipher's key source for the configured vault key.
fn key_source(key: &VaultKey) -> Result<KeySource, Error> {
    Ok(match key {
        VaultKey::Given(text) => KeySource::Text(text.clone()),
        VaultKey::File(path) => KeySource::File(path.clone()),
        VaultKey::CreatedOnFirstUse(path) => KeySource::CreatedOnFirstUse(path.clone()),
        VaultKey::Ephemeral => KeySource::Text(
            quarry_crypto_ring::VaultKey::generate()
                .map_err(|e| Error::new(ErrorCode::E012, e))?
                .to_text(),
        ),
    })
}

/// The resource service over `ports`, with the registry loaded.
///
/// # Errors
/// E012 when the registry cannot be read.
pub async fn service(settings: &Settings, ports: Ports) -> Result<Arc<ResourceService>, Error> {
    let service = ResourceService::new(
        settings.servers.clone(),
        ports,
        ServiceOptions {
            cache_enabled: settings.cache_enabled,
            cache_ttl: settings.cache_ttl,
            max_resource_bytes: settings.max_resource_bytes,
            classifier: settings.classifier.clone(),
            supervision: settings.supervision,
            allow_tool_registration: settings.allow_tool_registration,
            allow_tool_commands: settings.allow_tool_commands,
            require_auth_for_protected: settings.require_auth_for_protected,
        },
    );
    service.load_registry().await?;
    Ok(service)
}

/// E001 unless `addr` is a loopback address: the operator endpoints need no credential.
fn loopback_only(addr: std::net::SocketAddr) -> Result<(), Error> {
    if addr.ip().is_loopback() {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "--metrics {addr}: the metrics and health endpoints need no credential, so they listen on a loopback address only (127.0.0.1:PORT or [::1]:PORT)"
    )))
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `addr` (said on stderr, with the port chosen
/// when 0 was asked).
///
/// # Errors
/// E001 when `addr` cannot be bound.
async fn operator_endpoints(
    addr: std::net::SocketAddr,
    operations: Arc<dyn Operations>,
) -> Result<OperatorHttp, Error> {
    let http = OperatorHttp::start(addr, operations)
        .await
        .map_err(|e| Error::invalid(format!("--metrics {addr}: cannot listen there: {e}")))?;
    eprintln!(
        "quarry: metrics and health on http://{} (/metrics, /healthz, /readyz)",
        http.addr
    );
    Ok(http)
}

/// How `quarry serve` serves.
#[derive(Debug, Clone, Copy)]
pub struct Serving {
    /// MCP over stdin and stdout.
    pub stdio: bool,
    /// MCP over streamable HTTP on this address (and the operator's endpoints beside it).
    pub http: Option<std::net::SocketAddr>,
    /// The operator's endpoints on a loopback address of their own.
    pub metrics: Option<std::net::SocketAddr>,
}

/// E001 unless `addr` may serve HTTP: any address with TLS and inbound authentication (API keys
/// or tokens); plain HTTP, or no inbound authentication, on loopback only.
fn http_allowed(
    addr: std::net::SocketAddr,
    http: &crate::config::HttpSettings,
) -> Result<(), Error> {
    if addr.ip().is_loopback() || (http.tls.is_some() && http.authenticates()) {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "--http {addr}: beyond loopback Quarry serves HTTPS with inbound authentication only; set http.tls_cert_file, http.tls_key_file and [http.oauth] or [http.api_keys] (or listen on 127.0.0.1 behind a TLS-terminating proxy)"
    )))
}

/// Serves the gateway as `how` says until stdio's input ends (when serving stdio) or
/// `shutdown` resolves: upstreams are supervised from the start, requests in flight are
/// answered before the upstreams stop.
///
/// # Errors
/// What [`build`] returns; E001 for an address that may not be served; E012 when a transport
/// fails.
pub async fn serve(
    settings: &Settings,
    how: Serving,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    how.metrics.map(loopback_only).transpose()?;
    how.http
        .map(|a| http_allowed(a, &settings.http))
        .transpose()?;
    let (ports, store) = ports_and_store(settings).await?;
    let service = service(settings, ports).await?;
    // Credentials the configured key cannot open would fail every connection: refuse now.
    service.check_vault().await?;
    for server in settings.servers.iter().filter(|s| s.spec.tls.allow_tls12) {
        tracing::warn!(server = %server.name(), "accepts TLS 1.2 (tls_min_version = \"1.2\"); every other server needs TLS 1.3");
    }
    service.start_supervision();
    keep_audit_retention(settings);
    tracing::info!(
        servers = settings.servers.len(),
        config = %settings.source.as_ref().map_or("(defaults)".into(), |p| p.display().to_string()),
        stdio = how.stdio,
        http = ?how.http,
        "serving MCP"
    );
    let agents = agents(settings, &service).await?;
    let operator = match how.metrics {
        Some(addr) => Some(operator_endpoints(addr, agents.operations()).await?),
        None => None,
    };
    let options = ServerOptions {
        inline_limit: settings.inline_limit_bytes,
        principal: settings.agent.clone(),
        native: settings.native.clone(),
        cache_ttl: settings.cache_ttl,
    };
    let http = match how.http {
        Some(addr) => Some(serve_http(settings, &agents, &store, options.clone(), addr).await?),
        None => None,
    };
    let result = if how.stdio {
        let gateway = agents.gateway(&settings.agent, "stdio");
        quarry_mcp_server::serve_stdio(gateway, options, shutdown).await
    } else {
        shutdown.await;
        Ok(())
    };
    if let Some(http) = http {
        http.stop().await;
    }
    if let Some(operator) = operator {
        operator.stop().await;
    }
    service.shutdown().await;
    result.map_err(|e| {
        tracing::error!("{e}");
        Error::internal()
    })
}

/// The HTTP transport on `addr`, the operator's endpoints beside `/mcp` (said on stderr).
async fn serve_http(
    settings: &Settings,
    agents: &Arc<Agents>,
    store: &Store,
    options: ServerOptions,
    addr: std::net::SocketAddr,
) -> Result<quarry_mcp_server::HttpServer, Error> {
    let http = &settings.http;
    let transport = quarry_mcp_server::HttpOptions {
        addr,
        allowed_hosts: http.allowed_hosts.clone(),
        allowed_origins: http.allowed_origins.clone(),
        max_sessions: http.max_sessions,
        session_idle: http.session_idle,
        max_body_bytes: http.max_body_bytes,
        max_requests_per_agent: http.max_requests_per_agent,
        max_requests_in_flight: http.max_requests_in_flight,
        max_connections: http.max_connections,
        tls: http.tls.clone(),
        api_keys: http.api_keys.iter().cloned().collect(),
        oauth: match &http.oauth {
            Some(oauth) => Some(inbound::resource_server(oauth, &|v| std::env::var(v).ok()).await?),
            None => None,
        },
        request_timeout: http.request_timeout,
        sessions: store.sessions(),
        clock: Arc::new(SystemClock::new()),
    };
    let server = quarry_mcp_server::serve_http(
        Arc::new(agents::OverHttp(agents.clone())),
        hasher(),
        options,
        transport,
        quarry_operator_http::router(agents.operations()),
    )
    .await
    .map_err(|e| Error::invalid(format!("--http {addr}: {e}")))?;
    eprintln!(
        "quarry: serving MCP on {}://{}/mcp ({}; /metrics, /healthz, /readyz beside it)",
        if http.tls.is_some() { "https" } else { "http" },
        server.addr,
        match (&http.oauth, http.api_keys.len()) {
            (Some(oauth), keys) => format!(
                "bearer tokens from {} for {}{}",
                oauth.issuer,
                oauth.resource,
                if keys > 0 {
                    format!(", and {keys} API key(s)")
                } else {
                    String::new()
                }
            ),
            (None, 0) => format!("every request acts for '{}'", settings.agent),
            (None, keys) => format!("{keys} API key(s) name the agents"),
        }
    );
    Ok(server)
}
