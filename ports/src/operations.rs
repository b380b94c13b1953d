//! The operator's driving port: what the metrics and health endpoints ask of the gateway.

use async_trait::async_trait;

/// One readiness check.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReadinessCheck {
    /// `store`, `policy` or `upstreams`.
    pub name: &'static str,
    /// Whether it passed.
    pub ok: bool,
    /// What was found (caller-safe: no secret, no content).
    pub detail: String,
}

/// Whether the gateway can serve requests now, check by check.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Readiness {
    /// True when every check passed.
    pub ready: bool,
    /// The checks, in a fixed order.
    pub checks: Vec<ReadinessCheck>,
}

impl Readiness {
    /// The verdict over `checks`.
    pub fn of(checks: Vec<ReadinessCheck>) -> Self {
        Self {
            ready: checks.iter().all(|c| c.ok),
            checks,
        }
    }
}

/// Metrics and readiness, for `/metrics` and `/readyz`.
#[async_trait]
pub trait Operations: Send + Sync + std::fmt::Debug {
    /// The Prometheus text exposition of every metric now.
    async fn metrics(&self) -> String;
    /// Whether the store can be written, the policy engine answers (when a policy decides) and
    /// at least one upstream is usable.
    async fn readiness(&self) -> Readiness;
}
