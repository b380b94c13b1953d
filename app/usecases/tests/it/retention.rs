//! Audit retention over a fake trail and a manual clock: records older than the retention are
//! removed behind a signed checkpoint, the rest verifies from it, and a checkpoint that was
//! tampered with or signed by another key is refused.

use std::sync::Arc;

use quarry_domain::ErrorCode;
use quarry_ports::{AuditLog, Clock};
use quarry_testkit::{
    contract::audit::entry,
    fakes::{FakeAuditLog, FakeHasher, FakeSigner, ManualClock},
};
use quarry_usecases::AuditTrail;

const DAY: i64 = 86_400;

fn trail(log: &Arc<FakeAuditLog>, key: &str, clock: &Arc<ManualClock>) -> AuditTrail {
    AuditTrail::new(
        log.clone(),
        Arc::new(FakeSigner { key: key.into() }),
        Arc::new(FakeHasher),
        clock.clone(),
    )
}

/// Ten records, one a day, the last one today.
async fn ten_days(log: &FakeAuditLog, clock: &ManualClock) {
    for n in 1..=10u64 {
        let mut e = entry(n);
        e.time = clock.now() - chrono::Duration::days(10 - i64::try_from(n).unwrap());
        log.append(&e).await.unwrap();
    }
}

// traces: SR-005.3 — records older than the retention go, a signed checkpoint takes their
// place, and the trail verifies from it; a second prune finds nothing to do.
#[tokio::test]
async fn old_records_are_removed_behind_a_signed_checkpoint() {
    let (log, clock) = (
        Arc::new(FakeAuditLog::default()),
        Arc::new(ManualClock::new()),
    );
    ten_days(&log, &clock).await;
    let trail = trail(&log, "k1", &clock);
    let pruned = trail
        .prune(chrono::Duration::days(3))
        .await
        .unwrap()
        .unwrap();
    // Records 1..=6 are 9 to 4 days old; 7 is exactly 3 days old and stays.
    assert_eq!(pruned.removed, 6);
    assert_eq!(pruned.checkpoint.seq, 6);
    assert_eq!(pruned.checkpoint.key_id, "k1");
    let verified = trail.verify(|_| {}).await.unwrap();
    assert_eq!(verified.records, 4);
    assert_eq!(verified.head.0, 10);
    assert_eq!(verified.checkpoint, Some(pruned.checkpoint));
    assert!(
        trail
            .prune(chrono::Duration::days(3))
            .await
            .unwrap()
            .is_none()
    );
    // A day later, one more goes, and the new checkpoint follows the old one.
    clock.advance(DAY);
    let again = trail
        .prune(chrono::Duration::days(3))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((again.removed, again.checkpoint.seq), (1, 7));
    assert_eq!(trail.verify(|_| {}).await.unwrap().records, 3);
}

#[tokio::test]
async fn a_checkpoint_by_another_key_or_edited_is_not_trusted() {
    let (log, clock) = (
        Arc::new(FakeAuditLog::default()),
        Arc::new(ManualClock::new()),
    );
    ten_days(&log, &clock).await;
    trail(&log, "k1", &clock)
        .prune(chrono::Duration::days(3))
        .await
        .unwrap();
    let stranger = trail(&log, "k2", &clock);
    let refused = stranger.verify(|_| {}).await.unwrap_err();
    assert_eq!(refused.code(), ErrorCode::E006);
    assert!(
        refused.message().contains("record 6) cannot be trusted"),
        "{refused}"
    );
    assert!(refused.message().contains("made by key k1"), "{refused}");
    // And a prune under another key refuses to build on it.
    assert_eq!(
        stranger
            .prune(chrono::Duration::days(1))
            .await
            .unwrap_err()
            .code(),
        ErrorCode::E006
    );
    // A checkpoint moved to another record (its hash kept) does not verify.
    let mut moved = log.checkpoint().await.unwrap().unwrap();
    let at_8 = log.records(7, 1).await.unwrap().remove(0);
    moved.seq = 8;
    moved.record_hash = at_8.record_hash;
    log.prune(&moved).await.unwrap();
    let refused = trail(&log, "k1", &clock).verify(|_| {}).await.unwrap_err();
    assert_eq!(refused.code(), ErrorCode::E006);
    assert!(
        refused.message().contains("not this key's signature"),
        "{refused}"
    );
}
