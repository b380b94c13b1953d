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

/// Waits until `n` sightings are queued for the write turn.
async fn queued(store: &SqliteStore, n: usize) {
    for _ in 0..1000 {
        if store.queue().0.len() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the sightings did not queue for the write turn");
}

/// Starts recording `body` as a content of `uri` and waits until it is queued behind the
/// `already` queued before it, so that the queue's order is the order of the calls.
async fn queue_one(
    store: &SqliteStore,
    uri: &str,
    body: &str,
    already: usize,
) -> tokio::task::JoinHandle<Result<quarry_ports::Recorded, quarry_ports::StoreError>> {
    let (store2, k, body) = (store.clone(), key(uri), body.to_owned());
    let handle = tokio::spawn(async move {
        store2
            .record(&k, digest_of(&body), &text(&body), at(already as i64))
            .await
    });
    queued(store, already + 1).await;
    handle
}

// New contents that come while the write turn is taken are recorded together, in one commit,
// each in the order it came: a later sighting of a resource sees an earlier one of the same
// batch (three contents of one resource numbered in order, the first seen again), and every
// caller gets its own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sightings_that_wait_for_the_turn_are_recorded_in_one_commit() {
    let (_dir, store) = file_store().await;
    let turn = store.write_turn().await;
    let before = turn.as_ref().unwrap().commits();
    let mut calls = Vec::new();
    for i in 0..40 {
        calls.push(queue_one(&store, &format!("file:///r{i}"), "same", calls.len()).await);
    }
    for body in ["one", "two", "three", "one"] {
        calls.push(queue_one(&store, "file:///x", body, calls.len()).await);
    }
    drop(turn);
    let mut answers = Vec::new();
    for call in calls {
        answers.push(call.await.unwrap().unwrap());
    }
    for answer in &answers[..40] {
        assert_eq!((answer.version.version.get(), answer.is_new), (1, true));
    }
    let x: Vec<_> = answers[40..]
        .iter()
        .map(|a| (a.version.version.get(), a.is_new))
        .collect();
    assert_eq!(x, [(1, true), (2, true), (3, true), (1, false)]);
    let after = store.write_turn().await.as_ref().unwrap().commits();
    assert_eq!(
        after - before,
        1,
        "44 sightings took {} commits",
        after - before
    );
    assert_eq!(store.history(&key("file:///x")).await.unwrap().len(), 3);
}

// A batch is bounded by the content it carries: twenty 60 KiB contents queued at once are
// recorded in more than one commit, and every caller is still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_carries_at_most_a_mebibyte_and_the_rest_follow() {
    let (_dir, store) = file_store().await;
    let turn = store.write_turn().await;
    let before = turn.as_ref().unwrap().commits();
    let mut calls = Vec::new();
    for i in 0..20 {
        let body = format!("{i}").repeat(60 * 1024 / format!("{i}").len());
        calls.push(queue_one(&store, &format!("file:///big{i}"), &body, calls.len()).await);
    }
    drop(turn);
    for call in calls {
        let recorded = tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .expect("a sighting beyond the first batch was left waiting")
            .unwrap()
            .unwrap();
        assert!(recorded.is_new);
    }
    let commits = store.write_turn().await.as_ref().unwrap().commits() - before;
    assert_eq!(commits, 2, "1.2 MB of contents in {commits} commits");
}

// A caller that gives up while its sighting waits is not recorded; the others are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sighting_whose_caller_gave_up_is_left_out() {
    let (_dir, store) = file_store().await;
    let turn = store.write_turn().await;
    let first = queue_one(&store, "file:///a", "one", 0).await;
    let gone = queue_one(&store, "file:///b", "one", 1).await;
    let last = queue_one(&store, "file:///c", "one", 2).await;
    gone.abort();
    assert!(gone.await.unwrap_err().is_cancelled());
    drop(turn);
    first.await.unwrap().unwrap();
    last.await.unwrap().unwrap();
    assert!(store.history(&key("file:///b")).await.unwrap().is_empty());
    assert_eq!(store.history(&key("file:///c")).await.unwrap().len(), 1);
}

// With another process holding the file's write lock, a batch's transaction on this thread
// fails at once; each of its sightings is then recorded by the pool, which waits for the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_meets_another_process_lock_is_recorded_by_the_pool() {
    let (dir, store) = file_store().await;
    let turn = store.write_turn().await;
    let mut calls = Vec::new();
    for i in 0..5 {
        calls.push(queue_one(&store, &format!("file:///p{i}"), "one", calls.len()).await);
    }
    let other = rusqlite::Connection::open(dir.path().join("q.db")).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    drop(turn);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        calls.iter().all(|c| !c.is_finished()),
        "recorded under another's lock"
    );
    other.execute_batch("ROLLBACK").unwrap();
    for call in calls {
        assert!(call.await.unwrap().unwrap().is_new);
    }
}

/// The steps of SQLite's plan for `sql` with `params`, as `EXPLAIN QUERY PLAN` words them.
fn plan_of(conn: &rusqlite::Connection, sql: &str, params: impl rusqlite::Params) -> Vec<String> {
    conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
        .unwrap()
        .query_map(params, |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// The look-up made on every fresh fetch is one seek of the latest-version index: no version's
/// content is put in a temporary B-tree to be sorted (which took 0.7 ms for three versions of
/// 1 MiB), whatever the file holds.
#[tokio::test]
async fn the_latest_version_is_found_by_one_index_seek() {
    let (dir, store) = file_store().await;
    let path = dir.path().join("q.db");
    let k = key("file:///a");
    for (n, body) in ["one", "two", "three"].into_iter().enumerate() {
        store
            .record(&k, digest_of(body), &text(body), at(n as i64))
            .await
            .unwrap();
    }
    let conn = rusqlite::Connection::open(&path).unwrap();
    let plan = plan_of(
        &conn,
        crate::versions::LATEST,
        rusqlite::params![k.server.as_str(), k.upstream_uri],
    );
    assert_eq!(
        plan,
        ["SEARCH resource_versions USING INDEX resource_versions_latest (server=? AND uri=?)"],
        "{plan:?}"
    );
}

/// A listing's page asks for the summaries of up to 1,000 URIs: each URI costs one seek for
/// its latest version and one for its first sighting, not a third (the latest evaluated again
/// by the outer filter), and none at all when the server has no versions (one seek says so).
#[tokio::test]
async fn summaries_seek_twice_a_uri_and_not_at_all_for_a_server_without_versions() {
    let (dir, store) = file_store().await;
    let path = dir.path().join("q.db");
    let k = key("file:///a");
    store
        .record(&k, digest_of("one"), &text("one"), at(0))
        .await
        .unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let plan = plan_of(
        &conn,
        crate::versions::SUMMARIES,
        rusqlite::params![k.server.as_str(), "[]"],
    );
    let per_uri = plan
        .iter()
        .filter(|step| step.contains("(server=? AND uri=?)"))
        .count();
    assert_eq!(per_uri, 2, "{plan:#?}");
    assert!(
        plan.iter()
            .any(|step| step.contains("INDEX") && step.ends_with("(server=?)")),
        "no check that the server has versions: {plan:#?}"
    );

    // The work itself: SQLite's virtual machine steps for 1,000 URIs of a server with no
    // versions against 1 URI of it: about 5 a URI to go through the list, against about 39 when
    // each is looked up.
    let steps = |server: &str, n: usize| {
        let uris: Vec<String> = std::iter::once("file:///a".to_owned())
            .chain((1..n).map(|i| format!("file:///{i}")))
            .collect();
        let mut stmt = conn.prepare(crate::versions::SUMMARIES).unwrap();
        let rows = stmt
            .query_map(
                rusqlite::params![server, serde_json::to_string(&uris).unwrap()],
                |_| Ok(()),
            )
            .unwrap()
            .count();
        (rows, stmt.get_status(rusqlite::StatementStatus::VmStep))
    };
    let (found, _) = steps(k.server.as_str(), 1_000);
    assert_eq!(found, 1, "file:///a has versions");
    let (none, one) = steps("never-read", 1);
    let (none_either, thousand) = steps("never-read", 1_000);
    assert_eq!((none, none_either), (0, 0));
    assert!(
        thousand < one + 1_000 * 20,
        "{thousand} steps for 1,000 URIs of a server without versions, {one} for one"
    );
}
