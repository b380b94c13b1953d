//! A real token issuer on loopback, for tests of Quarry as a resource server: it publishes a JWKS
//! (an ES256 and an EdDSA key it generated) at `/jwks.json`, mints JWTs with those keys, and
//! answers RFC 7662 introspection at `/introspect` for opaque tokens it issued. It also makes the
//! tokens a resource server must refuse: expired, not yet valid, for another audience or issuer,
//! signed by a key it does not publish, `alg: none`, and HS256 keyed with its public key. Its
//! key set can be switched off (HTTP 503) and counts how often it was fetched.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU32, Ordering},
    },
    time::{SystemTime, UNIX_EPOCH},
};

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD as B64};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The client the resource server introspects as.
pub const INTROSPECTION_CLIENT: &str = "quarry-resource";
/// Its secret.
pub const INTROSPECTION_SECRET: &str = "introspection-secret-9d2e41";

struct SigningKey {
    kid: &'static str,
    alg: Algorithm,
    encoding: EncodingKey,
    jwk: Value,
}

/// What the issuer holds and was asked.
#[derive(Default)]
struct IssuerState {
    jwks: Mutex<Value>,
    available: AtomicBool,
    jwks_fetches: AtomicU32,
    introspections: AtomicU32,
    opaque: Mutex<HashMap<String, Value>>,
}

/// The running issuer.
pub struct TestIssuer {
    /// Its `iss`, `http://127.0.0.1:PORT`.
    pub issuer: String,
    /// Where its key set is.
    pub jwks_url: String,
    /// Where it introspects.
    pub introspection_url: String,
    published: Vec<SigningKey>,
    rogue: SigningKey,
    state: Arc<IssuerState>,
    stop: CancellationToken,
}

impl std::fmt::Debug for TestIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestIssuer")
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

impl Drop for TestIssuer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Seconds since the epoch.
#[must_use]
pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn generate(kid: &'static str, alg: Algorithm) -> anyhow::Result<SigningKey> {
    let (pair, jwk) = match alg {
        Algorithm::ES256 => {
            let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
            let point = pair.public_key_raw();
            let jwk = json!({"kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
                "x": B64.encode(&point[1..33]), "y": B64.encode(&point[33..65])});
            (pair, jwk)
        }
        Algorithm::EdDSA => {
            let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519)?;
            let jwk = json!({"kty": "OKP", "crv": "Ed25519", "use": "sig", "alg": "EdDSA", "kid": kid,
                "x": B64.encode(pair.public_key_raw())});
            (pair, jwk)
        }
        other => anyhow::bail!("the test issuer has no {other:?} keys"),
    };
    let der = pair.serialize_der();
    let encoding = match alg {
        Algorithm::ES256 => EncodingKey::from_ec_der(&der),
        _ => EncodingKey::from_ed_der(&der),
    };
    Ok(SigningKey {
        kid,
        alg,
        encoding,
        jwk,
    })
}

impl TestIssuer {
    /// Generates its keys and starts serving on 127.0.0.1.
    ///
    /// # Errors
    /// When a key cannot be generated or the port cannot be bound.
    pub async fn start() -> anyhow::Result<Self> {
        let published = vec![
            generate("es-1", Algorithm::ES256)?,
            generate("ed-1", Algorithm::EdDSA)?,
        ];
        let rogue = generate("es-rogue", Algorithm::ES256)?;
        let state = Arc::new(IssuerState {
            jwks: Mutex::new(
                json!({"keys": published.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()}),
            ),
            available: AtomicBool::new(true),
            ..IssuerState::default()
        });
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
        let router = Router::new()
            .route("/jwks.json", get(jwks))
            .route("/introspect", post(introspect))
            .with_state(state.clone());
        let stop = CancellationToken::new();
        let until = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async move { until.cancelled().await })
                .await;
        });
        let issuer = format!("http://{addr}");
        Ok(Self {
            jwks_url: format!("{issuer}/jwks.json"),
            introspection_url: format!("{issuer}/introspect"),
            issuer,
            published,
            rogue,
            state,
            stop,
        })
    }

    /// Claims for `sub` with `scope`, for `audience`, from this issuer, valid for ten minutes.
    #[must_use]
    pub fn claims(&self, sub: &str, scope: &str, audience: &str) -> Value {
        json!({"iss": self.issuer, "sub": sub, "aud": audience, "scope": scope,
            "iat": now(), "nbf": now() - 5, "exp": now() + 600})
    }

    /// `claims` signed with the published ES256 key.
    #[must_use]
    pub fn sign(&self, claims: &Value) -> String {
        sign_with(&self.published[0], claims)
    }

    /// `claims` signed with the published EdDSA key.
    #[must_use]
    pub fn sign_eddsa(&self, claims: &Value) -> String {
        sign_with(&self.published[1], claims)
    }

    /// `claims` signed with a key the issuer never published (its `kid` is `es-rogue`).
    #[must_use]
    pub fn sign_unknown_key(&self, claims: &Value) -> String {
        sign_with(&self.rogue, claims)
    }

    /// `claims` signed with the rogue key but naming a published key's id.
    #[must_use]
    pub fn sign_forged(&self, claims: &Value) -> String {
        let mut header = Header::new(self.rogue.alg);
        header.kid = Some(self.published[0].kid.to_owned());
        jsonwebtoken::encode(&header, claims, &self.rogue.encoding).unwrap_or_default()
    }

    /// `claims` with `alg: none` and no signature.
    #[must_use]
    pub fn unsigned(&self, claims: &Value) -> String {
        let header = json!({"alg": "none", "typ": "JWT", "kid": self.published[0].kid});
        format!(
            "{}.{}.",
            B64.encode(header.to_string()),
            B64.encode(claims.to_string())
        )
    }

    /// `claims` as HS256 keyed with the published ES256 key's JWK (the algorithm-confusion
    /// attack: a verifier that lets the token pick HMAC would check it with public material).
    #[must_use]
    pub fn hmac_with_public_key(&self, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some(self.published[0].kid.to_owned());
        let secret = self.published[0].jwk.to_string();
        jsonwebtoken::encode(
            &header,
            claims,
            &EncodingKey::from_secret(secret.as_bytes()),
        )
        .unwrap_or_default()
    }

    /// An opaque token the introspection endpoint describes with `claims` (plus `active: true`).
    #[must_use]
    pub fn opaque(&self, claims: &Value) -> String {
        let token = format!("opaque-{}", uuid_like());
        let mut answer = claims.clone();
        answer["active"] = json!(true);
        lock(&self.state.opaque).insert(token.clone(), answer);
        token
    }

    /// Revokes an opaque token: introspection says `active: false` from now on.
    pub fn revoke(&self, token: &str) {
        lock(&self.state.opaque).remove(token);
    }

    /// Switches the key set and the introspection endpoint on or off (off: HTTP 503).
    pub fn set_available(&self, available: bool) {
        self.state.available.store(available, Ordering::SeqCst);
    }

    /// How often the key set was fetched.
    #[must_use]
    pub fn jwks_fetches(&self) -> u32 {
        self.state.jwks_fetches.load(Ordering::SeqCst)
    }

    /// How often a token was introspected.
    #[must_use]
    pub fn introspections(&self) -> u32 {
        self.state.introspections.load(Ordering::SeqCst)
    }

    /// The key set as published.
    #[must_use]
    pub fn jwks(&self) -> Value {
        lock(&self.state.jwks).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn json_response(value: &Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

fn sign_with(key: &SigningKey, claims: &Value) -> String {
    let mut header = Header::new(key.alg);
    header.kid = Some(key.kid.to_owned());
    jsonwebtoken::encode(&header, claims, &key.encoding).unwrap_or_default()
}

fn uuid_like() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(u128::from(now().unsigned_abs()));
    format!("{:016x}{:016x}", h.finish(), std::process::id())
}

async fn jwks(State(state): State<Arc<IssuerState>>) -> Response {
    state.jwks_fetches.fetch_add(1, Ordering::SeqCst);
    if !state.available.load(Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    json_response(&lock(&state.jwks))
}

async fn introspect(
    State(state): State<Arc<IssuerState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let form: HashMap<String, String> = url::form_urlencoded::parse(&body).into_owned().collect();
    state.introspections.fetch_add(1, Ordering::SeqCst);
    if !state.available.load(Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD
            .encode(format!("{INTROSPECTION_CLIENT}:{INTROSPECTION_SECRET}"))
    );
    if headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        != Some(&expected)
    {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let token = form.get("token").cloned().unwrap_or_default();
    let answer = lock(&state.opaque)
        .get(&token)
        .cloned()
        .unwrap_or_else(|| json!({"active": false}));
    json_response(&answer)
}
