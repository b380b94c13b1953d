//! Retention: the checkpoint kept, only if the record it names is there with its hash, then the
//! records up to it removed a few thousand at a time, each batch a write of its own, so that
//! appends (this process's, which wait for the write turn, and other processes', which wait on
//! the file's lock) get in between batches instead of waiting for the whole removal: a million
//! records took about 2.3 s to remove in one statement. Verification starts after the checkpoint,
//! so records a prune cut short left behind are neither checked nor exported as the trail; the
//! next prune removes them.

use quarry_domain::AuditCheckpoint;
use quarry_ports::StoreError;

use super::{SqliteAudit, seq_of};
use crate::{corrupt, failed};

impl SqliteAudit {
    pub(super) async fn stored_checkpoint(&self) -> Result<Option<AuditCheckpoint>, StoreError> {
        let row: Option<(i64, String)> =
            sqlx::query_as("SELECT seq, checkpoint FROM audit_checkpoint WHERE id = 1")
                .fetch_optional(&self.store.pool)
                .await
                .map_err(failed)?;
        let Some((seq, text)) = row else {
            return Ok(None);
        };
        let checkpoint: AuditCheckpoint = serde_json::from_str(&text).map_err(|e| {
            corrupt(format!(
                "the audit checkpoint cannot be read (edited?): {e}"
            ))
        })?;
        if seq_of(seq)? != checkpoint.seq {
            return Err(corrupt(format!(
                "the audit checkpoint says record {} but is filed at {seq} (edited?)",
                checkpoint.seq
            )));
        }
        Ok(Some(checkpoint))
    }

    /// Keeps `checkpoint` and removes the records up to it; how many were removed. Takes the
    /// write turn for each step, not for the whole.
    pub(super) async fn prune_through(
        &self,
        checkpoint: &AuditCheckpoint,
    ) -> Result<u64, StoreError> {
        let at = i64::try_from(checkpoint.seq)
            .map_err(|_| StoreError::Conflict("no such record".into()))?;
        let text = serde_json::to_string(checkpoint).map_err(|e| corrupt(e.to_string()))?;
        let lowest = {
            let _turn = self.store.write_turn().await;
            let mut tx = self.begin().await?;
            let hash: Option<String> =
                sqlx::query_scalar("SELECT record_hash FROM audit_records WHERE seq = ?")
                    .bind(at)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(failed)?;
            if hash.as_deref() != Some(checkpoint.record_hash.as_str()) {
                return Err(StoreError::Conflict(format!(
                    "record {} is not in the trail with the checkpoint's hash",
                    checkpoint.seq
                )));
            }
            sqlx::query(
                "INSERT INTO audit_checkpoint (id, seq, checkpoint) VALUES (1, ?, ?)
                 ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, checkpoint = excluded.checkpoint",
            )
            .bind(at)
            .bind(text)
            .execute(&mut *tx)
            .await
            .map_err(failed)?;
            let lowest: Option<i64> = sqlx::query_scalar("SELECT MIN(seq) FROM audit_records")
                .fetch_one(&mut *tx)
                .await
                .map_err(failed)?;
            tx.commit().await.map_err(failed)?;
            lowest.unwrap_or(at)
        };
        let mut removed = 0;
        let mut below = lowest;
        while below <= at {
            let upto = below.saturating_add(PRUNE_BATCH - 1).min(at);
            let _turn = self.store.write_turn().await;
            removed += sqlx::query("DELETE FROM audit_records WHERE seq <= ?")
                .bind(upto)
                .execute(&self.store.pool)
                .await
                .map_err(failed)?
                .rows_affected();
            below = upto.saturating_add(1);
        }
        Ok(removed)
    }
}

/// Records removed in one write: about 10 ms of the file's write lock on the machines of
/// BENCHMARKS.md.
const PRUNE_BATCH: i64 = 5_000;
