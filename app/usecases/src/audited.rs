//! The audit decorator: [`Audited`] wraps the gateway an agent uses (outside the policy
//! decorator, so denials are recorded too) and writes one record per listing, read, version
//! read, purge, registry change and credential change; the same entry is counted and timed by
//! the metrics (with the trail off too). It fails closed: when the trail cannot
//! be written, the request is refused with E011 before it starts, and an answer whose record
//! could not be written is replaced by E011, so no answered request lacks its record.
//!
//! A record holds a digest of the request's arguments, never the arguments; for credential
//! changes not even that of the secret (only the server and the credential's type). Each
//! request runs in a `request` span carrying its correlation id, so every log line it causes
//! can be matched with its record.

mod port;

use std::{
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicU32, AtomicU64, Ordering},
    },
};

use quarry_domain::{
    AuditEntry, ByteRange, Error, ErrorCode, Principal, ReadResourceResult, ResourceUri,
    ServerName, canonical_json,
};
use quarry_ports::{AuditLog, Clock, ContentHasher, Metrics, RequestMeta, ResourceGateway};
use serde_json::Value;
use tracing::Instrument;

tokio::task_local! {
    /// The rules' reason for refusing the request being audited, set by the policy decorator
    /// inside it.
    static DENIAL: std::cell::RefCell<Option<String>>;
}

/// Gives the audit record of the request in progress the policy's reason for a denial (nothing
/// happens when the request is not audited).
pub(crate) fn explain_denial(why: String) {
    let _ = DENIAL.try_with(|d| *d.borrow_mut() = Some(why));
}

tokio::task_local! {
    /// Upstream calls retried for the request being audited.
    static RETRIES: Arc<AtomicU32>;
}

/// Counts one retry toward the request in progress (nothing happens outside one).
pub(crate) fn note_retry() {
    let _ = RETRIES.try_with(|r| r.fetch_add(1, Ordering::Relaxed));
}

/// The retry counter of the request in progress, for work it hands to a task of its own.
pub(crate) fn retry_counter() -> Option<Arc<AtomicU32>> {
    RETRIES.try_with(Arc::clone).ok()
}

/// Runs `work` with its retries counted in `counter` (as is, without one).
pub(crate) async fn counting_retries<F: Future>(
    counter: Option<Arc<AtomicU32>>,
    work: F,
) -> F::Output {
    match counter {
        Some(counter) => RETRIES.scope(counter, work).await,
        None => work.await,
    }
}

/// What a request concerned, for its record.
#[derive(Debug, Default)]
struct Subject {
    server: Option<String>,
    resource_uri: Option<String>,
    byte_range: Option<String>,
}

/// What came of it, beyond success or failure.
#[derive(Debug, Default)]
struct Outcome {
    cache_status: Option<&'static str>,
    bytes_returned: Option<u64>,
}

/// Where the decorator accounts for requests.
#[derive(Debug, Clone)]
pub struct Accounts {
    /// The audit trail; none when `logging.audit_enabled` is false (then nothing is refused for
    /// its sake, and no record is written).
    pub trail: Option<Arc<dyn AuditLog>>,
    /// Request counts and latencies, and audit write failures.
    pub metrics: Arc<dyn Metrics>,
    /// Digests of inputs.
    pub hasher: Arc<dyn ContentHasher>,
    /// Times and latencies.
    pub clock: Arc<dyn Clock>,
}

/// What every request through one agent's gateway shares.
#[derive(Debug)]
pub struct Shared {
    inner: Arc<dyn ResourceGateway>,
    accounts: Accounts,
    agent: Principal,
    transport: String,
    /// Correlation ids: this gateway's start, then a counter.
    run: String,
    next: AtomicU64,
}

/// The gateway as one agent uses it, every request accounted for.
#[derive(Debug)]
pub struct Audited {
    shared: Arc<Shared>,
    /// What the transport said of the request this handle serves (none: the gateway itself).
    meta: RequestMeta,
}

impl std::ops::Deref for Audited {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.shared
    }
}

fn range_text(range: ByteRange) -> Option<String> {
    if range == ByteRange::WHOLE {
        return None;
    }
    Some(match range.limit() {
        // Inclusive, as HTTP writes ranges.
        Some(limit) => format!(
            "{}-{}",
            range.offset(),
            range.offset().saturating_add(limit.saturating_sub(1))
        ),
        None => format!("{}-", range.offset()),
    })
}

/// What one request was and came to, before it becomes an entry.
struct Accounted<'a> {
    correlation_id: String,
    action: &'a str,
    input: &'a Value,
    subject: Subject,
    outcome: Result<Outcome, &'a Error>,
    reason: Option<String>,
    latency: std::time::Duration,
}

impl Audited {
    /// The gateway `inner`, as `agent` uses it over `transport`, accounted for in `accounts`.
    pub fn new(
        inner: Arc<dyn ResourceGateway>,
        accounts: Accounts,
        agent: Principal,
        transport: &str,
    ) -> Self {
        let run = format!("{:x}", accounts.clock.now().timestamp_micros());
        Self {
            shared: Arc::new(Shared {
                inner,
                accounts,
                agent,
                transport: transport.to_owned(),
                run,
                next: AtomicU64::new(1),
            }),
            meta: RequestMeta::default(),
        }
    }

    /// This gateway for the request `meta` describes.
    pub(crate) fn scoped(&self, meta: RequestMeta) -> Self {
        Self {
            shared: self.shared.clone(),
            meta,
        }
    }

    /// Runs `work` for `action` with its record: refused when the trail cannot be written,
    /// answered only once its record is.
    async fn recorded<T>(
        &self,
        action: &str,
        input: Value,
        subject: Subject,
        work: impl Future<Output = Result<T, Error>>,
        outcome: impl Fn(&T) -> Outcome,
    ) -> Result<T, Error> {
        let correlation_id = format!("{}-{}", self.run, self.next.fetch_add(1, Ordering::Relaxed));
        let clock = &self.accounts.clock;
        if let Some(trail) = &self.accounts.trail
            && let Err(e) = trail.writable().await
        {
            tracing::error!(%correlation_id, action, "audit trail unwritable, request refused: {e}");
            self.accounts.metrics.audit_write_failed();
            let refused = unrecorded();
            self.accounts.metrics.request(&self.entry(Accounted {
                correlation_id,
                action,
                input: &input,
                subject,
                outcome: Err(&refused),
                reason: None,
                latency: std::time::Duration::ZERO,
            }));
            return Err(refused);
        }
        let span = tracing::info_span!("request", %correlation_id, agent = %self.agent, action);
        let started = clock.monotonic();
        let retries = Arc::new(AtomicU32::new(0));
        let (result, reason) = DENIAL
            .scope(
                std::cell::RefCell::new(None),
                counting_retries(Some(retries.clone()), async {
                    let result = work.instrument(span.clone()).await;
                    (result, DENIAL.with(|d| d.borrow_mut().take()))
                }),
            )
            .await;
        let latency = clock.monotonic().saturating_sub(started);
        span.in_scope(|| match &result {
            Ok(_) => tracing::debug!(latency_us = latency.as_micros(), "answered"),
            Err(e) => tracing::debug!(
                latency_us = latency.as_micros(),
                code = e.code().as_str(),
                "failed"
            ),
        });
        let entry = self.entry(Accounted {
            correlation_id,
            action,
            input: &input,
            subject,
            outcome: result.as_ref().map(&outcome),
            reason,
            latency,
        });
        let entry = AuditEntry {
            retry_count: retries.load(Ordering::Relaxed),
            ..entry
        };
        // Past the transport's time bound its client got E009, whatever the work came to.
        let entry = if self
            .meta
            .answer_within
            .is_some_and(|within| latency > within)
        {
            AuditEntry {
                result: "error".to_owned(),
                error_code: Some(ErrorCode::E009.as_str().to_owned()),
                bytes_returned: None,
                ..entry
            }
        } else {
            entry
        };
        if let Some(trail) = &self.accounts.trail
            && let Err(e) = trail.append(&entry).await
        {
            let correlation_id = &entry.correlation_id;
            tracing::error!(%correlation_id, action, "audit record not written, answer withheld: {e}");
            self.accounts.metrics.audit_write_failed();
            let withheld = unrecorded();
            self.accounts.metrics.request(&AuditEntry {
                result: "error".to_owned(),
                error_code: Some(withheld.code().as_str().to_owned()),
                bytes_returned: None,
                ..entry
            });
            return Err(withheld);
        }
        self.accounts.metrics.request(&entry);
        result
    }

    fn entry(&self, a: Accounted<'_>) -> AuditEntry {
        let explanation = match a.outcome {
            Err(e) if is_denial(e) => Some(a.reason.unwrap_or_else(|| e.message().to_owned())),
            _ => None,
        };
        let (result_text, error_code, decision, seen) = match a.outcome {
            Ok(seen) => ("ok", None, "allow", seen),
            Err(e) => (
                "error",
                Some(e.code().as_str().to_owned()),
                if is_denial(e) { "deny" } else { "allow" },
                Outcome::default(),
            ),
        };
        AuditEntry {
            time: self.accounts.clock.now(),
            correlation_id: a.correlation_id,
            agent: self.agent.as_str().to_owned(),
            transport: self.transport.clone(),
            action: a.action.to_owned(),
            // Only the trail keeps it; the metrics have no use for it.
            input_digest: if self.accounts.trail.is_some() {
                self.digest(a.input)
            } else {
                String::new()
            },
            server: a.subject.server,
            resource_uri: a.subject.resource_uri,
            byte_range: a.subject.byte_range,
            decision: decision.to_owned(),
            explanation,
            cache_status: seen.cache_status.map(str::to_owned),
            result: result_text.to_owned(),
            error_code,
            latency_us: u64::try_from(a.latency.as_micros()).unwrap_or(u64::MAX),
            bytes_returned: seen.bytes_returned,
            mcp_request_id: self.meta.mcp_request_id.clone(),
            host_request_id: self.meta.host_request_id.clone(),
            client_address: self.meta.client_address.clone(),
            retry_count: 0,
        }
    }

    fn digest(&self, input: &Value) -> String {
        // Canonical JSON (sorted keys), as the records themselves are.
        self.accounts
            .hasher
            .sha256(canonical_json(input).as_bytes())
            .hex()
    }
}

/// A denial by the policy (E004 with the policy's text).
fn is_denial(e: &Error) -> bool {
    e.code() == ErrorCode::E004 && e.message().starts_with("access denied by policy")
}

fn unrecorded() -> Error {
    Error::new(
        ErrorCode::E011,
        "the audit trail cannot be written; the request is refused (see the gateway's log)",
    )
}

fn server_subject(server: &ServerName) -> Subject {
    Subject {
        server: Some(server.as_str().to_owned()),
        ..Subject::default()
    }
}

fn uri_subject(uri: &ResourceUri, range: Option<String>) -> Subject {
    Subject {
        server: Some(uri.server().as_str().to_owned()),
        resource_uri: Some(uri.as_str().to_owned()),
        byte_range: range,
    }
}

/// Bytes of content in a read's answer (text, or base64 decoded).
fn content_bytes(r: &ReadResourceResult) -> u64 {
    let n = match (&r.content, &r.bytes_content) {
        (Some(text), _) => text.len(),
        (None, Some(b64)) => {
            let padding = b64.bytes().rev().take_while(|b| *b == b'=').count();
            (b64.len() / 4 * 3).saturating_sub(padding)
        }
        (None, None) => 0,
    };
    u64::try_from(n).unwrap_or(u64::MAX)
}
