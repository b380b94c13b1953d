//! Finding a server's authorization server: its protected-resource metadata (RFC 9728, from the
//! challenge or the well-known locations, path first), then the authorization server's metadata
//! (RFC 8414 and OpenID Connect Discovery, with the path-aware locations), its issuer checked.
//! A server with no protected-resource metadata is taken as its own authorization server (the
//! MCP 2025-03-26 arrangement).

use quarry_domain::{Endpoint, ServerSpec};
use quarry_ports::{Challenge, OAuthFailure};
use reqwest::{StatusCode, Url};
use serde_json::Value;

use super::{Call, list, text, unavailable};

/// What discovery found.
#[derive(Debug, Clone)]
pub(crate) struct Discovered {
    /// The resource to ask tokens for (RFC 8707).
    pub(crate) resource: String,
    /// The scopes the protected-resource metadata lists.
    pub(crate) scopes_supported: Vec<String>,
    /// The authorization server.
    pub(crate) server: AuthServer,
}

/// An authorization server's metadata, as far as Quarry uses it.
#[derive(Debug, Clone)]
pub(crate) struct AuthServer {
    pub(crate) issuer: String,
    pub(crate) authorization_endpoint: String,
    pub(crate) token_endpoint: String,
    pub(crate) registration_endpoint: Option<String>,
    pub(crate) code_challenge_methods: Vec<String>,
    pub(crate) token_auth_methods: Vec<String>,
    pub(crate) client_id_metadata_documents: bool,
    pub(crate) iss_parameter: bool,
}

/// The server's URL (HTTP servers only have OAuth).
pub(crate) fn server_url(spec: &ServerSpec) -> Result<Url, OAuthFailure> {
    match &spec.endpoint {
        Endpoint::Http { url } => {
            Url::parse(url).map_err(|_| unavailable(format!("{url} is not a URL")))
        }
        Endpoint::Stdio { .. } => Err(unavailable(format!(
            "server '{}' is a stdio program: OAuth is for HTTP servers",
            spec.name
        ))),
    }
}

/// The challenge in a `WWW-Authenticate` header value: its `scope` and `resource_metadata`
/// parameters, and whether it says `insufficient_scope`.
pub(crate) fn challenge_of(header: &str, status_forbidden: bool) -> Challenge {
    Challenge {
        insufficient_scope: status_forbidden
            || param(header, "error").as_deref() == Some("insufficient_scope"),
        scope: param(header, "scope"),
        resource_metadata: param(header, "resource_metadata"),
    }
}

/// One auth-param of a challenge (`name="value"` or `name=token`).
fn param(header: &str, name: &str) -> Option<String> {
    let lower = header.to_ascii_lowercase();
    let mut from = 0;
    while let Some(found) = lower[from..].find(name) {
        let at = from + found;
        from = at + name.len();
        let before = lower[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let rest = header[from..].trim_start();
        let Some(rest) = rest.strip_prefix('=') else {
            continue;
        };
        let rest = rest.trim_start();
        let value = match rest.strip_prefix('"') {
            Some(quoted) => quoted.split('"').next().unwrap_or_default().to_owned(),
            None => rest.split([',', ' ']).next().unwrap_or_default().to_owned(),
        };
        return (!value.is_empty()).then_some(value);
    }
    None
}

/// Where the protected-resource metadata may be, in the order the spec gives.
fn metadata_locations(server: &Url, challenge: Option<&Challenge>) -> Vec<String> {
    let mut urls = Vec::new();
    if let Some(url) = challenge.and_then(|c| c.resource_metadata.clone()) {
        urls.push(url);
    }
    let origin = server.origin().ascii_serialization();
    let path = server.path().trim_end_matches('/');
    if !path.is_empty() {
        urls.push(format!(
            "{origin}/.well-known/oauth-protected-resource{path}"
        ));
    }
    urls.push(format!("{origin}/.well-known/oauth-protected-resource"));
    urls
}

/// Where an authorization server's metadata may be (RFC 8414 §3.1, OpenID Connect, and the
/// path-appended OpenID form).
fn server_locations(issuer: &Url) -> Vec<String> {
    let origin = issuer.origin().ascii_serialization();
    let path = issuer.path().trim_end_matches('/');
    if path.is_empty() {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server"),
            format!("{origin}/.well-known/openid-configuration"),
        ]
    } else {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{origin}/.well-known/openid-configuration{path}"),
            format!("{origin}{path}/.well-known/openid-configuration"),
        ]
    }
}

/// True when `resource` (from metadata) names `server`: the same origin, and a path that is
/// the server's or a parent of it (UC-2).
fn names_server(resource: &str, server: &Url) -> bool {
    let Ok(resource) = Url::parse(resource) else {
        return false;
    };
    let (rp, sp) = (
        resource.path().trim_end_matches('/'),
        server.path().trim_end_matches('/'),
    );
    resource.origin() == server.origin()
        && resource.fragment().is_none()
        && (sp == rp || sp.starts_with(&format!("{rp}/")))
}

fn same_issuer(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// Discovers the authorization server of `spec`'s server.
pub(crate) async fn discover(
    spec: &ServerSpec,
    challenge: Option<&Challenge>,
) -> Result<Discovered, OAuthFailure> {
    let server = server_url(spec)?;
    let mut metadata = None;
    for location in metadata_locations(&server, challenge) {
        let answer = Call::get(spec, &location).send().await?;
        if answer.status == StatusCode::OK && answer.body.is_object() {
            metadata = Some(answer.body);
            break;
        }
    }
    let Some(metadata) = metadata else {
        // No protected-resource metadata: the server is its own authorization server.
        let origin = server.origin().ascii_serialization();
        let issuer =
            Url::parse(&origin).map_err(|_| unavailable("the server's origin is not a URL"))?;
        return Ok(Discovered {
            resource: canonical(&server),
            scopes_supported: Vec::new(),
            server: authorization_server(spec, &issuer, false).await?,
        });
    };
    let resource = text(&metadata, "resource")
        .ok_or_else(|| unavailable("the server's protected-resource metadata names no resource"))?;
    if !names_server(resource, &server) {
        return Err(unavailable(format!(
            "the protected-resource metadata is for {}, not for this server ({})",
            resource,
            canonical(&server)
        )));
    }
    let issuer = list(&metadata, "authorization_servers")
        .into_iter()
        .next()
        .ok_or_else(|| {
            unavailable("the protected-resource metadata names no authorization server")
        })?;
    let issuer_url =
        Url::parse(&issuer).map_err(|_| unavailable(format!("{issuer} is not a URL")))?;
    Ok(Discovered {
        resource: resource.to_owned(),
        scopes_supported: list(&metadata, "scopes_supported"),
        server: authorization_server(spec, &issuer_url, true).await?,
    })
}

/// The server's URL as a resource indicator: no fragment, no trailing slash.
pub(crate) fn canonical(server: &Url) -> String {
    let mut url = server.clone();
    url.set_fragment(None);
    url.as_str().trim_end_matches('/').to_owned()
}

async fn authorization_server(
    spec: &ServerSpec,
    issuer: &Url,
    from_resource_metadata: bool,
) -> Result<AuthServer, OAuthFailure> {
    let expected = issuer.as_str();
    for location in server_locations(issuer) {
        let answer = Call::get(spec, &location).send().await?;
        if answer.status != StatusCode::OK || !answer.body.is_object() {
            continue;
        }
        return parse_server(&answer.body, expected, from_resource_metadata);
    }
    if from_resource_metadata {
        return Err(unavailable(format!(
            "the authorization server {expected} publishes no metadata"
        )));
    }
    // The MCP 2025-03-26 fallback: the usual paths at the server's origin.
    let origin = issuer.origin().ascii_serialization();
    Ok(AuthServer {
        issuer: origin.clone(),
        authorization_endpoint: format!("{origin}/authorize"),
        token_endpoint: format!("{origin}/token"),
        registration_endpoint: Some(format!("{origin}/register")),
        code_challenge_methods: vec!["S256".into()],
        token_auth_methods: Vec::new(),
        client_id_metadata_documents: false,
        iss_parameter: false,
    })
}

fn parse_server(body: &Value, expected: &str, checked: bool) -> Result<AuthServer, OAuthFailure> {
    let issuer = text(body, "issuer")
        .ok_or_else(|| unavailable("the authorization server's metadata names no issuer"))?;
    if checked && !same_issuer(issuer, expected) {
        return Err(unavailable(format!(
            "the authorization server's metadata says its issuer is {issuer}, not {expected}"
        )));
    }
    let endpoint = |field: &str| -> Result<String, OAuthFailure> {
        let url = text(body, field).ok_or_else(|| {
            unavailable(format!(
                "the authorization server's metadata has no {field}"
            ))
        })?;
        quarry_domain::check_url(field, url).map_err(|e| unavailable(e.message()))?;
        Ok(url.to_owned())
    };
    Ok(AuthServer {
        issuer: issuer.to_owned(),
        authorization_endpoint: endpoint("authorization_endpoint")?,
        token_endpoint: endpoint("token_endpoint")?,
        registration_endpoint: text(body, "registration_endpoint").map(str::to_owned),
        code_challenge_methods: list(body, "code_challenge_methods_supported"),
        token_auth_methods: list(body, "token_endpoint_auth_methods_supported"),
        client_id_metadata_documents: body
            .get("client_id_metadata_document_supported")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        iss_parameter: body
            .get("authorization_response_iss_parameter_supported")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    })
}

/// Asks the server with no token, for its challenge.
pub(crate) async fn ask_for_challenge(
    spec: &ServerSpec,
) -> Result<Option<Challenge>, OAuthFailure> {
    let server = server_url(spec)?;
    let mut call = Call::get(spec, server.as_str());
    call.method = reqwest::Method::POST;
    call.headers = vec![(
        reqwest::header::ACCEPT,
        "application/json, text/event-stream".into(),
    )];
    call.json = Some(serde_json::json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "quarry", "version": env!("CARGO_PKG_VERSION")}}
    }));
    // The server itself is the operator's to choose; its OAuth endpoints are what UC-1 guards.
    let mut spec = spec.clone();
    spec.oauth_private_network = true;
    call.spec = &spec;
    let answer = call.send().await?;
    Ok(match (answer.status, answer.challenge) {
        (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN, Some(h)) => {
            Some(challenge_of(&h, answer.status == StatusCode::FORBIDDEN))
        }
        (StatusCode::UNAUTHORIZED, None) => Some(Challenge::default()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_challenge_gives_its_parameters() {
        let c = challenge_of(
            r#"Bearer error="insufficient_scope", scope="a b", resource_metadata="https://x/.well-known/oauth-protected-resource/mcp""#,
            true,
        );
        assert!(c.insufficient_scope);
        assert_eq!(c.scope.as_deref(), Some("a b"));
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("https://x/.well-known/oauth-protected-resource/mcp")
        );
        let plain = challenge_of("Bearer realm=x, scope=read", false);
        assert!(!plain.insufficient_scope);
        assert_eq!(plain.scope.as_deref(), Some("read"));
        assert_eq!(plain.resource_metadata, None);
    }

    #[test]
    fn metadata_is_looked_for_path_first() {
        let url = Url::parse("https://h.example/tenant/mcp").unwrap();
        assert_eq!(
            metadata_locations(&url, None),
            [
                "https://h.example/.well-known/oauth-protected-resource/tenant/mcp",
                "https://h.example/.well-known/oauth-protected-resource"
            ]
        );
        let issuer = Url::parse("https://as.example/tenant1").unwrap();
        assert_eq!(
            server_locations(&issuer),
            [
                "https://as.example/.well-known/oauth-authorization-server/tenant1",
                "https://as.example/.well-known/openid-configuration/tenant1",
                "https://as.example/tenant1/.well-known/openid-configuration"
            ]
        );
    }

    #[test]
    fn a_resource_names_the_server_or_a_parent_of_it() {
        let server = Url::parse("https://h.example/api/mcp").unwrap();
        assert!(names_server("https://h.example/api/mcp", &server));
        assert!(names_server("https://h.example/api/mcp/", &server));
        assert!(names_server("https://h.example", &server));
        assert!(names_server("https://h.example/api", &server));
        assert!(!names_server("https://h.example/ap", &server));
        assert!(!names_server("https://evil.example/api/mcp", &server));
        assert!(!names_server("http://h.example/api/mcp", &server));
        assert!(!names_server("https://h.example/other", &server));
    }
}
