//! The metrics port: what the decorators count and time, and the exposition an operator
//! scrapes, with the gauges read at scrape time.

use std::time::Duration;

use quarry_domain::AuditEntry;

use crate::CacheStats;

/// One server's state, read when the metrics are scraped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerGauges {
    /// Its registered name.
    pub server: String,
    /// `connected`, `disconnected`, `authenticating` or `error`.
    pub status: &'static str,
    /// True while its circuit breaker is open (requests fail fast).
    pub circuit_open: bool,
    /// Live sessions in its pool.
    pub sessions: u64,
    /// The most sessions its pool opens.
    pub pool_size: u64,
    /// Requests in flight on its sessions.
    pub in_flight: u64,
    /// When its OAuth access token expires (Unix seconds), when it has one.
    pub credential_expires_at: Option<i64>,
}

/// How the policy engine is doing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EngineHealth {
    /// Whether it answered just now.
    pub ready: bool,
    /// Why not, when it did not.
    pub detail: Option<String>,
    /// Workers replaced after failing (dead, hung, confused) since start.
    pub restarts: u64,
    /// Workers replaced because they had made their share of decisions.
    pub recycled: u64,
}

/// What the gauges say now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Gauges {
    /// The content cache's occupancy and evictions.
    pub cache: CacheStats,
    /// Every registered server.
    pub servers: Vec<ServerGauges>,
    /// The policy engine, when a policy decides.
    pub policy: Option<EngineHealth>,
}

/// Counts, times and exposes.
///
/// Contract: recording never fails and never blocks on I/O (it runs on every request); label
/// values that come from requests (server names in URIs) are bounded in number by the adapter,
/// so a caller cannot grow the exposition without end; [`Metrics::render`] escapes every label
/// value, so no request text can forge a line of the exposition.
pub trait Metrics: Send + Sync + std::fmt::Debug {
    /// One request answered or refused, as its audit entry describes it.
    fn request(&self, entry: &AuditEntry);
    /// One request refused, or answer withheld, because its audit record could not be written.
    fn audit_write_failed(&self);
    /// One policy exchange (`decide` or a batch of `allowed`), how long it took, and whether
    /// the engine failed to answer.
    fn policy_decision(&self, kind: &'static str, elapsed: Duration, failed: bool);
    /// Every metric in the Prometheus text exposition format (0.0.4), with `gauges`.
    fn render(&self, gauges: &Gauges) -> String;
}
