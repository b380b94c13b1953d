//! Idempotency reservations and results: the first replica to insert a key's row holds it (a
//! row with no result yet) until it completes it with its result or releases it; a holder that
//! died is replaced by compare-and-set on its reservation time.

use std::time::Duration;

use async_trait::async_trait;
use quarry_domain::{IdempotencyKey, Timestamp};
use quarry_ports::{IdempotencyStore, Remembered, Reservation, StoreError};
use sqlx::Row;

use crate::{PostgresStore, failed, micros};

/// How often a reservation is tried again when the row changed under it (another replica
/// released or took over the key between two statements).
const ATTEMPTS: usize = 8;

/// What a stored row means for a reservation of `payload_digest`: `Err(reserved_at)` when the
/// holder never finished and is stale (it died), so the key may be taken over.
fn found_in(
    row: &sqlx::postgres::PgRow,
    payload_digest: &str,
    stale_before: i64,
) -> Result<Result<Reservation, i64>, StoreError> {
    let digest: String = row.try_get("payload_digest").map_err(failed)?;
    let result: Option<String> = row.try_get("result").map_err(failed)?;
    let reserved_at: i64 = row.try_get("reserved_at").map_err(failed)?;
    if digest != payload_digest {
        return Ok(Ok(Reservation::Conflict {
            payload_digest: digest,
        }));
    }
    if let Some(result) = result {
        return Ok(Ok(Reservation::Done(Remembered {
            payload_digest: digest,
            result,
        })));
    }
    Ok(if reserved_at >= stale_before {
        Ok(Reservation::Pending)
    } else {
        Err(reserved_at)
    })
}

#[async_trait]
impl IdempotencyStore for PostgresStore {
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
        for _ in 0..ATTEMPTS {
            let inserted = sqlx::query(
                "INSERT INTO idempotency (scope, key, payload_digest, result, reserved_at)
                 VALUES ($1, $2, $3, NULL, $4) ON CONFLICT (scope, key) DO NOTHING",
            )
            .bind(scope)
            .bind(key.as_str())
            .bind(payload_digest)
            .bind(micros(now))
            .execute(&self.pool)
            .await
            .map_err(failed)?;
            if inserted.rows_affected() == 1 {
                return Ok(Reservation::Granted);
            }
            let row = sqlx::query(
                "SELECT payload_digest, result, reserved_at FROM idempotency
                 WHERE scope = $1 AND key = $2",
            )
            .bind(scope)
            .bind(key.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(failed)?;
            let Some(row) = row else { continue };
            let stale_at = match found_in(&row, payload_digest, stale_before)? {
                Ok(found) => return Ok(found),
                Err(reserved_at) => reserved_at,
            };
            let taken = sqlx::query(
                "UPDATE idempotency SET reserved_at = $1
                 WHERE scope = $2 AND key = $3 AND result IS NULL AND reserved_at = $4",
            )
            .bind(micros(now))
            .bind(scope)
            .bind(key.as_str())
            .bind(stale_at)
            .execute(&self.pool)
            .await
            .map_err(failed)?;
            if taken.rows_affected() == 1 {
                return Ok(Reservation::Granted);
            }
        }
        // Still changing under us: someone else is working on the key.
        Ok(Reservation::Pending)
    }

    async fn complete(
        &self,
        scope: &str,
        key: &IdempotencyKey,
        result: &str,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE idempotency SET result = $1, created_at = $2
             WHERE scope = $3 AND key = $4 AND result IS NULL",
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
        sqlx::query("DELETE FROM idempotency WHERE scope = $1 AND key = $2 AND result IS NULL")
            .bind(scope)
            .bind(key.as_str())
            .execute(&self.pool)
            .await
            .map_err(failed)?;
        Ok(())
    }
}
