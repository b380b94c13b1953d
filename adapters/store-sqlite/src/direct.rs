//! This process's own connection to the store's file, written on the caller's thread.
//!
//! sqlx runs each SQLite connection on a thread of its own, so every statement is a hand-off
//! there and back: about 50 µs on the two-core machines the benchmarks run on, where the
//! statement itself (an audit record's INSERT, committed to the write-ahead log) takes about
//! 20. The writes a request waits for and that are small (an audit record in one statement,
//! a version of a few KiB in one transaction) go through this connection instead, under the
//! write turn (`SqliteStore::write_turn`), so they never meet each other.
//!
//! A second connection, the [`Reader`], answers the reads a request waits for that fit in
//! one statement (is this content the resource's latest version?) on the caller's thread too,
//! when no other caller is using it; otherwise, or if it fails, the read goes to the pool.
//!
//! It never waits: its busy timeout is zero, so while another process holds the file's write
//! lock a statement fails at once with `SQLITE_BUSY` and the caller takes the pooled path,
//! which waits for the lock without holding a thread. Nor does it checkpoint the write-ahead
//! log when it commits (the fsyncs that takes would hold the caller's thread): every
//! [`CHECKPOINT_EVERY`] commits it asks for a checkpoint, which the store runs on a pooled
//! connection (`SqliteStore::checkpoint_soon`).

use std::{path::Path, time::Duration};

use rusqlite::{Connection, OpenFlags, Params};

/// Commits through the direct connection between two checkpoints of the write-ahead log (an
/// audit record is a page or two of it: about the 1,000 pages at which SQLite checkpoints by
/// itself).
pub(crate) const CHECKPOINT_EVERY: u32 = 512;

/// Frames in the write-ahead log (4 KiB each) from which a checkpoint is made again under the
/// write turn, so that the log starts over: about four checkpoints' worth of audit appends.
pub(crate) const LOG_BOUND: i64 = 4096;

/// The connection and how many commits it made since it last asked for a checkpoint.
#[derive(Debug)]
pub(crate) struct Direct {
    conn: Connection,
    commits: u32,
}

/// What a direct statement did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Executed {
    /// Rows the statement changed.
    pub(crate) rows: usize,
    /// The write-ahead log has grown enough to be checkpointed.
    pub(crate) checkpoint_due: bool,
}

/// A connection of this process's own to `path`, used from one thread at a time, that never
/// waits for a lock.
fn connect(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(Duration::ZERO)?;
    Ok(conn)
}

impl Direct {
    /// Opens `path`, which the pool has already created, migrated and put in WAL mode.
    pub(crate) fn open(path: &Path) -> rusqlite::Result<Self> {
        let conn = connect(path)?;
        // Per connection, as in the pool: a commit reaches the log without an fsync.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        Ok(Self { conn, commits: 0 })
    }

    /// Runs one statement (its own transaction), prepared once per connection.
    pub(crate) fn execute(&mut self, sql: &str, params: impl Params) -> rusqlite::Result<Executed> {
        let rows = self.conn.prepare_cached(sql)?.execute(params)?;
        Ok(Executed {
            rows,
            checkpoint_due: self.committed(),
        })
    }

    /// Runs `work` in one `IMMEDIATE` transaction (the write lock from its start), committed
    /// when it succeeds and rolled back otherwise; with whether a checkpoint is due.
    pub(crate) fn transaction<T>(
        &mut self,
        work: impl FnOnce(&rusqlite::Transaction<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<(T, bool)> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let done = work(&tx)?;
        tx.commit()?;
        Ok((done, self.committed()))
    }

    /// Commits made since the last checkpoint was asked for.
    #[cfg(test)]
    pub(crate) fn commits(&self) -> u32 {
        self.commits
    }

    /// Counts a commit: whether the log has grown enough to be checkpointed.
    fn committed(&mut self) -> bool {
        self.commits += 1;
        let due = self.commits >= CHECKPOINT_EVERY;
        if due {
            self.commits = 0;
        }
        due
    }
}

/// This process's connection for reads on the caller's thread (`SqliteStore::read_here`).
#[derive(Debug)]
pub(crate) struct Reader {
    conn: Connection,
}

impl Reader {
    /// Opens `path`, which the pool has already created and migrated, for queries only.
    pub(crate) fn open(path: &Path) -> rusqlite::Result<Self> {
        let conn = connect(path)?;
        conn.pragma_update(None, "query_only", true)?;
        Ok(Self { conn })
    }

    /// The connection, to prepare (cached) and run one query on.
    pub(crate) fn conn(&self) -> &Connection {
        &self.conn
    }
}
