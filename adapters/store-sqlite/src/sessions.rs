//! The HTTP transport's sessions, in the same SQLite file: every process on the file can take
//! over a session another opened.

use async_trait::async_trait;
use quarry_domain::{Principal, Timestamp};
use quarry_ports::{SessionRecord, SessionStore, StoreError};
use sqlx::Row;

use crate::{SqliteStore, failed, from_micros, micros};

#[async_trait]
impl SessionStore for SqliteStore {
    async fn open(
        &self,
        key: &str,
        owner: &Principal,
        initialize: &str,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let mut tx = self.pool.begin().await.map_err(failed)?;
        sqlx::query("DELETE FROM session_subscriptions WHERE key = ?")
            .bind(key)
            .execute(&mut *tx)
            .await
            .map_err(failed)?;
        sqlx::query(
            "INSERT INTO sessions (key, owner, initialize, last_used) VALUES (?, ?, ?, ?)
             ON CONFLICT (key) DO UPDATE SET owner = excluded.owner,
                 initialize = excluded.initialize, last_used = excluded.last_used",
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
        let Some(row) =
            sqlx::query("SELECT owner, initialize, last_used FROM sessions WHERE key = ?")
                .bind(key)
                .fetch_optional(&self.pool)
                .await
                .map_err(failed)?
        else {
            return Ok(None);
        };
        let subscriptions = sqlx::query("SELECT uri FROM session_subscriptions WHERE key = ?")
            .bind(key)
            .fetch_all(&self.pool)
            .await
            .map_err(failed)?
            .iter()
            .map(|r| r.try_get::<String, _>("uri"))
            .collect::<Result<_, _>>()
            .map_err(failed)?;
        Ok(Some(SessionRecord {
            owner: Principal::new(row.try_get::<String, _>("owner").map_err(failed)?),
            initialize: row.try_get("initialize").map_err(failed)?,
            subscriptions,
            last_used: from_micros(row.try_get("last_used").map_err(failed)?),
        }))
    }

    async fn touch(&self, key: &str, now: Timestamp) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        sqlx::query("UPDATE sessions SET last_used = MAX(last_used, ?) WHERE key = ?")
            .bind(micros(now))
            .bind(key)
            .execute(&self.pool)
            .await
            .map_err(failed)?;
        Ok(())
    }

    async fn subscribe(&self, key: &str, uri: &str) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        sqlx::query(
            "INSERT INTO session_subscriptions (key, uri)
             SELECT key, ? FROM sessions WHERE key = ? ON CONFLICT DO NOTHING",
        )
        .bind(uri)
        .bind(key)
        .execute(&self.pool)
        .await
        .map_err(failed)?;
        Ok(())
    }

    async fn unsubscribe(&self, key: &str, uri: &str) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        sqlx::query("DELETE FROM session_subscriptions WHERE key = ? AND uri = ?")
            .bind(key)
            .bind(uri)
            .execute(&self.pool)
            .await
            .map_err(failed)?;
        Ok(())
    }

    async fn close(&self, key: &str) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let mut tx = self.pool.begin().await.map_err(failed)?;
        for sql in [
            "DELETE FROM session_subscriptions WHERE key = ?",
            "DELETE FROM sessions WHERE key = ?",
        ] {
            sqlx::query(sql)
                .bind(key)
                .execute(&mut *tx)
                .await
                .map_err(failed)?;
        }
        tx.commit().await.map_err(failed)
    }

    async fn expire(&self, before: Timestamp) -> Result<u64, StoreError> {
        let _turn = self.write_turn().await;
        let mut tx = self.pool.begin().await.map_err(failed)?;
        sqlx::query(
            "DELETE FROM session_subscriptions
             WHERE key IN (SELECT key FROM sessions WHERE last_used < ?)",
        )
        .bind(micros(before))
        .execute(&mut *tx)
        .await
        .map_err(failed)?;
        let gone = sqlx::query("DELETE FROM sessions WHERE last_used < ?")
            .bind(micros(before))
            .execute(&mut *tx)
            .await
            .map_err(failed)?
            .rows_affected();
        tx.commit().await.map_err(failed)?;
        Ok(gone)
    }
}
