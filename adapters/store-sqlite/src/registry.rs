//! The runtime server registry, in the same SQLite file.

use std::{collections::BTreeMap, time::Duration};

use async_trait::async_trait;
use quarry_domain::{
    Endpoint, RetryPolicy, ServerId, ServerName, ServerSettings, ServerSpec, Timestamp,
};
use quarry_ports::{ServerRegistry, StoreError};
use sqlx::{Row, SqliteConnection};

use crate::{SqliteStore, corrupt, failed, micros};

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn server_of(row: &sqlx::sqlite::SqliteRow) -> Result<ServerSettings, StoreError> {
    let text = |col: &str| -> Result<String, StoreError> { row.try_get(col).map_err(failed) };
    let name = ServerName::parse(&text("name")?).map_err(|e| corrupt(e.message()))?;
    let endpoint = match text("transport")?.as_str() {
        "http" => Endpoint::Http { url: text("url")? },
        "stdio" => Endpoint::Stdio {
            command: text("command")?,
            args: serde_json::from_str::<Vec<String>>(&text("args")?).map_err(failed)?,
            env: serde_json::from_str::<BTreeMap<String, String>>(&text("env")?).map_err(failed)?,
            cwd: row.try_get("cwd").map_err(failed)?,
        },
        other => {
            return Err(corrupt(format!(
                "unknown transport {other:?} in the registry"
            )));
        }
    };
    let number = |col: &str| -> Result<u64, StoreError> {
        u64::try_from(row.try_get::<i64, _>(col).map_err(failed)?).map_err(failed)
    };
    let mut spec = ServerSpec::new(name, endpoint);
    spec.id = ServerId::parse(&text("id")?).map_err(|e| corrupt(e.message()))?;
    spec.timeout = Duration::from_millis(number("timeout_ms")?);
    spec.max_pages = u32::try_from(number("max_pages")?).map_err(failed)?;
    Ok(ServerSettings {
        spec,
        retry: RetryPolicy {
            attempts: u32::try_from(number("retry_attempts")?).map_err(failed)?,
            delay: Duration::from_millis(number("retry_delay_ms")?),
        },
        pool_size: u32::try_from(number("pool_size")?).map_err(failed)?,
        // Protection is declared in the configuration file only.
        protection: quarry_domain::Protection::Nothing,
    })
}

/// Bumps the generation inside the change's transaction and returns the new value.
async fn bump(conn: &mut SqliteConnection) -> Result<u64, StoreError> {
    let n: i64 = sqlx::query_scalar(
        "UPDATE registry_generation SET generation = generation + 1 RETURNING generation",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(failed)?;
    u64::try_from(n).map_err(failed)
}

#[async_trait]
impl ServerRegistry for SqliteStore {
    async fn servers(&self) -> Result<Vec<ServerSettings>, StoreError> {
        let rows = sqlx::query("SELECT * FROM servers ORDER BY name")
            .fetch_all(&self.pool)
            .await
            .map_err(failed)?;
        rows.iter().map(server_of).collect()
    }

    async fn save(&self, server: &ServerSettings, now: Timestamp) -> Result<u64, StoreError> {
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
        let _turn = self.write_turn().await;
        // IMMEDIATE: a read that later writes never fails to upgrade its lock under contention.
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(failed)?;
        // Another server with this id is a conflict; the same name is a replacement.
        let taken: Option<String> =
            sqlx::query_scalar("SELECT name FROM servers WHERE id = ? AND name <> ?")
                .bind(spec.id.as_str())
                .bind(spec.name.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(failed)?;
        if let Some(other) = taken {
            return Err(StoreError::Conflict(format!(
                "server '{other}' already has the id {}",
                spec.id
            )));
        }
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
        .bind(i64::from(server.retry.attempts))
        .bind(millis(server.retry.delay))
        .bind(i64::from(server.pool_size))
        .bind(micros(now))
        .execute(&mut *tx)
        .await
        .map_err(failed)?;
        let generation = bump(&mut tx).await?;
        tx.commit().await.map_err(failed)?;
        Ok(generation)
    }

    async fn delete(&self, name: &ServerName) -> Result<Option<u64>, StoreError> {
        let _turn = self.write_turn().await;
        // IMMEDIATE: a read that later writes never fails to upgrade its lock under contention.
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(failed)?;
        let gone = sqlx::query("DELETE FROM servers WHERE name = ?")
            .bind(name.as_str())
            .execute(&mut *tx)
            .await
            .map_err(failed)?
            .rows_affected()
            > 0;
        let generation = if gone {
            Some(bump(&mut tx).await?)
        } else {
            None
        };
        tx.commit().await.map_err(failed)?;
        Ok(generation)
    }

    async fn generation(&self) -> Result<u64, StoreError> {
        let n: i64 = sqlx::query_scalar("SELECT generation FROM registry_generation")
            .fetch_one(&self.pool)
            .await
            .map_err(failed)?;
        u64::try_from(n).map_err(failed)
    }
}
