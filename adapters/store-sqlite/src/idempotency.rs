//! Idempotency reservations and results, in the same SQLite file: a key is reserved by the first
//! writer (a row with no result yet), completed with its result, or released when its mutation
//! failed. Two processes on one file see one another's reservations.

use std::time::Duration;

use async_trait::async_trait;
use quarry_domain::{IdempotencyKey, Timestamp};
use quarry_ports::{IdempotencyStore, Remembered, Reservation, StoreError};
use sqlx::Row;

use crate::{SqliteStore, failed, micros};

/// What a stored row means for a reservation of `payload_digest`; `None` when the key is free
/// (no row, or a holder that never finished and is stale: it died).
fn found_in(
    row: Option<&sqlx::sqlite::SqliteRow>,
    payload_digest: &str,
    stale_before: i64,
) -> Result<Option<Reservation>, StoreError> {
    let Some(row) = row else { return Ok(None) };
    let digest: String = row.try_get("payload_digest").map_err(failed)?;
    let result: Option<String> = row.try_get("result").map_err(failed)?;
    let reserved_at: i64 = row.try_get("reserved_at").map_err(failed)?;
    if digest != payload_digest {
        return Ok(Some(Reservation::Conflict {
            payload_digest: digest,
        }));
    }
    if let Some(result) = result {
        return Ok(Some(Reservation::Done(Remembered {
            payload_digest: digest,
            result,
        })));
    }
    Ok((reserved_at >= stale_before).then_some(Reservation::Pending))
}

impl SqliteStore {
    /// The reservation a row already decides, read without taking the write lock.
    async fn look(
        &self,
        scope: &str,
        key: &IdempotencyKey,
        payload_digest: &str,
        stale_before: i64,
    ) -> Result<Option<Reservation>, StoreError> {
        let row = sqlx::query(
            "SELECT payload_digest, result, reserved_at FROM idempotency WHERE scope = ? AND key = ?",
        )
        .bind(scope)
        .bind(key.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(failed)?;
        found_in(row.as_ref(), payload_digest, stale_before)
    }
}

#[async_trait]
impl IdempotencyStore for SqliteStore {
    async fn reserve(
        &self,
        scope: &str,
        key: &IdempotencyKey,
        payload_digest: &str,
        now: Timestamp,
        stale_after: Duration,
    ) -> Result<Reservation, StoreError> {
        let stale_before =
            micros(now).saturating_sub(i64::try_from(stale_after.as_micros()).unwrap_or(i64::MAX));
        // A look first, without the write lock: callers waiting for another's result poll here.
        if let Some(found) = self.look(scope, key, payload_digest, stale_before).await? {
            return Ok(found);
        }
        let _turn = self.write_turn().await;
        let mut conn = self.pool.acquire().await.map_err(failed)?;
        // IMMEDIATE: the look and the claim are one step for every process on the file.
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut *conn)
            .await
            .map_err(failed)?;
        let outcome = async {
            let row = sqlx::query(
                "SELECT payload_digest, result, reserved_at FROM idempotency
                 WHERE scope = ? AND key = ?",
            )
            .bind(scope)
            .bind(key.as_str())
            .fetch_optional(&mut *conn)
            .await
            .map_err(failed)?;
            if let Some(found) = found_in(row.as_ref(), payload_digest, stale_before)? {
                return Ok(found);
            }
            sqlx::query(
                "INSERT OR REPLACE INTO idempotency (scope, key, payload_digest, result, reserved_at)
                 VALUES (?, ?, ?, NULL, ?)",
            )
            .bind(scope)
            .bind(key.as_str())
            .bind(payload_digest)
            .bind(micros(now))
            .execute(&mut *conn)
            .await
            .map_err(failed)?;
            Ok(Reservation::Granted)
        }
        .await;
        let end = if outcome.is_ok() {
            "COMMIT"
        } else {
            "ROLLBACK"
        };
        sqlx::query(end).execute(&mut *conn).await.map_err(failed)?;
        outcome
    }

    async fn complete(
        &self,
        scope: &str,
        key: &IdempotencyKey,
        result: &str,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        sqlx::query(
            "UPDATE idempotency SET result = ?, created_at = ?
             WHERE scope = ? AND key = ? AND result IS NULL",
        )
        .bind(result)
        .bind(micros(now))
        .bind(scope)
        .bind(key.as_str())
        .execute(&self.pool)
        .await
        .map_err(failed)?;
        Ok(())
    }

    async fn release(&self, scope: &str, key: &IdempotencyKey) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        sqlx::query("DELETE FROM idempotency WHERE scope = ? AND key = ? AND result IS NULL")
            .bind(scope)
            .bind(key.as_str())
            .execute(&self.pool)
            .await
            .map_err(failed)?;
        Ok(())
    }
}
