//! Recording versions in a file: what is answered without the write lock or a pooled
//! connection, and what is written on the caller's thread or by the pool.

use std::time::Duration;

use quarry_domain::Retention;
use quarry_ports::VersionStore;
use quarry_testkit::contract::versions::{at, digest_of, key, text};

use crate::{SqliteStore, tests::file_store};

/// Seeing the latest content again writes nothing: it needs no write lock, so it is answered
/// while another process holds the file's, where a new content waits and then gives up.
#[tokio::test]
async fn an_unchanged_sighting_needs_no_write_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let store = SqliteStore::open_waiting(&path, Retention::default(), Duration::from_millis(200))
        .await
        .unwrap();
    let k = key("file:///a");
    let first = store
        .record(&k, digest_of("one"), &text("one"), at(0))
        .await
        .unwrap();
    // Another process takes the file's write lock and keeps it.
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let again = store
        .record(&k, digest_of("one"), &text("one"), at(1))
        .await
        .expect("an unchanged sighting waited for the write lock");
    assert_eq!(again.version, first.version);
    assert!(!again.is_new);
    assert!(
        store
            .record(&k, digest_of("two"), &text("two"), at(2))
            .await
            .is_err(),
        "a new content was recorded without the write lock"
    );
    other.execute_batch("ROLLBACK").unwrap();
    let second = store
        .record(&k, digest_of("two"), &text("two"), at(3))
        .await
        .unwrap();
    assert_eq!(second.version.version, "v2");
    // The first content is no longer the latest: seeing it again is a write again.
    let back = store
        .record(&k, digest_of("one"), &text("one"), at(4))
        .await
        .unwrap();
    assert_eq!(back.version, first.version);
    assert_eq!(
        store.history(&k).await.unwrap().len(),
        2,
        "no version was added by seeing one again"
    );
}

// An unchanged sighting is one statement on the caller's thread: it is answered while every
// pooled connection is taken (the pool would make it wait for one).
#[tokio::test]
async fn an_unchanged_sighting_needs_no_pooled_connection() {
    let (_dir, store) = file_store().await;
    let k = key("file:///a");
    let first = store
        .record(&k, digest_of("one"), &text("one"), at(0))
        .await
        .unwrap();
    let held = take_the_pool(&store).await;
    let again = tokio::time::timeout(
        Duration::from_secs(5),
        store.record(&k, digest_of("one"), &text("one"), at(1)),
    )
    .await
    .expect("the sighting waited for a pooled connection")
    .unwrap();
    assert_eq!(again.version, first.version);
    assert!(!again.is_new);
    drop(held);
}

/// Every pooled connection taken, the store's own.
async fn take_the_pool(store: &SqliteStore) -> Vec<sqlx::pool::PoolConnection<sqlx::Sqlite>> {
    let mut held = Vec::new();
    while let Ok(Ok(conn)) =
        tokio::time::timeout(Duration::from_millis(200), store.pool.acquire()).await
    {
        held.push(conn);
    }
    assert!(!held.is_empty(), "the pool gave no connection at all");
    held
}

// A new content of a few KiB is written on the caller's thread, in one transaction: recorded
// while every pooled connection is taken, with retention applied as the pool would. A larger
// one is written by the pool (no runtime thread copies its pages): it waits for a connection.
#[tokio::test]
async fn a_small_new_version_is_written_here_and_a_large_one_by_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let retention = Retention {
        count: 2,
        bytes: u64::MAX,
    };
    let store = SqliteStore::open(&dir.path().join("q.db"), retention)
        .await
        .unwrap();
    let k = key("file:///a");
    let held = take_the_pool(&store).await;
    for (i, body) in ["one", "two", "three"].into_iter().enumerate() {
        let recorded = tokio::time::timeout(
            Duration::from_secs(5),
            store.record(&k, digest_of(body), &text(body), at(i as i64)),
        )
        .await
        .expect("a small new content waited for a pooled connection")
        .unwrap();
        assert!(recorded.is_new);
        assert_eq!(recorded.version.version, format!("v{}", i + 1).as_str());
    }
    let big = "x".repeat(100 * 1024);
    let big_content = text(&big);
    let waiting = store.record(&k, digest_of(&big), &big_content, at(9));
    tokio::pin!(waiting);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut waiting)
            .await
            .is_err(),
        "a 100 KiB content was written without a pooled connection"
    );
    drop(held);
    let recorded = waiting.await.unwrap();
    assert_eq!(recorded.version.version, "v4");
    // Retention kept the newest two contents of the four, whichever path wrote them.
    let kept: Vec<bool> = sqlx::query_scalar(
        "SELECT content IS NOT NULL FROM resource_versions WHERE uri = 'file:///a' ORDER BY number",
    )
    .fetch_all(&store.pool)
    .await
    .unwrap();
    assert_eq!(kept, [false, false, true, true]);
}

// While another process holds the file's write lock, the write on the caller's thread (which
// never waits) gives way to the pool's, which waits for the lock: the record still succeeds
// once the lock is let go, and only once.
#[tokio::test]
async fn a_new_version_waits_for_another_process_holding_the_lock() {
    let (dir, store) = file_store().await;
    let other = rusqlite::Connection::open(dir.path().join("q.db")).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let k = key("file:///a");
    let recording = tokio::spawn({
        let (store, k) = (store.clone(), k.clone());
        async move {
            store
                .record(&k, digest_of("one"), &text("one"), at(0))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!recording.is_finished(), "recorded under another's lock");
    other.execute_batch("ROLLBACK").unwrap();
    let recorded = recording.await.unwrap().unwrap();
    assert_eq!(recorded.version.version, "v1");
    assert_eq!(store.history(&k).await.unwrap().len(), 1);
}
