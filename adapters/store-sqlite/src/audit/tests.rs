//! What only the SQLite trail shows: a batch is one commit, and all of it or none is written.

use std::sync::Arc;

use quarry_domain::{AuditEntry, Retention};
use quarry_ports::{AuditLog, ContentHasher};
use quarry_testkit::{
    contract::audit::{entry, verified},
    fakes::FakeHasher,
};

use crate::{SqliteAudit, SqliteStore};

/// A trail on a file with one record, and another store on the same file (another process,
/// as far as SQLite knows).
async fn trail_and_rival(dir: &std::path::Path) -> (SqliteAudit, SqliteStore) {
    let path = dir.join("audit.db");
    let hasher: Arc<dyn ContentHasher> = Arc::new(FakeHasher);
    let store = SqliteStore::open(&path, Retention::default())
        .await
        .unwrap();
    let trail = SqliteAudit::new(store, hasher);
    trail.append(&entry(0)).await.unwrap();
    let rival = SqliteStore::open(&path, Retention::default())
        .await
        .unwrap();
    (trail, rival)
}

/// Frames in the write-ahead log: every commit writes at least one.
async fn wal_frames(store: &SqliteStore) -> i64 {
    let (_busy, frames, _done): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
        .fetch_one(&store.pool)
        .await
        .unwrap();
    frames
}

fn fifty() -> Vec<AuditEntry> {
    (1..=50).map(entry).collect()
}

#[tokio::test]
async fn a_batch_is_one_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (trail, rival) = trail_and_rival(dir.path()).await;
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&rival.pool)
        .await
        .unwrap();
    assert_eq!(wal_frames(&rival).await, 0);
    let records = trail.append_batch(&fifty()).await.unwrap();
    assert_eq!(
        records.iter().map(|r| r.entry.clone()).collect::<Vec<_>>(),
        fifty(),
        "each entry gets its record, in order"
    );
    // Fifty commits would have written fifty frames at least.
    let frames = wal_frames(&rival).await;
    assert!(frames < 20, "{frames} frames: the batch was not one commit");
    assert_eq!(verified(&trail, &FakeHasher).await, 51);
    // The handle goes on after the batch's head in one statement.
    trail.append(&entry(51)).await.unwrap();
    assert_eq!(verified(&trail, &FakeHasher).await, 52);
}

#[tokio::test]
async fn a_batch_that_cannot_be_written_leaves_nothing_of_itself() {
    let dir = tempfile::tempdir().unwrap();
    let (trail, rival) = trail_and_rival(dir.path()).await;
    // A record already at the 26th place (the head put back where it was): the batch fails
    // half way through its insert.
    sqlx::raw_sql(
        "INSERT INTO audit_records (seq, entry, previous_hash, record_hash) VALUES (26, '{}', '', '');
         UPDATE audit_head SET seq = 1, record_hash = (SELECT record_hash FROM audit_records WHERE seq = 1);",
    )
    .execute(&rival.pool)
    .await
    .unwrap();
    assert!(trail.append_batch(&fifty()).await.is_err());
    assert!(
        trail.writable().await.is_ok(),
        "the file itself can still be written"
    );
    sqlx::query("DELETE FROM audit_records WHERE seq = 26")
        .execute(&rival.pool)
        .await
        .unwrap();
    // Nothing of the failed batch is there: the chain is the first record alone.
    assert_eq!(verified(&trail, &FakeHasher).await, 1);
    trail.append_batch(&fifty()).await.unwrap();
    assert_eq!(verified(&trail, &FakeHasher).await, 51);
}
