//! `[http]`: serving agents over streamable HTTP — where, which Host and Origin values are
//! accepted, how many sessions and for how long, the API keys that name agents, and the
//! resource server that checks bearer tokens (`[http.oauth]`).

use std::{collections::BTreeMap, net::SocketAddr, time::Duration};

use quarry_domain::{Error, Principal};
use serde::Deserialize;

use super::resource_server::{OAuthSection, OAuthSettings};

/// `[http]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HttpSection {
    listen: Option<SocketAddr>,
    allowed_hosts: Option<Vec<String>>,
    #[serde(default)]
    allowed_origins: Vec<String>,
    max_sessions: Option<usize>,
    session_idle_seconds: Option<u64>,
    max_body_kb: Option<usize>,
    max_requests_per_agent: Option<usize>,
    max_requests_in_flight: Option<usize>,
    max_connections: Option<usize>,
    tls_cert_file: Option<std::path::PathBuf>,
    tls_key_file: Option<std::path::PathBuf>,
    request_timeout_seconds: Option<u64>,
    #[serde(default)]
    api_keys: BTreeMap<String, String>,
    oauth: Option<OAuthSection>,
}

/// How `quarry serve --http` serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSettings {
    /// Where to listen when `--http` does not say (`http.listen`).
    pub listen: Option<SocketAddr>,
    /// Host header values accepted (names, or `name:port`); loopback names by default.
    pub allowed_hosts: Vec<String>,
    /// Origin values accepted (`scheme://host[:port]`); none by default, so a browser's request
    /// (any `Origin`, `null` included) is refused and other clients (no `Origin`) pass.
    pub allowed_origins: Vec<String>,
    /// Sessions open at once, at most.
    pub max_sessions: usize,
    /// A session unused this long is closed.
    pub session_idle: Duration,
    /// The largest request body.
    pub max_body_bytes: usize,
    /// Requests one agent may have in flight at once.
    pub max_requests_per_agent: usize,
    /// Requests handled at once across all agents; more wait their turn.
    pub max_requests_in_flight: usize,
    /// Connections served at once; more wait their turn, and meanwhile those served close after
    /// their current exchange.
    pub max_connections: usize,
    /// HTTPS: the certificate chain and private key files (PEM); none: plain HTTP.
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// The longest a request may take, to the end of its answer.
    pub request_timeout: Duration,
    /// API keys by the SHA-256 (hex) of the key: the agent each names.
    pub api_keys: Vec<(String, Principal)>,
    /// Bearer tokens from an authorization server (`[http.oauth]`).
    pub oauth: Option<OAuthSettings>,
}

impl HttpSettings {
    /// Whether requests must authenticate (API keys or tokens).
    #[must_use]
    pub fn authenticates(&self) -> bool {
        !self.api_keys.is_empty() || self.oauth.is_some()
    }
}

/// The loopback names a local server answers to.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

impl HttpSection {
    /// Checks the section.
    pub(super) fn settings(self) -> Result<HttpSettings, Error> {
        let max_sessions = self.max_sessions.unwrap_or(1000);
        if !(1..=100_000).contains(&max_sessions) {
            return Err(Error::invalid(
                "http.max_sessions must be between 1 and 100000",
            ));
        }
        let idle = self.session_idle_seconds.unwrap_or(1800);
        if !(10..=86_400).contains(&idle) {
            return Err(Error::invalid(
                "http.session_idle_seconds must be between 10 and 86400",
            ));
        }
        let body_kb = self.max_body_kb.unwrap_or(1024);
        if !(1..=65_536).contains(&body_kb) {
            return Err(Error::invalid(
                "http.max_body_kb must be between 1 and 65536",
            ));
        }
        let per_agent = self.max_requests_per_agent.unwrap_or(64);
        if !(1..=10_000).contains(&per_agent) {
            return Err(Error::invalid(
                "http.max_requests_per_agent must be between 1 and 10000",
            ));
        }
        let in_flight = self.max_requests_in_flight.unwrap_or(256);
        if !(1..=100_000).contains(&in_flight) {
            return Err(Error::invalid(
                "http.max_requests_in_flight must be between 1 and 100000",
            ));
        }
        let connections = self.max_connections.unwrap_or(1024);
        if !(1..=100_000).contains(&connections) {
            return Err(Error::invalid(
                "http.max_connections must be between 1 and 100000",
            ));
        }
        let timeout = self.request_timeout_seconds.unwrap_or(300);
        if !(1..=3600).contains(&timeout) {
            return Err(Error::invalid(
                "http.request_timeout_seconds must be between 1 and 3600",
            ));
        }
        for origin in &self.allowed_origins {
            if origin == "null"
                || !(origin.starts_with("http://") || origin.starts_with("https://"))
            {
                return Err(Error::invalid(format!(
                    "http.allowed_origins takes scheme://host[:port] values (\"null\" is never allowed), got {origin:?}"
                )));
            }
        }
        let tls = match (self.tls_cert_file, self.tls_key_file) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => {
                return Err(Error::invalid(
                    "http.tls_cert_file and http.tls_key_file go together (PEM files)",
                ));
            }
        };
        let mut api_keys = Vec::new();
        for (agent, digest) in self.api_keys {
            let hex = digest.strip_prefix("sha256:").unwrap_or(&digest);
            if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(Error::invalid(format!(
                    "http.api_keys.{agent} must be the key's SHA-256 as sha256:<64 hex digits> (`quarry api-key hash` prints it), never the key"
                )));
            }
            if agent.is_empty() || agent.len() > 128 || agent.chars().any(char::is_control) {
                return Err(Error::invalid(
                    "http.api_keys names agents of 1 to 128 characters",
                ));
            }
            api_keys.push((hex.to_ascii_lowercase(), Principal::new(agent)));
        }
        Ok(HttpSettings {
            listen: self.listen,
            allowed_hosts: self
                .allowed_hosts
                .unwrap_or_else(|| LOOPBACK_HOSTS.map(str::to_owned).to_vec()),
            allowed_origins: self.allowed_origins,
            max_sessions,
            session_idle: Duration::from_secs(idle),
            max_body_bytes: body_kb * 1024,
            max_requests_per_agent: per_agent,
            max_requests_in_flight: in_flight,
            max_connections: connections,
            tls,
            request_timeout: Duration::from_secs(timeout),
            api_keys,
            oauth: self.oauth.map(OAuthSection::settings).transpose()?,
        })
    }
}
