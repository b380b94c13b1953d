//! The policy port: access decisions by the rules policy authors edit.

use async_trait::async_trait;
use quarry_domain::{Decision, PolicyRequest};

use crate::EngineHealth;

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

    /// Decides many requests at once, without explanations: `Some(true)` where a rule allows,
    /// `Some(false)` where none does, `None` where the rules raised an error or ran out of
    /// inferences. The same rules as [`Self::decide`], so a listing and a read agree.
    ///
    /// # Errors
    /// [`PolicyUnavailable`] when no healthy engine answered in time.
    async fn allowed(
        &self,
        requests: &[(PolicyRequest, Vec<(String, String)>)],
    ) -> Result<Vec<Option<bool>>, PolicyUnavailable>;

    /// Whether the engine answers now (it asks a worker for nothing, within its budget), and
    /// how often its workers were replaced.
    async fn health(&self) -> EngineHealth;

    /// Which policy decides now: it changes when a new policy replaces the old one, so callers
    /// that cache decisions know to drop them.
    fn version(&self) -> u64 {
        0
    }
}
