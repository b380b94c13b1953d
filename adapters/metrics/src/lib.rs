//! Prometheus metrics: [`PrometheusMetrics`] counts and times what the decorators report, reads
//! the gauges it is handed at scrape time, and renders the text exposition (format 0.0.4).
//!
//! Label values that come from requests are bounded: at most [`MAX_SERVER_LABELS`] server
//! names get their own series, the rest are counted under `other`, so an agent asking for
//! endless made-up servers cannot grow the exposition. The encoder escapes every label value
//! (`\`, `"`, newline), so no request text can forge a line.

use std::{
    collections::HashSet,
    sync::{Mutex, MutexGuard},
    time::Duration,
};

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use quarry_domain::AuditEntry;
use quarry_ports::{Gauges, Metrics};

/// Distinct server names that get series of their own.
pub const MAX_SERVER_LABELS: usize = 256;

/// Request latency buckets, in seconds: 100 µs to 30 s.
const REQUEST_BUCKETS: &[f64] = &[
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];
/// Policy decision buckets, in seconds: 10 µs to 1 s.
const DECISION_BUCKETS: &[f64] = &[
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 1.0,
];

/// Counters whose running totals live elsewhere (the cache, the policy engine): the last total
/// seen, so each scrape adds what is new.
#[derive(Debug, Default)]
struct Totals {
    evictions: u64,
    restarts: u64,
    recycled: u64,
}

#[derive(Debug)]
struct Series {
    requests: IntCounterVec,
    errors: IntCounterVec,
    duration: HistogramVec,
    cache: IntCounterVec,
    bytes: IntCounterVec,
    audit_failures: IntCounter,
    decisions: HistogramVec,
    decision_failures: IntCounterVec,
    cache_entries: IntGauge,
    cache_bytes: IntGauge,
    cache_capacity: IntGauge,
    cache_degraded: IntGauge,
    cache_evictions: IntCounter,
    server_up: IntGaugeVec,
    circuit_open: IntGaugeVec,
    sessions: IntGaugeVec,
    pool_size: IntGaugeVec,
    in_flight: IntGaugeVec,
    credential_expiry: IntGaugeVec,
    policy_ready: IntGauge,
    policy_restarts: IntCounter,
    policy_recycled: IntCounter,
}

/// The gateway's metrics, in one registry of their own.
#[derive(Debug)]
pub struct PrometheusMetrics {
    registry: Registry,
    series: Series,
    servers: Mutex<HashSet<String>>,
    totals: Mutex<Totals>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Registers what `make` builds in `registry`.
fn add<C: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    made: prometheus::Result<C>,
) -> prometheus::Result<C> {
    let c = made?;
    registry.register(Box::new(c.clone()))?;
    Ok(c)
}

impl Series {
    fn new(r: &Registry) -> prometheus::Result<Self> {
        let counter = |name: &str, help: &str, labels: &[&str]| {
            add(r, IntCounterVec::new(Opts::new(name, help), labels))
        };
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            add(r, IntGaugeVec::new(Opts::new(name, help), labels))
        };
        let histogram = |name: &str, help: &str, labels: &[&str], buckets: &[f64]| {
            add(
                r,
                HistogramVec::new(
                    HistogramOpts::new(name, help).buckets(buckets.to_vec()),
                    labels,
                ),
            )
        };
        Ok(Self {
            requests: counter(
                "quarry_requests_total",
                "Requests answered or refused, by tool, server and result (ok or the E-code).",
                &["tool", "server", "result"],
            )?,
            errors: counter(
                "quarry_request_errors_total",
                "Requests that failed, by tool, server and E-code.",
                &["tool", "server", "code"],
            )?,
            duration: histogram(
                "quarry_request_duration_seconds",
                "How long requests took, by tool.",
                &["tool"],
                REQUEST_BUCKETS,
            )?,
            cache: counter(
                "quarry_cache_requests_total",
                "Reads and listings answered from the cache (hit) or not (miss).",
                &["tool", "status"],
            )?,
            bytes: counter(
                "quarry_bytes_returned_total",
                "Bytes of content returned, by tool.",
                &["tool"],
            )?,
            audit_failures: add(
                r,
                IntCounter::new(
                    "quarry_audit_write_failures_total",
                    "Requests refused, or answers withheld, because their audit record could not be written.",
                ),
            )?,
            decisions: histogram(
                "quarry_policy_decision_duration_seconds",
                "How long the policy engine took, by exchange (decide, or a batch for a listing).",
                &["kind"],
                DECISION_BUCKETS,
            )?,
            decision_failures: counter(
                "quarry_policy_decision_failures_total",
                "Policy exchanges the engine could not answer (the request was denied).",
                &["kind"],
            )?,
            cache_entries: add(
                r,
                IntGauge::new("quarry_cache_entries", "Entries in the content cache."),
            )?,
            cache_bytes: add(
                r,
                IntGauge::new("quarry_cache_bytes", "Bytes the content cache holds."),
            )?,
            cache_capacity: add(
                r,
                IntGauge::new(
                    "quarry_cache_capacity_bytes",
                    "The content cache's byte budget.",
                ),
            )?,
            cache_degraded: add(
                r,
                IntGauge::new(
                    "quarry_cache_degraded",
                    "1 while the shared cache (Redis) cannot be reached and requests go to the upstreams.",
                ),
            )?,
            cache_evictions: add(
                r,
                IntCounter::new(
                    "quarry_cache_evictions_total",
                    "Entries dropped from the content cache to make room.",
                ),
            )?,
            server_up: gauge(
                "quarry_upstream_status",
                "1 for each server's current status (connected, disconnected, authenticating, error).",
                &["server", "status"],
            )?,
            circuit_open: gauge(
                "quarry_upstream_circuit_open",
                "1 while a server's circuit breaker is open (its requests fail fast).",
                &["server"],
            )?,
            sessions: gauge(
                "quarry_upstream_sessions",
                "Live sessions in a server's pool.",
                &["server"],
            )?,
            pool_size: gauge(
                "quarry_upstream_pool_size",
                "The most sessions a server's pool opens.",
                &["server"],
            )?,
            in_flight: gauge(
                "quarry_upstream_in_flight",
                "Requests in flight to a server.",
                &["server"],
            )?,
            credential_expiry: gauge(
                "quarry_credential_expiry_timestamp_seconds",
                "When a server's OAuth access token expires (Unix time).",
                &["server"],
            )?,
            policy_ready: add(
                r,
                IntGauge::new(
                    "quarry_policy_ready",
                    "1 when the policy worker answers, 0 when it does not.",
                ),
            )?,
            policy_restarts: add(
                r,
                IntCounter::new(
                    "quarry_policy_worker_restarts_total",
                    "Policy workers replaced after dying, hanging or answering nonsense.",
                ),
            )?,
            policy_recycled: add(
                r,
                IntCounter::new(
                    "quarry_policy_worker_recycled_total",
                    "Policy workers replaced after their share of decisions.",
                ),
            )?,
        })
    }
}

impl PrometheusMetrics {
    /// Fresh metrics, every counter at zero.
    ///
    /// # Errors
    /// Never in practice: the metric names and labels are fixed (a clash is a bug).
    pub fn new() -> Result<Self, String> {
        let registry = Registry::new();
        let series = Series::new(&registry).map_err(|e| e.to_string())?;
        Ok(Self {
            registry,
            series,
            servers: Mutex::new(HashSet::new()),
            totals: Mutex::new(Totals::default()),
        })
    }

    /// The label for `server`: its name while fewer than [`MAX_SERVER_LABELS`] have been seen.
    fn server_label(&self, server: Option<&str>) -> String {
        let Some(server) = server else {
            return String::new();
        };
        let mut seen = lock(&self.servers);
        if seen.contains(server) {
            return server.to_owned();
        }
        if seen.len() < MAX_SERVER_LABELS {
            seen.insert(server.to_owned());
            return server.to_owned();
        }
        "other".to_owned()
    }

    fn set_gauges(&self, gauges: &Gauges) {
        let s = &self.series;
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        s.cache_entries.set(gauge(gauges.cache.entries));
        s.cache_bytes.set(gauge(gauges.cache.bytes));
        s.cache_capacity.set(gauge(gauges.cache.capacity_bytes));
        s.cache_degraded.set(i64::from(gauges.cache.degraded));
        for g in [
            &s.server_up,
            &s.circuit_open,
            &s.sessions,
            &s.pool_size,
            &s.in_flight,
            &s.credential_expiry,
        ] {
            g.reset();
        }
        for server in &gauges.servers {
            let name = [server.server.as_str()];
            s.server_up
                .with_label_values(&[server.server.as_str(), server.status])
                .set(1);
            s.circuit_open
                .with_label_values(&name)
                .set(i64::from(server.circuit_open));
            s.sessions
                .with_label_values(&name)
                .set(gauge(server.sessions));
            s.pool_size
                .with_label_values(&name)
                .set(gauge(server.pool_size));
            s.in_flight
                .with_label_values(&name)
                .set(gauge(server.in_flight));
            if let Some(at) = server.credential_expires_at {
                s.credential_expiry.with_label_values(&name).set(at);
            }
        }
        let mut totals = lock(&self.totals);
        let grow = |counter: &IntCounter, last: &mut u64, now: u64| {
            if now > *last {
                counter.inc_by(now - *last);
            }
            *last = now;
        };
        grow(
            &s.cache_evictions,
            &mut totals.evictions,
            gauges.cache.evictions,
        );
        if let Some(policy) = &gauges.policy {
            s.policy_ready.set(i64::from(policy.ready));
            grow(&s.policy_restarts, &mut totals.restarts, policy.restarts);
            grow(&s.policy_recycled, &mut totals.recycled, policy.recycled);
        }
    }
}

impl Metrics for PrometheusMetrics {
    fn request(&self, entry: &AuditEntry) {
        let s = &self.series;
        let tool = entry.action.as_str();
        let server = self.server_label(entry.server.as_deref());
        let result = entry.error_code.as_deref().unwrap_or("ok");
        s.requests
            .with_label_values(&[tool, server.as_str(), result])
            .inc();
        if let Some(code) = &entry.error_code {
            s.errors
                .with_label_values(&[tool, server.as_str(), code.as_str()])
                .inc();
        }
        s.duration
            .with_label_values(&[tool])
            .observe(Duration::from_micros(entry.latency_us).as_secs_f64());
        if let Some(status) = entry.cache_status.as_deref() {
            s.cache.with_label_values(&[tool, status]).inc();
        }
        if let Some(bytes) = entry.bytes_returned {
            s.bytes.with_label_values(&[tool]).inc_by(bytes);
        }
    }

    fn audit_write_failed(&self) {
        self.series.audit_failures.inc();
    }

    fn policy_decision(&self, kind: &'static str, elapsed: Duration, failed: bool) {
        self.series
            .decisions
            .with_label_values(&[kind])
            .observe(elapsed.as_secs_f64());
        if failed {
            self.series
                .decision_failures
                .with_label_values(&[kind])
                .inc();
        }
    }

    fn render(&self, gauges: &Gauges) -> String {
        self.set_gauges(gauges);
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            // Only an I/O failure of the buffer could cause this.
            return format!("# the metrics could not be encoded: {e}\n");
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

#[cfg(test)]
mod tests;
