//! Opaque tokens, asked about at an RFC 7662 introspection endpoint with this resource's client
//! credentials. An answer counts only when it says `active: true`, names this resource in `aud`,
//! the configured issuer when it names one, an agent, and an `exp` still ahead.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use quarry_domain::Secret;
use quarry_ports::{BearerRefused, Grant};

use crate::{ResourceServer, agent, scopes, usable_url};

/// The largest introspection answer read.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Where and as whom to introspect.
#[derive(Debug, Clone)]
pub struct Introspection {
    /// The endpoint (HTTPS; HTTP on loopback only).
    pub url: String,
    /// This resource server's client id at the authorization server.
    pub client_id: String,
    /// Its client secret.
    pub client_secret: Secret,
}

#[derive(Debug)]
pub(crate) struct Introspector {
    endpoint: Introspection,
    client: reqwest::Client,
    resource: String,
    issuer: String,
    agent_claim: String,
    leeway: Duration,
}

impl Introspector {
    pub(crate) fn new(
        endpoint: Introspection,
        client: reqwest::Client,
        config: &ResourceServer,
    ) -> Result<Self, String> {
        usable_url(&endpoint.url, "the introspection endpoint")?;
        Ok(Self {
            endpoint,
            client,
            resource: config.resource.clone(),
            issuer: config.issuer.clone(),
            agent_claim: config.agent_claim.clone(),
            leeway: config.leeway,
        })
    }

    pub(crate) async fn verify(&self, token: &str) -> Result<Grant, BearerRefused> {
        let unverifiable = |why: String| BearerRefused::Unverifiable(why);
        let invalid = |why: &str| BearerRefused::Invalid(why.to_owned());
        let mut response = self
            .client
            .post(&self.endpoint.url)
            .basic_auth(
                &self.endpoint.client_id,
                Some(self.endpoint.client_secret.expose()),
            )
            .header(reqwest::header::ACCEPT, "application/json")
            .form(&[("token", token), ("token_type_hint", "access_token")])
            .send()
            .await
            .map_err(|e| {
                unverifiable(format!(
                    "the introspection endpoint does not answer: {}",
                    e.without_url()
                ))
            })?;
        if !response.status().is_success() {
            return Err(unverifiable(format!(
                "the introspection endpoint answered HTTP {}",
                response.status().as_u16()
            )));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| {
            unverifiable(format!(
                "the introspection answer broke off: {}",
                e.without_url()
            ))
        })? {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(unverifiable("the introspection answer is too large".into()));
            }
            body.extend_from_slice(&chunk);
        }
        let claims: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|_| unverifiable("the introspection answer is not JSON".into()))?;
        if claims.get("active") != Some(&serde_json::Value::Bool(true)) {
            return Err(invalid("the token is not active"));
        }
        let for_us = match claims.get("aud") {
            Some(serde_json::Value::String(a)) => *a == self.resource,
            Some(serde_json::Value::Array(all)) => {
                all.iter().any(|a| a.as_str() == Some(&self.resource))
            }
            _ => return Err(invalid("the token names no audience")),
        };
        if !for_us {
            return Err(invalid("the token is for another audience"));
        }
        if let Some(iss) = claims.get("iss")
            && iss.as_str() != Some(&self.issuer)
        {
            return Err(invalid("the token is from another issuer"));
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        match claims.get("exp").and_then(serde_json::Value::as_u64) {
            Some(exp) if exp + self.leeway.as_secs() > now => {}
            Some(_) => return Err(invalid("the token has expired")),
            None => return Err(invalid("the introspection answer has no exp")),
        }
        if let Some(nbf) = claims.get("nbf").and_then(serde_json::Value::as_u64)
            && nbf > now + self.leeway.as_secs()
        {
            return Err(invalid("the token is not valid yet"));
        }
        Ok(Grant {
            agent: agent(&claims, &self.agent_claim)?,
            scopes: scopes(&claims),
        })
    }
}
