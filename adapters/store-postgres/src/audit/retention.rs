//! Retention: the records up to a checkpoint removed and the checkpoint kept, in one
//! transaction, only if the record it names is there with its hash.

use quarry_domain::AuditCheckpoint;
use quarry_ports::StoreError;

use super::{PostgresAudit, seq_of};
use crate::{corrupt, failed};

impl PostgresAudit {
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

    pub(super) async fn prune_through(
        &self,
        checkpoint: &AuditCheckpoint,
    ) -> Result<u64, StoreError> {
        let at = i64::try_from(checkpoint.seq)
            .map_err(|_| StoreError::Conflict("no such record".into()))?;
        let text = serde_json::to_string(checkpoint).map_err(|e| corrupt(e.to_string()))?;
        let mut tx = self.store.pool.begin().await.map_err(failed)?;
        let hash: Option<String> =
            sqlx::query_scalar("SELECT record_hash FROM audit_records WHERE seq = $1 FOR UPDATE")
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
        let removed = sqlx::query("DELETE FROM audit_records WHERE seq <= $1")
            .bind(at)
            .execute(&mut *tx)
            .await
            .map_err(failed)?
            .rows_affected();
        sqlx::query(
            "INSERT INTO audit_checkpoint (id, seq, checkpoint) VALUES (1, $1, $2)
             ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, checkpoint = excluded.checkpoint",
        )
        .bind(at)
        .bind(text)
        .execute(&mut *tx)
        .await
        .map_err(failed)?;
        tx.commit().await.map_err(failed)?;
        Ok(removed)
    }
}
