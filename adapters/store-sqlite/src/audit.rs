//! The audit trail in the same SQLite file: one row per record and the chain's head, both
//! written in one `IMMEDIATE` transaction, so every process appending to the file extends one
//! chain and a process killed mid-append leaves it as it was.
//!
//! A handle remembers the head it last wrote, so an append is one prepared INSERT (one round
//! trip to the connection's thread; a trigger moves the head) while no other writer moved it;
//! otherwise it reads the head first. A batch (`append_batch`, the group commit's write) is one
//! transaction that reads the head, inserts every record in one statement and moves the head.
//! `writable` costs nothing while appends succeed; after one fails it writes to find out (a
//! committed 64 KiB row, written and deleted, which reaches the write-ahead log, so a full disk
//! shows), and keeps saying no until such a write succeeds. Retention (`audit/retention.rs`)
//! keeps a checkpoint, then removes the records up to it in batches.

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

    /// Appends after the head this handle knows, in one prepared statement: the record goes in
    /// only if the head is still that one, and the head follows it (trigger), atomically. On a
    /// file the statement runs on the caller's thread (`direct`), otherwise on a pooled
    /// connection. `None` when another writer moved the head first, or the statement could not
    /// run, the file's write lock being taken included (the caller then appends after reading
    /// the head, in a transaction of its own, waiting for the lock if it must).
    async fn append_after(
        &self,
        direct: Option<&mut Direct>,
        entry: &AuditEntry,
        (last, last_hash): (u64, String),
    ) -> Option<AuditRecord> {
        const APPEND_AFTER: &str = "INSERT INTO audit_records (seq, entry, previous_hash, record_hash)
             SELECT ?1, ?2, ?3, ?4
             WHERE EXISTS (SELECT 1 FROM audit_head WHERE id = 1 AND seq = ?5 AND record_hash = ?3)";
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
        let head: Option<(i64, String)> =
            sqlx::query_as("SELECT seq, record_hash FROM audit_head WHERE id = 1")
                .fetch_optional(&mut *tx)
                .await
                .map_err(failed)?;
        let (mut last, mut previous_hash) = match head {
            Some((seq, hash)) => (seq_of(seq)?, hash),
            None => (0, GENESIS_HASH.to_owned()),
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
        let Some(newest) = records.last() else {
            return Ok(records);
        };
        let at = |seq: u64| i64::try_from(seq).map_err(|_| corrupt("the audit trail is full"));
        let newest_at = at(newest.seq)?;
        let rows = vec!["(?, ?, ?, ?)"; records.len()].join(", ");
        let sql = format!(
            "INSERT INTO audit_records (seq, entry, previous_hash, record_hash) VALUES {rows}"
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
        sqlx::query(
            "INSERT INTO audit_head (id, seq, record_hash) VALUES (1, ?, ?)
             ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, record_hash = excluded.record_hash",
        )
        .bind(newest_at)
        .bind(&newest.record_hash)
        .execute(&mut *tx)
        .await
        .map_err(failed)?;
        tx.commit().await.map_err(failed)?;
        Ok(records)
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
        let head: Option<(i64, String)> =
            sqlx::query_as("SELECT seq, record_hash FROM audit_head WHERE id = 1")
                .fetch_optional(&self.store.pool)
                .await
                .map_err(failed)?;
        head.map(|(seq, hash)| Ok((seq_of(seq)?, hash))).transpose()
    }

    async fn checkpoint(&self) -> Result<Option<AuditCheckpoint>, StoreError> {
        self.stored_checkpoint().await
    }

    async fn prune(&self, checkpoint: &AuditCheckpoint) -> Result<u64, StoreError> {
        self.prune_through(checkpoint).await
    }
}
