//! Server settings as registered: a server's spec with its retry policy and pool, and the one
//! validator that turns what someone wrote (a configuration section, a tool call, a command
//! line) into them, naming each field as that someone knows it.

use std::{collections::BTreeMap, time::Duration};

use serde::Serialize;

use crate::{Endpoint, Error, Protection, RetryPolicy, ServerId, ServerName, ServerSpec};

/// A registered server with its retry policy and its pool: one type for the configuration
/// file, the `add_mcp_server` tool, the command line and the registry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerSettings {
    /// Name, id, endpoint, timeout, page bound.
    pub spec: ServerSpec,
    /// Retries for reads, and the base of the reconnection backoff.
    pub retry: RetryPolicy,
    /// Most sessions (stdio: processes) held open to the server at once.
    pub pool_size: u32,
    /// Which of its resources need a credential to be read.
    pub protection: Protection,
}

impl ServerSettings {
    /// The default pool size (the spec's "10 connections per server").
    pub const DEFAULT_POOL_SIZE: u32 = 10;
    /// The largest pool a server may ask for.
    pub const MAX_POOL_SIZE: u32 = 100;

    /// A server with the default retry policy and pool.
    pub fn new(spec: ServerSpec) -> Self {
        Self {
            spec,
            retry: RetryPolicy::default(),
            pool_size: Self::DEFAULT_POOL_SIZE,
            protection: Protection::Nothing,
        }
    }

    /// The server's name.
    pub fn name(&self) -> &ServerName {
        &self.spec.name
    }
}

/// A server as someone describes it (a configuration section, a tool call, a command line),
/// before it is checked. The one validator of server settings: every bound lives here.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerDraft {
    /// The name to register.
    pub name: String,
    /// An explicit id.
    pub id: Option<String>,
    /// A streamable HTTP endpoint.
    pub endpoint: Option<String>,
    /// A program to run over stdio.
    pub command: Option<String>,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its extra environment.
    pub env: BTreeMap<String, String>,
    /// Its working directory.
    pub cwd: Option<String>,
    /// Request timeout, in seconds.
    pub timeout_secs: Option<f64>,
    /// Page bound for listings.
    pub max_pages: Option<u32>,
    /// Retries of a read whose connection failed.
    pub retry_attempts: Option<u32>,
    /// Seconds before the first retry.
    pub retry_delay_secs: Option<f64>,
    /// Most sessions held open at once.
    pub pool_size: Option<u32>,
    /// The whole server is protected.
    pub protected: bool,
    /// Upstream URIs (or prefixes ending in `*`) that are protected.
    pub protected_uris: Vec<String>,
    /// A PEM file of CA certificates to trust for this HTTPS server.
    pub tls_ca_file: Option<String>,
    /// The oldest TLS version accepted: `"1.3"` (the default) or `"1.2"`.
    pub tls_min_version: Option<String>,
    /// Its OAuth endpoints may be on private, loopback or link-local addresses.
    pub oauth_allow_private_network: bool,
}

impl ServerDraft {
    /// Checks the draft and builds the settings. `field` names each field in messages as the
    /// caller's user knows it (`servers.docs.timeout` in a configuration file, `--timeout` on the
    /// command line, `timeout` in a tool call).
    ///
    /// # Errors
    /// E001 naming the field: a bad name or id, neither or both of endpoint and command, an
    /// endpoint that is not http(s), stdio fields on an HTTP server, a timeout outside
    /// (0, 3600] seconds, a page bound of 0, more than 10 retries, a retry delay outside (0, 30]
    /// seconds, a pool outside 1..=100.
    pub fn into_settings(self, field: &dyn Fn(&str) -> String) -> Result<ServerSettings, Error> {
        let name = ServerName::parse(&self.name)
            .map_err(|e| Error::invalid(format!("{}: {}", field("name"), e.message())))?;
        let endpoint = match (self.endpoint, self.command) {
            (Some(_), Some(_)) => {
                return Err(Error::invalid(format!(
                    "{} and {} are both set; use endpoint for HTTP servers, command for stdio ones",
                    field("endpoint"),
                    field("command")
                )));
            }
            (None, None) => {
                return Err(Error::invalid(format!(
                    "{} (an http(s) URL) or {} (a program to run) is needed",
                    field("endpoint"),
                    field("command")
                )));
            }
            (Some(url), None) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() > 2048
                {
                    return Err(Error::invalid(format!(
                        "{} must be an http:// or https:// URL, got {:?}",
                        field("endpoint"),
                        url.chars().take(128).collect::<String>()
                    )));
                }
                if url.starts_with("http://") && !is_loopback(&url) {
                    return Err(Error::invalid(format!(
                        "{} is plain http:// to a host that is not this machine; credentials and \
                         content would cross the network unencrypted: use https:// (plain http \
                         is for 127.0.0.1, [::1] and localhost)",
                        field("endpoint")
                    )));
                }
                if !self.args.is_empty() || !self.env.is_empty() || self.cwd.is_some() {
                    return Err(Error::invalid(format!(
                        "{}, {} and {} apply to command servers, not endpoint ones",
                        field("args"),
                        field("env"),
                        field("cwd")
                    )));
                }
                Endpoint::Http { url }
            }
            (None, Some(command)) => {
                if command.trim().is_empty() {
                    return Err(Error::invalid(format!(
                        "{} must not be empty",
                        field("command")
                    )));
                }
                Endpoint::Stdio {
                    command,
                    args: self.args,
                    env: self.env,
                    cwd: self.cwd,
                }
            }
        };
        let mut spec = ServerSpec::new(name, endpoint);
        if let Some(id) = self.id {
            spec.id = ServerId::parse(&id)
                .map_err(|e| Error::invalid(format!("{}: {}", field("id"), e.message())))?;
        }
        if let Some(t) = self.timeout_secs {
            spec.timeout = seconds(&field("timeout"), t, 3600.0)?;
        }
        if let Some(p) = self.max_pages {
            if p == 0 {
                return Err(Error::invalid(format!(
                    "{} must be at least 1",
                    field("max_pages")
                )));
            }
            spec.max_pages = p;
        }
        let mut retry = RetryPolicy::default();
        if let Some(a) = self.retry_attempts {
            if a > RetryPolicy::MAX_ATTEMPTS {
                return Err(Error::invalid(format!(
                    "{} must be at most {}",
                    field("retry_attempts"),
                    RetryPolicy::MAX_ATTEMPTS
                )));
            }
            retry.attempts = a;
        }
        if let Some(d) = self.retry_delay_secs {
            retry.delay = seconds(
                &field("retry_delay"),
                d,
                RetryPolicy::MAX_DELAY.as_secs_f64(),
            )?;
        }
        let pool_size = match self.pool_size {
            None => ServerSettings::DEFAULT_POOL_SIZE,
            Some(n) if (1..=ServerSettings::MAX_POOL_SIZE).contains(&n) => n,
            Some(n) => {
                return Err(Error::invalid(format!(
                    "{} must be between 1 and {}, got {n}",
                    field("pool_size"),
                    ServerSettings::MAX_POOL_SIZE
                )));
            }
        };
        let protection = Protection::declare(self.protected, self.protected_uris, field)?;
        let is_http = matches!(spec.endpoint, Endpoint::Http { .. });
        if !is_http && (self.tls_ca_file.is_some() || self.tls_min_version.is_some()) {
            return Err(Error::invalid(format!(
                "{} and {} apply to HTTPS servers, not stdio ones",
                field("tls_ca_file"),
                field("tls_min_version")
            )));
        }
        spec.tls.allow_tls12 = match self.tls_min_version.as_deref() {
            None | Some("1.3") => false,
            Some("1.2") => true,
            Some(other) => {
                return Err(Error::invalid(format!(
                    "{} must be \"1.3\" or \"1.2\", got {:?}",
                    field("tls_min_version"),
                    other.chars().take(16).collect::<String>()
                )));
            }
        };
        if let Some(file) = self.tls_ca_file {
            if file.is_empty() || file.len() > 4096 {
                return Err(Error::invalid(format!(
                    "{} must name a file",
                    field("tls_ca_file")
                )));
            }
            spec.tls.ca_file = Some(file);
        }
        if self.oauth_allow_private_network && !is_http {
            return Err(Error::invalid(format!(
                "{} applies to HTTP servers, not stdio ones",
                field("oauth_allow_private_network")
            )));
        }
        spec.oauth_private_network = self.oauth_allow_private_network;
        if protection != Protection::Nothing && matches!(spec.endpoint, Endpoint::Stdio { .. }) {
            return Err(Error::invalid(format!(
                "{} applies to HTTP servers, whose credentials Quarry keeps; a stdio server \
                 takes its secrets in {}",
                field("protected"),
                field("env")
            )));
        }
        Ok(ServerSettings {
            spec,
            retry,
            pool_size,
            protection,
        })
    }
}

/// Whether an http(s) URL's host is this machine: `localhost`, `127.0.0.0/8` or `[::1]`.
pub(crate) fn is_loopback(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host_port.split(':').next().unwrap_or_default(),
    };
    let host = host.to_ascii_lowercase();
    host == "localhost"
        || host == "::1"
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// A duration in seconds within (0, max].
///
/// # Errors
/// E001 naming `key` when out of bounds or not a number.
pub fn seconds(key: &str, value: f64, max: f64) -> Result<Duration, Error> {
    if !(value.is_finite() && value > 0.0 && value <= max) {
        return Err(Error::invalid(format!(
            "{key} must be more than 0 and at most {max} seconds, got {value}"
        )));
    }
    Ok(Duration::from_secs_f64(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;

    #[test]
    fn plain_http_is_for_this_machine_only() {
        for url in [
            "http://127.0.0.1:8080/mcp",
            "http://127.9.9.9/mcp",
            "http://localhost/mcp",
            "http://LOCALHOST:1/mcp",
            "http://[::1]:80/mcp",
        ] {
            assert!(is_loopback(url), "{url}");
        }
        for url in [
            "http://10.0.0.1/mcp",
            "http://127.0.0.1.evil.example/mcp",
            "http://localhost.evil.example/mcp",
            "http://user@example.com/mcp",
            "http://[::2]/mcp",
        ] {
            assert!(!is_loopback(url), "{url}");
        }
    }

    #[test]
    fn plain_http_elsewhere_is_refused_naming_the_field() {
        let e = draft("http://mcp.example.com/mcp")
            .into_settings(&|f: &str| format!("servers.docs.{f}"))
            .unwrap_err();
        assert!(
            e.message()
                .starts_with("servers.docs.endpoint is plain http://"),
            "{}",
            e.message()
        );
        assert!(
            draft("http://127.0.0.1:9/mcp")
                .into_settings(&|f: &str| f.to_owned())
                .is_ok()
        );
    }

    fn draft(endpoint: &str) -> ServerDraft {
        ServerDraft {
            name: "docs".into(),
            endpoint: Some(endpoint.into()),
            ..ServerDraft::default()
        }
    }

    #[test]
    fn one_validator_names_fields_as_each_caller_does() {
        let config = |k: &str| format!("servers.docs.{k}");
        let cli = |k: &str| format!("--{}", k.replace('_', "-"));
        let bad = ServerDraft {
            pool_size: Some(0),
            ..draft("https://h/mcp")
        };
        let e = bad.clone().into_settings(&config).unwrap_err();
        assert_eq!(
            e.message(),
            "servers.docs.pool_size must be between 1 and 100, got 0"
        );
        let e = bad.into_settings(&cli).unwrap_err();
        assert_eq!(e.message(), "--pool-size must be between 1 and 100, got 0");
        for (d, want) in [
            (
                ServerDraft {
                    retry_attempts: Some(11),
                    ..draft("https://h")
                },
                "retry_attempts must be at most 10",
            ),
            (
                ServerDraft {
                    retry_delay_secs: Some(31.0),
                    ..draft("https://h")
                },
                "retry_delay must be more than 0 and at most 30",
            ),
            (
                ServerDraft {
                    timeout_secs: Some(0.0),
                    ..draft("https://h")
                },
                "timeout must be more than 0",
            ),
            (
                ServerDraft {
                    max_pages: Some(0),
                    ..draft("https://h")
                },
                "max_pages must be at least 1",
            ),
            (
                draft("ftp://h"),
                "endpoint must be an http:// or https:// URL",
            ),
        ] {
            let e = d.into_settings(&|k: &str| k.to_owned()).unwrap_err();
            assert!(e.message().starts_with(want), "{} vs {want}", e.message());
            assert_eq!(e.code(), ErrorCode::E001);
        }
    }

    #[test]
    fn defaults_fill_what_a_draft_leaves_out() {
        let s = ServerDraft {
            retry_attempts: Some(0),
            retry_delay_secs: Some(2.5),
            pool_size: Some(3),
            ..draft("https://h/mcp")
        }
        .into_settings(&|k: &str| k.to_owned())
        .unwrap();
        assert_eq!(
            s.retry,
            RetryPolicy {
                attempts: 0,
                delay: Duration::from_millis(2500)
            }
        );
        assert_eq!(s.pool_size, 3);
        assert_eq!(s.spec.timeout, ServerSpec::DEFAULT_TIMEOUT);
        let plain = draft("https://h/mcp")
            .into_settings(&|k: &str| k.to_owned())
            .unwrap();
        assert_eq!(plain, ServerSettings::new(plain.spec.clone()));
    }
}
