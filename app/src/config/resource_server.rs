//! `[http.oauth]`: Quarry as an OAuth 2.1 resource server — the resource it is (the audience
//! tokens must name), the issuer it trusts and where that issuer's keys are, which algorithms it
//! accepts, which scopes every request needs, and an optional introspection endpoint for opaque
//! tokens. The client secret for introspection comes from an environment variable, never the file.

use std::{path::PathBuf, time::Duration};

use quarry_domain::Error;
use serde::Deserialize;

/// `[http.oauth]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct OAuthSection {
    resource: String,
    issuer: String,
    jwks_url: Option<String>,
    jwks_file: Option<PathBuf>,
    algorithms: Option<Vec<String>>,
    #[serde(default)]
    required_scopes: Vec<String>,
    agent_claim: Option<String>,
    leeway_seconds: Option<u64>,
    jwks_max_age_seconds: Option<u64>,
    jwks_min_refetch_seconds: Option<u64>,
    introspection_url: Option<String>,
    introspection_client_id: Option<String>,
    introspection_client_secret_env: Option<String>,
}

/// Where the issuer's keys are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    /// Fetched over HTTPS (HTTP on loopback).
    Url(String),
    /// Read from a file.
    File(PathBuf),
}

/// An introspection endpoint and the credentials Quarry uses there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntrospectionSettings {
    /// The endpoint.
    pub url: String,
    /// Quarry's client id there.
    pub client_id: String,
    /// The environment variable holding its client secret.
    pub secret_env: String,
}

/// How inbound bearer tokens are checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthSettings {
    /// This resource's identifier: the audience tokens must name.
    pub resource: String,
    /// The issuer tokens must come from (and the authorization server the metadata names).
    pub issuer: String,
    /// The issuer's keys.
    pub jwks: JwksSource,
    /// Accepted signature algorithms.
    pub algorithms: Vec<String>,
    /// Scopes every request needs.
    pub required_scopes: Vec<String>,
    /// The claim naming the agent.
    pub agent_claim: String,
    /// Clock skew tolerated on `exp` and `nbf`.
    pub leeway: Duration,
    /// A fetched key set is used this long.
    pub jwks_max_age: Duration,
    /// Fetches prompted by an unknown key id are at least this far apart.
    pub jwks_min_refetch: Duration,
    /// Introspection for opaque tokens.
    pub introspection: Option<IntrospectionSettings>,
}

/// The algorithms accepted when the file names none.
const DEFAULT_ALGORITHMS: [&str; 4] = ["RS256", "PS256", "ES256", "EdDSA"];

/// The algorithms that may be named: asymmetric only.
const ALGORITHMS: [&str; 9] = [
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

fn https_or_loopback(url: &str, key: &str) -> Result<(), Error> {
    let loopback = ["http://127.0.0.1", "http://localhost", "http://[::1]"]
        .iter()
        .any(|p| {
            url.strip_prefix(p)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with([':', '/']))
        });
    if url.starts_with("https://") || loopback {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "http.oauth.{key} must be an https:// URL (http:// on loopback only), got {url:?}"
        )))
    }
}

fn bounded(key: &str, value: Option<u64>, default: u64, max: u64) -> Result<Duration, Error> {
    let v = value.unwrap_or(default);
    if v > max {
        return Err(Error::invalid(format!(
            "http.oauth.{key} must be at most {max}"
        )));
    }
    Ok(Duration::from_secs(v))
}

impl OAuthSection {
    /// Checks the section.
    pub(super) fn settings(self) -> Result<OAuthSettings, Error> {
        https_or_loopback(&self.resource, "resource")?;
        https_or_loopback(&self.issuer, "issuer")?;
        let jwks = match (self.jwks_url, self.jwks_file) {
            (Some(url), None) => {
                https_or_loopback(&url, "jwks_url")?;
                JwksSource::Url(url)
            }
            (None, Some(file)) => JwksSource::File(file),
            _ => {
                return Err(Error::invalid(
                    "http.oauth takes the issuer's keys from jwks_url or jwks_file (one of them)",
                ));
            }
        };
        let algorithms = self
            .algorithms
            .unwrap_or_else(|| DEFAULT_ALGORITHMS.map(str::to_owned).to_vec());
        if algorithms.is_empty() {
            return Err(Error::invalid("http.oauth.algorithms names no algorithm"));
        }
        for a in &algorithms {
            if !ALGORITHMS.contains(&a.as_str()) {
                return Err(Error::invalid(format!(
                    "http.oauth.algorithms: {a:?} is not accepted; asymmetric ones only: {}",
                    ALGORITHMS.join(", ")
                )));
            }
        }
        for s in &self.required_scopes {
            if s.is_empty() || s.contains(|c: char| c.is_whitespace() || c == '"' || c == '\\') {
                return Err(Error::invalid(format!(
                    "http.oauth.required_scopes: {s:?} is not a scope token"
                )));
            }
        }
        let introspection = match (
            self.introspection_url,
            self.introspection_client_id,
            self.introspection_client_secret_env,
        ) {
            (None, None, None) => None,
            (Some(url), Some(client_id), Some(secret_env)) => {
                https_or_loopback(&url, "introspection_url")?;
                Some(IntrospectionSettings {
                    url,
                    client_id,
                    secret_env,
                })
            }
            _ => {
                return Err(Error::invalid(
                    "http.oauth.introspection_url, introspection_client_id and introspection_client_secret_env go together",
                ));
            }
        };
        Ok(OAuthSettings {
            resource: self.resource,
            issuer: self.issuer,
            jwks,
            algorithms,
            required_scopes: self.required_scopes,
            agent_claim: self.agent_claim.unwrap_or_else(|| "sub".to_owned()),
            leeway: bounded("leeway_seconds", self.leeway_seconds, 30, 300)?,
            jwks_max_age: bounded(
                "jwks_max_age_seconds",
                self.jwks_max_age_seconds,
                300,
                86_400,
            )?,
            jwks_min_refetch: bounded(
                "jwks_min_refetch_seconds",
                self.jwks_min_refetch_seconds,
                10,
                3600,
            )?,
            introspection,
        })
    }
}
