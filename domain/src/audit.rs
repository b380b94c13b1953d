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

/// The canonical JSON of an entry (how it is stored).
pub fn canonical_entry(entry: &AuditEntry) -> String {
    canonical_text(&serde_json::to_value(entry).unwrap_or(Value::Null))
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
mod tests {
    use super::*;

    /// Not SHA-256, but a digest all the same for the chain's logic (the adapters' tests use
    /// the real one).
    fn digest(bytes: &[u8]) -> Digest {
        use std::hash::{DefaultHasher, Hasher};
        let mut out = [0u8; 32];
        for (i, chunk) in out.chunks_mut(8).enumerate() {
            let mut h = DefaultHasher::new();
            h.write_usize(i);
            h.write(bytes);
            chunk.copy_from_slice(&h.finish().to_le_bytes());
        }
        Digest::new(out)
    }

    fn entry(n: u64) -> AuditEntry {
        AuditEntry {
            time: chrono::DateTime::from_timestamp(1_700_000_000 + n as i64, 0).unwrap_or_default(),
            correlation_id: format!("c{n}"),
            agent: "alice".into(),
            transport: "stdio".into(),
            action: "read".into(),
            input_digest: "d".into(),
            server: Some("docs".into()),
            resource_uri: Some(format!("mcp://docs/{n}")),
            byte_range: None,
            decision: "allow".into(),
            explanation: None,
            cache_status: Some("miss".into()),
            result: "ok".into(),
            error_code: None,
            latency_us: 10,
            bytes_returned: Some(5),
            mcp_request_id: None,
            host_request_id: None,
            client_address: None,
            retry_count: 0,
        }
    }

    fn chain(n: u64) -> Vec<AuditRecord> {
        let mut previous = GENESIS_HASH.to_owned();
        (1..=n)
            .map(|seq| {
                let entry = entry(seq);
                let record_hash = digest(&chain_material(seq, &entry, &previous)).hex();
                let r = AuditRecord {
                    seq,
                    entry,
                    previous_hash: previous.clone(),
                    record_hash: record_hash.clone(),
                };
                previous = record_hash;
                r
            })
            .collect()
    }

    fn start() -> (u64, String) {
        (0, GENESIS_HASH.to_owned())
    }

    #[test]
    fn canonical_json_sorts_keys_and_escapes_text() {
        let mut e = entry(1);
        e.resource_uri = Some("mcp://docs/a\n\u{1b}[31m\u{202e}".into());
        let text = canonical_entry(&e);
        assert!(
            text.starts_with("{\"action\":\"read\",\"agent\":\"alice\","),
            "{text}"
        );
        assert!(!text.contains('\n') && !text.contains('\u{1b}'), "{text}");
        let back: AuditEntry = serde_json::from_str(&text).unwrap_or_else(|_| entry(0));
        assert_eq!(back, e);
    }

    // The bytes a record's hash is taken of are those every trail so far was chained with (this
    // string was written by the encoder before `chain_material_of`): a change here would make
    // every stored trail fail to verify.
    #[test]
    fn the_chain_material_is_the_bytes_trails_were_chained_with() {
        let pinned = r#"{"entry":{"action":"read","agent":"al\"ice","byte_range":null,"bytes_returned":5,"cache_status":"miss","correlation_id":"c1","decision":"allow","error_code":null,"explanation":"rule é \n x","input_digest":"d","latency_us":10,"mcp_request_id":"7","resource_uri":"mcp://docs/1","result":"ok","retry_count":2,"server":"docs","time":"2023-11-14T22:13:21Z","transport":"stdio"},"previous_hash":"ab\"c","seq":42}"#;
        let mut e = entry(1);
        e.agent = "al\"ice".into();
        e.time = chrono::DateTime::from_timestamp(1_700_000_001, 0).unwrap_or_default();
        e.explanation = Some("rule é \n x".into());
        e.resource_uri = Some("mcp://docs/1".into());
        e.mcp_request_id = Some("7".into());
        e.retry_count = 2;
        let material = chain_material(42, &e, "ab\"c");
        assert_eq!(String::from_utf8_lossy(&material), pinned);
        let value = serde_json::json!({"seq": 42, "entry": e, "previous_hash": "ab\"c"});
        assert_eq!(canonical_json(&value), pinned);
    }

    // Records written before the request ids and the retry count existed read back and hash
    // as they were written: the new fields are left out when empty.
    #[test]
    fn fields_added_later_leave_older_records_as_they_were() {
        let e = entry(1);
        let old = canonical_entry(&e);
        assert!(
            !old.contains("retry_count") && !old.contains("mcp_request_id"),
            "{old}"
        );
        let back: AuditEntry = serde_json::from_str(&old).unwrap_or_else(|_| entry(0));
        assert_eq!(canonical_entry(&back), old);
        let newer = AuditEntry {
            mcp_request_id: Some("7".into()),
            retry_count: 2,
            ..e
        };
        let text = canonical_entry(&newer);
        assert!(
            text.contains("\"mcp_request_id\":\"7\"") && text.contains("\"retry_count\":2"),
            "{text}"
        );
    }

    #[test]
    fn an_intact_chain_verifies() {
        let records = chain(5);
        let (seq, hash) = verify_chain(&records, start(), digest).unwrap_or_default();
        assert_eq!(seq, 5);
        assert_eq!(hash, records[4].record_hash);
        // And continues from where a previous check stopped.
        let (seq, _) = verify_chain(&records[3..], (3, records[2].record_hash.clone()), digest)
            .unwrap_or_default();
        assert_eq!(seq, 5);
    }

    #[test]
    fn every_kind_of_tampering_is_found_and_named() {
        let mut edited = chain(5);
        edited[2].entry.agent = "mallory".into();
        let broken = verify_chain(&edited, start(), digest).unwrap_err();
        assert_eq!(broken.seq, 3);
        assert!(broken.what.starts_with("edited"), "{broken:?}");

        let mut deleted = chain(5);
        deleted.remove(2);
        let broken = verify_chain(&deleted, start(), digest).unwrap_err();
        assert_eq!(broken.seq, 4);
        assert_eq!(broken.what, "record 3 is missing before it");

        let mut reordered = chain(5);
        reordered.swap(1, 2);
        let broken = verify_chain(&reordered, start(), digest).unwrap_err();
        assert_eq!(broken.seq, 3);
        assert_eq!(broken.what, "out of order: it comes before record 2");

        // A forged record, hashed correctly, at the place of a real one.
        let mut inserted = chain(5);
        let mut forged = inserted[1].clone();
        forged.entry.resource_uri = Some("mcp://docs/forged".into());
        forged.record_hash = digest(&chain_material(2, &forged.entry, &forged.previous_hash)).hex();
        inserted.insert(2, forged);
        let broken = verify_chain(&inserted, start(), digest).unwrap_err();
        assert_eq!(broken.seq, 2);
        assert!(broken.what.starts_with("inserted"), "{broken:?}");

        // The last record deleted: the chain is shorter than its head says (checked by the
        // store, which keeps the head); what remains verifies.
        let mut truncated = chain(5);
        truncated.pop();
        assert_eq!(
            verify_chain(&truncated, start(), digest).map(|v| v.0),
            Ok(4)
        );
    }
}
