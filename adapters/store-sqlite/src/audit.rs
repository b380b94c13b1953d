//! The audit trail in the same SQLite file: one row per record and the chain's head, both
//! written in one `IMMEDIATE` transaction, so every process appending to the file extends one
//! chain and a process killed mid-append leaves it as it was.

use std::sync::Arc;

use async_trait::async_trait;
use quarry_domain::{AuditEntry, AuditRecord, GENESIS_HASH, canonical_entry, chain_material};
use quarry_ports::{AuditLog, ContentHasher, StoreError};
use sqlx::Row;

use crate::{SqliteStore, corrupt, failed};

/// The audit log of a [`SqliteStore`], chained with SHA-256 from `hasher`.
#[derive(Debug, Clone)]
pub struct SqliteAudit {
    store: SqliteStore,
    hasher: Arc<dyn ContentHasher>,
}

impl SqliteAudit {
    /// The audit log kept in `store`'s file.
    pub fn new(store: SqliteStore, hasher: Arc<dyn ContentHasher>) -> Self {
        Self { store, hasher }
    }
}

fn seq_of(n: i64) -> Result<u64, StoreError> {
    u64::try_from(n).map_err(|_| corrupt(format!("an audit record's number is {n}")))
}

#[async_trait]
impl AuditLog for SqliteAudit {
    async fn writable(&self) -> Result<(), StoreError> {
        // Taking the write lock is what an append needs first; a read-only or locked file fails.
        let tx = self
            .store
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(failed)?;
        tx.rollback().await.map_err(failed)
    }

    async fn append(&self, entry: &AuditEntry) -> Result<AuditRecord, StoreError> {
        let mut tx = self
            .store
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(failed)?;
        let head: Option<(i64, String)> =
            sqlx::query_as("SELECT seq, record_hash FROM audit_head WHERE id = 1")
                .fetch_optional(&mut *tx)
                .await
                .map_err(failed)?;
        let (seq, previous_hash) = match head {
            Some((seq, hash)) => (seq_of(seq)? + 1, hash),
            None => (1, GENESIS_HASH.to_owned()),
        };
        let record_hash = self
            .hasher
            .sha256(&chain_material(seq, entry, &previous_hash))
            .hex();
        let at = i64::try_from(seq).map_err(|_| corrupt("the audit trail is full"))?;
        sqlx::query(
            "INSERT INTO audit_records (seq, entry, previous_hash, record_hash) VALUES (?, ?, ?, ?)",
        )
        .bind(at)
        .bind(canonical_entry(entry))
        .bind(&previous_hash)
        .bind(&record_hash)
        .execute(&mut *tx)
        .await
        .map_err(failed)?;
        sqlx::query(
            "INSERT INTO audit_head (id, seq, record_hash) VALUES (1, ?, ?)
             ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, record_hash = excluded.record_hash",
        )
        .bind(at)
        .bind(&record_hash)
        .execute(&mut *tx)
        .await
        .map_err(failed)?;
        tx.commit().await.map_err(failed)?;
        Ok(AuditRecord {
            seq,
            entry: entry.clone(),
            previous_hash,
            record_hash,
        })
    }

    async fn records(&self, after: u64, limit: usize) -> Result<Vec<AuditRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT seq, entry, previous_hash, record_hash FROM audit_records
             WHERE seq > ? ORDER BY seq LIMIT ?",
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
}
