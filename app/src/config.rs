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
//!
//! [security]
//! max_resource_size_mb = 50
//!
//! [store]
//! path = "/var/lib/quarry/quarry.db"   # default: $XDG_DATA_HOME/quarry/quarry.db
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
//! ```

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::Duration,
};

use quarry_domain::{ClassificationRule, Classifier, Error, Retention, ServerDraft, ServerSpec};
use serde::Deserialize;

/// The file read when no `--config` or `QUARRY_CONFIG` names one and it exists.
pub const DEFAULT_FILE: &str = "quarry.toml";

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    servers: BTreeMap<String, ServerSection>,
    #[serde(default)]
    cache: CacheSection,
    #[serde(default)]
    security: SecuritySection,
    #[serde(default)]
    logging: LoggingSection,
    #[serde(default)]
    classification: ClassificationSection,
    #[serde(default)]
    store: StoreSection,
    #[serde(default)]
    versions: VersionsSection,
    #[serde(default)]
    results: ResultsSection,
    #[serde(default)]
    upstreams: UpstreamsSection,
    #[serde(default)]
    registry: RegistrySection,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RegistrySection {
    #[serde(default)]
    allow_tool_registration: bool,
    #[serde(default)]
    allow_tool_commands: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoreSection {
    path: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VersionsSection {
    #[serde(default = "default_retain_count")]
    retain_count: u32,
    #[serde(default = "default_retain_mb")]
    retain_mb: u64,
}

impl Default for VersionsSection {
    fn default() -> Self {
        Self {
            retain_count: default_retain_count(),
            retain_mb: default_retain_mb(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResultsSection {
    #[serde(default = "default_inline_kb")]
    inline_limit_kb: u64,
}

impl Default for ResultsSection {
    fn default() -> Self {
        Self {
            inline_limit_kb: default_inline_kb(),
        }
    }
}

fn default_retain_count() -> u32 {
    10
}
fn default_retain_mb() -> u64 {
    64
}
// Claude Code refuses tool results over about 25,000 tokens; 32 KiB of text is well under, and
// so is its base64 when the content is binary.
fn default_inline_kb() -> u64 {
    32
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerSection {
    id: Option<String>,
    endpoint: Option<String>,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<String>,
    timeout: Option<f64>,
    retry_attempts: Option<u32>,
    retry_delay: Option<f64>,
    max_pages: Option<u32>,
    pool_size: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UpstreamsSection {
    #[serde(default = "default_health_seconds")]
    health_check_seconds: f64,
    #[serde(default = "default_circuit_threshold")]
    circuit_threshold: u32,
    #[serde(default = "default_jitter")]
    backoff_jitter: f64,
    #[serde(default = "default_drain_seconds")]
    shutdown_drain_seconds: f64,
}

impl Default for UpstreamsSection {
    fn default() -> Self {
        Self {
            health_check_seconds: default_health_seconds(),
            circuit_threshold: default_circuit_threshold(),
            backoff_jitter: default_jitter(),
            shutdown_drain_seconds: default_drain_seconds(),
        }
    }
}

fn default_health_seconds() -> f64 {
    60.0
}
fn default_circuit_threshold() -> u32 {
    5
}
fn default_jitter() -> f64 {
    0.2
}
fn default_drain_seconds() -> f64 {
    10.0
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CacheSection {
    #[serde(default = "yes")]
    enabled: bool,
    #[serde(default = "default_ttl")]
    ttl_seconds: u64,
    #[serde(default = "default_cache_mb")]
    max_size_mb: u64,
    #[serde(default = "default_policy")]
    eviction_policy: String,
}

impl Default for CacheSection {
    fn default() -> Self {
        Self {
            enabled: true,
            ttl_seconds: default_ttl(),
            max_size_mb: default_cache_mb(),
            eviction_policy: default_policy(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SecuritySection {
    #[serde(default = "default_max_resource_mb")]
    max_resource_size_mb: u64,
}

impl Default for SecuritySection {
    fn default() -> Self {
        Self {
            max_resource_size_mb: default_max_resource_mb(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoggingSection {
    #[serde(default = "default_level")]
    level: String,
}

impl Default for LoggingSection {
    fn default() -> Self {
        Self {
            level: default_level(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClassificationSection {
    #[serde(default)]
    rules: Vec<ClassificationRule>,
}

fn yes() -> bool {
    true
}
fn default_ttl() -> u64 {
    300
}
fn default_cache_mb() -> u64 {
    100
}
fn default_policy() -> String {
    "lru".into()
}
fn default_max_resource_mb() -> u64 {
    50
}
fn default_level() -> String {
    "info".into()
}

/// How a server's reads retry a failed connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first failure.
    pub attempts: u32,
    /// Delay before the first retry; each next one doubles, up to 30 s.
    pub delay: Duration,
}

impl RetryPolicy {
    /// The longest wait between two attempts.
    pub const MAX_DELAY: Duration = Duration::from_secs(30);

    /// The delay before retry number `n` (1-based).
    pub fn delay_before(&self, n: u32) -> Duration {
        let factor = 2u32.saturating_pow(n.saturating_sub(1));
        self.delay.saturating_mul(factor).min(Self::MAX_DELAY)
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 3,
            delay: Duration::from_secs(1),
        }
    }
}

/// A registered server, its retry policy and its pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSettings {
    /// Name, id, endpoint, timeout, page bound.
    pub spec: ServerSpec,
    /// Retries for reads, and the base of the reconnection backoff.
    pub retry: RetryPolicy,
    /// Most sessions (stdio: processes) held open to the server at once.
    pub pool_size: u32,
}

impl ServerSettings {
    /// The default pool size (the spec's "10 connections per server").
    pub const DEFAULT_POOL_SIZE: u32 = 10;

    /// A server with the default retry policy and pool.
    pub fn new(spec: ServerSpec) -> Self {
        Self {
            spec,
            retry: RetryPolicy::default(),
            pool_size: Self::DEFAULT_POOL_SIZE,
        }
    }
}

/// How upstreams are supervised while serving.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Supervision {
    /// How often live sessions are pinged.
    pub health_interval: Duration,
    /// Consecutive failures after which the circuit opens.
    pub circuit_threshold: u32,
    /// Random spread of each backoff delay, as a fraction of it (0.2: ±20 %).
    pub jitter: f64,
    /// How long shutdown waits for requests in flight.
    pub drain: Duration,
}

impl Default for Supervision {
    fn default() -> Self {
        Self {
            health_interval: Duration::from_secs(60),
            circuit_threshold: 5,
            jitter: 0.2,
            drain: Duration::from_secs(10),
        }
    }
}

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
}

/// Where the store goes when the configuration does not say: `$XDG_DATA_HOME/quarry/quarry.db`,
/// else `~/.local/share/quarry/quarry.db`, else `./quarry.db`.
fn default_store_path(env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    let data = env("XDG_DATA_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            env("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| PathBuf::from(h).join(".local/share"))
        });
    match data {
        Some(dir) => dir.join("quarry").join("quarry.db"),
        None => PathBuf::from("quarry.db"),
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
        let store_path = match file.store.path.take() {
            Some(p) if p.as_os_str() == ":memory:" => None,
            Some(p) => Some(p),
            None => Some(default_store_path(env)),
        };
        Self::from_file(file, path, store_path)
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
        for (name, section) in file.servers {
            let server = server_settings(&name, section).map_err(|e| at(e.message().to_owned()))?;
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
        })
    }
}

fn seconds(key: &str, value: f64, max: f64) -> Result<Duration, Error> {
    if !(value.is_finite() && value > 0.0 && value <= max) {
        return Err(Error::invalid(format!(
            "{key} must be more than 0 and at most {max} seconds, got {value}"
        )));
    }
    Ok(Duration::from_secs_f64(value))
}

fn server_settings(name: &str, s: ServerSection) -> Result<ServerSettings, Error> {
    let key = |k: &str| format!("servers.{name}.{k}");
    let spec = ServerDraft {
        name: name.to_owned(),
        id: s.id,
        endpoint: s.endpoint,
        command: s.command,
        args: s.args,
        env: s.env,
        cwd: s.cwd,
        timeout_secs: s.timeout,
        max_pages: s.max_pages,
    }
    .into_spec(&format!("servers.{name}."))
    .map_err(|e| {
        Error::invalid(
            e.message()
                .replace(&format!("servers.{name}.name"), &format!("servers.{name}")),
        )
    })?;
    let mut retry = RetryPolicy::default();
    if let Some(a) = s.retry_attempts {
        if a > 10 {
            return Err(Error::invalid(format!(
                "{} must be at most 10",
                key("retry_attempts")
            )));
        }
        retry.attempts = a;
    }
    if let Some(d) = s.retry_delay {
        retry.delay = seconds(&key("retry_delay"), d, 30.0)?;
    }
    let pool_size = match s.pool_size {
        None => ServerSettings::DEFAULT_POOL_SIZE,
        Some(n) if (1..=100).contains(&n) => n,
        Some(n) => {
            return Err(Error::invalid(format!(
                "{} must be between 1 and 100, got {n}",
                key("pool_size")
            )));
        }
    };
    Ok(ServerSettings {
        spec,
        retry,
        pool_size,
    })
}

/// `QUARRY_*` variables that override a file key.
pub const ENV_OVERRIDES: &[(&str, &str)] = &[
    ("QUARRY_CACHE_ENABLED", "cache.enabled"),
    ("QUARRY_CACHE_TTL_SECONDS", "cache.ttl_seconds"),
    ("QUARRY_CACHE_MAX_SIZE_MB", "cache.max_size_mb"),
    (
        "QUARRY_SECURITY_MAX_RESOURCE_SIZE_MB",
        "security.max_resource_size_mb",
    ),
    ("QUARRY_LOGGING_LEVEL", "logging.level"),
    ("QUARRY_STORE_PATH", "store.path"),
];

fn apply_env(file: &mut File, env: &dyn Fn(&str) -> Option<String>) -> Result<(), Error> {
    fn number(var: &str, v: &str) -> Result<u64, Error> {
        v.trim().parse().map_err(|_| {
            Error::invalid(format!(
                "environment variable {var}={v:?} is not a whole number"
            ))
        })
    }
    for (var, _) in ENV_OVERRIDES {
        let Some(value) = env(var) else { continue };
        match *var {
            "QUARRY_CACHE_ENABLED" => {
                file.cache.enabled = match value.trim() {
                    "true" | "1" | "yes" | "on" => true,
                    "false" | "0" | "no" | "off" => false,
                    other => {
                        return Err(Error::invalid(format!(
                            "environment variable {var}={other:?} is not true or false"
                        )));
                    }
                }
            }
            "QUARRY_CACHE_TTL_SECONDS" => file.cache.ttl_seconds = number(var, &value)?,
            "QUARRY_CACHE_MAX_SIZE_MB" => file.cache.max_size_mb = number(var, &value)?,
            "QUARRY_SECURITY_MAX_RESOURCE_SIZE_MB" => {
                file.security.max_resource_size_mb = number(var, &value)?;
            }
            "QUARRY_LOGGING_LEVEL" => file.logging.level = value,
            "QUARRY_STORE_PATH" => file.store.path = Some(PathBuf::from(value)),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
