//! Registered upstream servers: their names, ids and how to reach them.

use std::{collections::BTreeMap, fmt, time::Duration};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::Error;

/// A registered server's name: `[A-Za-z0-9_-]{1,128}`, compared exactly.
///
/// The name is the first path segment of every gateway URI, so it must stay inside the spec's URI
/// pattern; case-insensitive duplicates are refused where names are registered.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerName(String);

impl ServerName {
    /// The longest name the spec's `MCPConnection.server_name` allows.
    pub const MAX_LEN: usize = 128;

    /// Parses a server name.
    ///
    /// # Errors
    /// E001 when the name is empty, longer than 128 bytes or has a character outside
    /// `[A-Za-z0-9_-]`.
    pub fn parse(name: &str) -> Result<Self, Error> {
        if name.is_empty() {
            return Err(Error::invalid("server name must not be empty"));
        }
        if name.len() > Self::MAX_LEN {
            return Err(Error::invalid(format!(
                "server name is {} bytes long; the limit is {}",
                name.len(),
                Self::MAX_LEN
            )));
        }
        if let Some(bad) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
        {
            return Err(Error::invalid(format!(
                "server name {name:?} contains {bad:?}; use only letters, digits, '_' and '-'"
            )));
        }
        Ok(Self(name.to_owned()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True when `other` differs from this name only by letter case (and is not identical).
    pub fn collides_with(&self, other: &ServerName) -> bool {
        self.0 != other.0 && self.0.eq_ignore_ascii_case(&other.0)
    }
}

impl fmt::Display for ServerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ServerName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).map_err(|e| serde::de::Error::custom(e.message()))
    }
}

impl Serialize for ServerName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// A server's stable id, `^[a-zA-Z0-9_-]{8,}$` as the spec's `MCPConnection.server_id` requires.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerId(String);

impl ServerId {
    /// Parses an explicitly configured id.
    ///
    /// # Errors
    /// E001 when shorter than 8 characters, longer than 128, or outside `[A-Za-z0-9_-]`.
    pub fn parse(id: &str) -> Result<Self, Error> {
        let valid_chars = id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if id.len() < 8 || id.len() > 128 || !valid_chars {
            return Err(Error::invalid(format!(
                "server id {id:?} must be 8 to 128 characters of letters, digits, '_' and '-'"
            )));
        }
        Ok(Self(id.to_owned()))
    }

    /// The id a server gets when none is configured: `srv-` and 16 hex digits of the FNV-1a hash
    /// of its name, so it is stable across restarts and replicas without any stored state.
    pub fn derive(name: &ServerName) -> Self {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in name.as_str().bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        Self(format!("srv-{hash:016x}"))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ServerId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).map_err(|e| serde::de::Error::custom(e.message()))
    }
}

impl Serialize for ServerId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// How to reach an upstream server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Endpoint {
    /// A child process speaking MCP over its stdin/stdout. Spawned without a shell.
    Stdio {
        /// The program to run (a path, or a name looked up on `PATH`).
        command: String,
        /// Its arguments, passed as they are.
        args: Vec<String>,
        /// Extra environment variables; the child gets only these and a minimal base set.
        env: BTreeMap<String, String>,
        /// Working directory, if not the gateway's.
        cwd: Option<String>,
    },
    /// A streamable HTTP MCP endpoint.
    Http {
        /// The endpoint URL, `http://` or `https://`.
        url: String,
    },
}

impl Endpoint {
    /// The endpoint as a URI for display and for `MCPConnection.endpoint`: the URL for HTTP,
    /// `stdio:<command>` for a child process (arguments and environment are not shown: they may
    /// carry secrets).
    pub fn display_uri(&self) -> String {
        match self {
            Self::Stdio { command, .. } => format!("stdio:{command}"),
            Self::Http { url } => url.clone(),
        }
    }

    /// `"stdio"` or `"http"`.
    pub fn transport(&self) -> &'static str {
        match self {
            Self::Stdio { .. } => "stdio",
            Self::Http { .. } => "http",
        }
    }
}

/// Everything Quarry knows about one registered upstream server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerSpec {
    /// Its registered name.
    pub name: ServerName,
    /// Its stable id.
    pub id: ServerId,
    /// How to reach it.
    pub endpoint: Endpoint,
    /// Deadline for every request to it, connection included.
    pub timeout: Duration,
    /// At most this many `resources/list` pages are followed (a server that repeats a cursor, or
    /// never stops, cannot hang a listing).
    pub max_pages: u32,
    /// How an HTTPS connection to it is made.
    pub tls: TlsPolicy,
    /// Its OAuth metadata, registration and token endpoints may be on private, loopback or
    /// link-local addresses (refused by default: a server could point Quarry at the internal
    /// network).
    pub oauth_private_network: bool,
}

/// How Quarry speaks TLS to one HTTPS server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TlsPolicy {
    /// A PEM file of CA certificates to trust for it instead of the system's (a private CA).
    pub ca_file: Option<String>,
    /// Accept TLS 1.2 from it (the default demands 1.3).
    pub allow_tls12: bool,
}

impl ServerSpec {
    /// The default per-request timeout (the spec's `timeout: 30`).
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
    /// The default page bound: 1,000 pages covers the spec's 10,000+ resources per server at any
    /// reasonable page size.
    pub const DEFAULT_MAX_PAGES: u32 = 1000;

    /// A spec with the default timeout and page bound and an id derived from the name.
    pub fn new(name: ServerName, endpoint: Endpoint) -> Self {
        Self {
            id: ServerId::derive(&name),
            name,
            endpoint,
            timeout: Self::DEFAULT_TIMEOUT,
            max_pages: Self::DEFAULT_MAX_PAGES,
            tls: TlsPolicy::default(),
            oauth_private_network: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;

    #[test]
    fn names_accept_the_pattern_and_nothing_else() {
        for ok in ["a", "everything", "prod-mcp_01", &"x".repeat(128)] {
            assert!(ServerName::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a b", "a/b", "é", "a.b", &"x".repeat(129)] {
            assert_eq!(
                ServerName::parse(bad).unwrap_err().code(),
                ErrorCode::E001,
                "{bad}"
            );
        }
    }

    #[test]
    fn case_only_differences_collide() {
        let a = ServerName::parse("Docs").unwrap();
        let b = ServerName::parse("docs").unwrap();
        assert!(a.collides_with(&b));
        assert!(!a.collides_with(&a.clone()));
    }

    #[test]
    fn derived_ids_are_stable_distinct_and_match_the_spec_pattern() {
        let a = ServerId::derive(&ServerName::parse("alpha").unwrap());
        let b = ServerId::derive(&ServerName::parse("beta").unwrap());
        assert_eq!(a, ServerId::derive(&ServerName::parse("alpha").unwrap()));
        assert_ne!(a, b);
        assert!(ServerId::parse(a.as_str()).is_ok());
        assert!(ServerId::parse("short").is_err());
    }

    #[test]
    fn stdio_endpoints_do_not_show_arguments() {
        let e = Endpoint::Stdio {
            command: "node".into(),
            args: vec!["--token=secret".into()],
            env: BTreeMap::new(),
            cwd: None,
        };
        assert_eq!(e.display_uri(), "stdio:node");
    }
}
