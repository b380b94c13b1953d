//! The policy port: access decisions by the rules policy authors edit.

use async_trait::async_trait;
use quarry_domain::{Decision, PolicyRequest};

/// Why no decision could be had. The gateway denies (E011): the engine fails closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the policy engine cannot decide: {0}")]
pub struct PolicyUnavailable(pub String);

/// Decides requests by the loaded policy.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait PolicyEngine: Send + Sync + std::fmt::Debug {
    /// Decides `request`, with `context` (the transport, the client address, whether the
    /// resource is protected) visible to the rules as `request_context(Key, Value)`. Returns
    /// within the engine's budget.
    ///
    /// # Errors
    /// [`PolicyUnavailable`] when no healthy engine answered in time, or the rules raised an
    /// error or ran out of inferences.
    async fn decide(
        &self,
        request: &PolicyRequest,
        context: &[(String, String)],
    ) -> Result<Decision, PolicyUnavailable>;
}
