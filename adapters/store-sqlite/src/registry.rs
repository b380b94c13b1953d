//! The runtime server registry and the idempotency records, in the same SQLite file.

use std::{collections::BTreeMap, time::Duration};

use async_trait::async_trait;
use quarry_domain::{Endpoint, ServerId, ServerName, ServerSpec, Timestamp};
use quarry_ports::{IdempotencyStore, RegisteredServer, Remembered, ServerRegistry, StoreError};
use sqlx::Row;

use crate::{SqliteStore, failed, micros};

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn server_of(row: &sqlx::sqlite::SqliteRow) -> Result<RegisteredServer, StoreError> {
    let text = |col: &str| -> Result<String, StoreError> { row.try_get(col).map_err(failed) };
    let name = ServerName::parse(&text("name")?).map_err(|e| failed(e.message()))?;
    let endpoint = match text("transport")?.as_str() {
        "http" => Endpoint::Http { url: text("url")? },
        "stdio" => Endpoint::Stdio {
            command: text("command")?,
            args: serde_json::from_str::<Vec<String>>(&text("args")?).map_err(failed)?,
            env: serde_json::from_str::<BTreeMap<String, String>>(&text("env")?).map_err(failed)?,
            cwd: row.try_get("cwd").map_err(failed)?,
        },
        other => {
            return Err(failed(format!(
                "unknown transport {other:?} in the registry"
            )));
        }
    };
    let number = |col: &str| -> Result<u64, StoreError> {
        u64::try_from(row.try_get::<i64, _>(col).map_err(failed)?).map_err(failed)
    };
    let mut spec = ServerSpec::new(name, endpoint);
    spec.id = ServerId::parse(&text("id")?).map_err(|e| failed(e.message()))?;
    spec.timeout = Duration::from_millis(number("timeout_ms")?);
    spec.max_pages = u32::try_from(number("max_pages")?).map_err(failed)?;
    Ok(RegisteredServer {
        spec,
        retry_attempts: u32::try_from(number("retry_attempts")?).map_err(failed)?,
        retry_delay: Duration::from_millis(number("retry_delay_ms")?),
        pool_size: u32::try_from(number("pool_size")?).map_err(failed)?,
    })
}

#[async_trait]
impl ServerRegistry for SqliteStore {
    async fn servers(&self) -> Result<Vec<RegisteredServer>, StoreError> {
        let rows = sqlx::query("SELECT * FROM servers ORDER BY name")
            .fetch_all(&self.pool)
            .await
            .map_err(failed)?;
        rows.iter().map(server_of).collect()
    }

    async fn save(&self, server: &RegisteredServer, now: Timestamp) -> Result<(), StoreError> {
        let spec = &server.spec;
        let (transport, url, command, args, env, cwd) = match &spec.endpoint {
            Endpoint::Http { url } => (
                "http",
                Some(url.as_str()),
                None,
                "[]".to_owned(),
                "{}".to_owned(),
                None,
            ),
            Endpoint::Stdio {
                command,
                args,
                env,
                cwd,
            } => (
                "stdio",
                None,
                Some(command.as_str()),
                serde_json::to_string(args).map_err(failed)?,
                serde_json::to_string(env).map_err(failed)?,
                cwd.as_deref(),
            ),
        };
        let mut tx = self.pool.begin().await.map_err(failed)?;
        sqlx::query(
            "INSERT OR REPLACE INTO servers
             (name, id, transport, url, command, args, env, cwd, timeout_ms, max_pages,
              retry_attempts, retry_delay_ms, pool_size, created_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(spec.name.as_str())
        .bind(spec.id.as_str())
        .bind(transport)
        .bind(url)
        .bind(command)
        .bind(args)
        .bind(env)
        .bind(cwd)
        .bind(millis(spec.timeout))
        .bind(i64::from(spec.max_pages))
        .bind(i64::from(server.retry_attempts))
        .bind(millis(server.retry_delay))
        .bind(i64::from(server.pool_size))
        .bind(micros(now))
        .execute(&mut *tx)
        .await
        .map_err(failed)?;
        sqlx::query("UPDATE registry_generation SET generation = generation + 1")
            .execute(&mut *tx)
            .await
            .map_err(failed)?;
        tx.commit().await.map_err(failed)
    }

    async fn delete(&self, name: &ServerName) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await.map_err(failed)?;
        let gone = sqlx::query("DELETE FROM servers WHERE name = ?")
            .bind(name.as_str())
            .execute(&mut *tx)
            .await
            .map_err(failed)?
            .rows_affected()
            > 0;
        if gone {
            sqlx::query("UPDATE registry_generation SET generation = generation + 1")
                .execute(&mut *tx)
                .await
                .map_err(failed)?;
        }
        tx.commit().await.map_err(failed)?;
        Ok(gone)
    }

    async fn generation(&self) -> Result<u64, StoreError> {
        let n: i64 = sqlx::query_scalar("SELECT generation FROM registry_generation")
            .fetch_one(&self.pool)
            .await
            .map_err(failed)?;
        u64::try_from(n).map_err(failed)
    }
}

#[async_trait]
impl IdempotencyStore for SqliteStore {
    async fn recall(&self, scope: &str, key: &str) -> Result<Option<Remembered>, StoreError> {
        let row = sqlx::query(
            "SELECT payload_digest, result FROM idempotency WHERE scope = ? AND key = ?",
        )
        .bind(scope)
        .bind(key)
        .fetch_optional(&self.pool)
        .await
        .map_err(failed)?;
        row.map(|r| {
            Ok(Remembered {
                payload_digest: r.try_get("payload_digest").map_err(failed)?,
                result: r.try_get("result").map_err(failed)?,
            })
        })
        .transpose()
    }

    async fn remember(
        &self,
        scope: &str,
        key: &str,
        entry: Remembered,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT OR IGNORE INTO idempotency (scope, key, payload_digest, result, created_at)
             VALUES (?, ?, ?, ?, ?)",
        )
        .bind(scope)
        .bind(key)
        .bind(entry.payload_digest)
        .bind(entry.result)
        .bind(micros(now))
        .execute(&self.pool)
        .await
        .map_err(failed)?;
        Ok(())
    }
}
