//! Whether opening a file upgrades it: a store an earlier release made, with migrations it has not
//! had yet. A new file (no migration applied) is not an upgrade, and neither is an up-to-date one.

use sqlx::{SqlitePool, migrate::Migrator};

/// The steps an existing store is still to take (`0011 versions content last`), or `None`
/// when the file is new, up to date, or cannot tell (the migrator then says what is wrong).
pub(crate) async fn pending(pool: &SqlitePool, migrator: &Migrator) -> Option<Vec<String>> {
    let applied: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success = 1")
            .fetch_all(pool)
            .await
            .ok()?;
    if applied.is_empty() {
        return None;
    }
    let steps: Vec<String> = migrator
        .iter()
        .filter(|m| m.migration_type.is_up_migration() && !applied.contains(&m.version))
        .map(|m| format!("{:04} {}", m.version, m.description))
        .collect();
    (!steps.is_empty()).then_some(steps)
}

#[cfg(test)]
mod tests {
    use std::{
        io::Write,
        path::Path,
        sync::{Arc, Mutex},
    };

    use quarry_domain::Retention;

    use crate::SqliteStore;

    /// What the store logged, at info and above.
    #[derive(Clone, Default)]
    struct Logged(Arc<Mutex<Vec<u8>>>);

    impl Write for Logged {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Logged {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
        }
    }

    /// Opens `path` with the store, logging into what it returns.
    async fn open_logged(path: &Path) -> String {
        let logged = Logged::default();
        let writer = logged.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);
        SqliteStore::open(path, Retention::default())
            .await
            .unwrap()
            .close()
            .await;
        logged.text()
    }

    #[tokio::test]
    async fn a_store_made_by_an_earlier_release_is_said_to_be_upgraded_before_and_after() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        crate::tests::migrated_up_to(&path, 10).await;

        let logged = open_logged(&path).await;
        let shown = path.display().to_string();
        let started = logged
            .lines()
            .find(|l| l.contains("upgrading the store"))
            .unwrap_or_else(|| panic!("no word of the upgrade: {logged}"));
        assert!(started.contains(&shown), "{started}");
        assert!(
            started.contains("0011 versions content last"),
            "the step is not named: {started}"
        );
        assert!(
            !started.contains("0010"),
            "a step already taken is named: {started}"
        );
        assert!(
            logged
                .lines()
                .any(|l| l.contains("is upgraded") && l.contains(&shown)),
            "no word of the upgrade's end: {logged}"
        );

        // Up to date now: opening it again says nothing of an upgrade.
        let again = open_logged(&path).await;
        assert!(!again.contains("upgrad"), "{again}");
    }

    #[tokio::test]
    async fn a_new_store_is_not_called_an_upgrade() {
        let dir = tempfile::tempdir().unwrap();
        let logged = open_logged(&dir.path().join("new.db")).await;
        assert!(!logged.contains("upgrad"), "{logged}");
    }

    /// Set in the copy of this test binary that upgrades the store at its value, to be killed.
    const UPGRADING: &str = "QUARRY_TEST_UPGRADE_TO_BE_KILLED";

    /// The versions and their contents (one byte repeated) a file holds.
    fn contents(path: &Path) -> Vec<(i64, i64, i64)> {
        let conn = rusqlite::Connection::open(path).unwrap();
        let mut stmt = conn
            .prepare(
                "SELECT number, length(content), unicode(substr(CAST(content AS TEXT), -1)) \
                 FROM resource_versions ORDER BY number",
            )
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// The last migration a file took.
    fn schema(path: &Path) -> i64 {
        rusqlite::Connection::open(path)
            .unwrap()
            .query_row(
                "SELECT max(version) FROM _sqlx_migrations WHERE success = 1",
                [],
                |r| r.get(0),
            )
            .unwrap()
    }

    /// README: stopping an upgrade is safe. A process killed (SIGKILL) while migration 0011
    /// rewrites a store of 160 MiB leaves the file as it was, and the next start upgrades it
    /// whole, every content kept.
    #[tokio::test]
    async fn an_upgrade_killed_halfway_is_undone_and_made_again_whole() {
        if let Some(path) = std::env::var_os(UPGRADING) {
            // The copy: upgrade, to be killed while at it.
            let _ = SqliteStore::open(Path::new(&path), Retention::default()).await;
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        crate::tests::migrated_up_to(&path, 10).await;
        let versions: i64 = 160;
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch("BEGIN").unwrap();
            for n in 1..=versions {
                let body = vec![b'a' + (n % 26) as u8; 1 << 20];
                conn.execute(
                    "INSERT INTO resource_versions (server, uri, number, digest, size, mime_type, \
                     is_text, content, created_at, seen_seq) \
                     VALUES ('s', 'file:///a', ?1, ?2, ?3, 'text/plain', 1, ?4, ?1, ?1)",
                    rusqlite::params![n, n.to_be_bytes().to_vec(), 1_i64 << 20, body],
                )
                .unwrap();
            }
            conn.execute_batch("COMMIT").unwrap();
        }
        let before = contents(&path);
        assert_eq!(before.len(), 160);

        let mut upgrading = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "upgrade::tests::an_upgrade_killed_halfway_is_undone_and_made_again_whole",
            ])
            .env(UPGRADING, &path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Under way once the rewrite spills into the write-ahead log (a tenth of the copy).
        let wal = dir.path().join("q.db-wal");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while std::fs::metadata(&wal).map_or(0, |m| m.len()) < 16 << 20 {
            if let Some(status) = upgrading.try_wait().unwrap() {
                panic!("the upgrade ended ({status}) before it could be killed");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the upgrade did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        upgrading.kill().unwrap();
        let status = upgrading.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9),
            "the upgrade ended by itself ({status}) before it was killed"
        );

        assert_eq!(schema(&path), 10, "a step killed halfway was kept");
        assert_eq!(contents(&path), before, "the killed step changed the file");
        let logged = open_logged(&path).await;
        assert!(
            logged.contains("0011 versions content last"),
            "the step was not made again: {logged}"
        );
        assert_eq!(schema(&path), 12, "not every step was made");
        assert_eq!(contents(&path), before, "a content was lost or changed");
    }
}
