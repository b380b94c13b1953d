//! The audit trail's canonical JSON, chain material and chain verification, checked.

use super::*;
use proptest::prelude::*;

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

/// The entry as a JSON value, written canonically: what `canonical_entry` writes directly.
fn canonical_through_value(entry: &AuditEntry) -> String {
    canonical_json(&serde_json::to_value(entry).unwrap())
}

fn text() -> impl Strategy<Value = String> {
    // Quotes, backslashes, control characters and non-ASCII among the ordinary.
    proptest::string::string_regex("[a-z\"\\\\\u{0}-\u{1f}é€😀 /:.-]{0,24}").unwrap()
}

proptest! {
    #[test]
    fn an_entry_written_directly_is_its_value_written_canonically(
        texts in proptest::collection::vec(text(), 8),
        optional in proptest::collection::vec(proptest::option::of(text()), 8),
        numbers in (any::<u64>(), proptest::option::of(any::<u64>()), any::<u32>()),
        nanos in 0i64..4_000_000_000_000_000_000,
    ) {
        let entry = AuditEntry {
            time: chrono::DateTime::from_timestamp_nanos(nanos),
            correlation_id: texts[0].clone(),
            agent: texts[1].clone(),
            transport: texts[2].clone(),
            action: texts[3].clone(),
            input_digest: texts[4].clone(),
            server: optional[0].clone(),
            resource_uri: optional[1].clone(),
            byte_range: optional[2].clone(),
            decision: texts[5].clone(),
            explanation: optional[3].clone(),
            cache_status: optional[4].clone(),
            result: texts[6].clone(),
            error_code: optional[5].clone(),
            latency_us: numbers.0,
            bytes_returned: numbers.1,
            mcp_request_id: optional[6].clone(),
            host_request_id: optional[7].clone(),
            client_address: texts[7].is_empty().then(|| "127.0.0.1:1".to_owned()),
            retry_count: numbers.2 % 3,
        };
        prop_assert_eq!(canonical_entry(&entry), canonical_through_value(&entry));
    }
}

#[test]
fn every_field_of_an_entry_is_written_directly() {
    // All optional fields present and the retry count set: a field added to the entry but not
    // to the direct writer shows here as a difference.
    let entry = AuditEntry {
        explanation: Some("why".into()),
        byte_range: Some("0-9".into()),
        error_code: Some("E002".into()),
        mcp_request_id: Some("7".into()),
        host_request_id: Some("h".into()),
        client_address: Some("127.0.0.1:9".into()),
        retry_count: 2,
        ..entry(1)
    };
    let value = serde_json::to_value(&entry).unwrap();
    assert_eq!(value.as_object().unwrap().len(), 20);
    assert_eq!(canonical_entry(&entry), canonical_through_value(&entry));
}
