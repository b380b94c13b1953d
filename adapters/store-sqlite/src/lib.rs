//! The embedded store: one SQLite file, through sqlx, holding the version history of every
//! resource Quarry has read, the servers registered at runtime, and idempotency records and
//! reservations, the credential vault's sealed records and the audit trail (shared by every
//! process that opens the file).
//!
//! Architecture invariant: SQL stays here. sqlx errors become [`StoreError`] at this seam; the
//! schema lives in `migrations/` and is applied on open.

mod audit;
mod direct;
mod errors;
mod idempotency;
mod registry;
mod sessions;
mod upgrade;
mod vault;
mod versions;

use std::{path::Path, str::FromStr, time::Duration};

use chrono::{TimeZone, Utc};
use quarry_domain::{Retention, Timestamp};
use quarry_ports::StoreError;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

/// The SQLite store.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pub(crate) pool: SqlitePool,
    pub(crate) retention: Retention,
    /// This process's writers, one at a time (`write_turn`),
    /// and for a file the connection they may write with on their own thread.
    writer: std::sync::Arc<tokio::sync::Mutex<Option<Direct>>>,
    /// For a file, the connection single-statement reads may use on their own thread.
    reader: std::sync::Arc<std::sync::Mutex<Option<Reader>>>,
    /// Versions waiting to be recorded together (`versions/together.rs`).
    versions_queued: std::sync::Arc<std::sync::Mutex<versions::Queue>>,
}

pub use audit::SqliteAudit;
use direct::{Direct, Reader};
pub(crate) use errors::{corrupt, failed};

pub(crate) fn micros(t: Timestamp) -> i64 {
    t.timestamp_micros()
}

pub(crate) fn from_micros(us: i64) -> Timestamp {
    Utc.timestamp_micros(us).single().unwrap_or_default()
}

impl SqliteStore {
    /// Opens (creating if needed) the store at `path` and brings its schema up to date.
    ///
    /// # Errors
    /// When the file cannot be created or opened, or a migration fails.
    pub async fn open(path: &Path, retention: Retention) -> Result<Self, StoreError> {
        Self::open_waiting(path, retention, Duration::from_secs(5)).await
    }

    /// [`Self::open`], waiting at most `busy` for another connection's write lock.
    async fn open_waiting(
        path: &Path,
        retention: Retention,
        busy: Duration,
    ) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                StoreError::Unavailable(format!("cannot create {}: {e}", dir.display()))
            })?;
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(busy);
        // A file connection does not go stale: no ping before each use (a round trip to its
        // thread on every query, the audit trail's append included).
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .test_before_acquire(false)
            // A COMMIT that failed (a full disk) can leave its transaction open: such a
            // connection is closed instead of going back to the pool, so the next write starts
            // clean once there is room again (checked in memory, no round trip).
            .after_release(|conn, _| {
                use sqlx::Connection;
                let clean = !conn.is_in_transaction();
                Box::pin(async move { Ok(clean) })
            })
            .connect_with(options)
            .await
            .map_err(|e| StoreError::Unavailable(format!("cannot open {}: {e}", path.display())))?;
        let store = Self::migrate(pool, retention, Some(path)).await?;
        let direct = Direct::open(path)
            .map_err(|e| StoreError::Unavailable(format!("cannot open {}: {e}", path.display())))?;
        *store.writer.lock().await = Some(direct);
        let reader = Reader::open(path)
            .map_err(|e| StoreError::Unavailable(format!("cannot open {}: {e}", path.display())))?;
        *store
            .reader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(reader);
        Ok(store)
    }

    /// A private in-memory store, gone when dropped (for tests and throwaway runs).
    ///
    /// # Errors
    /// When SQLite cannot start.
    pub async fn in_memory(retention: Retention) -> Result<Self, StoreError> {
        // One connection: every connection to :memory: would be a different database.
        let options = SqliteConnectOptions::from_str("sqlite::memory:").map_err(failed)?;
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await
            .map_err(failed)?;
        Self::migrate(pool, retention, None).await
    }

    /// Brings the schema up to date. Upgrading a file made by an earlier release is said in the
    /// log before and after: a step that rewrites a table (0011) takes minutes on a large store.
    async fn migrate(
        pool: SqlitePool,
        retention: Retention,
        path: Option<&Path>,
    ) -> Result<Self, StoreError> {
        let migrator = sqlx::migrate!("./migrations");
        let upgrade = match path {
            Some(path) => upgrade::pending(&pool, &migrator)
                .await
                .map(|steps| (path, steps)),
            None => None,
        };
        let started = std::time::Instant::now();
        if let Some((path, steps)) = &upgrade {
            // A warning, so that every command shows it (only `quarry serve` logs at `info` by
            // default): a command that seems to hang for minutes is worse than a line too many.
            tracing::warn!(
                "upgrading the store {} ({}): once, and on a large store it can take minutes; \
                 stopping meanwhile is safe (an unfinished step is undone and made again at the \
                 next start)",
                path.display(),
                steps.join("; ")
            );
        }
        migrator
            .run(&pool)
            .await
            .map_err(|e| corrupt(format!("migrating the store: {e}")))?;
        if let Some((path, _)) = &upgrade {
            tracing::info!(
                "the store {} is upgraded ({:.1} s)",
                path.display(),
                started.elapsed().as_secs_f64()
            );
        }
        Ok(Self {
            pool,
            retention,
            writer: std::sync::Arc::default(),
            reader: std::sync::Arc::default(),
            versions_queued: std::sync::Arc::default(),
        })
    }

    /// This process's turn to write: versions, audit records, sessions, servers, credentials and
    /// idempotency claims alike (any write left out would meet the others, the direct
    /// connection's included, on the file's lock). Its pooled connections would
    /// otherwise meet on the file's write lock and wait in SQLite's busy handler, which sleeps
    /// between tries (1 ms, 2 ms, 5 ms … up to 100 ms) however soon the lock is free; here they
    /// wait in order and are woken as soon as it is their turn. Another process on the same file
    /// still meets the busy handler.
    ///
    /// The turn holds the direct connection (`direct.rs`) of a store kept in a file.
    pub(crate) async fn write_turn(&self) -> tokio::sync::MutexGuard<'_, Option<Direct>> {
        self.writer.lock().await
    }

    /// Runs `query` on the reader connection, on this thread: `None` when there is none (a
    /// store in memory), another caller is using it, or the query failed (`SQLITE_BUSY` while
    /// the log is being reset, say), and the caller then asks the pool.
    pub(crate) fn read_here<T>(
        &self,
        query: impl FnOnce(&rusqlite::Connection) -> rusqlite::Result<T>,
    ) -> Option<T> {
        let reader = self.reader.try_lock().ok()?;
        match query(reader.as_ref()?.conn()) {
            Ok(found) => Some(found),
            Err(e) => {
                tracing::debug!("a read on the reader connection failed, asked the pool: {e}");
                None
            }
        }
    }

    /// Checkpoints the write-ahead log on a pooled connection, in the background: the direct
    /// connection does not checkpoint when it commits. The checkpoint first runs beside the
    /// writers, copying what the log holds and syncing it without stopping them (SQLite's
    /// `PASSIVE` mode). A write made while it ran keeps the log from starting over from its
    /// beginning, so once the log holds [`direct::LOG_BOUND`] frames a second checkpoint runs
    /// under the write turn: it has only the frames written meanwhile to copy (about 1 ms
    /// where the first takes about 4), and the next write starts the log over. No thread
    /// waits for either; this process's writers wait only for the second.
    pub(crate) fn checkpoint_soon(&self) {
        let store = self.clone();
        tokio::spawn(async move { store.checkpoint_now().await });
    }

    /// [`Self::checkpoint_soon`]'s work, awaited.
    pub(crate) async fn checkpoint_now(&self) {
        match self.checkpoint().await {
            // The frame count only goes down when the log starts over: a long log has not for
            // a while, writers having raced each checkpoint.
            Ok((log, _)) if log >= direct::LOG_BOUND => {
                let _turn = self.write_turn().await;
                if let Err(e) = self.checkpoint().await {
                    tracing::debug!("checkpointing the write-ahead log: {e}");
                }
            }
            Ok(_) => {}
            Err(e) => tracing::debug!("checkpointing the write-ahead log: {e}"),
        }
    }

    /// One `PASSIVE` checkpoint: the frames the log holds and those now copied to the file.
    async fn checkpoint(&self) -> Result<(i64, i64), sqlx::Error> {
        use sqlx::Row;
        let row = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
            .fetch_one(&self.pool)
            .await?;
        Ok((row.try_get(1)?, row.try_get(2)?))
    }

    /// Closes the direct connection and the pool, flushing the WAL (SQLite does when the last
    /// connection to the file closes).
    pub async fn close(&self) {
        self.writer.lock().await.take();
        self.reader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        self.pool.close().await;
    }
}

#[cfg(test)]
mod tests;
