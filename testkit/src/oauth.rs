//! A real OAuth 2 authorization server on loopback, for tests of Quarry's upstream OAuth client:
//! RFC 8414 metadata, an authorization endpoint that approves at once (checking nothing a person
//! would), PKCE-checked code exchange, refresh tokens that rotate (only the newest works),
//! client credentials, and dynamic registration. Switches make it misbehave (a wrong `state` or
//! `iss` in the redirect, a slow token endpoint, a revoked grant); counters say what it was asked.
//!
//! [`crate::fixture::serve_http_oauth`] puts a fixture MCP server behind it: requests without one
//! of its access tokens get 401 with a `resource_metadata` challenge.

use std::{
    collections::{HashMap, HashSet},
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering},
    },
    time::Duration,
};

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode, Uri, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use serde_json::{Value, json};
use sha2::Digest;
use tokio_util::sync::CancellationToken;

/// The confidential client the server knows from the start (for client credentials and
/// pre-registered sign-ins).
pub const CLIENT_ID: &str = "quarry-test-client";
/// Its secret.
pub const CLIENT_SECRET: &str = "test-client-secret-3f9a1c";

/// What the server holds and was asked.
#[derive(Debug, Default)]
pub struct AuthState {
    issued: AtomicU32,
    token_requests: AtomicU32,
    registrations: AtomicU32,
    access_ttl: AtomicI64,
    token_delay_ms: AtomicU64,
    /// True while a token request waits out the delay (so a test can act mid-request).
    pub token_request_waiting: AtomicBool,
    wrong_state: AtomicBool,
    wrong_iss: AtomicBool,
    newest_refresh: Mutex<Option<String>>,
    access: Mutex<HashSet<String>>,
    codes: Mutex<HashMap<String, (String, String, String)>>,
    clients: Mutex<HashMap<String, String>>,
    /// Unique per server, so its tokens are canaries: found anywhere, they leaked.
    tag: String,
}

impl AuthState {
    /// True when `token` is an access token this server issued and has not revoked.
    pub fn accepts(&self, token: &str) -> bool {
        lock(&self.access).contains(token)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The running server.
#[derive(Debug)]
pub struct TestAuthServer {
    /// Its issuer, `http://127.0.0.1:PORT`.
    pub issuer: String,
    /// What it holds.
    pub state: Arc<AuthState>,
    stop: CancellationToken,
}

impl Drop for TestAuthServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl TestAuthServer {
    /// Starts one on a free loopback port; access tokens last an hour.
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start() -> anyhow::Result<Self> {
        let tag = format!("{:016x}", rand_u64());
        let state = Arc::new(AuthState {
            tag,
            ..AuthState::default()
        });
        state.access_ttl.store(3600, Ordering::SeqCst);
        lock(&state.clients).insert(CLIENT_ID.into(), CLIENT_SECRET.into());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr: SocketAddr = listener.local_addr()?;
        let issuer = format!("http://{addr}");
        let app = Router::new()
            .route("/.well-known/oauth-authorization-server", get(metadata))
            .route("/authorize", get(authorize))
            .route("/token", post(token))
            .route("/register", post(register))
            .with_state((state.clone(), issuer.clone()));
        let stop = CancellationToken::new();
        let token = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { token.cancelled_owned().await })
                .await;
        });
        Ok(Self {
            issuer,
            state,
            stop,
        })
    }

    /// Token requests answered or refused so far.
    pub fn token_requests(&self) -> u32 {
        self.state.token_requests.load(Ordering::SeqCst)
    }

    /// Dynamic registrations so far.
    pub fn registrations(&self) -> u32 {
        self.state.registrations.load(Ordering::SeqCst)
    }

    /// Access tokens issued from now on expire after `secs`.
    pub fn set_access_ttl(&self, secs: i64) {
        self.state.access_ttl.store(secs, Ordering::SeqCst);
    }

    /// The token endpoint waits this long before it answers (and before it rotates anything).
    pub fn set_token_delay(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.state.token_delay_ms.store(ms, Ordering::SeqCst);
    }

    /// Redirects carry another `state` than the client sent.
    pub fn send_wrong_state(&self) {
        self.state.wrong_state.store(true, Ordering::SeqCst);
    }

    /// Redirects carry another issuer's `iss`.
    pub fn send_wrong_iss(&self) {
        self.state.wrong_iss.store(true, Ordering::SeqCst);
    }

    /// A refresh token for [`CLIENT_ID`], the only one that works until it is used; the access
    /// token it came with is returned too (already expired: `expires_at` in the past).
    pub fn grant(&self) -> (String, String) {
        let (access, refresh) = self.state.issue();
        lock(&self.state.access).remove(&access);
        (access, refresh.unwrap_or_default())
    }

    /// Every access token stops working (as if they expired early); the refresh token still
    /// does.
    pub fn expire_access_tokens(&self) {
        lock(&self.state.access).clear();
    }

    /// Revokes the grant and every access token: only a new sign-in helps.
    pub fn revoke(&self) {
        *lock(&self.state.newest_refresh) = None;
        lock(&self.state.access).clear();
    }

    /// The tag in every token this server issues (tokens are `at-TAG-N`, `rt-TAG-N`).
    pub fn tag(&self) -> &str {
        &self.state.tag
    }
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.finish()
}

impl AuthState {
    /// A new access token, and a refresh token that replaces the previous one.
    fn issue(&self) -> (String, Option<String>) {
        let n = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
        let access = format!("at-{}-{n}", self.tag);
        let refresh = format!("rt-{}-{n}", self.tag);
        lock(&self.access).insert(access.clone());
        *lock(&self.newest_refresh) = Some(refresh.clone());
        (access, Some(refresh))
    }
}

type St = State<(Arc<AuthState>, String)>;

/// A JSON body (axum's own needs a feature the workspace leaves off).
pub(crate) struct Json(pub(crate) Value);

impl IntoResponse for Json {
    fn into_response(self) -> Response {
        (
            [(header::CONTENT_TYPE, "application/json")],
            self.0.to_string(),
        )
            .into_response()
    }
}

async fn metadata(State((_, issuer)): St) -> Response {
    Json(json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/authorize"),
        "token_endpoint": format!("{issuer}/token"),
        "registration_endpoint": format!("{issuer}/register"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post", "none"],
        "authorization_response_iss_parameter_supported": true,
    }))
    .into_response()
}

fn pairs(text: &str) -> HashMap<String, String> {
    url::form_urlencoded::parse(text.as_bytes())
        .into_owned()
        .collect()
}

async fn authorize(State((state, issuer)): St, uri: Uri) -> Response {
    let q = pairs(uri.query().unwrap_or_default());
    let (Some(redirect), Some(challenge), Some(client)) = (
        q.get("redirect_uri"),
        q.get("code_challenge"),
        q.get("client_id"),
    ) else {
        return (
            StatusCode::BAD_REQUEST,
            "redirect_uri, code_challenge and client_id are required",
        )
            .into_response();
    };
    if q.get("code_challenge_method").map(String::as_str) != Some("S256")
        || !q.contains_key("resource")
    {
        return (StatusCode::BAD_REQUEST, "S256 and a resource are required").into_response();
    }
    let code = format!("code-{}", rand_u64());
    lock(&state.codes).insert(
        code.clone(),
        (challenge.clone(), redirect.clone(), client.clone()),
    );
    let sent_state = if state.wrong_state.load(Ordering::SeqCst) {
        "not-the-state-sent".to_owned()
    } else {
        q.get("state").cloned().unwrap_or_default()
    };
    let iss = if state.wrong_iss.load(Ordering::SeqCst) {
        "https://evil.example".to_owned()
    } else {
        issuer
    };
    let Ok(mut target) = url::Url::parse(redirect) else {
        return (StatusCode::BAD_REQUEST, "redirect_uri is not a URL").into_response();
    };
    target
        .query_pairs_mut()
        .append_pair("code", &code)
        .append_pair("state", &sent_state)
        .append_pair("iss", &iss);
    (StatusCode::FOUND, [(header::LOCATION, target.to_string())]).into_response()
}

fn token_error(error: &str) -> Response {
    (StatusCode::BAD_REQUEST, Json(json!({"error": error}))).into_response()
}

/// The client the request authenticates as: HTTP Basic, or the form's id (and secret).
fn client_of(
    state: &AuthState,
    headers: &HeaderMap,
    form: &HashMap<String, String>,
) -> Option<String> {
    if let Some(basic) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
    {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(basic)
            .ok()?;
        let decoded = String::from_utf8(decoded).ok()?;
        let (id, secret) = decoded.split_once(':')?;
        let unescape = |s: &str| {
            url::form_urlencoded::parse(format!("x={s}").as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())
        };
        let (id, secret) = (unescape(id)?, unescape(secret)?);
        return (lock(&state.clients).get(&id) == Some(&secret)).then_some(id);
    }
    let id = form.get("client_id")?;
    match (lock(&state.clients).get(id), form.get("client_secret")) {
        (Some(known), Some(given)) if known == given => Some(id.clone()),
        (Some(known), None) if known.is_empty() => Some(id.clone()),
        _ => None,
    }
}

async fn token(State((state, _)): St, headers: HeaderMap, body: Bytes) -> Response {
    state.token_requests.fetch_add(1, Ordering::SeqCst);
    let delay = state.token_delay_ms.load(Ordering::SeqCst);
    if delay > 0 {
        state.token_request_waiting.store(true, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        state.token_request_waiting.store(false, Ordering::SeqCst);
    }
    let form = pairs(&String::from_utf8_lossy(&body));
    let Some(client) = client_of(&state, &headers, &form) else {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": "invalid_client"})),
        )
            .into_response();
    };
    if !form.contains_key("resource") {
        return token_error("invalid_target");
    }
    let refresh = match form.get("grant_type").map(String::as_str) {
        Some("authorization_code") => {
            let Some((challenge, redirect, for_client)) =
                form.get("code").and_then(|c| lock(&state.codes).remove(c))
            else {
                return token_error("invalid_grant");
            };
            let verifier = form.get("code_verifier").cloned().unwrap_or_default();
            let computed = URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier.as_bytes()));
            if computed != challenge
                || form.get("redirect_uri") != Some(&redirect)
                || for_client != client
            {
                return token_error("invalid_grant");
            }
            true
        }
        Some("refresh_token") => {
            let newest = lock(&state.newest_refresh).clone();
            if newest.is_none() || form.get("refresh_token") != newest.as_ref() {
                return token_error("invalid_grant");
            }
            true
        }
        Some("client_credentials") => false,
        _ => return token_error("unsupported_grant_type"),
    };
    let (access, refresh_token) = state.issue();
    let mut answer = json!({
        "access_token": access,
        "token_type": "Bearer",
        "expires_in": state.access_ttl.load(Ordering::SeqCst),
    });
    if refresh && let (Some(r), Value::Object(map)) = (refresh_token, &mut answer) {
        map.insert("refresh_token".into(), Value::String(r));
    }
    Json(answer).into_response()
}

async fn register(State((state, _)): St, body: Bytes) -> Response {
    state.registrations.fetch_add(1, Ordering::SeqCst);
    let asked: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let n = state.registrations.load(Ordering::SeqCst);
    let id = format!("dcr-client-{n}");
    let public = asked["token_endpoint_auth_method"] == "none";
    let secret = if public {
        String::new()
    } else {
        format!("dcr-secret-{}-{n}", state.tag)
    };
    lock(&state.clients).insert(id.clone(), secret.clone());
    let mut answer = json!({
        "client_id": id,
        "redirect_uris": asked["redirect_uris"],
        "token_endpoint_auth_method": if public { "none" } else { "client_secret_basic" },
    });
    if !public && let Value::Object(map) = &mut answer {
        map.insert("client_secret".into(), Value::String(secret));
    }
    (StatusCode::CREATED, Json(answer)).into_response()
}
