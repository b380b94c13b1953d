//! The audit log contract (see [`AuditLog`]): records numbered 1, 2, 3... and chained by
//! `quarry_domain::chain_material`, one at a time or in batches; the head is the last record;
//! concurrent appenders extend one chain.

use std::sync::Arc;

use chrono::TimeZone;
use quarry_domain::{AuditCheckpoint, AuditEntry, GENESIS_HASH, verify_chain};
use quarry_ports::{AuditLog, ContentHasher, StoreError};

/// An entry for `n` (sample data, with characters a log line must not let through).
pub fn entry(n: u64) -> AuditEntry {
    AuditEntry {
        time: chrono::Utc
            .timestamp_micros(1_700_000_000_000_000 + i64::try_from(n).unwrap())
            .unwrap(),
        correlation_id: format!("corr-{n}"),
        agent: "alice".into(),
        transport: "stdio".into(),
        action: "read".into(),
        input_digest: format!("{n:064x}"),
        server: Some("docs".into()),
        resource_uri: Some(format!("mcp://docs/{n}\n\u{1b}[2J\u{202e}")),
        byte_range: Some("0-99".into()),
        decision: "allow".into(),
        explanation: None,
        cache_status: Some("miss".into()),
        result: "ok".into(),
        error_code: None,
        latency_us: n,
        bytes_returned: Some(100),
        mcp_request_id: Some(n.to_string()),
        host_request_id: n.is_multiple_of(2).then(|| format!("host-{n}")),
        client_address: None,
        retry_count: u32::try_from(n % 3).unwrap(),
    }
}

/// Every record of `log`, from its checkpoint if retention left one, checked against `hasher`
/// and the head.
pub async fn verified(log: &dyn AuditLog, hasher: &dyn ContentHasher) -> u64 {
    let mut at = match log.checkpoint().await.unwrap() {
        Some(c) => (c.seq, c.record_hash),
        None => (0, GENESIS_HASH.to_owned()),
    };
    loop {
        let page = log.records(at.0, 64).await.unwrap();
        if page.is_empty() {
            break;
        }
        at = verify_chain(&page, at, |b| hasher.sha256(b)).unwrap();
    }
    assert_eq!(
        log.head().await.unwrap(),
        (at.0 > 0).then(|| at.clone()),
        "the head is the last record"
    );
    at.0
}

/// Runs the contract against a fresh, empty log that chains with `hasher`.
pub async fn check(log: impl AuditLog, hasher: &dyn ContentHasher) {
    assert_eq!(log.head().await.unwrap(), None);
    assert!(log.records(0, 10).await.unwrap().is_empty());
    log.writable().await.unwrap();
    let first = log.append(&entry(1)).await.unwrap();
    assert_eq!(first.seq, 1);
    assert_eq!(first.previous_hash, GENESIS_HASH);
    let second = log.append(&entry(2)).await.unwrap();
    assert_eq!(second.seq, 2);
    assert_eq!(second.previous_hash, first.record_hash);
    for n in 3..=60 {
        log.append(&entry(n)).await.unwrap();
    }
    // A batch goes on from the head, in order; an empty one writes nothing.
    let batch: Vec<AuditEntry> = (61..=99).map(entry).collect();
    let written = log.append_batch(&batch).await.unwrap();
    assert_eq!(
        written.iter().map(|r| r.seq).collect::<Vec<_>>(),
        (61..=99).collect::<Vec<_>>()
    );
    assert_eq!(
        written.iter().map(|r| r.entry.clone()).collect::<Vec<_>>(),
        batch
    );
    assert!(log.append_batch(&[]).await.unwrap().is_empty());
    assert_eq!(log.append(&entry(100)).await.unwrap().seq, 100);
    let page = log.records(40, 10).await.unwrap();
    assert_eq!(
        page.iter().map(|r| r.seq).collect::<Vec<_>>(),
        (41..=50).collect::<Vec<_>>()
    );
    assert_eq!(page[0].entry, entry(41), "an entry comes back as it was");
    assert_eq!(verified(&log, hasher).await, 100);
    check_prune(&log, hasher).await;
}

/// A checkpoint at `seq` with `record_hash` (unsigned: the log keeps what it is given).
fn checkpoint(seq: u64, record_hash: &str) -> AuditCheckpoint {
    AuditCheckpoint {
        seq,
        record_hash: record_hash.to_owned(),
        pruned_at: chrono::Utc.timestamp_opt(1_800_000_000, 0).unwrap(),
        key_id: "k".into(),
        signature: "s".into(),
    }
}

/// Retention over a log of 100 records: a checkpoint that names a record wrongly or one already
/// pruned removes nothing; a right one removes the records up to it, and the chain continues
/// from it.
async fn check_prune(log: &impl AuditLog, hasher: &dyn ContentHasher) {
    assert_eq!(log.checkpoint().await.unwrap(), None);
    let at_60 = log.records(59, 1).await.unwrap().remove(0);
    let wrong = checkpoint(60, &"0".repeat(64));
    assert!(matches!(
        log.prune(&wrong).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        log.records(0, 1).await.unwrap()[0].seq,
        1,
        "nothing removed"
    );
    let right = checkpoint(60, &at_60.record_hash);
    assert_eq!(log.prune(&right).await.unwrap(), 60);
    assert_eq!(log.checkpoint().await.unwrap(), Some(right));
    assert_eq!(log.records(0, 1).await.unwrap()[0].seq, 61);
    assert_eq!(
        log.head().await.unwrap().map(|h| h.0),
        Some(100),
        "the head stays"
    );
    let at_30 = checkpoint(30, &at_60.record_hash);
    assert!(matches!(
        log.prune(&at_30).await,
        Err(StoreError::Conflict(_))
    ));
    let next = log.append(&entry(101)).await.unwrap();
    assert_eq!(next.seq, 101);
    assert_eq!(verified(log, hasher).await, 101);
    // Everything pruned: the chain still continues.
    let last = log.records(100, 1).await.unwrap().remove(0);
    assert_eq!(
        log.prune(&checkpoint(101, &last.record_hash))
            .await
            .unwrap(),
        41
    );
    assert!(log.records(0, 10).await.unwrap().is_empty());
    assert_eq!(
        log.append(&entry(102)).await.unwrap().previous_hash,
        last.record_hash
    );
    assert_eq!(verified(log, hasher).await, 102);
}

/// Appends from `writers` concurrently (two handles on one backend may be given): one chain,
/// numbered without gaps, and each append answered with its own record as stored.
pub async fn check_concurrent(writers: Vec<Arc<dyn AuditLog>>, hasher: &dyn ContentHasher) {
    let tasks: Vec<_> = (0..8u64)
        .map(|t| {
            let log = writers[usize::try_from(t).unwrap() % writers.len()].clone();
            tokio::spawn(async move {
                let mut answered = Vec::new();
                for n in 0..25 {
                    let given = entry(t * 100 + n);
                    let record = log.append(&given).await.unwrap();
                    assert_eq!(
                        record.entry, given,
                        "an append answered with another's record"
                    );
                    answered.push(record);
                }
                answered
            })
        })
        .collect();
    let mut answered = Vec::new();
    for t in tasks {
        answered.extend(t.await.unwrap());
    }
    assert_eq!(verified(writers[0].as_ref(), hasher).await, 200);
    let stored = writers[0].records(0, 200).await.unwrap();
    answered.sort_by_key(|r| r.seq);
    assert_eq!(
        answered, stored,
        "the records answered are the records stored"
    );
}
