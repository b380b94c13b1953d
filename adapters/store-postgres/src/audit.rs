//! The audit trail shared by every replica: one row per record and the chain's head. An append
//! is first tried as one statement that moves the head from the one this process last wrote
//! and inserts the record only if it did (one round trip); when another writer moved the head
//! since, it is one transaction that locks the head row, writes the record after it and moves
//! the head; a batch (`append_batch`, the group commit's write) is always such a transaction,
//! its records inserted in one statement. Either way any number of writers extend one chain, and a replica killed mid-append
//! leaves it as it was. `writable` costs nothing while appends succeed; after one fails it writes the head row
//! (unchanged) to find out, and keeps saying no until that succeeds. Retention
//! (`audit/retention.rs`) removes records up to a checkpoint and keeps the checkpoint, in one
//! transaction.

mod retention;

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicBool, Ordering},
};

use async_trait::async_trait;
use quarry_domain::{
    AuditCheckpoint, AuditEntry, AuditRecord, GENESIS_HASH, canonical_entry, chain_material,
};
use quarry_ports::{AuditLog, ContentHasher, StoreError};
use sqlx::Row;

use crate::{PostgresStore, corrupt, failed};

/// The audit log of a [`PostgresStore`], chained with SHA-256 from `hasher`.
#[derive(Debug, Clone)]
pub struct PostgresAudit {
    store: PostgresStore,
    hasher: Arc<dyn ContentHasher>,
    /// False from a failed append until a test write succeeds.
    healthy: Arc<AtomicBool>,
    /// The head this process last wrote or saw (number, hash): the next append expects it.
    last: Arc<Mutex<Option<(u64, String)>>>,
}

fn seq_of(n: i64) -> Result<u64, StoreError> {
    u64::try_from(n).map_err(|_| corrupt(format!("an audit record's number is {n}")))
}

impl PostgresAudit {
    /// The audit log kept in `store`'s schema.
    pub fn new(store: PostgresStore, hasher: Arc<dyn ContentHasher>) -> Self {
        Self {
            store,
            hasher,
            healthy: Arc::new(AtomicBool::new(false)),
            last: Arc::new(Mutex::new(None)),
        }
    }

    /// The record after `(last, last_hash)` (the head; 0 for none yet).
    fn after(&self, last: u64, last_hash: String, entry: &AuditEntry) -> AuditRecord {
        let seq = last + 1;
        let previous_hash = if last == 0 {
            GENESIS_HASH.to_owned()
        } else {
            last_hash
        };
        let record_hash = self
            .hasher
            .sha256(&chain_material(seq, entry, &previous_hash))
            .hex();
        AuditRecord {
            seq,
            entry: entry.clone(),
            previous_hash,
            record_hash,
        }
    }

    fn remember(&self, record: &AuditRecord) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((record.seq, record.record_hash.clone()));
    }

    async fn chain(&self, entry: &AuditEntry) -> Result<AuditRecord, StoreError> {
        let expected = self.last.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some((last, last_hash)) = expected {
            let record = self.after(last, last_hash.clone(), entry);
            if self.append_after(&record, &last_hash).await? {
                self.remember(&record);
                return Ok(record);
            }
        }
        let record = self
            .chain_locked(std::slice::from_ref(entry))
            .await?
            .pop()
            .ok_or_else(|| corrupt("an append wrote no record"))?;
        self.remember(&record);
        Ok(record)
    }

    /// One statement: the head moves to `record` only if it is still `record.seq - 1` with
    /// `last_hash`, and the record is written only if it moved. False when another writer came
    /// first (nothing written).
    async fn append_after(
        &self,
        record: &AuditRecord,
        last_hash: &str,
    ) -> Result<bool, StoreError> {
        let at = i64::try_from(record.seq).map_err(|_| corrupt("the audit trail is full"))?;
        let written = sqlx::query(
            "WITH moved AS (
                 UPDATE audit_head SET seq = $1, record_hash = $2
                 WHERE id = 1 AND seq = $1 - 1 AND record_hash = $3
                 RETURNING seq)
             INSERT INTO audit_records (seq, entry, previous_hash, record_hash)
             SELECT $1, $4, $5, $2 FROM moved",
        )
        .bind(at)
        .bind(&record.record_hash)
        .bind(last_hash)
        .bind(canonical_entry(&record.entry))
        .bind(&record.previous_hash)
        .execute(&self.store.pool)
        .await
        .map_err(failed)?
        .rows_affected();
        Ok(written == 1)
    }

    /// The append that waits for the head: a transaction holding its row's lock, writing
    /// `entries` after it in order (one statement for all of them) and moving it to the last.
    async fn chain_locked(&self, entries: &[AuditEntry]) -> Result<Vec<AuditRecord>, StoreError> {
        let mut tx = self.store.pool.begin().await.map_err(failed)?;
        let (last, last_hash): (i64, String) =
            sqlx::query_as("SELECT seq, record_hash FROM audit_head WHERE id = 1 FOR UPDATE")
                .fetch_one(&mut *tx)
                .await
                .map_err(failed)?;
        let mut head = (seq_of(last)?, last_hash);
        let mut records = Vec::with_capacity(entries.len());
        for entry in entries {
            let record = self.after(head.0, head.1.clone(), entry);
            head = (record.seq, record.record_hash.clone());
            records.push(record);
        }
        let at = |seq: u64| i64::try_from(seq).map_err(|_| corrupt("the audit trail is full"));
        let seqs = records
            .iter()
            .map(|r| at(r.seq))
            .collect::<Result<Vec<_>, _>>()?;
        let texts: Vec<String> = records.iter().map(|r| canonical_entry(&r.entry)).collect();
        let previous: Vec<&str> = records.iter().map(|r| r.previous_hash.as_str()).collect();
        let hashes: Vec<&str> = records.iter().map(|r| r.record_hash.as_str()).collect();
        sqlx::query(
            "INSERT INTO audit_records (seq, entry, previous_hash, record_hash)
             SELECT * FROM UNNEST($1::BIGINT[], $2::TEXT[], $3::TEXT[], $4::TEXT[])",
        )
        .bind(&seqs)
        .bind(&texts)
        .bind(&previous)
        .bind(&hashes)
        .execute(&mut *tx)
        .await
        .map_err(failed)?;
        sqlx::query("UPDATE audit_head SET seq = $1, record_hash = $2 WHERE id = 1")
            .bind(at(head.0)?)
            .bind(&head.1)
            .execute(&mut *tx)
            .await
            .map_err(failed)?;
        tx.commit().await.map_err(failed)?;
        Ok(records)
    }

    /// A write that changes nothing but needs what an append needs: a connection, a writable
    /// database and the head row's lock.
    async fn test_write(&self) -> Result<(), StoreError> {
        sqlx::query("UPDATE audit_head SET seq = seq WHERE id = 1")
            .execute(&self.store.pool)
            .await
            .map_err(failed)?;
        Ok(())
    }
}

#[async_trait]
impl AuditLog for PostgresAudit {
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
        let written = self.chain_locked(entries).await;
        if let Ok(Some(newest)) = written.as_ref().map(|r| r.last()) {
            self.remember(newest);
        }
        self.healthy.store(written.is_ok(), Ordering::Release);
        written
    }

    async fn records(&self, after: u64, limit: usize) -> Result<Vec<AuditRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT seq, entry, previous_hash, record_hash FROM audit_records
             WHERE seq > $1 ORDER BY seq LIMIT $2",
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
        let (seq, hash): (i64, String) =
            sqlx::query_as("SELECT seq, record_hash FROM audit_head WHERE id = 1")
                .fetch_one(&self.store.pool)
                .await
                .map_err(failed)?;
        Ok((seq > 0).then_some((seq_of(seq)?, hash)))
    }

    async fn checkpoint(&self) -> Result<Option<AuditCheckpoint>, StoreError> {
        self.stored_checkpoint().await
    }

    async fn prune(&self, checkpoint: &AuditCheckpoint) -> Result<u64, StoreError> {
        self.prune_through(checkpoint).await
    }
}
