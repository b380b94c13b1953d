//! The issuer's key set: fetched (or read) on first use, used for `keys_max_age`, fetched again
//! after that, and on a key id it does not hold at most once per `keys_min_refetch`, so tokens
//! naming unknown keys cannot make Quarry hammer the issuer. Fetches are single-flight.

use std::{
    collections::HashMap,
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use jsonwebtoken::{
    Algorithm, DecodingKey,
    jwk::{AlgorithmParameters, EllipticCurve, JwkSet},
};
use tokio::sync::{Mutex, RwLock};

use crate::KeySource;

/// The largest key set document read.
const MAX_JWKS_BYTES: usize = 256 * 1024;

/// A key ready to verify with, and what it may verify.
#[derive(Clone)]
pub(crate) struct Key {
    pub(crate) decoding: DecodingKey,
    /// The algorithms this key can verify: its family (and curve), narrowed by its `alg`.
    pub(crate) algorithms: Vec<Algorithm>,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("algorithms", &self.algorithms)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct Held {
    /// By key id; keys without one under "".
    keys: HashMap<String, Key>,
    fetched: Option<Instant>,
}

/// The key set of one issuer.
#[derive(Debug)]
pub(crate) struct KeySet {
    source: KeySource,
    client: reqwest::Client,
    max_age: Duration,
    min_refetch: Duration,
    held: RwLock<Held>,
    /// Held while fetching; the last attempt's time, and why it failed if it did.
    fetching: Mutex<Option<(Instant, Option<Unusable>)>>,
    fetches: AtomicU64,
}

/// Why the key set cannot be used.
pub(crate) type Unusable = String;

impl KeySet {
    pub(crate) fn new(
        source: KeySource,
        client: reqwest::Client,
        max_age: Duration,
        min_refetch: Duration,
    ) -> Self {
        Self {
            source,
            client,
            max_age,
            min_refetch,
            held: RwLock::default(),
            fetching: Mutex::new(None),
            fetches: AtomicU64::new(0),
        }
    }

    pub(crate) fn fetches(&self) -> u64 {
        self.fetches.load(Ordering::Relaxed)
    }

    /// The key `kid` names (None: the set's only key), fetching the set first when it is
    /// missing or old, or when it lacks `kid` and was not fetched within `min_refetch`.
    /// `Ok(None)`: no such key.
    pub(crate) async fn key(&self, kid: Option<&str>) -> Result<Option<Key>, Unusable> {
        let fresh = {
            let held = self.held.read().await;
            match held.fetched {
                Some(at) if at.elapsed() < self.max_age => {
                    if let Some(key) = lookup(&held.keys, kid) {
                        return Ok(Some(key));
                    }
                    true
                }
                _ => false,
            }
        };
        // Stale or empty: fetch now. Fresh but lacking the key: fetch unless one was tried just
        // now (a key rotated in since is found; a made-up id costs one fetch per interval).
        self.refresh(!fresh).await?;
        let held = self.held.read().await;
        Ok(lookup(&held.keys, kid))
    }

    /// Fetches the set: when `stale`, unless another caller fetched it while this one waited;
    /// otherwise unless an attempt was made within `min_refetch`.
    pub(crate) async fn refresh(&self, stale: bool) -> Result<usize, Unusable> {
        let mut last = self.fetching.lock().await;
        {
            let held = self.held.read().await;
            let fresh = held.fetched.is_some_and(|at| at.elapsed() < self.max_age);
            let quiet = last
                .as_ref()
                .filter(|(at, _)| at.elapsed() < self.min_refetch);
            if (stale && fresh) || (!stale && quiet.is_some()) {
                return Ok(held.keys.len());
            }
            // An issuer that just failed is not asked again at once by every request.
            if let Some((_, Some(why))) = quiet {
                return Err(why.clone());
            }
        }
        self.fetches.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let result = self.fetch().await;
        *last = Some((started, result.as_ref().err().cloned()));
        match result {
            Ok(keys) => {
                let n = keys.len();
                *self.held.write().await = Held {
                    keys,
                    fetched: Some(Instant::now()),
                };
                Ok(n)
            }
            Err(why) => {
                // A set that cannot be refreshed is not used past its age.
                let mut held = self.held.write().await;
                if held.fetched.is_none_or(|f| f.elapsed() >= self.max_age) {
                    held.keys.clear();
                    held.fetched = None;
                }
                tracing::warn!("the token key set cannot be used: {why}");
                Err(why)
            }
        }
    }

    async fn fetch(&self) -> Result<HashMap<String, Key>, Unusable> {
        let body = match &self.source {
            KeySource::File(path) => std::fs::read(path)
                .map_err(|e| format!("the key set file {} cannot be read: {e}", path.display()))?,
            KeySource::Url(url) => {
                let response = self
                    .client
                    .get(url)
                    .header(reqwest::header::ACCEPT, "application/json")
                    .send()
                    .await
                    .map_err(|e| {
                        format!("the key set at {url} does not answer: {}", e.without_url())
                    })?;
                if !response.status().is_success() {
                    return Err(format!(
                        "the key set at {url} answered HTTP {}",
                        response.status().as_u16()
                    ));
                }
                read_bounded(response, url).await?
            }
        };
        let set: JwkSet = serde_json::from_slice(&body)
            .map_err(|e| format!("the key set is not a JWKS document: {e}"))?;
        let mut keys = HashMap::new();
        for jwk in &set.keys {
            let Some(algorithms) = algorithms_of(jwk) else {
                continue;
            };
            let Ok(decoding) = DecodingKey::from_jwk(jwk) else {
                continue;
            };
            let kid = jwk.common.key_id.clone().unwrap_or_default();
            keys.insert(
                kid,
                Key {
                    decoding,
                    algorithms,
                },
            );
        }
        if keys.is_empty() {
            return Err("the key set holds no usable signing key".into());
        }
        Ok(keys)
    }
}

fn lookup(keys: &HashMap<String, Key>, kid: Option<&str>) -> Option<Key> {
    match kid {
        Some(kid) => keys.get(kid).cloned(),
        None if keys.len() == 1 => keys.values().next().cloned(),
        None => None,
    }
}

async fn read_bounded(mut response: reqwest::Response, url: &str) -> Result<Vec<u8>, Unusable> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("the key set at {url} broke off: {}", e.without_url()))?
    {
        if body.len() + chunk.len() > MAX_JWKS_BYTES {
            return Err(format!(
                "the key set at {url} is larger than {} KiB",
                MAX_JWKS_BYTES / 1024
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The algorithms a JWK can verify: by its type (and curve), narrowed to its `alg` when it
/// names one. Symmetric (`oct`) keys and keys meant for encryption verify nothing.
fn algorithms_of(jwk: &jsonwebtoken::jwk::Jwk) -> Option<Vec<Algorithm>> {
    use jsonwebtoken::jwk::{KeyAlgorithm, PublicKeyUse};
    if matches!(
        jwk.common.public_key_use,
        Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_))
    ) {
        return None;
    }
    let family = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => vec![
            Algorithm::RS256,
            Algorithm::RS384,
            Algorithm::RS512,
            Algorithm::PS256,
            Algorithm::PS384,
            Algorithm::PS512,
        ],
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            EllipticCurve::P256 => vec![Algorithm::ES256],
            EllipticCurve::P384 => vec![Algorithm::ES384],
            _ => return None,
        },
        AlgorithmParameters::OctetKeyPair(okp) if okp.curve == EllipticCurve::Ed25519 => {
            vec![Algorithm::EdDSA]
        }
        _ => return None,
    };
    let named = match jwk.common.key_algorithm {
        None => return Some(family),
        Some(KeyAlgorithm::RS256) => Algorithm::RS256,
        Some(KeyAlgorithm::RS384) => Algorithm::RS384,
        Some(KeyAlgorithm::RS512) => Algorithm::RS512,
        Some(KeyAlgorithm::PS256) => Algorithm::PS256,
        Some(KeyAlgorithm::PS384) => Algorithm::PS384,
        Some(KeyAlgorithm::PS512) => Algorithm::PS512,
        Some(KeyAlgorithm::ES256) => Algorithm::ES256,
        Some(KeyAlgorithm::ES384) => Algorithm::ES384,
        Some(KeyAlgorithm::EdDSA) => Algorithm::EdDSA,
        Some(_) => return None,
    };
    family.contains(&named).then(|| vec![named])
}
