//! The audit trail: what each request was, who made it, what was decided and what came of it,
//! as hash-chained records. A record's hash is the SHA-256 of its canonical JSON (object keys
//! sorted, no whitespace), which holds its sequence number, the entry and the previous record's
//! hash, so an edited, inserted, reordered or deleted record breaks the chain where it is
//! (the shape SEP-3004 proposes: `previous_hash`, `record_hash`).
//!
//! An entry never holds a secret, a token or content: inputs are kept as a digest, and text
//! that came from a request (URIs, names) is kept as data, escaped by JSON.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Digest, Timestamp};

/// The `previous_hash` of the first record.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// One request, as the trail keeps it. Unknown fields are refused when read back, so a field
/// added to a stored record is an edit the chain sees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditEntry {
    /// When the request was answered.
    pub time: Timestamp,
    /// Ties the record to the request's log lines.
    pub correlation_id: String,
    /// Who asked (the transport's identity).
    pub agent: String,
    /// How (`stdio`, `http`).
    pub transport: String,
    /// What: the operation (`list`, `read`, `versions`, `purge`, `add_server`, ...).
    pub action: String,
    /// The SHA-256 of the request's arguments (never the arguments).
    pub input_digest: String,
    /// The server it concerned.
    pub server: Option<String>,
    /// The gateway URI it concerned.
    pub resource_uri: Option<String>,
    /// The byte range asked (`first-last`, inclusive, or `first-` to the end); none for all.
    pub byte_range: Option<String>,
    /// `allow` or `deny`.
    pub decision: String,
    /// Why, when the policy said (its rule or the missing condition).
    pub explanation: Option<String>,
    /// `hit` or `miss`, for reads.
    pub cache_status: Option<String>,
    /// `ok` or `error`.
    pub result: String,
    /// The E-code of an error.
    pub error_code: Option<String>,
    /// Time taken, in microseconds.
    pub latency_us: u64,
    /// Bytes of content returned.
    pub bytes_returned: Option<u64>,
    /// The MCP request's JSON-RPC id. Fields from here on are left out when empty, so that
    /// records written before they existed hash as they did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_request_id: Option<String>,
    /// The id the agent's host gave the operation, when it passed one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_request_id: Option<String>,
    /// Where the request came from, on a network transport.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_address: Option<String>,
    /// Upstream calls retried while answering it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retry_count: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// An entry in the chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Its place: 1, 2, 3... with no gaps.
    pub seq: u64,
    /// The entry.
    pub entry: AuditEntry,
    /// The hash of the record before it ([`GENESIS_HASH`] for the first).
    pub previous_hash: String,
    /// The SHA-256 (hex) of [`chain_material`] of this record.
    pub record_hash: String,
}

/// Where the trail starts once retention has removed the records before it: the last removed
/// record's number and hash (the remaining chain continues from them; every record up to it
/// is gone), when, and a signature over these by the trail's signing key, so a checkpoint
/// cannot be moved or made up without the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditCheckpoint {
    /// The last record removed.
    pub seq: u64,
    /// Its `record_hash`: the first remaining record's `previous_hash`.
    pub record_hash: String,
    /// When the records were removed.
    pub pruned_at: Timestamp,
    /// Which key signed it (a digest of its public half).
    pub key_id: String,
    /// The signature (hex) of [`AuditCheckpoint::material`].
    pub signature: String,
}

impl AuditCheckpoint {
    /// The bytes signed: the canonical JSON of every field but the signature.
    pub fn material(&self) -> Vec<u8> {
        let value = serde_json::json!({
            "seq": self.seq,
            "record_hash": self.record_hash,
            "pruned_at": self.pruned_at,
            "key_id": self.key_id,
        });
        canonical_json(&value).into_bytes()
    }
}

/// Which records an export selects; every condition given must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AuditFilter {
    /// At or after this time.
    pub since: Option<Timestamp>,
    /// Before this time.
    pub until: Option<Timestamp>,
    /// This agent's.
    pub agent: Option<String>,
    /// About this server.
    pub server: Option<String>,
    /// `allow` or `deny`.
    pub decision: Option<String>,
}

impl AuditFilter {
    /// Whether `entry` is selected.
    pub fn matches(&self, entry: &AuditEntry) -> bool {
        self.since.is_none_or(|t| entry.time >= t)
            && self.until.is_none_or(|t| entry.time < t)
            && self.agent.as_ref().is_none_or(|a| *a == entry.agent)
            && self
                .server
                .as_ref()
                .is_none_or(|s| entry.server.as_ref() == Some(s))
            && self.decision.as_ref().is_none_or(|d| *d == entry.decision)
    }

    /// A filter time from RFC 3339 text (`what` names the field in the error).
    ///
    /// # Errors
    /// E001 naming `what` when `text` is not an RFC 3339 time.
    pub fn time(what: &str, text: &str) -> Result<Timestamp, crate::Error> {
        chrono::DateTime::parse_from_rfc3339(text)
            .map(|t| t.with_timezone(&chrono::Utc))
            .map_err(|e| {
                crate::Error::invalid(format!(
                    "{what} must be an RFC 3339 time such as 2026-12-01T00:00:00Z: {e}"
                ))
            })
    }

    /// A decision to select by, checked.
    ///
    /// # Errors
    /// E001 unless `text` is `allow` or `deny`.
    pub fn decision(text: &str) -> Result<String, crate::Error> {
        match text {
            "allow" | "deny" => Ok(text.to_owned()),
            other => Err(crate::Error::invalid(format!(
                "decision must be allow or deny, not {:?}",
                other.chars().take(32).collect::<String>()
            ))),
        }
    }
}

/// Where and how a chain is broken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainBreak {
    /// The record at which the chain stops verifying.
    pub seq: u64,
    /// What is wrong there.
    pub what: String,
}

/// Writes `value` as canonical JSON: object keys sorted, no whitespace. Strings and numbers are
/// written as serde_json writes them (it cannot fail writing into memory).
fn canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push(b'{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                let _ = serde_json::to_writer(&mut *out, key);
                out.push(b':');
                canonical(&map[key], out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical(item, out);
            }
            out.push(b']');
        }
        other => {
            let _ = serde_json::to_writer(&mut *out, other);
        }
    }
}

fn canonical_text(value: &Value) -> String {
    let mut out = Vec::with_capacity(512);
    canonical(value, &mut out);
    // Only serde_json's own output and ASCII punctuation went in.
    String::from_utf8(out).unwrap_or_default()
}

/// `value` as canonical JSON (object keys sorted, no whitespace).
pub fn canonical_json(value: &Value) -> String {
    canonical_text(value)
}

/// The canonical JSON of an entry (how it is stored): the same bytes as the entry turned into a
/// JSON value and written with [`canonical_json`], written field by field in sorted key order
/// instead (an entry is flat: strings, numbers and nulls), so that an audited request does not
/// build a map of twenty keys to hash its record.
pub fn canonical_entry(entry: &AuditEntry) -> String {
    let mut out = Vec::with_capacity(512);
    let mut w = Flat::new(&mut out);
    w.field("action", &entry.action);
    w.field("agent", &entry.agent);
    w.field("byte_range", &entry.byte_range);
    w.field("bytes_returned", &entry.bytes_returned);
    w.field("cache_status", &entry.cache_status);
    w.present("client_address", entry.client_address.as_ref());
    w.field("correlation_id", &entry.correlation_id);
    w.field("decision", &entry.decision);
    w.field("error_code", &entry.error_code);
    w.field("explanation", &entry.explanation);
    w.present("host_request_id", entry.host_request_id.as_ref());
    w.field("input_digest", &entry.input_digest);
    w.field("latency_us", &entry.latency_us);
    w.present("mcp_request_id", entry.mcp_request_id.as_ref());
    w.field("resource_uri", &entry.resource_uri);
    w.field("result", &entry.result);
    w.present("retry_count", Some(&entry.retry_count).filter(|n| **n != 0));
    w.field("server", &entry.server);
    w.field("time", &entry.time);
    w.field("transport", &entry.transport);
    out.push(b'}');
    // Only serde_json's own output and ASCII punctuation went in.
    String::from_utf8(out).unwrap_or_default()
}

/// A flat JSON object written one field at a time, the caller giving the keys in sorted order.
struct Flat<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl<'a> Flat<'a> {
    fn new(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        Self { out, first: true }
    }

    /// `"key":value`, `key` being plain ASCII that needs no escaping.
    fn field(&mut self, key: &str, value: &impl Serialize) {
        if !std::mem::take(&mut self.first) {
            self.out.push(b',');
        }
        self.out.push(b'"');
        self.out.extend_from_slice(key.as_bytes());
        self.out.extend_from_slice(b"\":");
        let _ = serde_json::to_writer(&mut *self.out, value);
    }

    /// A field skipped when it is absent (`skip_serializing_if` on the entry).
    fn present(&mut self, key: &str, value: Option<&impl Serialize>) {
        if let Some(value) = value {
            self.field(key, value);
        }
    }
}

/// The bytes a record's hash is taken of: the canonical JSON of
/// `{"entry": ..., "previous_hash": ..., "seq": ...}`.
pub fn chain_material(seq: u64, entry: &AuditEntry, previous_hash: &str) -> Vec<u8> {
    chain_material_of(seq, &canonical_entry(entry), previous_hash)
}

/// [`chain_material`] for an entry whose canonical JSON (`canonical_entry`) is at hand: the
/// same bytes, written around it (the three keys in their sorted order) instead of encoding
/// the entry again.
pub fn chain_material_of(seq: u64, canonical_entry: &str, previous_hash: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(canonical_entry.len() + previous_hash.len() + 48);
    out.extend_from_slice(b"{\"entry\":");
    out.extend_from_slice(canonical_entry.as_bytes());
    out.extend_from_slice(b",\"previous_hash\":");
    let _ = serde_json::to_writer(&mut out, previous_hash);
    out.extend_from_slice(b",\"seq\":");
    out.extend_from_slice(seq.to_string().as_bytes());
    out.push(b'}');
    out
}

/// Checks `records` in their stored order, continuing a chain whose last verified record was
/// `after` (seq and hash; `(0, GENESIS_HASH)` from the start), with `sha256` computing
/// digests. Returns the last record verified.
///
/// # Errors
/// The first record at which the chain breaks, and how: edited (its hash is not its
/// content's), out of order (a record it should follow comes after it), records missing before
/// it (a gap in the sequence), or inserted (it does not follow the record before it).
pub fn verify_chain(
    records: &[AuditRecord],
    after: (u64, String),
    sha256: impl Fn(&[u8]) -> Digest,
) -> Result<(u64, String), ChainBreak> {
    let (mut seq, mut hash) = after;
    for (i, r) in records.iter().enumerate() {
        let broken = |what: String| ChainBreak { seq: r.seq, what };
        let computed = sha256(&chain_material(r.seq, &r.entry, &r.previous_hash)).hex();
        if computed != r.record_hash {
            return Err(broken("edited: its hash does not match its content".into()));
        }
        if r.seq > seq + 1 && r.previous_hash != hash {
            let skipped = seq + 1..r.seq;
            if let Some(later) = records[i + 1..].iter().find(|l| skipped.contains(&l.seq)) {
                return Err(broken(format!(
                    "out of order: it comes before record {}",
                    later.seq
                )));
            }
            return Err(broken(if r.seq == seq + 2 {
                format!("record {} is missing before it", seq + 1)
            } else {
                format!("records {} to {} are missing before it", seq + 1, r.seq - 1)
            }));
        }
        if r.seq != seq + 1 || r.previous_hash != hash {
            return Err(broken(format!("inserted: it does not follow record {seq}")));
        }
        seq = r.seq;
        hash = r.record_hash.clone();
    }
    Ok((seq, hash))
}

#[cfg(test)]
mod tests;
