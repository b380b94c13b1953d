//! Upstream credentials: what Quarry sends a server to authenticate, validated before anything
//! is stored, printed only as a redaction, and wiped from memory when dropped.
//!
//! A credential exists in plaintext only as a [`UpstreamAuth`] in memory, and as the bytes of
//! [`UpstreamAuth::to_plaintext`] on their way into the vault's cipher (both zeroised on drop).

use std::fmt;

use serde_json::{Map, Value, json};
use zeroize::{Zeroize, Zeroizing};

use crate::{ConnectionStatus, Error, ErrorCode, ServerId};

mod oauth;

pub use oauth::{OAuthCredential, OAuthGrant, TokenAuthMethod, check_url};

/// The longest secret accepted, in bytes.
pub const MAX_SECRET_LEN: usize = 8 * 1024;
/// The longest header name accepted for an API key.
pub const MAX_HEADER_NAME_LEN: usize = 64;
/// The header an API key goes in when the credential names none.
pub const DEFAULT_API_KEY_HEADER: &str = "X-API-Key";

/// What a redacted secret prints as.
const REDACTED: &str = "«redacted»";

/// Headers an API key may not take: they belong to HTTP itself or to the MCP transport.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
    "accept",
    "cookie",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

/// A secret string: never printed, wiped from memory when dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Zeroizing<String>);

impl Secret {
    /// A secret of visible ASCII (a header value), 1 to [`MAX_SECRET_LEN`] bytes; `field` names
    /// it in the error, which never contains the value.
    pub fn parse(field: &str, value: String) -> Result<Self, Error> {
        let value = Zeroizing::new(value);
        if value.is_empty() {
            return Err(Error::invalid(format!("credentials.{field} is empty")));
        }
        if value.len() > MAX_SECRET_LEN {
            return Err(Error::invalid(format!(
                "credentials.{field} is longer than {MAX_SECRET_LEN} bytes"
            )));
        }
        if !value.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Error::invalid(format!(
                "credentials.{field} may hold only visible ASCII characters (no spaces, no line breaks)"
            )));
        }
        Ok(Self(value))
    }

    /// The plaintext, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

/// The kinds of credential, as the spec names them on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuthType {
    /// A key in a request header.
    ApiKey,
    /// `Authorization: Bearer <token>`.
    BearerToken,
    /// A client certificate presented in the TLS handshake (mutual TLS).
    Certificate,
    /// OAuth 2: access tokens from the server's authorization server, renewed by Quarry.
    OAuth2,
    /// The secret environment of a stdio server registered at runtime (kept out of the
    /// registry's rows). Not a type agents configure: it comes with the registration.
    Environment,
}

impl AuthType {
    /// Every type this build accepts.
    pub const ALL: [Self; 4] = [
        Self::ApiKey,
        Self::OAuth2,
        Self::Certificate,
        Self::BearerToken,
    ];

    /// The type's name on the wire (`api_key`, `bearer_token`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ApiKey => "api_key",
            Self::BearerToken => "bearer_token",
            Self::Certificate => "certificate",
            Self::OAuth2 => "oauth2",
            Self::Environment => "environment",
        }
    }

    /// Parses a type a store recorded (any type, [`Self::Environment`] included).
    pub fn from_stored(name: &str) -> Option<Self> {
        [
            Self::ApiKey,
            Self::BearerToken,
            Self::Certificate,
            Self::OAuth2,
            Self::Environment,
        ]
        .into_iter()
        .find(|t| t.as_str() == name)
    }

    /// Parses a name from the wire.
    pub fn parse(name: &str) -> Result<Self, Error> {
        Self::ALL
            .into_iter()
            .find(|t| t.as_str() == name)
            .ok_or_else(|| {
                let known: Vec<_> = Self::ALL.iter().map(|t| t.as_str()).collect();
                // The value is not echoed: it may be a secret given in the wrong place.
                Error::invalid(format!("auth_type must be one of: {}", known.join(", ")))
            })
    }
}

impl fmt::Display for AuthType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How Quarry authenticates to one upstream server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamAuth {
    /// A key sent in `header` on every request.
    ApiKey {
        /// The header's name (a valid HTTP token, not one HTTP or MCP reserves).
        header: String,
        /// The key.
        key: Secret,
    },
    /// A bearer token sent as `Authorization: Bearer <token>`.
    Bearer {
        /// The token.
        token: Secret,
    },
    /// A client certificate and its private key (PEM), for mutual TLS.
    ClientCertificate {
        /// The certificate chain, leaf first.
        certificate: String,
        /// The private key.
        private_key: Secret,
    },
    /// OAuth 2 tokens and the client that obtains them.
    OAuth2(Box<OAuthCredential>),
    /// Environment variables given to a stdio server's process.
    Environment(std::collections::BTreeMap<String, Secret>),
}

impl UpstreamAuth {
    /// Parses the spec's `auth_type` and `credentials` object: `api_key` takes `key` and an
    /// optional `header` (default [`DEFAULT_API_KEY_HEADER`]); `bearer_token` takes `token`.
    /// Unknown fields are refused, so a misspelt one is not silently dropped.
    pub fn parse(auth_type: &str, credentials: &Map<String, Value>) -> Result<Self, Error> {
        let kind = AuthType::parse(auth_type)?;
        let allowed: &[&str] = match kind {
            AuthType::ApiKey => &["key", "header"],
            AuthType::BearerToken => &["token"],
            AuthType::Certificate => &["certificate", "private_key"],
            AuthType::OAuth2 => oauth::FIELDS,
            // Not in `AuthType::ALL`: never parsed from a name.
            AuthType::Environment => &[],
        };
        if let Some(unknown) = credentials.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(Error::invalid(format!(
                "credentials.{} is not a field of {kind} credentials (expected: {})",
                crate::sanitize_label(unknown),
                allowed.join(", ")
            )));
        }
        let text = |field: &str| -> Result<Option<String>, Error> {
            match credentials.get(field) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(Error::invalid(format!(
                    "credentials.{field} must be a string"
                ))),
            }
        };
        let required = |field: &str| -> Result<Secret, Error> {
            let value = text(field)?.ok_or_else(|| {
                Error::invalid(format!("{kind} credentials need credentials.{field}"))
            })?;
            Secret::parse(field, value)
        };
        match kind {
            AuthType::ApiKey => {
                let header = match text("header")? {
                    Some(name) => header_name(&name)?,
                    None => DEFAULT_API_KEY_HEADER.to_owned(),
                };
                Ok(Self::ApiKey {
                    header,
                    key: required("key")?,
                })
            }
            AuthType::BearerToken => Ok(Self::Bearer {
                token: required("token")?,
            }),
            AuthType::Certificate => {
                let pem = |field: &str, marker: &str| -> Result<String, Error> {
                    let value = text(field)?.ok_or_else(|| {
                        Error::invalid(format!("{kind} credentials need credentials.{field}"))
                    })?;
                    check_pem(field, &value, marker)?;
                    Ok(value)
                };
                Ok(Self::ClientCertificate {
                    certificate: pem("certificate", "CERTIFICATE-----")?,
                    private_key: Secret(Zeroizing::new(pem("private_key", "PRIVATE KEY-----")?)),
                })
            }
            AuthType::OAuth2 => {
                OAuthCredential::parse(credentials).map(|c| Self::OAuth2(Box::new(c)))
            }
            AuthType::Environment => Ok(Self::Environment(std::collections::BTreeMap::new())),
        }
    }

    /// A stdio server's environment as a credential.
    pub fn environment(env: &std::collections::BTreeMap<String, String>) -> Self {
        Self::Environment(
            env.iter()
                .map(|(k, v)| (k.clone(), Secret(Zeroizing::new(v.clone()))))
                .collect(),
        )
    }

    /// The credential's type.
    pub fn auth_type(&self) -> AuthType {
        match self {
            Self::ApiKey { .. } => AuthType::ApiKey,
            Self::Bearer { .. } => AuthType::BearerToken,
            Self::ClientCertificate { .. } => AuthType::Certificate,
            Self::OAuth2(_) => AuthType::OAuth2,
            Self::Environment(_) => AuthType::Environment,
        }
    }

    /// The environment variables that carry it to a stdio server: (name, value).
    pub fn env(&self) -> Vec<(String, Secret)> {
        match self {
            Self::Environment(env) => env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            _ => Vec::new(),
        }
    }

    /// The headers that carry it on an HTTP request: (name, value).
    pub fn headers(&self) -> Vec<(String, Secret)> {
        match self {
            Self::ApiKey { header, key } => vec![(header.clone(), key.clone())],
            Self::Bearer { token } => vec![(
                "Authorization".to_owned(),
                Secret(Zeroizing::new(format!("Bearer {}", token.expose()))),
            )],
            // OAuth tokens are added per request, by whoever holds the current one.
            Self::ClientCertificate { .. } | Self::OAuth2(_) | Self::Environment(_) => Vec::new(),
        }
    }

    /// The bytes the vault seals: the credentials object as JSON.
    pub fn to_plaintext(&self) -> Zeroizing<Vec<u8>> {
        let mut value = match self {
            Self::ApiKey { header, key } => json!({"header": header, "key": key.expose()}),
            Self::Bearer { token } => json!({"token": token.expose()}),
            Self::ClientCertificate {
                certificate,
                private_key,
            } => json!({"certificate": certificate, "private_key": private_key.expose()}),
            Self::OAuth2(oauth) => oauth.to_value(),
            Self::Environment(env) => {
                let env: Map<String, Value> = env
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.expose().to_owned())))
                    .collect();
                json!({ "env": env })
            }
        };
        let bytes = Zeroizing::new(value.to_string().into_bytes());
        wipe(&mut value);
        bytes
    }

    /// The credential sealed as [`Self::to_plaintext`], given its type.
    pub fn from_plaintext(auth_type: AuthType, plaintext: &[u8]) -> Result<Self, Error> {
        let mut value: Value = serde_json::from_slice(plaintext)
            .map_err(|_| Error::invalid("a stored credential is not a credentials object"))?;
        let parsed = match (&value, auth_type) {
            (Value::Object(map), AuthType::Environment) => match map.get("env") {
                Some(Value::Object(env)) => env
                    .iter()
                    .map(|(k, v)| match v {
                        Value::String(v) => Ok((k.clone(), Secret(Zeroizing::new(v.clone())))),
                        _ => Err(Error::invalid("a stored environment value is not a string")),
                    })
                    .collect::<Result<_, _>>()
                    .map(Self::Environment),
                _ => Err(Error::invalid("a stored environment is not an object")),
            },
            (Value::Object(map), _) => Self::parse(auth_type.as_str(), map),
            _ => Err(Error::invalid(
                "a stored credential is not a credentials object",
            )),
        };
        wipe(&mut value);
        parsed
    }
}

/// What an authentication operation did (the spec's AuthResult).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AuthResult {
    /// Whether the operation succeeded (for a test: whether the server accepted the credential).
    pub success: bool,
    /// The server's stable id.
    pub server_id: ServerId,
    /// The connection's state after the operation, when it tried one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_status: Option<ConnectionStatus>,
    /// What failed, when something did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<ErrorCode>,
    /// Why, caller-safe (never a secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// How long connecting, initialising and listing took, for a test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
}

/// Overwrites the strings of a JSON value that held secrets.
fn wipe(value: &mut Value) {
    match value {
        Value::String(s) => s.zeroize(),
        Value::Array(items) => items.iter_mut().for_each(wipe),
        Value::Object(map) => map.values_mut().for_each(wipe),
        _ => {}
    }
}

/// The longest PEM accepted (a certificate chain, a private key).
const MAX_PEM_LEN: usize = 64 * 1024;

/// A PEM text of `field`: bounded, ASCII, with a block whose BEGIN line ends in `marker`. Whether
/// it parses and the key matches the certificate is the TLS library's to say (at the connection).
fn check_pem(field: &str, value: &str, marker: &str) -> Result<(), Error> {
    if value.len() > MAX_PEM_LEN {
        return Err(Error::invalid(format!(
            "credentials.{field} is longer than {MAX_PEM_LEN} bytes"
        )));
    }
    let ascii = value
        .bytes()
        .all(|b| b.is_ascii_graphic() || b.is_ascii_whitespace());
    let begins = value
        .lines()
        .any(|l| l.trim().starts_with("-----BEGIN ") && l.trim().ends_with(marker));
    if !ascii || !begins || !value.contains("-----END ") {
        return Err(Error::invalid(format!(
            "credentials.{field} must be PEM (a -----BEGIN ...{marker} block)"
        )));
    }
    Ok(())
}

/// A header name an API key may go in: an HTTP token, bounded, not reserved.
fn header_name(name: &str) -> Result<String, Error> {
    let is_token_char = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || name.len() > MAX_HEADER_NAME_LEN || !name.bytes().all(is_token_char) {
        return Err(Error::invalid(format!(
            "credentials.header must be an HTTP header name of 1 to {MAX_HEADER_NAME_LEN} letters, digits or !#$%&'*+-.^_`|~"
        )));
    }
    if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
        return Err(Error::invalid(format!(
            "credentials.header may not be '{name}': HTTP or MCP sets that header itself"
        )));
    }
    Ok(name.to_owned())
}

#[cfg(test)]
mod tests;
