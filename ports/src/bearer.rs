//! Inbound bearer tokens: who a token presented to Quarry names, and what it was granted. An
//! adapter validates them (signature, issuer, audience, lifetime; or an introspection endpoint);
//! the HTTP transport asks before anything else runs.

use std::collections::BTreeSet;

use async_trait::async_trait;
use quarry_domain::{Principal, Secret};

/// What a valid token grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The agent the token names (its subject): what policy and audit see.
    pub agent: Principal,
    /// The scopes granted.
    pub scopes: BTreeSet<String>,
}

/// Why a token was refused. Messages name the check that failed, never the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BearerRefused {
    /// Not a token for this resource: malformed, badly signed, expired or not yet valid, from
    /// another issuer, for another audience, signed with an algorithm or key not accepted,
    /// inactive.
    #[error("{0}")]
    Invalid(String),
    /// It cannot be checked now (the key set or introspection endpoint does not answer, or
    /// answers garbage): refused, never accepted.
    #[error("{0}")]
    Unverifiable(String),
}

/// Validates inbound bearer tokens.
#[async_trait]
pub trait BearerVerifier: Send + Sync + std::fmt::Debug {
    /// What `token` grants.
    ///
    /// # Errors
    /// [`BearerRefused`] for any token that is not provably valid for this resource now.
    async fn verify(&self, token: &Secret) -> Result<Grant, BearerRefused>;
}
