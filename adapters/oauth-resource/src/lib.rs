//! Quarry as an OAuth 2.1 resource server: a bearer token is accepted when it is provably for
//! this resource now. A JWT (three dot-separated parts) must be signed by a key of the
//! configured key set (a JWKS URL or file) with an allowed asymmetric algorithm that matches the
//! key, come from the configured issuer, name this resource in `aud`, and be within `exp`/`nbf`
//! (with a small leeway). Any other token goes to the RFC 7662 introspection endpoint when one is
//! configured, and is refused otherwise. A key set or endpoint that cannot be reached means
//! refusal, never acceptance. A verified JWT is remembered (by its SHA-256) until the sooner of its
//! expiry and [`REMEMBER_FOR`].

use std::{
    collections::{BTreeSet, HashMap},
    path::PathBuf,
    time::{Duration, Instant},
};

use async_trait::async_trait;
use quarry_domain::{Principal, Secret};
use quarry_ports::{BearerRefused, BearerVerifier, Grant};

mod introspect;
mod jwks;
mod jwt;

pub use introspect::Introspection;

/// Where the issuer's signing keys come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// A JWKS document fetched over HTTPS (HTTP on loopback only).
    Url(String),
    /// A JWKS document on disk, reread when a token names a key it does not hold.
    File(PathBuf),
}

/// How tokens are checked.
#[derive(Debug, Clone)]
pub struct ResourceServer {
    /// This resource's identifier: the audience every token must name.
    pub resource: String,
    /// The authorization server that issues tokens for it (`iss`).
    pub issuer: String,
    /// The issuer's signing keys.
    pub keys: KeySource,
    /// Accepted signature algorithms (asymmetric only: RS*, PS*, ES256, ES384, EdDSA).
    pub algorithms: Vec<String>,
    /// Clock skew tolerated on `exp` and `nbf`.
    pub leeway: Duration,
    /// The claim naming the agent (`sub` by default).
    pub agent_claim: String,
    /// How long a fetched key set is used before it is fetched again.
    pub keys_max_age: Duration,
    /// The shortest time between two fetches prompted by an unknown key id.
    pub keys_min_refetch: Duration,
    /// An RFC 7662 endpoint for opaque tokens.
    pub introspection: Option<Introspection>,
}

/// The algorithms a resource server may be told to accept.
pub const ACCEPTABLE_ALGORITHMS: [&str; 9] = [
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

/// The verifier of one resource server.
#[derive(Debug)]
pub struct TokenVerifier {
    jwt: jwt::JwtCheck,
    introspection: Option<introspect::Introspector>,
    /// JWTs already verified, by their SHA-256, until the sooner of their expiry and
    /// [`REMEMBER_FOR`]: a token is checked once, not on every request.
    remembered: std::sync::Mutex<HashMap<[u8; 32], (Grant, Instant)>>,
}

/// The longest a verified JWT is taken as verified without checking it again (so a key the
/// issuer withdraws stops being honoured within this time).
pub const REMEMBER_FOR: Duration = Duration::from_secs(60);

/// The most verified tokens remembered at once.
const REMEMBERED_MAX: usize = 10_000;

impl TokenVerifier {
    /// A verifier for `config`. The key set is fetched on first use (and a failure then refuses
    /// tokens); [`TokenVerifier::preload`] fetches it now.
    ///
    /// # Errors
    /// When the configuration cannot work: an algorithm that is not asymmetric or unknown, or an
    /// HTTP key set or endpoint beyond loopback.
    pub fn new(config: ResourceServer) -> Result<Self, String> {
        let algorithms = jwt::JwtCheck::check(&config)?;
        if let Some(i) = &config.introspection {
            usable_url(&i.url, "the introspection endpoint")?;
        }
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("cannot build the HTTP client for token checks: {e}"))?;
        let introspection = match config.introspection.clone() {
            Some(i) => Some(introspect::Introspector::new(i, client.clone(), &config)?),
            None => None,
        };
        Ok(Self {
            jwt: jwt::JwtCheck::new(&config, algorithms, client),
            introspection,
            remembered: std::sync::Mutex::default(),
        })
    }

    /// Fetches the key set now.
    ///
    /// # Errors
    /// When it cannot be fetched or holds no usable key.
    pub async fn preload(&self) -> Result<usize, String> {
        self.jwt.preload().await
    }

    /// A verified token's grant, while it is remembered.
    fn recall(&self, digest: &[u8; 32]) -> Option<Grant> {
        let mut held = self.remembered.lock().unwrap_or_else(|e| e.into_inner());
        match held.get(digest) {
            Some((grant, until)) if Instant::now() < *until => Some(grant.clone()),
            Some(_) => {
                held.remove(digest);
                None
            }
            None => None,
        }
    }

    /// Remembers a verified token for `left` (at most [`REMEMBER_FOR`]).
    fn remember(&self, digest: [u8; 32], grant: &Grant, left: Duration) {
        let mut held = self.remembered.lock().unwrap_or_else(|e| e.into_inner());
        if held.len() >= REMEMBERED_MAX {
            let now = Instant::now();
            held.retain(|_, (_, until)| *until > now);
            if held.len() >= REMEMBERED_MAX {
                held.clear();
            }
        }
        held.insert(
            digest,
            (grant.clone(), Instant::now() + left.min(REMEMBER_FOR)),
        );
    }

    /// How many times the key set was fetched (or read).
    #[must_use]
    pub fn key_fetches(&self) -> u64 {
        self.jwt.fetches()
    }
}

#[async_trait]
impl BearerVerifier for TokenVerifier {
    async fn verify(&self, token: &Secret) -> Result<Grant, BearerRefused> {
        let raw = token.expose();
        if raw.split('.').count() == 3 {
            let digest: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, raw.as_bytes())
                .as_ref()
                .try_into()
                .unwrap_or([0; 32]);
            if let Some(grant) = self.recall(&digest) {
                return Ok(grant);
            }
            let (grant, left) = self.jwt.verify(raw).await?;
            self.remember(digest, &grant, left);
            return Ok(grant);
        }
        match &self.introspection {
            Some(i) => i.verify(raw).await,
            None => Err(BearerRefused::Invalid(
                "the token is not a JWT, and no introspection endpoint is configured".into(),
            )),
        }
    }
}

/// Whether `url` may be used for token checks: HTTPS, or HTTP to a loopback host.
fn usable_url(url: &str, what: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|_| format!("{what} is not a URL"))?;
    let loopback = matches!(parsed.host(), Some(url::Host::Domain("localhost")))
        || match parsed.host() {
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            _ => false,
        };
    match parsed.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        _ => Err(format!(
            "{what} must be https:// (http:// on loopback only)"
        )),
    }
}

/// The agent a set of claims names, from `claim`: 1 to 128 characters, no control characters.
fn agent(claims: &serde_json::Value, claim: &str) -> Result<Principal, BearerRefused> {
    match claims.get(claim).and_then(serde_json::Value::as_str) {
        Some(id) if !id.is_empty() && id.len() <= 128 && !id.chars().any(char::is_control) => {
            Ok(Principal::new(id))
        }
        Some(_) => Err(BearerRefused::Invalid(format!(
            "the token's {claim} claim is not a usable agent name"
        ))),
        None => Err(BearerRefused::Invalid(format!(
            "the token has no {claim} claim"
        ))),
    }
}

/// The scopes of a set of claims: `scope` (space-separated) and `scp` (a string or a list).
fn scopes(claims: &serde_json::Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut words = |s: &str| {
        out.extend(s.split_ascii_whitespace().map(str::to_owned));
    };
    if let Some(s) = claims.get("scope").and_then(serde_json::Value::as_str) {
        words(s);
    }
    match claims.get("scp") {
        Some(serde_json::Value::String(s)) => words(s),
        Some(serde_json::Value::Array(items)) => {
            for s in items.iter().filter_map(serde_json::Value::as_str) {
                words(s);
            }
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn scopes_come_from_scope_and_scp() {
        let claims = json!({"scope": "a b", "scp": ["c", "d e"]});
        let all: Vec<String> = scopes(&claims).into_iter().collect();
        assert_eq!(all, ["a", "b", "c", "d", "e"]);
        assert!(scopes(&json!({"scope": 7})).is_empty());
    }

    #[test]
    fn an_agent_name_must_be_usable() {
        assert_eq!(
            agent(&json!({"sub": "alice"}), "sub").unwrap(),
            Principal::new("alice")
        );
        for bad in [
            json!({}),
            json!({"sub": ""}),
            json!({"sub": "a\nb"}),
            json!({"sub": 5}),
        ] {
            assert!(agent(&bad, "sub").is_err(), "{bad}");
        }
    }

    #[test]
    fn token_endpoints_are_https_or_loopback() {
        assert!(usable_url("https://idp.example.com/jwks", "k").is_ok());
        assert!(usable_url("http://127.0.0.1:8080/jwks", "k").is_ok());
        assert!(usable_url("http://localhost/jwks", "k").is_ok());
        assert!(usable_url("http://idp.example.com/jwks", "k").is_err());
        assert!(usable_url("file:///etc/jwks", "k").is_err());
    }

    #[test]
    fn symmetric_algorithms_cannot_be_configured() {
        let config = ResourceServer {
            resource: "https://q.example/mcp".into(),
            issuer: "https://idp.example".into(),
            keys: KeySource::Url("https://idp.example/jwks".into()),
            algorithms: vec!["HS256".into()],
            leeway: Duration::from_secs(30),
            agent_claim: "sub".into(),
            keys_max_age: Duration::from_secs(300),
            keys_min_refetch: Duration::from_secs(10),
            introspection: None,
        };
        let e = TokenVerifier::new(config).unwrap_err();
        assert!(e.contains("HS256"), "{e}");
    }
}
