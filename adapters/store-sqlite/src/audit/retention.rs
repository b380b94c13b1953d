//! Retention: the checkpoint kept, only if the record it names is there with its hash, then the
//! records up to it removed a few thousand at a time, each batch a write of its own, so that
//! appends (this process's, which wait for the write turn, and other processes', which wait on
//! the file's lock) get in between batches instead of waiting for the whole removal: a million
//! records took about 2.3 s to remove in one statement. Verification starts after the checkpoint,
//! so records a prune cut short left behind are neither checked nor exported as the trail; the
//! next prune removes them.
//!
//! The head's record stays (the schema refuses its deletion; an append needs it to chain to):
//! when a checkpoint covers it, it is out of the trail like the others, and counted as removed;
//! the prune after the next append deletes it.

use quarry_domain::AuditCheckpoint;
use quarry_ports::StoreError;

use super::{SqliteAudit, Stored, seq_of, stored_head};
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
        let (lowest, before, head) = {
            let _turn = self.store.write_turn().await;
            let mut tx = self.begin().await?;
            // Only a record still in the trail: after the checkpoint already kept.
            let hash: Option<String> = sqlx::query_scalar(
                "SELECT record_hash FROM audit_records
                 WHERE seq = ?1 AND seq > COALESCE((SELECT seq FROM audit_checkpoint WHERE id = 1), 0)",
            )
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
            let before: Option<i64> =
                sqlx::query_scalar("SELECT seq FROM audit_checkpoint WHERE id = 1")
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(failed)?;
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
            let head = stored_head(&mut tx).await?;
            tx.commit().await.map_err(failed)?;
            (lowest.unwrap_or(at), before.unwrap_or(0), head)
        };
        // What an earlier prune left (cut short, or the head it kept) was counted by it.
        self.remove(lowest, before).await?;
        let mut removed = self.remove(lowest.max(before + 1), at).await?;
        // The head's record, if the checkpoint covers it, stays out of the trail (unless an
        // append made meanwhile let it be deleted with the others).
        if let Stored::Head(seq, _) = head
            && let Ok(seq) = i64::try_from(seq)
            && (before + 1..=at).contains(&seq)
            && sqlx::query_scalar::<_, i64>("SELECT seq FROM audit_records WHERE seq = ?")
                .bind(seq)
                .fetch_optional(&self.store.pool)
                .await
                .map_err(failed)?
                .is_some()
        {
            removed += 1;
        }
        Ok(removed)
    }

    /// Deletes the records from `from` to `to` but the head's, a batch at a time, each under
    /// the write turn; how many.
    async fn remove(&self, from: i64, to: i64) -> Result<u64, StoreError> {
        let mut removed = 0;
        let mut below = from;
        while below <= to {
            let upto = below.saturating_add(PRUNE_BATCH - 1).min(to);
            let _turn = self.store.write_turn().await;
            removed += sqlx::query("DELETE FROM audit_records WHERE seq <= ? AND head IS NULL")
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
