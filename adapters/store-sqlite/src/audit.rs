//! The audit trail in the same SQLite file: one row per record, the chain's head marked on its
//! own (`head = 1`, migration 0012), so an append writes one page of the log, the newest
//! records sharing it. Every write is one `IMMEDIATE` transaction or one statement, so every
//! process appending to the file extends one chain and a process killed mid-append leaves it as
//! it was.
//!
//! A handle remembers the head it last wrote, so an append is one prepared INSERT (on the
//! caller's thread, `direct`): its record is marked the head only if the record before it is
//! the head with the hash it chains to, and the schema refuses a record that is not, so while no
//! other writer moved the head that one statement is the whole append; otherwise the handle
//! reads the head first. A batch (`append_batch`, the group commit's write) is one transaction
//! that reads the head and inserts every record in one statement. The head's record cannot be
//! deleted; should it go anyway (the schema's trigger dropped first), the last record left is
//! not marked: `head` reports the records missing at the end, and the next append skips a
//! number so that verify names the gap rather than the trail hiding it. `writable` costs nothing
//! while appends succeed; after one fails it writes to find out (a committed 64 KiB row, written
//! and deleted, which reaches the write-ahead log, so a full disk shows), and keeps saying no
//! until such a write succeeds. Retention (`audit/retention.rs`) keeps a checkpoint, then
//! removes the records up to it in batches.

mod retention;
#[cfg(test)]
mod tests;

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use async_trait::async_trait;
use quarry_domain::{
    AuditCheckpoint, AuditEntry, AuditRecord, GENESIS_HASH, canonical_entry, chain_material,
    chain_material_of,
};
use quarry_ports::{AuditLog, ContentHasher, StoreError};
use sqlx::Row;

use crate::{SqliteStore, corrupt, direct::Direct, failed};

/// The audit log of a [`SqliteStore`], chained with SHA-256 from `hasher`.
#[derive(Debug, Clone)]
pub struct SqliteAudit {
    store: SqliteStore,
    hasher: Arc<dyn ContentHasher>,
    /// False from a failed append until a test write succeeds.
    healthy: Arc<AtomicBool>,
    /// The head this handle last wrote or read, for the one-round-trip append.
    head: Arc<std::sync::Mutex<Option<(u64, String)>>>,
}

impl SqliteAudit {
    /// The audit log kept in `store`'s file.
    pub fn new(store: SqliteStore, hasher: Arc<dyn ContentHasher>) -> Self {
        Self {
            store,
            hasher,
            healthy: Arc::new(AtomicBool::new(false)),
            head: Arc::default(),
        }
    }

    /// A transaction holding the write lock from its start.
    async fn begin(&self) -> Result<sqlx::Transaction<'_, sqlx::Sqlite>, StoreError> {
        self.store
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(failed)
    }

    /// A write that changes nothing but must reach the file, and big enough (64 KiB: sixteen
    /// pages) that an append fits after it: a failed write leaves the journal grown by what it
    /// managed, so a one-page probe would pass on a full disk where an append still fails.
    async fn test_write(&self) -> Result<(), StoreError> {
        let _turn = self.store.write_turn().await;
        let mut tx = self.begin().await?;
        sqlx::raw_sql(
            "INSERT INTO audit_probe (data) VALUES (zeroblob(65536)); DELETE FROM audit_probe;",
        )
        .execute(&mut *tx)
        .await
        .map_err(failed)?;
        tx.commit().await.map_err(failed)
    }

    /// Appends after the head this handle knows, in one prepared statement: the record is the
    /// head only if the one before it still is (the schema refuses it otherwise), and the mark
    /// moves to it (trigger), atomically. On a file the statement runs on the caller's thread
    /// (`direct`), otherwise on a pooled connection. `None` when another writer moved the head
    /// first, or the statement could not run, the file's write lock being taken included (the
    /// caller then appends after reading the head, in a transaction of its own, waiting for the
    /// lock if it must).
    async fn append_after(
        &self,
        direct: Option<&mut Direct>,
        entry: &AuditEntry,
        (last, last_hash): (u64, String),
    ) -> Option<AuditRecord> {
        const APPEND_AFTER: &str = "INSERT INTO audit_records (seq, entry, previous_hash, record_hash, head)
             VALUES (?1, ?2, ?3, ?4,
                     (SELECT 1 FROM audit_records WHERE seq = ?5 AND record_hash = ?3 AND head = 1))";
        // A `SELECT … WHERE EXISTS` reading the table it inserts into would make SQLite copy
        // the row to a temporary table first; the value of `head` asks the same question.
        let seq = last + 1;
        let text = canonical_entry(entry);
        let record_hash = self
            .hasher
            .sha256(&chain_material_of(seq, &text, &last_hash))
            .hex();
        let (seq_at, last_at) = (i64::try_from(seq).ok()?, i64::try_from(last).ok()?);
        let inserted = match direct {
            Some(direct) => direct
                .execute(
                    APPEND_AFTER,
                    rusqlite::params![seq_at, text, last_hash, record_hash, last_at],
                )
                .map(|done| {
                    if done.checkpoint_due {
                        self.store.checkpoint_soon();
                    }
                    done.rows == 1
                })
                .map_err(|e| e.to_string()),
            None => sqlx::query(APPEND_AFTER)
                .bind(seq_at)
                .bind(text)
                .bind(&last_hash)
                .bind(&record_hash)
                .bind(last_at)
                .execute(&self.store.pool)
                .await
                .map(|done| done.rows_affected() == 1)
                .map_err(|e| e.to_string()),
        };
        match inserted {
            Ok(true) => Some(AuditRecord {
                seq,
                entry: entry.clone(),
                previous_hash: last_hash,
                record_hash,
            }),
            Ok(false) => None,
            Err(e) => {
                tracing::debug!(
                    "audit append after the known head failed, retried after reading it: {e}"
                );
                None
            }
        }
    }

    async fn chain(&self, entry: &AuditEntry) -> Result<AuditRecord, StoreError> {
        let mut turn = self.store.write_turn().await;
        let known = self.head.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let record = match known {
            Some(head) => self.append_after(turn.as_mut(), entry, head).await,
            None => None,
        };
        let record = match record {
            Some(r) => r,
            None => self
                .append_reading_head(std::slice::from_ref(entry))
                .await?
                .pop()
                .ok_or_else(|| corrupt("an append wrote no record"))?,
        };
        *self.head.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((record.seq, record.record_hash.clone()));
        Ok(record)
    }

    /// Appends `entries`, in order, after the head as stored, in one transaction that holds the
    /// write lock from its start (the first append of a handle, after another writer, or a
    /// batch): all of them or none.
    async fn append_reading_head(
        &self,
        entries: &[AuditEntry],
    ) -> Result<Vec<AuditRecord>, StoreError> {
        let mut tx = self.begin().await?;
        let (mut last, mut previous_hash) = match stored_head(&mut tx).await? {
            Stored::Head(seq, hash) => (seq, hash),
            Stored::Empty(Some((seq, hash))) => (seq, hash),
            Stored::Empty(None) => (0, GENESIS_HASH.to_owned()),
            Stored::Cut(seq) => {
                tracing::warn!(
                    "the audit trail's last record ({seq}) is not its head: the records after it \
                     were removed; record {} is left out, so that `quarry audit verify` names the gap",
                    seq + 1
                );
                // Their hashes went with them: the next record follows none of the records there.
                (seq + 1, GENESIS_HASH.to_owned())
            }
        };
        let mut records = Vec::with_capacity(entries.len());
        for entry in entries {
            let seq = last + 1;
            let record_hash = self
                .hasher
                .sha256(&chain_material(seq, entry, &previous_hash))
                .hex();
            records.push(AuditRecord {
                seq,
                entry: entry.clone(),
                previous_hash: std::mem::replace(&mut previous_hash, record_hash.clone()),
                record_hash,
            });
            last = seq;
        }
        if records.is_empty() {
            return Ok(records);
        }
        let at = |seq: u64| i64::try_from(seq).map_err(|_| corrupt("the audit trail is full"));
        let rows = vec!["(?, ?, ?, ?, 1)"; records.len()].join(", ");
        let sql = format!(
            "INSERT INTO audit_records (seq, entry, previous_hash, record_hash, head) VALUES {rows}"
        );
        let mut insert = sqlx::query(sqlx::AssertSqlSafe(sql));
        for r in &records {
            insert = insert
                .bind(at(r.seq)?)
                .bind(canonical_entry(&r.entry))
                .bind(&r.previous_hash)
                .bind(&r.record_hash);
        }
        insert.execute(&mut *tx).await.map_err(failed)?;
        tx.commit().await.map_err(failed)?;
        Ok(records)
    }
}

/// Where the chain ends, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stored {
    /// The last record, marked the head.
    Head(u64, String),
    /// No record: a new trail, or one whose records retention removed before the head was kept
    /// on its record (a file made before migration 0012), whose head `audit_head` still names.
    Empty(Option<(u64, String)>),
    /// The last record left is not the head: the records after it were removed.
    Cut(u64),
}

/// Reads where the chain ends on `conn` (in the caller's transaction, if it has one).
async fn stored_head(conn: &mut sqlx::SqliteConnection) -> Result<Stored, StoreError> {
    let last: Option<(i64, String, Option<i64>)> = sqlx::query_as(
        "SELECT seq, record_hash, head FROM audit_records ORDER BY seq DESC LIMIT 1",
    )
    .fetch_optional(&mut *conn)
    .await
    .map_err(failed)?;
    match last {
        Some((seq, hash, Some(1))) => Ok(Stored::Head(seq_of(seq)?, hash)),
        Some((seq, _, _)) => Ok(Stored::Cut(seq_of(seq)?)),
        None => {
            let head: Option<(i64, String)> =
                sqlx::query_as("SELECT seq, record_hash FROM audit_head WHERE id = 1")
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err(failed)?;
            Ok(Stored::Empty(
                head.map(|(seq, hash)| Ok((seq_of(seq)?, hash)))
                    .transpose()?,
            ))
        }
    }
}

fn seq_of(n: i64) -> Result<u64, StoreError> {
    u64::try_from(n).map_err(|_| corrupt(format!("an audit record's number is {n}")))
}

#[async_trait]
impl AuditLog for SqliteAudit {
    async fn writable(&self) -> Result<(), StoreError> {
        if self.healthy.load(Ordering::Acquire) {
            return Ok(());
        }
        self.test_write().await?;
        self.healthy.store(true, Ordering::Release);
        Ok(())
    }

    async fn append(&self, entry: &AuditEntry) -> Result<AuditRecord, StoreError> {
        let appended = self.chain(entry).await;
        self.healthy.store(appended.is_ok(), Ordering::Release);
        appended
    }

    async fn append_batch(&self, entries: &[AuditEntry]) -> Result<Vec<AuditRecord>, StoreError> {
        if let [entry] = entries {
            return Ok(vec![self.append(entry).await?]);
        }
        let written = {
            let _turn = self.store.write_turn().await;
            self.append_reading_head(entries).await
        };
        if let Ok(Some(newest)) = written.as_ref().map(|r| r.last()) {
            *self.head.lock().unwrap_or_else(|e| e.into_inner()) =
                Some((newest.seq, newest.record_hash.clone()));
        }
        self.healthy.store(written.is_ok(), Ordering::Release);
        written
    }

    async fn records(&self, after: u64, limit: usize) -> Result<Vec<AuditRecord>, StoreError> {
        // Not those up to the checkpoint: removed by retention, if not yet deleted.
        let rows = sqlx::query(
            "SELECT seq, entry, previous_hash, record_hash FROM audit_records
             WHERE seq > ? AND seq > COALESCE((SELECT seq FROM audit_checkpoint WHERE id = 1), 0)
             ORDER BY seq LIMIT ?",
        )
        .bind(i64::try_from(after).unwrap_or(i64::MAX))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.store.pool)
        .await
        .map_err(failed)?;
        rows.iter()
            .map(|row| {
                let seq = seq_of(row.try_get("seq").map_err(failed)?)?;
                let text: String = row.try_get("entry").map_err(failed)?;
                let entry = serde_json::from_str(&text).map_err(|e| {
                    corrupt(format!("audit record {seq} cannot be read (edited?): {e}"))
                })?;
                Ok(AuditRecord {
                    seq,
                    entry,
                    previous_hash: row.try_get("previous_hash").map_err(failed)?,
                    record_hash: row.try_get("record_hash").map_err(failed)?,
                })
            })
            .collect()
    }

    async fn head(&self) -> Result<Option<(u64, String)>, StoreError> {
        let mut conn = self.store.pool.acquire().await.map_err(failed)?;
        match stored_head(&mut conn).await? {
            Stored::Head(seq, hash) => Ok(Some((seq, hash))),
            Stored::Empty(head) => Ok(head),
            Stored::Cut(seq) => Err(corrupt(format!(
                "record {} is missing at the end: record {seq}, the last one left, is not the \
                 chain's head",
                seq + 1
            ))),
        }
    }

    async fn checkpoint(&self) -> Result<Option<AuditCheckpoint>, StoreError> {
        self.stored_checkpoint().await
    }

    async fn prune(&self, checkpoint: &AuditCheckpoint) -> Result<u64, StoreError> {
        self.prune_through(checkpoint).await
    }
}
