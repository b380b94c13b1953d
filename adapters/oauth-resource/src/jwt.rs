//! JWT access tokens: the header's algorithm must be allowed and match the key it names, the
//! signature must verify with that key, and the claims must name this resource, the issuer and
//! an agent, within their lifetime.

use std::{str::FromStr, time::Duration};

use jsonwebtoken::{Algorithm, Validation, errors::ErrorKind};
use quarry_ports::{BearerRefused, Grant};

use crate::{
    ACCEPTABLE_ALGORITHMS, KeySource, ResourceServer, agent, jwks::KeySet, scopes, usable_url,
};

#[derive(Debug)]
pub(crate) struct JwtCheck {
    resource: String,
    issuer: String,
    algorithms: Vec<Algorithm>,
    leeway: Duration,
    agent_claim: String,
    keys: KeySet,
}

impl JwtCheck {
    /// Checks what `config` says of JWTs, before anything is built.
    pub(crate) fn check(config: &ResourceServer) -> Result<Vec<Algorithm>, String> {
        let mut algorithms = Vec::new();
        for name in &config.algorithms {
            if !ACCEPTABLE_ALGORITHMS.contains(&name.as_str()) {
                return Err(format!(
                    "the token algorithm {name:?} is not accepted (one of {})",
                    ACCEPTABLE_ALGORITHMS.join(", ")
                ));
            }
            algorithms.push(Algorithm::from_str(name).map_err(|e| e.to_string())?);
        }
        if algorithms.is_empty() {
            return Err("at least one token algorithm must be accepted".into());
        }
        if let KeySource::Url(url) = &config.keys {
            usable_url(url, "the key set URL")?;
        }
        Ok(algorithms)
    }

    pub(crate) fn new(
        config: &ResourceServer,
        algorithms: Vec<Algorithm>,
        client: reqwest::Client,
    ) -> Self {
        Self {
            resource: config.resource.clone(),
            issuer: config.issuer.clone(),
            algorithms,
            leeway: config.leeway,
            agent_claim: config.agent_claim.clone(),
            keys: KeySet::new(
                config.keys.clone(),
                client,
                config.keys_max_age,
                config.keys_min_refetch,
            ),
        }
    }

    pub(crate) async fn preload(&self) -> Result<usize, String> {
        self.keys.refresh(true).await
    }

    pub(crate) fn fetches(&self) -> u64 {
        self.keys.fetches()
    }

    /// What `token` grants, and for how much longer.
    pub(crate) async fn verify(&self, token: &str) -> Result<(Grant, Duration), BearerRefused> {
        let invalid = |why: &str| BearerRefused::Invalid(why.to_owned());
        // An `alg` outside the enum (`none` among them) fails here.
        let header = jsonwebtoken::decode_header(token).map_err(|_| {
            invalid("the token's header is malformed or names no accepted algorithm")
        })?;
        if !self.algorithms.contains(&header.alg) {
            return Err(BearerRefused::Invalid(format!(
                "tokens signed with {:?} are not accepted",
                header.alg
            )));
        }
        let key = self
            .keys
            .key(header.kid.as_deref())
            .await
            .map_err(BearerRefused::Unverifiable)?
            .ok_or_else(|| invalid("the token is signed with a key the issuer does not publish"))?;
        if !key.algorithms.contains(&header.alg) {
            return Err(invalid("the token's algorithm does not match its key"));
        }
        let mut validation = Validation::new(header.alg);
        validation.algorithms = vec![header.alg];
        validation.leeway = self.leeway.as_secs();
        validation.validate_nbf = true;
        validation.set_audience(&[&self.resource]);
        validation.set_issuer(&[&self.issuer]);
        validation.set_required_spec_claims(&["exp", "aud", "iss"]);
        let data = jsonwebtoken::decode::<serde_json::Value>(token, &key.decoding, &validation)
            .map_err(|e| {
                invalid(match e.kind() {
                    ErrorKind::ExpiredSignature => "the token has expired",
                    ErrorKind::ImmatureSignature => "the token is not valid yet",
                    ErrorKind::InvalidAudience => "the token is for another audience",
                    ErrorKind::InvalidIssuer => "the token is from another issuer",
                    ErrorKind::MissingRequiredClaim(c) if c == "aud" => {
                        "the token names no audience"
                    }
                    ErrorKind::MissingRequiredClaim(_) => "the token lacks exp, aud or iss",
                    ErrorKind::InvalidSignature => "the token's signature does not verify",
                    ErrorKind::InvalidAlgorithm => "the token's algorithm does not match its key",
                    _ => "the token cannot be decoded",
                })
            })?;
        let grant = Grant {
            agent: agent(&data.claims, &self.agent_claim)?,
            scopes: scopes(&data.claims),
        };
        // How much longer the token is good for (its `exp` was checked, with the leeway).
        let exp = data
            .claims
            .get("exp")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let left = Duration::from_secs((exp + self.leeway.as_secs()).saturating_sub(now));
        Ok((grant, left))
    }
}
