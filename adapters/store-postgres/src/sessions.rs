//! The HTTP transport's sessions, shared by every replica: whichever one a client reaches can
//! take over a session another opened. Subscriptions go with their session (`ON DELETE
//! CASCADE`).

use async_trait::async_trait;
use quarry_domain::{Principal, Timestamp};
use quarry_ports::{SessionRecord, SessionStore, StoreError};
use sqlx::Row;

use crate::{PostgresStore, failed, from_micros, micros};

#[async_trait]
impl SessionStore for PostgresStore {
    async fn open(
        &self,
        key: &str,
        owner: &Principal,
        initialize: &str,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        // Replacing the row drops its subscriptions with it.
        let mut tx = self.pool.begin().await.map_err(failed)?;
        sqlx::query("DELETE FROM sessions WHERE key = $1")
            .bind(key)
            .execute(&mut *tx)
            .await
            .map_err(failed)?;
        sqlx::query(
            "INSERT INTO sessions (key, owner, initialize, last_used) VALUES ($1, $2, $3, $4)",
        )
        .bind(key)
        .bind(owner.as_str())
        .bind(initialize)
        .bind(micros(now))
        .execute(&mut *tx)
        .await
        .map_err(failed)?;
        tx.commit().await.map_err(failed)
    }

    async fn find(&self, key: &str) -> Result<Option<SessionRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT s.owner, s.initialize, s.last_used, u.uri FROM sessions s
             LEFT JOIN session_subscriptions u ON u.key = s.key WHERE s.key = $1",
        )
        .bind(key)
        .fetch_all(&self.pool)
        .await
        .map_err(failed)?;
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        let subscriptions = rows
            .iter()
            .map(|r| r.try_get::<Option<String>, _>("uri"))
            .filter_map(Result::transpose)
            .collect::<Result<_, _>>()
            .map_err(failed)?;
        Ok(Some(SessionRecord {
            owner: Principal::new(first.try_get::<String, _>("owner").map_err(failed)?),
            initialize: first.try_get("initialize").map_err(failed)?,
            subscriptions,
            last_used: from_micros(first.try_get("last_used").map_err(failed)?),
        }))
    }

    async fn touch(&self, key: &str, now: Timestamp) -> Result<(), StoreError> {
        sqlx::query("UPDATE sessions SET last_used = GREATEST(last_used, $1) WHERE key = $2")
            .bind(micros(now))
            .bind(key)
            .execute(&self.pool)
            .await
            .map_err(failed)?;
        Ok(())
    }

    async fn subscribe(&self, key: &str, uri: &str) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO session_subscriptions (key, uri)
             SELECT key, $1 FROM sessions WHERE key = $2 ON CONFLICT DO NOTHING",
        )
        .bind(uri)
        .bind(key)
        .execute(&self.pool)
        .await
        .map_err(failed)?;
        Ok(())
    }

    async fn unsubscribe(&self, key: &str, uri: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM session_subscriptions WHERE key = $1 AND uri = $2")
            .bind(key)
            .bind(uri)
            .execute(&self.pool)
            .await
            .map_err(failed)?;
        Ok(())
    }

    async fn close(&self, key: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM sessions WHERE key = $1")
            .bind(key)
            .execute(&self.pool)
            .await
            .map_err(failed)?;
        Ok(())
    }

    async fn expire(&self, before: Timestamp) -> Result<u64, StoreError> {
        Ok(sqlx::query("DELETE FROM sessions WHERE last_used < $1")
            .bind(micros(before))
            .execute(&self.pool)
            .await
            .map_err(failed)?
            .rows_affected())
    }
}
