//! Configuration: a TOML file whose sections and keys mirror the spec's `mcp:` configuration,
//! environment overrides, and validation with messages that say what to fix.
//!
//! ```toml
//! [servers.docs]                 # a stdio upstream
//! command = "node"
//! args = ["server.js"]
//! timeout = 30                   # seconds, every request
//! retry_attempts = 3             # reads retry a failed connection this many times
//! retry_delay = 1                # seconds before the first retry, doubling, at most 30
//!
//! [servers.remote]               # a streamable HTTP upstream
//! endpoint = "https://mcp.example.com/mcp"
//!
//! [cache]
//! enabled = true
//! ttl_seconds = 300
//! max_size_mb = 100
//! eviction_policy = "lru"
//! # backend = "redis"             # shared by replicas: redis_url = "redis://host:6379"
//!
//! [security]
//! max_resource_size_mb = 50
//!
//! [store]
//! path = "/var/lib/quarry/quarry.db"   # default: $XDG_DATA_HOME/quarry/quarry.db
//! # backend = "postgres"          # several replicas: url = "postgres://...", schema = "quarry"
//!
//! [versions]
//! retain_count = 10              # versions per resource whose content is kept
//! retain_mb = 64                 # and at most this much of it
//!
//! [results]
//! inline_limit_kb = 32           # the most content one tool result carries
//!
//! [logging]
//! level = "info"
//! format = "pretty"              # or "json"
//! # file = "/var/log/quarry.log" # default: stderr
//! audit_enabled = true
//! audit_retention_days = 90      # older records are removed behind a signed checkpoint
//! ```

mod backends;
mod env;
mod expose;
mod file;
mod http;
mod policy;
mod resource_server;

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use quarry_domain::{Classifier, Error, Retention, ServerSettings, seconds};
use quarry_usecases::Supervision;
use zeroize::Zeroizing;

use backends::default_store_path;
pub use backends::{Backends, CacheBackend, StoreBackend};
pub use env::ENV_OVERRIDES;
use env::apply_env;
use file::{File, server_settings};
pub use file::{LogFormat, Telemetry};
pub use http::HttpSettings;
pub use policy::PolicySettings;
pub use resource_server::{IntrospectionSettings, JwksSource, OAuthSettings};

/// The file read when no `--config` or `QUARRY_CONFIG` names one and it exists.
pub const DEFAULT_FILE: &str = "quarry.toml";

/// Validated settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where they came from (`None`: defaults only).
    pub source: Option<PathBuf>,
    /// Registered servers, by name.
    pub servers: Vec<ServerSettings>,
    /// Whether content is cached.
    pub cache_enabled: bool,
    /// Cache time-to-live.
    pub cache_ttl: Duration,
    /// Cache byte budget.
    pub cache_max_bytes: u64,
    /// Largest resource accepted, in bytes.
    pub max_resource_bytes: u64,
    /// Log filter (`info`, `debug`, `quarry=trace`...).
    pub log_level: String,
    /// How log events are written (`logging.format`).
    pub log_format: LogFormat,
    /// Where (`logging.file`; none: stderr).
    pub log_file: Option<PathBuf>,
    /// Whether agents' requests are audited (`logging.audit_enabled`); when they are, a request
    /// whose record cannot be written is refused.
    pub audit_enabled: bool,
    /// Days audit records are kept (`logging.audit_retention_days`).
    pub audit_retention_days: u32,
    /// The key file signing retention's checkpoints (`logging.audit_key_file`, default
    /// `audit.key` beside the store); none with the store in memory.
    pub audit_key: Option<PathBuf>,
    /// Resource type rules.
    pub classifier: Classifier,
    /// Where the store lives; `None` keeps it in memory (gone at exit).
    pub store_path: Option<PathBuf>,
    /// How much version history is kept.
    pub retention: Retention,
    /// The most content bytes one tool result carries.
    pub inline_limit_bytes: u64,
    /// How upstreams are supervised.
    pub supervision: Supervision,
    /// Whether agents may add and remove servers through the tools.
    pub allow_tool_registration: bool,
    /// Whether agents may also register stdio commands (programs to run) that way.
    pub allow_tool_commands: bool,
    /// Where the vault's key-encryption key comes from.
    pub vault_key: VaultKey,
    /// Whether protected resources need a credential for their server to be read.
    pub require_auth_for_protected: bool,
    /// The access policy (`[policy]`); none: a personal gateway, where the operator's agent may
    /// do everything.
    pub policy: Option<PolicySettings>,
    /// Who a stdio session acts for (`[serve] agent`).
    pub agent: quarry_domain::Principal,
    /// OpenTelemetry trace export (`[telemetry]`); none: off.
    pub telemetry: Option<Telemetry>,
    /// Serving over streamable HTTP (`[http]`).
    pub http: HttpSettings,
    /// Transparent mode: the one server published with its own URIs (`expose = "native"`).
    pub native: Option<quarry_domain::ServerName>,
    /// Where the store and the cache are (`store.backend`, `cache.backend`).
    pub backends: Backends,
}

/// Where the vault's key-encryption key comes from, in order: `QUARRY_VAULT_KEY`, the key file
/// `security.vault_key_file` names (`QUARRY_VAULT_KEY_FILE`), a `vault.key` beside the store
/// (created on first use), or, with the store in memory, a key that lives as long as the process.
#[derive(Clone)]
pub enum VaultKey {
    /// The key itself, base64 (from `QUARRY_VAULT_KEY`).
    Given(Zeroizing<String>),
    /// A key file that must exist.
    File(PathBuf),
    /// A key file created with a new key the first time one is needed.
    CreatedOnFirstUse(PathBuf),
    /// A new key for this process only (the store is in memory too).
    Ephemeral,
}

impl std::fmt::Debug for VaultKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Given(_) => f.write_str("Given(«redacted»)"),
            Self::File(p) => write!(f, "File({})", p.display()),
            Self::CreatedOnFirstUse(p) => write!(f, "CreatedOnFirstUse({})", p.display()),
            Self::Ephemeral => f.write_str("Ephemeral"),
        }
    }
}

impl Settings {
    /// The defaults: no servers, cache on.
    pub fn defaults() -> Self {
        let Ok(settings) = Self::from_file(File::default(), None, None) else {
            unreachable!("the defaults are valid")
        };
        settings
    }

    /// Reads settings: the file named (or `quarry.toml` in the working directory if present, or
    /// the defaults), then the `QUARRY_*` environment overrides.
    ///
    /// # Errors
    /// E001 naming the file, the key and what is wrong.
    pub fn load(
        explicit: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, Error> {
        let path = match explicit {
            Some(p) => Some(p.to_path_buf()),
            None => Some(PathBuf::from(DEFAULT_FILE)).filter(|p| p.is_file()),
        };
        let mut file = match &path {
            None => File::default(),
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| {
                    Error::invalid(format!("cannot read config file {}: {e}", p.display()))
                })?;
                toml::from_str(&text).map_err(|e| {
                    Error::invalid(format!(
                        "config file {}: {}",
                        p.display(),
                        e.to_string().trim_end()
                    ))
                })?
            }
        };
        apply_env(&mut file, env)?;
        let in_file = |e: String| match &path {
            Some(p) => Error::invalid(format!("config file {}: {e}", p.display())),
            None => Error::invalid(e),
        };
        let backends = Backends::of(&file).map_err(in_file)?;
        let store_path = backends.store_path(match file.store.path.take() {
            Some(p) if p.as_os_str() == ":memory:" => None,
            Some(p) => Some(p),
            None => Some(default_store_path(env)),
        });
        let vault_key = match (
            env("QUARRY_VAULT_KEY"),
            file.security.vault_key_file.take(),
            &store_path,
        ) {
            (Some(key), _, _) if !key.trim().is_empty() => VaultKey::Given(Zeroizing::new(key)),
            (_, Some(file), _) => VaultKey::File(file),
            (_, None, Some(store)) => {
                VaultKey::CreatedOnFirstUse(store.with_file_name("vault.key"))
            }
            (_, None, None) => VaultKey::Ephemeral,
        };
        let mut settings = Self::from_file(file, path, store_path)?;
        (settings.vault_key, settings.backends) = (vault_key, backends);
        Ok(settings)
    }

    fn from_file(
        file: File,
        source: Option<PathBuf>,
        store_path: Option<PathBuf>,
    ) -> Result<Self, Error> {
        let at = |what: String| match &source {
            Some(p) => Error::invalid(format!("config file {}: {what}", p.display())),
            None => Error::invalid(what),
        };
        if file.cache.eviction_policy != "lru" {
            return Err(at(format!(
                "cache.eviction_policy is {:?}; the only policy is \"lru\"",
                file.cache.eviction_policy
            )));
        }
        if file.cache.max_size_mb == 0 {
            return Err(at("cache.max_size_mb must be at least 1".into()));
        }
        if !file.security.encrypt_credentials {
            return Err(at(
                "security.encrypt_credentials = false is refused: Quarry keeps upstream credentials \
                 encrypted at rest, always (remove the key or set it to true)"
                    .into(),
            ));
        }
        if file.security.max_resource_size_mb == 0 {
            return Err(at("security.max_resource_size_mb must be at least 1".into()));
        }
        if file.versions.retain_count == 0 {
            return Err(at("versions.retain_count must be at least 1".into()));
        }
        if file.results.inline_limit_kb == 0 || file.results.inline_limit_kb > 10 * 1024 {
            return Err(at(
                "results.inline_limit_kb must be between 1 and 10240".into()
            ));
        }
        let mut servers: Vec<ServerSettings> = Vec::new();
        let mut exposed = Vec::new();
        for (name, section) in file.servers {
            let expose = section.expose.clone();
            let server = server_settings(&name, section).map_err(|e| at(e.message().to_owned()))?;
            exposed.push((server.spec.name.clone(), expose));
            if let Some(other) = servers
                .iter()
                .find(|s| s.spec.name.collides_with(&server.spec.name))
            {
                return Err(at(format!(
                    "servers.{} and servers.{} differ only by letter case; server names must be distinct ignoring case",
                    other.spec.name, server.spec.name
                )));
            }
            if let Some(other) = servers.iter().find(|s| s.spec.id == server.spec.id) {
                return Err(at(format!(
                    "servers.{} and servers.{} have the same id {}",
                    other.spec.name, server.spec.name, server.spec.id
                )));
            }
            servers.push(server);
        }
        let native =
            expose::native_server(exposed, file.registry.allow_tool_registration).map_err(at)?;
        let u = &file.upstreams;
        let supervision = Supervision {
            health_interval: seconds(
                "upstreams.health_check_seconds",
                u.health_check_seconds,
                86_400.0,
            )
            .map_err(|e| at(e.message().to_owned()))?,
            circuit_threshold: u.circuit_threshold.max(1),
            jitter: if (0.0..=1.0).contains(&u.backoff_jitter) {
                u.backoff_jitter
            } else {
                return Err(at(format!(
                    "upstreams.backoff_jitter must be between 0 and 1, got {}",
                    u.backoff_jitter
                )));
            },
            drain: seconds(
                "upstreams.shutdown_drain_seconds",
                u.shutdown_drain_seconds,
                3600.0,
            )
            .map_err(|e| at(e.message().to_owned()))?,
        };
        let classifier = Classifier::new(file.classification.rules)
            .map_err(|e| at(format!("classification.rules: {}", e.message())))?;
        let registry_allows: Vec<String> = [
            (file.registry.allow_tool_registration, "tool_registration"),
            (file.registry.allow_tool_commands, "tool_commands"),
        ]
        .into_iter()
        .filter(|(set, _)| *set)
        .map(|(_, fact)| fact.to_owned())
        .collect();
        let policy = file
            .policy
            .map(|p| policy::policy_settings(p, source.as_deref().and_then(Path::parent)))
            .transpose()
            .map_err(|e| at(e.message().to_owned()))?
            .map(|p| PolicySettings {
                registry_allows,
                ..p
            });
        let agent = policy::serve_agent(&file.serve).map_err(|e| at(e.message().to_owned()))?;
        let telemetry = file.telemetry.settings().map_err(at)?;
        let http = file
            .http
            .settings()
            .map_err(|e| at(e.message().to_owned()))?;
        let log_file = file
            .logging
            .resolved_file(source.as_deref().and_then(Path::parent));
        if !(1..=36_500).contains(&file.logging.audit_retention_days) {
            return Err(at(
                "logging.audit_retention_days must be between 1 and 36500".into(),
            ));
        }
        Ok(Self {
            source,
            servers,
            cache_enabled: file.cache.enabled,
            cache_ttl: Duration::from_secs(file.cache.ttl_seconds),
            cache_max_bytes: file.cache.max_size_mb.saturating_mul(1024 * 1024),
            max_resource_bytes: file
                .security
                .max_resource_size_mb
                .saturating_mul(1024 * 1024),
            log_level: file.logging.level,
            audit_enabled: file.logging.audit_enabled,
            audit_retention_days: file.logging.audit_retention_days,
            audit_key: file
                .logging
                .audit_key_file
                .clone()
                .or_else(|| store_path.as_ref().map(|s| s.with_file_name("audit.key"))),
            log_format: file.logging.format,
            log_file,
            classifier,
            store_path,
            retention: Retention {
                count: file.versions.retain_count,
                bytes: file.versions.retain_mb.saturating_mul(1024 * 1024),
            },
            inline_limit_bytes: file.results.inline_limit_kb.saturating_mul(1024),
            supervision,
            allow_tool_registration: file.registry.allow_tool_registration,
            allow_tool_commands: file.registry.allow_tool_commands,
            vault_key: VaultKey::Ephemeral,
            require_auth_for_protected: file.security.require_auth_for_protected,
            policy,
            agent,
            telemetry,
            http,
            native,
            backends: Backends::default(),
        })
    }
}

#[cfg(test)]
mod tests;
