//! The composition root: the only place that knows every adapter and picks one per port, and
//! that wires the MCP server to the gateway.

use std::{future::Future, sync::Arc};

use quarry_cache_lru::{InMemoryInvalidationBus, InMemoryListingCache, LruContentCache};
use quarry_crypto_ring::{KeySource, RingCipher, RingHasher};
use quarry_domain::{Error, ErrorCode};
use quarry_mcp_client::{OAuthHttp, RmcpConnector};
use quarry_mcp_server::ServerOptions;
use quarry_ports::{AuditLog, ContentHasher, ResourceGateway};
use quarry_store_sqlite::{SqliteAudit, SqliteStore};
use quarry_usecases::{Ports, ResourceService, ServiceOptions};

use crate::{
    clock::SystemClock,
    config::{PolicySettings, Settings, VaultKey},
};

/// How long `quarry auth login` waits for the person to approve the sign-in.
const LOGIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// Builds the resource service the settings describe: rmcp upstreams, the in-memory caches, the
/// SQLite store, ring's SHA-256, the system clock. Servers registered at runtime are loaded.
///
/// # Errors
/// E012 when the HTTP client for upstreams cannot be built or the store cannot be opened (the
/// message names the file and the key that sets it), or the registry cannot be read.
pub async fn build(settings: &Settings) -> Result<Arc<ResourceService>, Error> {
    let ports = ports(settings).await?;
    service(settings, ports).await
}

/// The store the settings name (a private in-memory one with no path).
async fn open_store(settings: &Settings) -> Result<SqliteStore, Error> {
    match &settings.store_path {
        Some(path) => SqliteStore::open(path, settings.retention)
            .await
            .map_err(|e| {
                Error::new(
                    ErrorCode::E012,
                    format!("{e} (set [store] path in the configuration, or QUARRY_STORE_PATH)"),
                )
            }),
        None => SqliteStore::in_memory(settings.retention)
            .await
            .map_err(|e| {
                tracing::error!("{e}");
                Error::internal()
            }),
    }
}

/// The audit trail, in the store's file, chained with SHA-256.
///
/// # Errors
/// E012 when the store cannot be opened.
pub async fn audit_log(settings: &Settings) -> Result<Arc<dyn AuditLog>, Error> {
    Ok(Arc::new(SqliteAudit::new(
        open_store(settings).await?,
        hasher(),
    )))
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
    let connector = RmcpConnector::new(settings.max_resource_bytes).map_err(|e| {
        tracing::error!("{e}");
        Error::internal()
    })?;
    let store = Arc::new(open_store(settings).await?);
    let cipher = Arc::new(RingCipher::new(key_source(&settings.vault_key)?, |path| {
        // Said once, on stderr (stdout may be the MCP transport).
        eprintln!(
            "quarry: created the vault key file {} (mode 0600); credentials stored under it cannot be read without it, so back it up",
            path.display()
        );
    }));
    Ok(Ports {
        connector: Arc::new(connector),
        cache: Arc::new(LruContentCache::new(settings.cache_max_bytes)),
        listings: Arc::new(InMemoryListingCache::new()),
        bus: Arc::new(InMemoryInvalidationBus::new()),
        versions: store.clone(),
        registry: store.clone(),
        idempotency: store.clone(),
        hasher: Arc::new(RingHasher),
        clock: Arc::new(SystemClock::new()),
        credentials: store,
        cipher,
        oauth: Arc::new(OAuthHttp::new(LOGIN_TIMEOUT)),
    })
}

/// Decisions a policy worker makes before a fresh one replaces it.
const POLICY_RECYCLE_AFTER: u32 = quarry_policy_prolog::RECYCLE_AFTER;

/// The policy worker's loop (`quarry policy-worker`): JSON lines on stdin and stdout.
///
/// # Errors
/// When stdout cannot be written.
pub fn policy_worker() -> std::io::Result<()> {
    quarry_policy_prolog::run_worker()
}

/// How the gateway starts policy workers: this program, `policy-worker`.
fn worker_command(policy: &PolicySettings) -> Result<quarry_policy_prolog::WorkerCommand, Error> {
    let program = std::env::current_exe().map_err(|e| {
        Error::new(
            ErrorCode::E011,
            format!("cannot find the quarry program to run the policy worker: {e}"),
        )
    })?;
    Ok(quarry_policy_prolog::WorkerCommand {
        program,
        args: vec!["policy-worker".into()],
        memory_limit: Some(policy.worker_memory),
    })
}

/// The program a policy's engine loads: its rules (the spec's unless a file is named), its
/// facts files, the configured agents; `extra_facts` after them (a golden case's facts).
///
/// # Errors
/// E001 when a file cannot be read.
pub fn policy_program(policy: &PolicySettings, extra_facts: &[String]) -> Result<String, Error> {
    let (rules, mut facts) = policy.texts()?;
    facts.extend_from_slice(extra_facts);
    Ok(quarry_policy_prolog::program(
        rules.as_deref(),
        &facts,
        &policy.agents,
        &policy.registry_allows,
    ))
}

/// The policy engine for `program`, its first worker started and the policy checked.
///
/// # Errors
/// E001 saying why the policy cannot be used (it does not parse, calls an undefined predicate,
/// does not decide); E011 when no worker can start.
pub async fn policy_engine(
    policy: &PolicySettings,
    program: String,
) -> Result<Arc<dyn quarry_ports::PolicyEngine>, Error> {
    let engine = quarry_policy_prolog::PrologPolicy::start(
        worker_command(policy)?,
        program,
        policy.budget,
        POLICY_RECYCLE_AFTER,
    )
    .await
    .map_err(|why| Error::invalid(format!("the policy cannot be used: {why}")))?;
    Ok(Arc::new(engine))
}

/// Checks `program` in a throw-away worker.
///
/// # Errors
/// As [`policy_engine`].
pub async fn lint_policy(policy: &PolicySettings, program: &str) -> Result<(), Error> {
    quarry_policy_prolog::PrologPolicy::check(&worker_command(policy)?, program)
        .await
        .map_err(|why| Error::invalid(format!("the policy cannot be used: {why}")))
}

/// The gateway an agent of this process uses: governed by the configured policy, or, with none,
/// the whole gateway (said on stderr: a personal gateway's agent may do everything); audited
/// unless `logging.audit_enabled` is false (said on stderr too).
///
/// # Errors
/// As [`policy_engine`] and [`audit_log`].
pub async fn agent_gateway(
    settings: &Settings,
    service: &Arc<ResourceService>,
    transport: &str,
) -> Result<Arc<dyn ResourceGateway>, Error> {
    let governed = governed_gateway(settings, service, transport).await?;
    if !settings.audit_enabled {
        eprintln!(
            "quarry: logging.audit_enabled is false: the {transport} agent's requests are not audited"
        );
        return Ok(governed);
    }
    Ok(Arc::new(quarry_usecases::Audited::new(
        governed,
        audit_log(settings).await?,
        hasher(),
        Arc::new(SystemClock::new()),
        settings.agent.clone(),
        transport,
    )))
}

async fn governed_gateway(
    settings: &Settings,
    service: &Arc<ResourceService>,
    transport: &str,
) -> Result<Arc<dyn ResourceGateway>, Error> {
    let Some(policy) = &settings.policy else {
        eprintln!(
            "quarry: no [policy] is configured: the {transport} agent may list, read and change everything (a personal gateway)"
        );
        return Ok(service.clone());
    };
    let engine = Arc::new(
        quarry_policy_prolog::ReloadablePolicy::start(
            worker_command(policy)?,
            policy_program(policy, &[])?,
            policy.budget,
            POLICY_RECYCLE_AFTER,
        )
        .await
        .map_err(|why| Error::invalid(format!("the policy cannot be used: {why}")))?,
    );
    watch_policy(policy.clone(), engine.clone());
    tracing::info!(agent = %settings.agent, "access is decided by the configured policy");
    Ok(Arc::new(quarry_usecases::Governed::new(
        service.clone(),
        engine,
        settings.agent.clone(),
        transport,
    )))
}

/// How often the policy's files are looked at for changes.
const POLICY_WATCH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Reloads the policy when one of its files changes: the new one is checked and started before
/// it replaces the old; one that does not load is refused and the old one keeps deciding.
fn watch_policy(policy: PolicySettings, engine: Arc<quarry_policy_prolog::ReloadablePolicy>) {
    let files: Vec<std::path::PathBuf> =
        policy.rules.iter().chain(&policy.facts).cloned().collect();
    if files.is_empty() {
        return;
    }
    let stamps = move || -> Vec<Option<std::time::SystemTime>> {
        files
            .iter()
            .map(|f| std::fs::metadata(f).and_then(|m| m.modified()).ok())
            .collect()
    };
    tokio::spawn(async move {
        let mut seen = stamps();
        loop {
            tokio::time::sleep(POLICY_WATCH_INTERVAL).await;
            let now = stamps();
            if now == seen {
                continue;
            }
            seen = now;
            let outcome = match policy_program(&policy, &[]) {
                Ok(program) => engine.reload(program).await.map_err(|why| why.to_string()),
                Err(e) => Err(e.message().to_owned()),
            };
            match outcome {
                Ok(version) => tracing::info!(version, "policy reloaded: its files changed"),
                Err(why) => tracing::error!(
                    "the changed policy is refused, the previous one keeps deciding: {why}"
                ),
            }
        }
    });
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

/// Serves the gateway to an agent over stdio until input ends or `shutdown` resolves: upstreams
/// are supervised from the start, requests in flight are answered before the upstreams stop.
///
/// # Errors
/// What [`build`] returns; E012 when the transport fails.
pub async fn serve_stdio(
    settings: &Settings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let service = build(settings).await?;
    // Credentials the configured key cannot open would fail every connection: refuse now.
    service.check_vault().await?;
    for server in settings.servers.iter().filter(|s| s.spec.tls.allow_tls12) {
        tracing::warn!(server = %server.name(), "accepts TLS 1.2 (tls_min_version = \"1.2\"); every other server needs TLS 1.3");
    }
    service.start_supervision();
    tracing::info!(
        servers = settings.servers.len(),
        config = %settings.source.as_ref().map_or("(defaults)".into(), |p| p.display().to_string()),
        "serving MCP on stdio"
    );
    let gateway = agent_gateway(settings, &service, "stdio").await?;
    let options = ServerOptions {
        inline_limit: settings.inline_limit_bytes,
        principal: settings.agent.clone(),
    };
    let result = quarry_mcp_server::serve_stdio(gateway, options, shutdown).await;
    service.shutdown().await;
    result.map_err(|e| {
        tracing::error!("{e}");
        Error::internal()
    })
}
