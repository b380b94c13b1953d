//! What only the SQLite store shows: files that survive a restart, several connections on one
//! file, migrations of older files. The ports' contracts run here too (see `contract`).

use quarry_ports::VersionStore;
use quarry_testkit::contract::versions::{at, digest_of, key, text};

use super::*;

/// A store in a file of a directory of its own (kept while the directory is).
pub(crate) async fn file_store() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("q.db"), Retention::default())
        .await
        .unwrap();
    (dir, store)
}

/// A file at `path` as a release that had migrations up to `last` (a version) left it: the
/// schema of then, no row yet. The caller fills it and opens it with the store of now.
pub(crate) async fn migrated_up_to(path: &std::path::Path, last: i64) {
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true);
    let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
    let all = sqlx::migrate!("./migrations");
    let mut old = sqlx::migrate::Migrator::DEFAULT;
    old.migrations = all.iter().filter(|m| m.version <= last).cloned().collect();
    old.run(&pool).await.unwrap();
    pool.close().await;
}

/// Runs `sql` on the file at `path` through a connection of its own (another program, as far
/// as the store knows).
pub(crate) async fn on_file(path: &std::path::Path, sql: &str) {
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
}

/// Two stores on one file: two processes, as far as SQLite is concerned.
async fn two_on(path: &std::path::Path) -> (SqliteStore, SqliteStore) {
    let one = SqliteStore::open(path, Retention::default()).await.unwrap();
    let two = SqliteStore::open(path, Retention::default()).await.unwrap();
    (one, two)
}

/// With no patience for a locked file at all, this process's own writers still never find it
/// locked: every one of them (versions, audit records, sessions, servers, credentials,
/// idempotency claims) takes turns (`write_turn`) instead of meeting the others on the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_process_writers_take_turns_rather_than_meet_on_the_lock() {
    use quarry_domain::{AuthType, IdempotencyKey, Principal};
    use quarry_ports::{AuditLog, CredentialStore, IdempotencyStore, ServerRegistry, SessionStore};
    use quarry_testkit::contract::{registry::stdio_server, vault::record as credential};
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_waiting(
        &dir.path().join("q.db"),
        Retention::default(),
        Duration::ZERO,
    )
    .await
    .unwrap();
    let trail = SqliteAudit::new(
        store.clone(),
        std::sync::Arc::new(quarry_testkit::fakes::FakeHasher),
    );
    let mut writes = tokio::task::JoinSet::new();
    for i in 0..64u64 {
        let (store, trail) = (store.clone(), trail.clone());
        writes.spawn(async move {
            let uri = format!("file:///{i}");
            let body = format!("content {i}");
            store
                .record(&key(&uri), digest_of(&body), &text(&body), at(0))
                .await?;
            trail
                .append(&quarry_testkit::contract::audit::entry(i))
                .await?;
            // The other writers of the file: sessions, servers, credentials, idempotency.
            let session = format!("session-{i}");
            SessionStore::open(&store, &session, &Principal::local(), "{}", at(0)).await?;
            store.touch(&session, at(1)).await?;
            store.subscribe(&session, &uri).await?;
            store
                .save(&stdio_server(&format!("server{i}")), at(0))
                .await?;
            store
                .put(&credential(&format!("server{i}"), AuthType::ApiKey, 7))
                .await?;
            let claim = IdempotencyKey::parse(&format!("key-{i}")).unwrap();
            store
                .reserve("t", &claim, "d", at(0), Duration::from_secs(60))
                .await?;
            store.complete("t", &claim, "{}", at(0)).await?;
            SessionStore::close(&store, &session).await
        });
    }
    while let Some(written) = writes.join_next().await {
        written.unwrap().unwrap();
    }
}

#[tokio::test]
async fn history_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/quarry.db");
    let store = SqliteStore::open(&path, Retention::default())
        .await
        .unwrap();
    store
        .record(&key("file:///a"), digest_of("one"), &text("one"), at(0))
        .await
        .unwrap();
    store.close().await;
    // The last connection closed checkpoints the write-ahead log into the file and removes it.
    assert!(
        !dir.path().join("nested/quarry.db-wal").exists(),
        "the write-ahead log outlived the store's close"
    );
    let reopened = SqliteStore::open(&path, Retention::default())
        .await
        .unwrap();
    assert_eq!(reopened.history(&key("file:///a")).await.unwrap().len(), 1);
    let v = reopened
        .record(&key("file:///a"), digest_of("two"), &text("two"), at(1))
        .await
        .unwrap();
    assert_eq!(v.version.version, "v2");
}

mod registry {
    use std::time::Duration;

    use quarry_domain::IdempotencyKey;
    use quarry_ports::{IdempotencyStore, Reservation, ServerRegistry};

    use super::*;

    #[tokio::test]
    async fn servers_and_their_generation_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        let store = SqliteStore::open(&path, Retention::default())
            .await
            .unwrap();
        let a = quarry_testkit::contract::registry::stdio_server("alpha");
        let g1 = store.save(&a, at(0)).await.unwrap();
        store.close().await;
        let reopened = SqliteStore::open(&path, Retention::default())
            .await
            .unwrap();
        assert_eq!(reopened.servers().await.unwrap(), vec![a.clone()]);
        assert_eq!(reopened.generation().await.unwrap(), g1);
    }

    #[tokio::test]
    async fn results_recorded_before_reservations_existed_still_replay() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        {
            // A store as the 0002 schema left it, with one recorded result.
            super::migrated_up_to(&path, 2).await;
            super::on_file(
                &path,
                "INSERT INTO idempotency VALUES ('t', 'k', 'd', '{\"n\":1}', 5)",
            )
            .await;
        }
        let store = SqliteStore::open(&path, Retention::default())
            .await
            .unwrap();
        let key = IdempotencyKey::parse("k").unwrap();
        assert_eq!(
            store
                .reserve("t", &key, "d", at(9), Duration::from_secs(60))
                .await
                .unwrap(),
            Reservation::Done(quarry_ports::Remembered {
                payload_digest: "d".into(),
                result: "{\"n\":1}".into()
            })
        );
    }
}

mod contract {
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };

    use quarry_testkit::contract;

    use super::*;

    async fn store() -> SqliteStore {
        SqliteStore::in_memory(Retention::default()).await.unwrap()
    }

    /// Stores in files (several connections, so concurrent recorders really are concurrent).
    fn in_files(
        dir: &std::path::Path,
    ) -> impl Fn(
        Retention,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = SqliteStore> + Send>>
    + Sync
    + '_ {
        let made = Arc::new(AtomicUsize::new(0));
        move |retention| {
            let path = dir.join(format!("v{}.db", made.fetch_add(1, Ordering::SeqCst)));
            Box::pin(async move { SqliteStore::open(&path, retention).await.unwrap() })
        }
    }

    #[tokio::test]
    async fn the_sqlite_store_keeps_the_version_store_contract() {
        let dir = tempfile::tempdir().unwrap();
        contract::versions::check(in_files(dir.path())).await;
        contract::versions::check(|retention| async move {
            SqliteStore::in_memory(retention).await.unwrap()
        })
        .await;
    }

    #[test]
    fn the_sqlite_store_numbers_versions_as_the_contract_says() {
        contract::versions::check_numbering_property(|retention| async move {
            SqliteStore::in_memory(retention).await.unwrap()
        });
    }

    #[tokio::test]
    async fn the_sqlite_store_keeps_the_registry_contract() {
        contract::registry::check(store().await).await;
        contract::vault::check(store().await).await;
    }

    #[tokio::test]
    async fn the_sqlite_store_keeps_the_audit_contract() {
        let hasher: Arc<dyn quarry_ports::ContentHasher> =
            Arc::new(quarry_testkit::fakes::FakeHasher);
        contract::audit::check(
            crate::SqliteAudit::new(store().await, hasher.clone()),
            hasher.as_ref(),
        )
        .await;
        // Two connections pools on one file, as two processes would be: still one chain.
        let dir = tempfile::tempdir().unwrap();
        let (one, two) = two_on(&dir.path().join("audit.db")).await;
        contract::audit::check_concurrent(
            vec![
                Arc::new(crate::SqliteAudit::new(one, hasher.clone())),
                Arc::new(crate::SqliteAudit::new(two, hasher.clone())),
            ],
            hasher.as_ref(),
        )
        .await;
    }

    #[tokio::test]
    async fn the_sqlite_store_keeps_the_idempotency_contract() {
        contract::idempotency::check(store().await).await;
    }

    #[tokio::test]
    async fn a_sqlite_file_keeps_the_idempotency_contract_across_connections() {
        let dir = tempfile::tempdir().unwrap();
        let (one, two) = two_on(&dir.path().join("q.db")).await;
        contract::idempotency::check_shared(Arc::new(one), Arc::new(two)).await;
    }

    #[tokio::test]
    async fn the_sqlite_store_keeps_the_session_contract_across_connections() {
        contract::sessions::check(store().await).await;
        let dir = tempfile::tempdir().unwrap();
        let (one, two) = two_on(&dir.path().join("s.db")).await;
        contract::sessions::check_shared(one, two).await;
    }
}

/// The frames the write-ahead log holds, and those copied to the file, after one more
/// `PASSIVE` checkpoint.
async fn log_of(store: &SqliteStore) -> (i64, i64) {
    store.checkpoint().await.unwrap()
}

// A checkpoint of a short log runs beside the writers: it completes while this process's write
// turn is held (a writer in the middle of its statement).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_of_a_short_log_does_not_stop_the_writers() {
    let (_dir, store) = file_store().await;
    for i in 0..20 {
        let body = format!("content {i}");
        store
            .record(
                &key(&format!("file:///{i}")),
                digest_of(&body),
                &text(&body),
                at(i),
            )
            .await
            .unwrap();
    }
    let turn = store.write_turn().await;
    tokio::time::timeout(Duration::from_secs(5), store.checkpoint_now())
        .await
        .expect("the checkpoint waited for the write turn");
    drop(turn);
    let (log, copied) = log_of(&store).await;
    assert!(log > 0 && copied == log, "{copied} of {log} frames copied");
}

// A log that has grown to LOG_BOUND frames (writers raced every checkpoint) is checkpointed
// again under the write turn, so that the next write starts it over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_log_is_checkpointed_under_the_write_turn_and_starts_over() {
    let (_dir, store) = file_store().await;
    // One content of about 4,400 pages: the log passes the bound in one commit.
    let big = "x".repeat(17 << 20);
    store
        .record(&key("file:///big"), digest_of(&big), &text(&big), at(0))
        .await
        .unwrap();
    let turn = store.write_turn().await;
    let checkpoint = tokio::spawn({
        let store = store.clone();
        async move { store.checkpoint_now().await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !checkpoint.is_finished(),
        "a log past the bound was left without waiting for the write turn"
    );
    drop(turn);
    tokio::time::timeout(Duration::from_secs(10), checkpoint)
        .await
        .expect("the checkpoint ended once it had the turn")
        .unwrap();
    store
        .record(&key("file:///small"), digest_of("s"), &text("s"), at(1))
        .await
        .unwrap();
    let (log, _) = log_of(&store).await;
    assert!(
        log < 64,
        "the log did not start over: it holds {log} frames after one small write"
    );
}
