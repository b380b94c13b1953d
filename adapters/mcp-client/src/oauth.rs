//! OAuth 2 toward upstream servers, as the MCP authorization spec (2025-11-25) describes it for
//! clients: discovery from a 401 and RFC 9728 protected-resource metadata, RFC 8414 / OpenID
//! authorization-server metadata, resource indicators (RFC 8707), PKCE S256 with `state` and an
//! exact loopback redirect URI, the issuer checked (RFC 9207), client ID metadata documents,
//! dynamic registration or a pre-registered client, client credentials, and refresh.
//!
//! Every request to an OAuth endpoint is pinned to the address that was checked (`address.rs`),
//! follows no redirect (so no credential reaches another origin), and reads a bounded body.

use std::time::Duration;

use async_trait::async_trait;
use quarry_domain::{OAuthCredential, OAuthGrant, ServerSpec, sanitize_label};
use quarry_ports::{Browser, Challenge, OAuthClient, OAuthFailure};
use reqwest::{Method, StatusCode, Url, header};
use serde_json::Value;

mod address;
mod discovery;
mod login;
mod token;

pub(crate) use discovery::challenge_of;

/// The largest OAuth response read.
const MAX_BODY: usize = 256 * 1024;

/// OAuth 2 over reqwest.
#[derive(Debug, Clone)]
pub struct OAuthHttp {
    /// How long a person has to approve a sign-in.
    login_timeout: Duration,
}

impl OAuthHttp {
    /// A client whose sign-ins wait up to `login_timeout` for the person to approve.
    pub fn new(login_timeout: Duration) -> Self {
        Self { login_timeout }
    }
}

/// One request to an OAuth endpoint of `spec`'s server.
pub(crate) struct Call<'a> {
    pub(crate) spec: &'a ServerSpec,
    pub(crate) method: Method,
    pub(crate) url: &'a str,
    pub(crate) headers: Vec<(header::HeaderName, String)>,
    pub(crate) form: Option<Vec<(&'static str, String)>>,
    pub(crate) json: Option<Value>,
}

/// What an OAuth endpoint answered: its status and its body as JSON (Null when it is not).
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) body: Value,
    pub(crate) challenge: Option<String>,
}

fn unavailable(what: impl std::fmt::Display) -> OAuthFailure {
    OAuthFailure::Unavailable(sanitize_label(&what.to_string()))
}

impl Call<'_> {
    pub(crate) fn get<'a>(spec: &'a ServerSpec, url: &'a str) -> Call<'a> {
        Call {
            spec,
            method: Method::GET,
            url,
            headers: vec![(header::ACCEPT, "application/json".into())],
            form: None,
            json: None,
        }
    }

    /// Sends it, to the checked address only, and reads at most [`MAX_BODY`] bytes back.
    pub(crate) async fn send(self) -> Result<Answer, OAuthFailure> {
        let url =
            Url::parse(self.url).map_err(|_| unavailable(format!("{} is not a URL", self.url)))?;
        if !matches!(url.scheme(), "https" | "http") {
            return Err(unavailable(format!("{} is not an http(s) URL", self.url)));
        }
        if url.scheme() == "http"
            && !matches!(url.host_str(), Some("127.0.0.1" | "[::1]" | "localhost"))
        {
            return Err(unavailable(format!(
                "{} is plain http:// to another machine; OAuth endpoints must be https://",
                self.url
            )));
        }
        let (host, address) = address::resolve(&url, self.spec.oauth_private_network).await?;
        let client = crate::connector::tls_builder(self.spec)
            .map_err(unavailable)?
            .resolve(&host, address)
            .timeout(Duration::from_secs(15))
            .build()
            .map_err(|e| unavailable(format!("cannot build an HTTP client: {e}")))?;
        let mut request = client.request(self.method, url.clone());
        for (name, value) in self.headers {
            let mut value = header::HeaderValue::from_str(&value)
                .map_err(|_| unavailable("a header value cannot be sent"))?;
            value.set_sensitive(true);
            request = request.header(name, value);
        }
        if let Some(form) = self.form {
            let body = url::form_urlencoded::Serializer::new(String::new())
                .extend_pairs(form.iter().map(|(k, v)| (*k, v.as_str())))
                .finish();
            request = request
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(body);
        }
        if let Some(json) = self.json {
            request = request.json(&json);
        }
        let response = request
            .send()
            .await
            .map_err(|e| unavailable(format!("{} cannot be reached: {}", url, without_url(&e))))?;
        let status = response.status();
        let challenge = response
            .headers()
            .get(header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let mut body = Vec::new();
        let mut response = response;
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| unavailable(format!("{url}: {}", without_url(&e))))?
        {
            if body.len() + chunk.len() > MAX_BODY {
                return Err(unavailable(format!(
                    "{url} answered more than {MAX_BODY} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
        Ok(Answer {
            status,
            body,
            challenge,
        })
    }
}

/// reqwest's message without the URL it appends (callers name the URL once).
fn without_url(e: &reqwest::Error) -> String {
    let mut e = e.to_string();
    if let Some(at) = e.find(" for url (") {
        e.truncate(at);
    }
    e
}

/// A string field of a JSON object.
pub(crate) fn text<'a>(body: &'a Value, field: &str) -> Option<&'a str> {
    body.get(field)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// A list of strings of a JSON object (absent: empty).
pub(crate) fn list(body: &Value, field: &str) -> Vec<String> {
    body.get(field)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The union of two space-separated scope lists, first-seen order, no repeats.
pub(crate) fn union_scopes(a: Option<&str>, b: Option<&str>) -> Option<String> {
    let mut scopes: Vec<&str> = Vec::new();
    for s in a.into_iter().chain(b).flat_map(str::split_whitespace) {
        if !scopes.contains(&s) {
            scopes.push(s);
        }
    }
    (!scopes.is_empty()).then(|| scopes.join(" "))
}

#[async_trait]
impl OAuthClient for OAuthHttp {
    async fn renew(
        &self,
        spec: &ServerSpec,
        credential: &OAuthCredential,
        challenge: Option<&Challenge>,
    ) -> Result<OAuthCredential, OAuthFailure> {
        let wants_more = challenge.filter(|c| c.insufficient_scope);
        match credential.grant {
            OAuthGrant::AuthorizationCode if wants_more.is_some() => {
                Err(OAuthFailure::NeedsLogin(format!(
                    "the server needs scope '{}', which only a new sign-in can grant",
                    sanitize_label(
                        wants_more
                            .and_then(|c| c.scope.as_deref())
                            .unwrap_or("more")
                    )
                )))
            }
            OAuthGrant::AuthorizationCode if credential.refresh_token.is_none() => {
                Err(OAuthFailure::NeedsLogin(
                    if credential.access_token.is_some() {
                        "the access token was refused or expired, and there is no refresh token"
                    } else {
                        "no one has signed in yet"
                    }
                    .into(),
                ))
            }
            OAuthGrant::AuthorizationCode => token::refresh(spec, credential, challenge).await,
            OAuthGrant::ClientCredentials => {
                token::client_credentials(spec, credential, challenge).await
            }
        }
    }

    async fn authorize(
        &self,
        spec: &ServerSpec,
        credential: &OAuthCredential,
        challenge: Option<&Challenge>,
        browser: &dyn Browser,
    ) -> Result<OAuthCredential, OAuthFailure> {
        if credential.grant == OAuthGrant::ClientCredentials {
            return token::client_credentials(spec, credential, challenge).await;
        }
        login::authorize(spec, credential, challenge, browser, self.login_timeout).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_unite_without_repeats() {
        assert_eq!(
            union_scopes(Some("a b"), Some("b c")).as_deref(),
            Some("a b c")
        );
        assert_eq!(union_scopes(None, Some("x")).as_deref(), Some("x"));
        assert_eq!(union_scopes(None, None), None);
        assert_eq!(union_scopes(Some(" "), None), None);
    }
}

/// A browser for authorization servers that approve without a person (test servers, some
/// machine-to-machine setups): it GETs the authorization URL and follows its redirects to
/// Quarry's loopback listener, sending no credential anywhere.
#[derive(Debug, Default, Clone, Copy)]
pub struct Visitor;

#[async_trait]
impl Browser for Visitor {
    async fn open(&self, url: &str) -> Result<(), String> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::limited(10))
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| e.to_string())?;
        let response = client.get(url).send().await.map_err(|e| without_url(&e))?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(format!(
                "the authorization URL answered HTTP {}",
                response.status().as_u16()
            ))
        }
    }
}
