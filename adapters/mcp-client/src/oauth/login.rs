//! The authorization-code flow with PKCE: a loopback listener on 127.0.0.1 takes the redirect,
//! whose `state` (UC-3) and `iss` (RFC 9207, UC-12) must be the ones expected; the code is then
//! exchanged with the verifier, for the resource discovery named.

use std::time::Duration;

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use quarry_domain::{OAuthCredential, Secret, ServerSpec, TokenAuthMethod, sanitize_label};
use quarry_ports::{Browser, Challenge, OAuthFailure};
use reqwest::{Method, Url};
use serde_json::json;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
};

use super::{
    Call,
    discovery::{self, AuthServer, Discovered},
    text, token, unavailable, union_scopes,
};

/// The path the authorization server redirects to.
const CALLBACK: &str = "/callback";

/// The scope to ask for (MCP's scope selection): the challenge's, else everything the
/// protected-resource metadata lists, else none; what the credential asked for before is kept
/// (a step-up adds to it).
fn scope_for(
    credential: &OAuthCredential,
    challenge: Option<&Challenge>,
    found: &Discovered,
) -> Option<String> {
    let offered = challenge
        .and_then(|c| c.scope.clone())
        .or_else(|| (!found.scopes_supported.is_empty()).then(|| found.scopes_supported.join(" ")));
    union_scopes(credential.scope.as_deref(), offered.as_deref())
}

/// The client to authorize as: pre-registered, the metadata document's URL where the server
/// supports them, else dynamically registered.
async fn client_for(
    spec: &ServerSpec,
    credential: &OAuthCredential,
    server: &AuthServer,
    redirect_uri: &str,
) -> Result<OAuthCredential, OAuthFailure> {
    let mut client = credential.clone();
    if client.client_id.is_some() {
        return Ok(client);
    }
    if let Some(url) = &credential.client_metadata_url
        && server.client_id_metadata_documents
    {
        client.client_id = Some(url.clone());
        client.token_endpoint_auth_method = Some(TokenAuthMethod::None);
        return Ok(client);
    }
    let Some(registration) = &server.registration_endpoint else {
        return Err(OAuthFailure::NeedsLogin(
            "the authorization server offers no dynamic client registration: register Quarry \
             with it and give the client id (client_id)"
                .into(),
        ));
    };
    let method = token::method_for(
        &client_with_secret_placeholder(&client),
        &server.token_auth_methods,
    );
    let answer = Call {
        spec,
        method: Method::POST,
        url: registration,
        headers: vec![(reqwest::header::ACCEPT, "application/json".into())],
        form: None,
        json: Some(json!({
            "client_name": "Quarry",
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": method.as_str(),
        })),
    }
    .send()
    .await?;
    if !answer.status.is_success() {
        return Err(unavailable(format!(
            "dynamic client registration answered HTTP {}",
            answer.status.as_u16()
        )));
    }
    let id = text(&answer.body, "client_id")
        .ok_or_else(|| unavailable("the registration response has no client_id"))?;
    client.client_id = Some(id.to_owned());
    client.client_secret = text(&answer.body, "client_secret")
        .map(|s| Secret::parse("client_secret", s.to_owned()))
        .transpose()
        .map_err(|e| unavailable(e.message()))?;
    client.token_endpoint_auth_method = text(&answer.body, "token_endpoint_auth_method")
        .and_then(TokenAuthMethod::parse)
        .or_else(|| Some(token::method_for(&client, &server.token_auth_methods)));
    Ok(client)
}

/// A confidential client asks to be registered as one: the method is chosen as if it had a
/// secret (the registration gives it one).
fn client_with_secret_placeholder(client: &OAuthCredential) -> OAuthCredential {
    let mut c = client.clone();
    if c.private_key.is_none() {
        c.client_secret = Secret::parse("client_secret", "placeholder".into()).ok();
    }
    c
}

/// What the redirect brought.
struct Redirect {
    code: Option<String>,
    state: Option<String>,
    iss: Option<String>,
    error: Option<String>,
}

/// Waits for the authorization server's redirect on `listener`, answering the browser.
async fn redirect(listener: &TcpListener) -> Result<Redirect, OAuthFailure> {
    loop {
        let (mut stream, _) = listener
            .accept()
            .await
            .map_err(|e| unavailable(format!("the loopback listener failed: {e}")))?;
        let mut buf = vec![0u8; 16 * 1024];
        let mut read = 0;
        // The request line is all that is needed; read until the headers end or the buffer fills.
        while read < buf.len() {
            let n =
                match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf[read..]))
                    .await
                {
                    Ok(Ok(n)) => n,
                    _ => 0,
                };
            if n == 0 {
                break;
            }
            read += n;
            if buf[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
        let head = String::from_utf8_lossy(&buf[..read]);
        let target = head
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("GET "))
            .and_then(|l| l.split(' ').next())
            .unwrap_or_default()
            .to_owned();
        let Ok(url) = Url::parse(&format!("http://127.0.0.1{target}")) else {
            let _ = stream
                .write_all(
                    b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                )
                .await;
            continue;
        };
        if url.path() != CALLBACK {
            let _ = stream
                .write_all(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                )
                .await;
            continue;
        }
        let get = |name: &str| {
            url.query_pairs()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.into_owned())
        };
        let found = Redirect {
            code: get("code"),
            state: get("state"),
            iss: get("iss"),
            error: get("error").map(|e| {
                let detail = get("error_description")
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default();
                sanitize_label(&format!("{e}{detail}"))
            }),
        };
        let page = if found.code.is_some() {
            "Quarry is signed in. You can close this tab."
        } else {
            "Quarry was not signed in. See the terminal for why."
        };
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
            page.len()
        );
        let _ = stream.write_all(response.as_bytes()).await;
        return Ok(found);
    }
}

/// The S256 challenge of a PKCE verifier.
fn s256(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(ring::digest::digest(
        &ring::digest::SHA256,
        verifier.as_bytes(),
    ))
}

/// Runs the flow; see the module.
pub(super) async fn authorize(
    spec: &ServerSpec,
    credential: &OAuthCredential,
    challenge: Option<&Challenge>,
    browser: &dyn Browser,
    timeout: Duration,
) -> Result<OAuthCredential, OAuthFailure> {
    let challenge = match challenge {
        Some(c) => Some(c.clone()),
        None => discovery::ask_for_challenge(spec).await?,
    };
    let found = discovery::discover(spec, challenge.as_ref()).await?;
    let server = &found.server;
    if !server.code_challenge_methods.iter().any(|m| m == "S256") {
        return Err(unavailable(
            "the authorization server does not say it supports PKCE with S256, which MCP requires",
        ));
    }
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| unavailable(format!("cannot listen on 127.0.0.1 for the redirect: {e}")))?;
    let port = listener
        .local_addr()
        .map_err(|e| unavailable(format!("the loopback listener has no address: {e}")))?
        .port();
    let redirect_uri = format!("http://127.0.0.1:{port}{CALLBACK}");
    let client = client_for(spec, credential, server, &redirect_uri).await?;
    let client_id = client.client_id.clone().unwrap_or_default();
    let verifier = token::random_token(32)?;
    let state = token::random_token(16)?;
    let scope = scope_for(credential, challenge.as_ref(), &found);
    let mut url = Url::parse(&server.authorization_endpoint)
        .map_err(|_| unavailable("the authorization endpoint is not a URL"))?;
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("response_type", "code")
            .append_pair("client_id", &client_id)
            .append_pair("redirect_uri", &redirect_uri)
            .append_pair("code_challenge", &s256(&verifier))
            .append_pair("code_challenge_method", "S256")
            .append_pair("state", &state)
            .append_pair("resource", &found.resource);
        if let Some(scope) = &scope {
            q.append_pair("scope", scope);
        }
    }
    let listen = tokio::time::timeout(timeout, redirect(&listener));
    tokio::pin!(listen);
    let answered = tokio::select! {
        answered = &mut listen => answered,
        opened = browser.open(url.as_str()) => match opened {
            Ok(()) => listen.await,
            Err(why) => {
                return Err(unavailable(format!("the authorization URL could not be opened: {why}")));
            }
        },
    };
    let answered = answered.map_err(|_| {
        OAuthFailure::NeedsLogin(format!(
            "no one approved the sign-in within {} s",
            timeout.as_secs()
        ))
    })??;
    if let Some(error) = answered.error {
        return Err(OAuthFailure::NeedsLogin(format!(
            "the authorization server said: {error}"
        )));
    }
    if answered.state.as_deref() != Some(state.as_str()) {
        return Err(unavailable(
            "the redirect's state is not the one sent: the sign-in is refused",
        ));
    }
    match answered.iss.as_deref() {
        Some(iss) if iss.trim_end_matches('/') != server.issuer.trim_end_matches('/') => {
            return Err(unavailable(format!(
                "the redirect comes from issuer {}, not {}: the sign-in is refused",
                sanitize_label(iss),
                server.issuer
            )));
        }
        None if server.iss_parameter => {
            return Err(unavailable(
                "the authorization server promises an iss parameter and the redirect has none",
            ));
        }
        _ => {}
    }
    let code = answered
        .code
        .ok_or_else(|| unavailable("the redirect carries no code"))?;
    let endpoint = token::TokenEndpoint::of(server, found.resource.clone());
    let form = vec![
        ("grant_type", "authorization_code".to_owned()),
        ("code", code),
        ("redirect_uri", redirect_uri),
        ("code_verifier", verifier),
    ];
    let mut next = token::request(spec, &client, &endpoint, form).await?;
    if next.scope.is_none() {
        next.scope = scope;
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s256_is_the_unpadded_base64url_of_the_verifiers_sha256() {
        // As Python computes it: base64.urlsafe_b64encode(hashlib.sha256(v).digest()) without "=".
        assert_eq!(
            s256("dBjftJeZ4CVP-mJ92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "ngF5GsXcbwljx6u133FFr3Xht9xooA_DuaX_3QwODtc"
        );
    }
}
