//! Who a request is from, and whether what it was granted covers what it asks. A bearer
//! credential is an API key (its SHA-256 names an agent, which may call every tool) or, with a
//! resource server configured, a token the verifier accepts (its subject is the agent, its scopes
//! what it may call). Without one: 401 with the RFC 9728 challenge. A `tools/call` (or a native
//! resources method) whose scopes the token lacks: one 403 `insufficient_scope` naming every
//! scope the call needs. The protected-resource metadata is served to anyone.

use std::{collections::BTreeSet, sync::Arc};

use axum::{
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use quarry_domain::{Principal, Secret};
use quarry_ports::{BearerRefused, BearerVerifier, ContentHasher};
use serde_json::json;

use super::{
    message::{Call, Message},
    refuse,
};
use crate::catalogue::{RESOURCES_SCOPE, required_scope, tool_scopes};

/// The well-known path of protected-resource metadata (RFC 9728 §3).
pub(super) const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// Quarry as an OAuth 2.1 resource server.
#[derive(Debug, Clone)]
pub struct ResourceServerOptions {
    /// Validates tokens.
    pub verifier: Arc<dyn BearerVerifier>,
    /// This resource's identifier (the tokens' audience), e.g. `https://quarry.example.com/mcp`.
    pub resource: String,
    /// The authorization servers that issue tokens for it.
    pub authorization_servers: Vec<String>,
    /// Scopes every request needs, beside each tool's own.
    pub required_scopes: Vec<String>,
}

/// What a caller was granted: every tool (API keys, or no authentication on loopback), or the
/// token's scopes.
pub(crate) type Granted = Option<Arc<BTreeSet<String>>>;

#[derive(Debug)]
pub(super) struct Authenticator {
    pub(super) keys: std::collections::HashMap<String, Principal>,
    pub(super) default: Principal,
    pub(super) hasher: Arc<dyn ContentHasher>,
    pub(super) oauth: Option<ResourceServerOptions>,
}

/// A value safe inside a quoted auth-param.
fn quoted(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control() && *c != '"' && *c != '\\')
        .collect()
}

impl Authenticator {
    /// Whether requests must carry a credential.
    fn required(&self) -> bool {
        !self.keys.is_empty() || self.oauth.is_some()
    }

    /// Where the metadata is: the well-known path with the resource's path after it.
    fn metadata_url(&self) -> Option<String> {
        let oauth = self.oauth.as_ref()?;
        let url = url::Url::parse(&oauth.resource).ok()?;
        let path = url.path().trim_end_matches('/');
        Some(format!(
            "{}{METADATA_PATH}{path}",
            url.origin().ascii_serialization()
        ))
    }

    /// Every scope this resource knows, the ones every request needs first.
    fn scopes_supported(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .oauth
            .iter()
            .flat_map(|o| o.required_scopes.iter().cloned())
            .collect();
        for s in tool_scopes() {
            if !all.iter().any(|a| a == s) {
                all.push(s.to_owned());
            }
        }
        all
    }

    /// The RFC 9728 document, for a request to one of its paths.
    pub(super) fn metadata(&self, path: &str) -> Option<Response> {
        let oauth = self.oauth.as_ref()?;
        let suffix = path.strip_prefix(METADATA_PATH)?;
        let own = url::Url::parse(&oauth.resource).ok()?;
        if !(suffix.is_empty() || suffix == own.path().trim_end_matches('/')) {
            return None;
        }
        let document = json!({
            "resource": oauth.resource,
            "authorization_servers": oauth.authorization_servers,
            "scopes_supported": self.scopes_supported(),
            "bearer_methods_supported": ["header"],
            "resource_name": "Quarry",
        });
        Some(
            (
                [
                    (header::CONTENT_TYPE, "application/json"),
                    (header::CACHE_CONTROL, "max-age=300"),
                ],
                document.to_string(),
            )
                .into_response(),
        )
    }

    /// The 401 for a request without a usable credential; `error` when one was presented.
    fn challenge(&self, error: Option<&str>) -> Response {
        let Some(metadata) = self.metadata_url() else {
            let mut r = refuse(
                StatusCode::UNAUTHORIZED,
                "an API key is required: Authorization: Bearer <key>",
            );
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"quarry\""),
            );
            return r;
        };
        let mut scope: Vec<String> = self
            .oauth
            .iter()
            .flat_map(|o| o.required_scopes.iter().cloned())
            .collect();
        if !scope.iter().any(|s| s == RESOURCES_SCOPE) {
            scope.push(RESOURCES_SCOPE.to_owned());
        }
        let mut value = format!(
            "Bearer resource_metadata=\"{}\", scope=\"{}\"",
            quoted(&metadata),
            quoted(&scope.join(" "))
        );
        let why = match error {
            Some(why) => {
                value.push_str(&format!(
                    ", error=\"invalid_token\", error_description=\"{}\"",
                    quoted(why)
                ));
                format!("the bearer token was refused: {why}")
            }
            None => "a bearer token is required: Authorization: Bearer <token>".to_owned(),
        };
        let mut r = refuse(StatusCode::UNAUTHORIZED, &why);
        if let Ok(v) = HeaderValue::from_str(&value) {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        r
    }

    /// The one 403 for a call that needs `needed` (all of it named, held or not).
    fn insufficient(&self, needed: &BTreeSet<String>, missing: &[&String]) -> Response {
        let scope = needed.iter().cloned().collect::<Vec<_>>().join(" ");
        let mut value = format!(
            "Bearer error=\"insufficient_scope\", scope=\"{}\"",
            quoted(&scope)
        );
        if let Some(metadata) = self.metadata_url() {
            value.push_str(&format!(", resource_metadata=\"{}\"", quoted(&metadata)));
        }
        let lacking = missing
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        value.push_str(&format!(
            ", error_description=\"this call needs the scopes {}; the token lacks {}\"",
            quoted(&scope),
            quoted(&lacking)
        ));
        let mut r = refuse(
            StatusCode::FORBIDDEN,
            &format!("insufficient_scope: this call needs {scope} (the token lacks {lacking})"),
        );
        if let Ok(v) = HeaderValue::from_str(&value) {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        r
    }

    /// The agent a request's credential names and what it was granted, or the 401.
    pub(super) async fn identify(
        &self,
        headers: &HeaderMap,
    ) -> Result<(Principal, Granted), Response> {
        if !self.required() {
            return Ok((self.default.clone(), None));
        }
        let Some(presented) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, token) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            })
            .filter(|t| !t.is_empty())
        else {
            return Err(self.challenge(None));
        };
        let digest = self.hasher.sha256(presented.as_bytes()).hex();
        if let Some(agent) = self.keys.get(&digest) {
            return Ok((agent.clone(), None));
        }
        let Some(oauth) = &self.oauth else {
            return Err(self.challenge(Some("not a known API key")));
        };
        let Ok(token) = Secret::parse("bearer token", presented.to_owned()) else {
            return Err(self.challenge(Some("the token is malformed")));
        };
        match oauth.verifier.verify(&token).await {
            Ok(grant) => Ok((grant.agent, Some(Arc::new(grant.scopes)))),
            Err(refused) => {
                let why = match &refused {
                    BearerRefused::Invalid(why) | BearerRefused::Unverifiable(why) => why,
                };
                tracing::info!(reason = %why, "refused a bearer token");
                Err(self.challenge(Some(why)))
            }
        }
    }

    /// The 403 when `granted` does not cover what `message` needs.
    pub(super) fn uncovered(
        &self,
        granted: &BTreeSet<String>,
        message: &Message,
    ) -> Option<Response> {
        let needed: BTreeSet<String> = message.calls.iter().flat_map(|c| self.needed(c)).collect();
        let missing: Vec<&String> = needed.iter().filter(|s| !granted.contains(*s)).collect();
        (!missing.is_empty()).then(|| self.insufficient(&needed, &missing))
    }

    /// What a JSON-RPC message needs: the scopes every request needs, and the tool's (or, for
    /// MCP's own resources methods, the read scope).
    fn needed(&self, call: &Call) -> BTreeSet<String> {
        let mut needed: BTreeSet<String> = self
            .oauth
            .iter()
            .flat_map(|o| o.required_scopes.iter().cloned())
            .collect();
        let own = match call.method.as_deref().unwrap_or_default() {
            "tools/call" => call.tool.as_deref().and_then(required_scope),
            m if m.starts_with("resources/") => Some(RESOURCES_SCOPE),
            _ => None,
        };
        needed.extend(own.map(str::to_owned));
        needed
    }
}
