//! Metrics that keep what they are told, for use-case tests to inspect.

use std::{
    sync::{Mutex, MutexGuard},
    time::Duration,
};

use quarry_domain::AuditEntry;
use quarry_ports::{Gauges, Metrics};

/// Every request entry, audit failure and policy exchange reported, in order.
#[derive(Debug, Default)]
pub struct FakeMetrics {
    requests: Mutex<Vec<AuditEntry>>,
    audit_failures: Mutex<u64>,
    decisions: Mutex<Vec<(&'static str, Duration, bool)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl FakeMetrics {
    /// The entries reported so far.
    pub fn requests(&self) -> Vec<AuditEntry> {
        lock(&self.requests).clone()
    }

    /// Audit write failures reported so far.
    pub fn audit_failures(&self) -> u64 {
        *lock(&self.audit_failures)
    }

    /// Policy exchanges reported so far: kind, time taken, whether the engine failed.
    pub fn decisions(&self) -> Vec<(&'static str, Duration, bool)> {
        lock(&self.decisions).clone()
    }
}

impl Metrics for FakeMetrics {
    fn request(&self, entry: &AuditEntry) {
        lock(&self.requests).push(entry.clone());
    }

    fn audit_write_failed(&self) {
        *lock(&self.audit_failures) += 1;
    }

    fn policy_decision(&self, kind: &'static str, elapsed: Duration, failed: bool) {
        lock(&self.decisions).push((kind, elapsed, failed));
    }

    /// Two counters and the number of servers, in the text format.
    fn render(&self, gauges: &Gauges) -> String {
        format!(
            "# TYPE fake_requests_total counter\nfake_requests_total {}\n\
             # TYPE fake_audit_write_failures_total counter\nfake_audit_write_failures_total {}\n\
             # TYPE fake_servers gauge\nfake_servers {}\n",
            lock(&self.requests).len(),
            self.audit_failures(),
            gauges.servers.len()
        )
    }
}
