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
    use sqlx::{Connection, SqliteConnection};

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
        // The migrations up to 0010, as an earlier release applied them.
        let before = dir.path().join("migrations");
        std::fs::create_dir(&before).unwrap();
        let all = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        for entry in std::fs::read_dir(&all).unwrap() {
            let name = entry.unwrap().file_name();
            if name.to_string_lossy().as_ref() < "0011" {
                std::fs::copy(all.join(&name), before.join(&name)).unwrap();
            }
        }
        let url = format!("sqlite://{}?mode=rwc", path.display());
        let mut conn = SqliteConnection::connect(&url).await.unwrap();
        sqlx::migrate::Migrator::new(before.as_path())
            .await
            .unwrap()
            .run(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();

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
}
