//! The configuration file as written: one struct per TOML section, with the defaults of every
//! key. Unknown keys are refused (`deny_unknown_fields`); checking values is `Settings`' job.

use std::{collections::BTreeMap, path::PathBuf};

use quarry_domain::ClassificationRule;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct File {
    #[serde(default)]
    pub(super) servers: BTreeMap<String, ServerSection>,
    #[serde(default)]
    pub(super) cache: CacheSection,
    #[serde(default)]
    pub(super) security: SecuritySection,
    #[serde(default)]
    pub(super) logging: LoggingSection,
    #[serde(default)]
    pub(super) classification: ClassificationSection,
    #[serde(default)]
    pub(super) store: StoreSection,
    #[serde(default)]
    pub(super) versions: VersionsSection,
    #[serde(default)]
    pub(super) results: ResultsSection,
    #[serde(default)]
    pub(super) upstreams: UpstreamsSection,
    #[serde(default)]
    pub(super) registry: RegistrySection,
    pub(super) policy: Option<super::policy::PolicySection>,
    #[serde(default)]
    pub(super) serve: super::policy::ServeSection,
    #[serde(default)]
    pub(super) telemetry: TelemetrySection,
    #[serde(default)]
    pub(super) http: super::http::HttpSection,
}

/// `[telemetry]`: OpenTelemetry trace export, off unless an endpoint is given.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TelemetrySection {
    /// The collector's OTLP/HTTP traces URL (`http://127.0.0.1:4318/v1/traces`).
    pub(super) otlp_endpoint: Option<String>,
    /// The service name spans are exported under.
    pub(super) service_name: Option<String>,
}

/// Where traces are exported, when they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Telemetry {
    /// The collector's OTLP/HTTP traces URL.
    pub otlp_endpoint: String,
    /// The service name (default `quarry`).
    pub service_name: String,
}

impl TelemetrySection {
    /// The export these keys ask for; none without an endpoint.
    pub(super) fn settings(&self) -> Result<Option<Telemetry>, String> {
        let Some(endpoint) = self.otlp_endpoint.clone() else {
            return Ok(None);
        };
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(format!(
                "telemetry.otlp_endpoint must be an http:// or https:// URL (the collector's OTLP/HTTP traces endpoint), got {endpoint:?}"
            ));
        }
        Ok(Some(Telemetry {
            otlp_endpoint: endpoint,
            service_name: self.service_name.clone().unwrap_or_else(|| "quarry".into()),
        }))
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RegistrySection {
    #[serde(default)]
    pub(super) allow_tool_registration: bool,
    #[serde(default)]
    pub(super) allow_tool_commands: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StoreSection {
    pub(super) path: Option<PathBuf>,
    pub(super) backend: Option<String>,
    pub(super) url: Option<String>,
    pub(super) schema: Option<String>,
    pub(super) max_connections: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct VersionsSection {
    #[serde(default = "default_retain_count")]
    pub(super) retain_count: u32,
    #[serde(default = "default_retain_mb")]
    pub(super) retain_mb: u64,
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
pub(super) struct ResultsSection {
    #[serde(default = "default_inline_kb")]
    pub(super) inline_limit_kb: u64,
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
pub(super) struct ServerSection {
    pub(super) id: Option<String>,
    pub(super) endpoint: Option<String>,
    pub(super) command: Option<String>,
    #[serde(default)]
    pub(super) args: Vec<String>,
    #[serde(default)]
    pub(super) env: BTreeMap<String, String>,
    pub(super) cwd: Option<String>,
    pub(super) timeout: Option<f64>,
    pub(super) retry_attempts: Option<u32>,
    pub(super) retry_delay: Option<f64>,
    pub(super) max_pages: Option<u32>,
    pub(super) pool_size: Option<u32>,
    #[serde(default)]
    pub(super) protected: bool,
    #[serde(default)]
    pub(super) protected_uris: Vec<String>,
    pub(super) tls_ca_file: Option<String>,
    pub(super) tls_min_version: Option<String>,
    #[serde(default)]
    pub(super) oauth_allow_private_network: bool,
    /// `"gateway"` (default) or `"native"` (transparent mode, one server only).
    pub(super) expose: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct UpstreamsSection {
    #[serde(default = "default_health_seconds")]
    pub(super) health_check_seconds: f64,
    #[serde(default = "default_circuit_threshold")]
    pub(super) circuit_threshold: u32,
    #[serde(default = "default_jitter")]
    pub(super) backoff_jitter: f64,
    #[serde(default = "default_drain_seconds")]
    pub(super) shutdown_drain_seconds: f64,
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
pub(super) struct CacheSection {
    #[serde(default = "yes")]
    pub(super) enabled: bool,
    #[serde(default = "default_ttl")]
    pub(super) ttl_seconds: u64,
    #[serde(default = "default_cache_mb")]
    pub(super) max_size_mb: u64,
    #[serde(default = "default_policy")]
    pub(super) eviction_policy: String,
    pub(super) backend: Option<String>,
    pub(super) redis_url: Option<String>,
    pub(super) redis_prefix: Option<String>,
}

impl Default for CacheSection {
    fn default() -> Self {
        Self {
            enabled: true,
            ttl_seconds: default_ttl(),
            max_size_mb: default_cache_mb(),
            eviction_policy: default_policy(),
            backend: None,
            redis_url: None,
            redis_prefix: None,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SecuritySection {
    #[serde(default = "default_max_resource_mb")]
    pub(super) max_resource_size_mb: u64,
    /// The vault's key file (created with a new key on first use when it does not exist and
    /// no key is given); by default `vault.key` beside the store.
    #[serde(default)]
    pub(super) vault_key_file: Option<std::path::PathBuf>,
    /// Credentials are always encrypted at rest; `false` is refused.
    #[serde(default = "yes")]
    pub(super) encrypt_credentials: bool,
    /// Protected resources need a credential for their server to be read.
    #[serde(default = "yes")]
    pub(super) require_auth_for_protected: bool,
}

impl Default for SecuritySection {
    fn default() -> Self {
        Self {
            max_resource_size_mb: default_max_resource_mb(),
            vault_key_file: None,
            encrypt_credentials: true,
            require_auth_for_protected: true,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LoggingSection {
    #[serde(default = "default_level")]
    pub(super) level: String,
    /// Keep the audit trail (and refuse requests when it cannot be written).
    #[serde(default = "yes")]
    pub(super) audit_enabled: bool,
    /// `pretty` (one line per event, for people) or `json` (one JSON object per line).
    #[serde(default)]
    pub(super) format: LogFormat,
    /// Write the log to this file (appended) instead of stderr.
    pub(super) file: Option<std::path::PathBuf>,
    /// Days audit records are kept before retention removes them behind a signed checkpoint.
    #[serde(default = "default_retention_days")]
    pub(super) audit_retention_days: u32,
    /// The key file that signs retention's checkpoints (default: `audit.key` beside the store).
    pub(super) audit_key_file: Option<std::path::PathBuf>,
}

fn default_retention_days() -> u32 {
    90
}

impl LoggingSection {
    /// The log file, relative to the configuration file's folder `dir` unless absolute.
    pub(super) fn resolved_file(
        &self,
        dir: Option<&std::path::Path>,
    ) -> Option<std::path::PathBuf> {
        self.file.clone().map(|p| match dir {
            Some(dir) if p.is_relative() => dir.join(p),
            _ => p,
        })
    }
}

/// How log events are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One line per event, for people.
    #[default]
    Pretty,
    /// One JSON object per line, for log collectors.
    Json,
}

impl Default for LoggingSection {
    fn default() -> Self {
        Self {
            level: default_level(),
            audit_enabled: true,
            format: LogFormat::default(),
            file: None,
            audit_retention_days: default_retention_days(),
            audit_key_file: None,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ClassificationSection {
    #[serde(default)]
    pub(super) rules: Vec<ClassificationRule>,
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

/// A `[servers.NAME]` section checked into a server's settings.
pub(super) fn server_settings(
    name: &str,
    s: ServerSection,
) -> Result<quarry_domain::ServerSettings, quarry_domain::Error> {
    quarry_domain::ServerDraft {
        name: name.to_owned(),
        id: s.id,
        endpoint: s.endpoint,
        command: s.command,
        args: s.args,
        env: s.env,
        cwd: s.cwd,
        timeout_secs: s.timeout,
        max_pages: s.max_pages,
        retry_attempts: s.retry_attempts,
        retry_delay_secs: s.retry_delay,
        pool_size: s.pool_size,
        protected: s.protected,
        protected_uris: s.protected_uris,
        tls_ca_file: s.tls_ca_file,
        tls_min_version: s.tls_min_version,
        oauth_allow_private_network: s.oauth_allow_private_network,
    }
    .into_settings(&|field: &str| match field {
        "name" => format!("servers.{name}"),
        other => format!("servers.{name}.{other}"),
    })
}
