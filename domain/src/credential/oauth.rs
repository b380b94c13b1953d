//! OAuth 2 credentials: the client Quarry is toward a server's authorization server, and the
//! tokens it holds. What discovery finds (the issuer, the token endpoint, the resource) is kept
//! with them, so a refresh needs no discovery.

use serde_json::{Map, Value, json};
use zeroize::Zeroizing;

use super::{Secret, check_pem};
use crate::{Error, settings::is_loopback};

/// How Quarry obtains tokens for a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OAuthGrant {
    /// A person signs in once (`quarry auth login`); refresh tokens do the rest.
    AuthorizationCode,
    /// The client authenticates as itself, with no person (machines).
    ClientCredentials,
}

impl OAuthGrant {
    /// The grant's name in OAuth (`authorization_code`, `client_credentials`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AuthorizationCode => "authorization_code",
            Self::ClientCredentials => "client_credentials",
        }
    }
}

/// How the client authenticates to the token endpoint (RFC 8414's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenAuthMethod {
    /// HTTP Basic with the client id and secret.
    ClientSecretBasic,
    /// The client id and secret in the form body.
    ClientSecretPost,
    /// A JWT signed with the client's private key (RFC 7523).
    PrivateKeyJwt,
    /// A public client: the client id only.
    None,
}

impl TokenAuthMethod {
    const ALL: [Self; 4] = [
        Self::ClientSecretBasic,
        Self::ClientSecretPost,
        Self::PrivateKeyJwt,
        Self::None,
    ];

    /// The method's name in OAuth metadata.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClientSecretBasic => "client_secret_basic",
            Self::ClientSecretPost => "client_secret_post",
            Self::PrivateKeyJwt => "private_key_jwt",
            Self::None => "none",
        }
    }

    /// The method named `name`, if Quarry speaks it.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == name)
    }
}

/// An OAuth 2 credential for one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthCredential {
    /// How tokens are obtained.
    pub grant: OAuthGrant,
    /// The client id: pre-registered, a client ID metadata document's URL, or the one dynamic
    /// registration gave. None until one of them is known.
    pub client_id: Option<String>,
    /// The client secret, for a confidential client.
    pub client_secret: Option<Secret>,
    /// The client's private key (PKCS#8 PEM, P-256), for `private_key_jwt`.
    pub private_key: Option<Secret>,
    /// The URL of a client ID metadata document describing Quarry, used as the client id where
    /// the authorization server supports them.
    pub client_metadata_url: Option<String>,
    /// How the client authenticates to the token endpoint; chosen from the server's metadata when
    /// not set.
    pub token_endpoint_auth_method: Option<TokenAuthMethod>,
    /// The scopes asked for (space-separated); chosen as the MCP spec says when not set.
    pub scope: Option<String>,
    /// The authorization server's issuer, once discovered (or as configured).
    pub issuer: Option<String>,
    /// Its token endpoint, once discovered (or as configured).
    pub token_endpoint: Option<String>,
    /// The resource the tokens are for (RFC 8707), once discovered.
    pub resource: Option<String>,
    /// The current access token.
    pub access_token: Option<Secret>,
    /// The refresh token, if the server gave one.
    pub refresh_token: Option<Secret>,
    /// When the access token expires, in seconds since the Unix epoch.
    pub expires_at: Option<i64>,
}

/// The fields an `oauth2` credentials object may have.
pub(super) const FIELDS: &[&str] = &[
    "grant_type",
    "client_id",
    "client_secret",
    "private_key",
    "client_metadata_url",
    "token_endpoint_auth_method",
    "scope",
    "issuer",
    "token_endpoint",
    "resource",
    "access_token",
    "refresh_token",
    "expires_at",
];

/// The longest URL or scope accepted.
const MAX_TEXT_LEN: usize = 2048;

impl OAuthCredential {
    /// A credential for `grant` with nothing else known yet.
    pub fn new(grant: OAuthGrant) -> Self {
        Self {
            grant,
            client_id: None,
            client_secret: None,
            private_key: None,
            client_metadata_url: None,
            token_endpoint_auth_method: None,
            scope: None,
            issuer: None,
            token_endpoint: None,
            resource: None,
            access_token: None,
            refresh_token: None,
            expires_at: None,
        }
    }

    /// Parses an `oauth2` credentials object (fields checked against [`FIELDS`] by the caller).
    pub(super) fn parse(credentials: &Map<String, Value>) -> Result<Self, Error> {
        let text = |field: &str| -> Result<Option<String>, Error> {
            match credentials.get(field) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(Error::invalid(format!(
                    "credentials.{field} must be a string"
                ))),
            }
        };
        let bounded = |field: &str| -> Result<Option<String>, Error> {
            let value = text(field)?;
            if value.as_ref().is_some_and(|v| {
                v.is_empty() || v.len() > MAX_TEXT_LEN || v.chars().any(char::is_control)
            }) {
                return Err(Error::invalid(format!(
                    "credentials.{field} must be 1 to {MAX_TEXT_LEN} characters, none of them control characters"
                )));
            }
            Ok(value)
        };
        let url = |field: &str| -> Result<Option<String>, Error> {
            let value = bounded(field)?;
            if let Some(v) = &value {
                check_url(field, v)?;
            }
            Ok(value)
        };
        let secret = |field: &str| -> Result<Option<Secret>, Error> {
            text(field)?.map(|v| Secret::parse(field, v)).transpose()
        };
        let grant = match text("grant_type")?.as_deref() {
            None | Some("authorization_code") => OAuthGrant::AuthorizationCode,
            Some("client_credentials") => OAuthGrant::ClientCredentials,
            Some(_) => {
                return Err(Error::invalid(
                    "credentials.grant_type must be authorization_code or client_credentials",
                ));
            }
        };
        let method = match text("token_endpoint_auth_method")? {
            None => None,
            Some(name) => Some(TokenAuthMethod::parse(&name).ok_or_else(|| {
                Error::invalid(
                    "credentials.token_endpoint_auth_method must be one of: client_secret_basic, \
                     client_secret_post, private_key_jwt, none",
                )
            })?),
        };
        let private_key = match text("private_key")? {
            None => None,
            Some(pem) => {
                check_pem("private_key", &pem, "PRIVATE KEY-----")?;
                Some(Secret(Zeroizing::new(pem)))
            }
        };
        let expires_at = match credentials.get("expires_at") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_i64().ok_or_else(|| {
                Error::invalid("credentials.expires_at must be seconds since the Unix epoch")
            })?),
        };
        let credential = Self {
            grant,
            client_id: bounded("client_id")?,
            client_secret: secret("client_secret")?,
            private_key,
            client_metadata_url: url("client_metadata_url")?,
            token_endpoint_auth_method: method,
            scope: bounded("scope")?,
            issuer: url("issuer")?,
            token_endpoint: url("token_endpoint")?,
            resource: bounded("resource")?,
            access_token: secret("access_token")?,
            refresh_token: secret("refresh_token")?,
            expires_at,
        };
        credential.check()?;
        Ok(credential)
    }

    /// What every credential must hold whatever its origin.
    fn check(&self) -> Result<(), Error> {
        if self
            .client_metadata_url
            .as_deref()
            .is_some_and(|u| !u.starts_with("https://"))
        {
            return Err(Error::invalid(
                "credentials.client_metadata_url must be an https:// URL (it is the client's id)",
            ));
        }
        if self.grant == OAuthGrant::ClientCredentials {
            if self.client_id.is_none() {
                return Err(Error::invalid(
                    "client_credentials needs credentials.client_id (a client registered with the authorization server)",
                ));
            }
            if self.client_secret.is_none() && self.private_key.is_none() {
                return Err(Error::invalid(
                    "client_credentials needs credentials.client_secret or credentials.private_key",
                ));
            }
        }
        if self.token_endpoint_auth_method == Some(TokenAuthMethod::PrivateKeyJwt)
            && self.private_key.is_none()
        {
            return Err(Error::invalid(
                "token_endpoint_auth_method private_key_jwt needs credentials.private_key",
            ));
        }
        Ok(())
    }

    /// True when the access token is missing or expires within `margin_secs` of `now`
    /// (seconds since the Unix epoch).
    pub fn needs_renewal(&self, now: i64, margin_secs: i64) -> bool {
        self.access_token.is_none()
            || self
                .expires_at
                .is_some_and(|at| at.saturating_sub(margin_secs) <= now)
    }

    /// True when tokens can be had without a person: a refresh token, or client credentials.
    pub fn renews_alone(&self) -> bool {
        self.grant == OAuthGrant::ClientCredentials || self.refresh_token.is_some()
    }

    /// The credentials object, as [`Self::parse`] reads it.
    pub(super) fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("grant_type".into(), json!(self.grant.as_str()));
        let mut put = |k: &str, v: Option<&str>| {
            if let Some(v) = v {
                map.insert(k.into(), Value::String(v.to_owned()));
            }
        };
        put("client_id", self.client_id.as_deref());
        put(
            "client_secret",
            self.client_secret.as_ref().map(Secret::expose),
        );
        put("private_key", self.private_key.as_ref().map(Secret::expose));
        put("client_metadata_url", self.client_metadata_url.as_deref());
        put(
            "token_endpoint_auth_method",
            self.token_endpoint_auth_method.map(TokenAuthMethod::as_str),
        );
        put("scope", self.scope.as_deref());
        put("issuer", self.issuer.as_deref());
        put("token_endpoint", self.token_endpoint.as_deref());
        put("resource", self.resource.as_deref());
        put(
            "access_token",
            self.access_token.as_ref().map(Secret::expose),
        );
        put(
            "refresh_token",
            self.refresh_token.as_ref().map(Secret::expose),
        );
        if let Some(at) = self.expires_at {
            map.insert("expires_at".into(), json!(at));
        }
        Value::Object(map)
    }
}

/// An OAuth endpoint's URL: https, or http to this machine.
pub fn check_url(field: &str, url: &str) -> Result<(), Error> {
    let https = url.starts_with("https://");
    if !(https || url.starts_with("http://") && is_loopback(url))
        || url.contains(char::is_whitespace)
    {
        return Err(Error::invalid(format!(
            "credentials.{field} must be an https:// URL (http:// only to 127.0.0.1, [::1] or localhost)"
        )));
    }
    Ok(())
}
