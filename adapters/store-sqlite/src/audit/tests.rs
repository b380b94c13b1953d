//! What only the SQLite trail shows: a batch is one commit, and all of it or none is written;
//! an append made on the caller's thread never holds that thread waiting for the file, and the
//! write-ahead log it grows is checkpointed.

use std::sync::Arc;

use quarry_domain::{AuditEntry, Retention};
use quarry_ports::{AuditLog, ContentHasher};
use quarry_testkit::{
    contract::audit::{entry, verified},
    fakes::FakeHasher,
};

use crate::{
    SqliteAudit, SqliteStore,
    direct::{CHECKPOINT_EVERY, LOG_BOUND},
};

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

/// Empties the write-ahead log (checkpointed into the file, then cut to nothing).
async fn empty_log(store: &SqliteStore) {
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&store.pool)
        .await
        .unwrap();
}

fn fifty() -> Vec<AuditEntry> {
    (1..=50).map(entry).collect()
}

#[tokio::test]
async fn a_batch_is_one_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (trail, rival) = trail_and_rival(dir.path()).await;
    empty_log(&rival).await;
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
    // The 26th record refused (a trigger of the test's own): the batch fails half way through
    // its insert.
    sqlx::raw_sql(
        "CREATE TRIGGER no_26 BEFORE INSERT ON audit_records WHEN NEW.seq = 26
         BEGIN SELECT RAISE(ABORT, 'no room for 26'); END;",
    )
    .execute(&rival.pool)
    .await
    .unwrap();
    assert!(trail.append_batch(&fifty()).await.is_err());
    assert!(
        trail.writable().await.is_ok(),
        "the file itself can still be written"
    );
    sqlx::query("DROP TRIGGER no_26")
        .execute(&rival.pool)
        .await
        .unwrap();
    // Nothing of the failed batch is there: the chain is the first record alone.
    assert_eq!(verified(&trail, &FakeHasher).await, 1);
    trail.append_batch(&fifty()).await.unwrap();
    assert_eq!(verified(&trail, &FakeHasher).await, 51);
}

/// The direct connection does not wait for the file's write lock: while another process holds
/// it, the append waits on the pooled path, and the thread (the only one here) keeps running
/// everything else, the other process's commit included.
#[tokio::test]
async fn an_append_waits_for_another_process_without_holding_the_thread() {
    let dir = tempfile::tempdir().unwrap();
    let (trail, rival) = trail_and_rival(dir.path()).await;
    let mut lock = rival.pool.begin_with("BEGIN IMMEDIATE").await.unwrap();
    sqlx::query("INSERT INTO audit_probe (data) VALUES (x'00')")
        .execute(&mut *lock)
        .await
        .unwrap();
    let ticks = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let ticker = tokio::spawn({
        let ticks = ticks.clone();
        async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                ticks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    });
    let append = tokio::spawn({
        let trail = trail.clone();
        async move { trail.append(&entry(1)).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!append.is_finished(), "the append waits for the lock");
    let ticked = ticks.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        ticked >= 20,
        "{ticked} ticks of 5 ms in 300 ms: the append held the thread"
    );
    lock.commit().await.unwrap();
    let record = append.await.unwrap().unwrap();
    ticker.abort();
    assert_eq!(record.seq, 2);
    assert_eq!(verified(&trail, &FakeHasher).await, 2);
}

/// The direct connection's commits do not checkpoint the log themselves; the checkpoints the
/// store runs for them keep it from growing with every record.
#[tokio::test]
async fn the_log_the_direct_appends_write_is_checkpointed() {
    let dir = tempfile::tempdir().unwrap();
    let (trail, _rival) = trail_and_rival(dir.path()).await;
    let wal = dir.path().join("audit.db-wal");
    let before = std::fs::metadata(&wal).unwrap().len();
    let sample: u64 = 64;
    for n in 1..=sample {
        trail.append(&entry(n)).await.unwrap();
    }
    let per_append = (std::fs::metadata(&wal).unwrap().len() - before) / sample;
    assert!(per_append > 0, "each append grows the log");
    // Each append is a frame or so (the page of the newest records, now and then the page above
    // it); the log starts over once it holds LOG_BOUND frames, give or take a checkpoint's
    // worth of appends.
    let bound = u64::try_from(LOG_BOUND).unwrap() + u64::from(2 * CHECKPOINT_EVERY);
    let appends = 3 * bound;
    for n in sample + 1..=appends {
        trail.append(&entry(n)).await.unwrap();
    }
    // Without checkpoints the log would hold every append.
    let size = std::fs::metadata(&wal).unwrap().len();
    let held = size / per_append;
    assert!(
        held < bound,
        "the log holds about {held} appends of {appends}: it is not checkpointed"
    );
    assert_eq!(verified(&trail, &FakeHasher).await, appends + 1);
}

/// Records 2 to `last` on the trail's file, written as SQL (content and hashes made up): what a
/// long-kept trail holds, in well under a second. Record `n`'s hash is `h{n}`.
async fn many_records(store: &SqliteStore, last: i64) {
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
         INSERT INTO audit_records (seq, entry, previous_hash, record_hash, head)
         SELECT i, '{}', 'h' || (i - 1), 'h' || i, 1 FROM n",
    )
    .bind(last)
    .execute(&store.pool)
    .await
    .unwrap();
}

fn checkpoint_at(seq: u64) -> quarry_domain::AuditCheckpoint {
    quarry_domain::AuditCheckpoint {
        seq,
        record_hash: format!("h{seq}"),
        pruned_at: chrono::Utc::now(),
        key_id: "test".into(),
        signature: String::new(),
    }
}

// traces: AU-1 — retention removes records in batches, each a write of its own, so an append
// made while a long prune runs is written between two batches instead of after the whole
// removal: here the append returns while the prune is still removing.
#[tokio::test]
async fn an_append_gets_in_while_a_prune_removes_records() {
    let dir = tempfile::tempdir().unwrap();
    let (trail, rival) = trail_and_rival(dir.path()).await;
    let last = 200_001;
    many_records(&rival, last).await;
    let trail = Arc::new(trail);
    let pruning = tokio::spawn({
        let trail = trail.clone();
        async move { trail.prune(&checkpoint_at(200_001)).await }
    });
    // The checkpoint is kept first; the removal follows.
    let waited = std::time::Instant::now();
    while sqlx::query_scalar::<_, i64>("SELECT seq FROM audit_checkpoint WHERE id = 1")
        .fetch_optional(&rival.pool)
        .await
        .unwrap()
        .is_none()
    {
        assert!(waited.elapsed() < std::time::Duration::from_secs(30));
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    let appended = trail.append(&entry(1)).await.unwrap();
    assert!(
        !pruning.is_finished(),
        "the append waited for the whole removal"
    );
    assert_eq!(appended.seq, 200_002);
    assert_eq!(appended.previous_hash, "h200001");
    assert_eq!(pruning.await.unwrap().unwrap(), 200_001);
    let left: Vec<i64> = sqlx::query_scalar("SELECT seq FROM audit_records")
        .fetch_all(&rival.pool)
        .await
        .unwrap();
    assert_eq!(left, [200_002]);
}

// traces: AU-3 — records up to the checkpoint are not part of the trail even while they are
// still in the file (a prune cut short): the trail's pages start after the checkpoint.
#[tokio::test]
async fn records_up_to_the_checkpoint_are_not_read_as_the_trail() {
    let dir = tempfile::tempdir().unwrap();
    let (trail, rival) = trail_and_rival(dir.path()).await;
    trail.append_batch(&fifty()).await.unwrap();
    let kept = serde_json::to_string(&checkpoint_at(20)).unwrap();
    sqlx::query("INSERT INTO audit_checkpoint (id, seq, checkpoint) VALUES (1, 20, ?)")
        .bind(kept)
        .execute(&rival.pool)
        .await
        .unwrap();
    let read: Vec<u64> = trail
        .records(0, 100)
        .await
        .unwrap()
        .iter()
        .map(|r| r.seq)
        .collect();
    assert_eq!(read, (21..=51).collect::<Vec<_>>());
}

// traces: AU-1 — an append writes one page of the write-ahead log, not two: the chain's head is
// marked on its record, which shares its page with the records before it.
#[tokio::test]
async fn an_append_writes_about_one_page_of_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let (trail, rival) = trail_and_rival(dir.path()).await;
    empty_log(&rival).await;
    let appends = 100;
    for n in 1..=appends {
        trail.append(&entry(n)).await.unwrap();
    }
    let frames = wal_frames(&rival).await;
    // Each a frame of the newest records' page; when that page is full, the new one, the page
    // above it and the file's first page (its size) as well. With the head on a page of its
    // own, every append wrote two frames and more.
    assert!(
        (appends..appends * 2).contains(&u64::try_from(frames).unwrap()),
        "{frames} frames for {appends} appends"
    );
    assert_eq!(verified(&trail, &FakeHasher).await, 101);
}

// traces: AU-3 — the head's record cannot be deleted; removed anyway (its trigger dropped
// first), the records missing at the end are named, and the trail goes on past a gap that
// verification names, instead of chaining to the last record left and hiding the removal.
#[tokio::test]
async fn a_removed_end_of_the_trail_is_named_and_stays_seen() {
    let dir = tempfile::tempdir().unwrap();
    let (trail, rival) = trail_and_rival(dir.path()).await;
    for n in 1..=4 {
        trail.append(&entry(n)).await.unwrap();
    }
    let refused = sqlx::query("DELETE FROM audit_records WHERE seq = 5")
        .execute(&rival.pool)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("head"), "{refused}");
    assert_eq!(trail.head().await.unwrap().map(|h| h.0), Some(5));

    sqlx::raw_sql("DROP TRIGGER audit_head_stays; DELETE FROM audit_records WHERE seq >= 4;")
        .execute(&rival.pool)
        .await
        .unwrap();
    let cut = trail.head().await.unwrap_err();
    assert!(
        matches!(&cut, quarry_ports::StoreError::Corrupt(why) if why.contains("record 4 is missing at the end")),
        "{cut}"
    );
    let next = trail.append(&entry(6)).await.unwrap();
    assert_eq!(next.seq, 5, "a number is left out");
    assert_eq!(trail.head().await.unwrap().map(|h| h.0), Some(5));
    let records = trail.records(0, 10).await.unwrap();
    let broken =
        quarry_domain::verify_chain(&records, (0, quarry_domain::GENESIS_HASH.into()), |b| {
            FakeHasher.sha256(b)
        })
        .unwrap_err();
    assert_eq!(broken.seq, 5);
    assert!(
        broken.what.contains("record 4 is missing"),
        "{}",
        broken.what
    );
}

/// Records 1 to 3 written as the trail wrote them before its head was marked on its record
/// (migration 0012): with the head in `audit_head`.
async fn written_before_the_mark(path: &std::path::Path) -> (u64, String) {
    crate::tests::migrated_up_to(path, 11).await;
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let mut previous = quarry_domain::GENESIS_HASH.to_owned();
    for seq in 1..=3 {
        let text = quarry_domain::canonical_entry(&entry(seq));
        let hash = FakeHasher
            .sha256(&quarry_domain::chain_material_of(seq, &text, &previous))
            .hex();
        sqlx::query(
            "INSERT INTO audit_records (seq, entry, previous_hash, record_hash) VALUES (?, ?, ?, ?);",
        )
        .bind(i64::try_from(seq).unwrap())
        .bind(text)
        .bind(&previous)
        .bind(&hash)
        .execute(&pool)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO audit_head (id, seq, record_hash) VALUES (1, ?, ?)
             ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, record_hash = excluded.record_hash",
        )
        .bind(i64::try_from(seq).unwrap())
        .bind(&hash)
        .execute(&pool)
        .await
        .unwrap();
        previous = hash;
    }
    pool.close().await;
    (3, previous)
}

// traces: AU-3 — a trail written before the head was marked on its record goes on from its
// head once upgraded, and so does one whose records retention had all removed.
#[tokio::test]
async fn a_trail_from_before_the_upgrade_goes_on_from_its_head() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let head = written_before_the_mark(&path).await;
    let store = SqliteStore::open(&path, Retention::default())
        .await
        .unwrap();
    let trail = SqliteAudit::new(store, Arc::new(FakeHasher));
    assert_eq!(trail.head().await.unwrap(), Some(head.clone()));
    assert_eq!(trail.append(&entry(4)).await.unwrap().previous_hash, head.1);
    assert_eq!(verified(&trail, &FakeHasher).await, 4);

    // All of its records removed by an earlier release's retention: `audit_head` says where
    // the chain is.
    let path = dir.path().join("pruned.db");
    let head = written_before_the_mark(&path).await;
    crate::tests::on_file(&path, "DELETE FROM audit_records").await;
    let store = SqliteStore::open(&path, Retention::default())
        .await
        .unwrap();
    let trail = SqliteAudit::new(store, Arc::new(FakeHasher));
    assert_eq!(trail.head().await.unwrap(), Some(head.clone()));
    let next = trail.append(&entry(4)).await.unwrap();
    assert_eq!((next.seq, next.previous_hash), (4, head.1));
}
