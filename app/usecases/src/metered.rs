//! The policy engine, timed: [`MeteredPolicy`] wraps the engine the policy decorator asks and
//! hands every exchange's latency (and whether the engine failed) to the metrics.

use std::sync::Arc;

use quarry_domain::{Decision, PolicyRequest};
use quarry_ports::{Clock, EngineHealth, Metrics, PolicyEngine, PolicyUnavailable};

/// A policy engine whose decisions are timed.
#[derive(Debug)]
pub struct MeteredPolicy {
    inner: Arc<dyn PolicyEngine>,
    metrics: Arc<dyn Metrics>,
    clock: Arc<dyn Clock>,
}

impl MeteredPolicy {
    /// `inner`, timed by `clock` into `metrics`.
    pub fn new(
        inner: Arc<dyn PolicyEngine>,
        metrics: Arc<dyn Metrics>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            inner,
            metrics,
            clock,
        }
    }
}

#[async_trait::async_trait]
impl PolicyEngine for MeteredPolicy {
    async fn decide(
        &self,
        request: &PolicyRequest,
        context: &[(String, String)],
    ) -> Result<Decision, PolicyUnavailable> {
        let started = self.clock.monotonic();
        let decided = self.inner.decide(request, context).await;
        let took = self.clock.monotonic().saturating_sub(started);
        self.metrics
            .policy_decision("decide", took, decided.is_err());
        decided
    }

    async fn allowed(
        &self,
        requests: &[(PolicyRequest, Vec<(String, String)>)],
    ) -> Result<Vec<Option<bool>>, PolicyUnavailable> {
        let started = self.clock.monotonic();
        let decided = self.inner.allowed(requests).await;
        let took = self.clock.monotonic().saturating_sub(started);
        self.metrics
            .policy_decision("batch", took, decided.is_err());
        decided
    }

    async fn health(&self) -> EngineHealth {
        self.inner.health().await
    }

    fn version(&self) -> u64 {
        self.inner.version()
    }
}
