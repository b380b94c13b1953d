//! The shared store: PostgreSQL, through sqlx, holding what several Quarry replicas must agree
//! on — the version history of every resource, the servers registered at runtime, idempotency
//! reservations and results, the credential vault's sealed records and the audit trail.
//!
//! Architecture invariant: SQL stays here. sqlx errors become [`StoreError`] at this seam; the
//! schema lives in `migrations/` and is applied on connect, inside the configured schema (every
//! replica pointed at one database and schema shares one truth).

mod audit;
mod errors;
mod idempotency;
mod registry;
mod sessions;
mod vault;
mod versions;

use std::{str::FromStr, time::Duration};

use chrono::{TimeZone, Utc};
use quarry_domain::{Retention, Timestamp};
use quarry_ports::StoreError;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

pub use audit::PostgresAudit;
pub(crate) use errors::{corrupt, failed};

/// Where the store lives: a PostgreSQL URL and the schema Quarry's tables go in.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresTarget {
    /// `postgres://user[:password]@host[:port]/database[?options]`.
    pub url: String,
    /// The schema (created if missing): lowercase letters, digits and `_`, not starting with a
    /// digit.
    pub schema: String,
}

impl std::fmt::Debug for PostgresTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password.
        f.debug_struct("PostgresTarget")
            .field("url", &redacted(&self.url))
            .field("schema", &self.schema)
            .finish()
    }
}

/// `url` with any password replaced by `***`, for messages and logs.
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((user, host)) => match user.split_once(':') {
            Some((name, _)) => format!("{scheme}://{name}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// Whether `schema` is a name the store accepts (it is written into SQL unquoted-safe).
pub fn valid_schema(schema: &str) -> bool {
    let mut chars = schema.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && schema.len() <= 63
}

/// The PostgreSQL store.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pub(crate) pool: PgPool,
    retention: Retention,
    schema: String,
}

/// How long a request waits for a connection before the store counts as unavailable.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);

pub(crate) fn micros(t: Timestamp) -> i64 {
    t.timestamp_micros()
}

pub(crate) fn from_micros(us: i64) -> Timestamp {
    Utc.timestamp_micros(us).single().unwrap_or_default()
}

impl PostgresStore {
    /// Connects to `target`, creates its schema if missing and brings it up to date.
    ///
    /// Connections are made as they are needed (at most `max_connections`): a database that
    /// goes away fails the requests that need it (after waiting at most 3 s for a connection),
    /// and once it is back the next request is served, without a restart.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the URL does not parse, the schema name is not valid,
    /// or the database cannot be reached; [`StoreError::Corrupt`] when a migration fails.
    pub async fn connect(
        target: &PostgresTarget,
        retention: Retention,
        max_connections: u32,
    ) -> Result<Self, StoreError> {
        if !valid_schema(&target.schema) {
            return Err(StoreError::Unavailable(format!(
                "the schema name {:?} is not valid (lowercase letters, digits and _)",
                target.schema
            )));
        }
        let options = PgConnectOptions::from_str(&target.url)
            .map_err(|e| {
                StoreError::Unavailable(format!(
                    "{} is not a PostgreSQL URL: {e}",
                    redacted(&target.url)
                ))
            })?
            .options([("search_path", target.schema.as_str())]);
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.max(1))
            .min_connections(0)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_lazy_with(options);
        let store = Self {
            pool,
            retention,
            schema: target.schema.clone(),
        };
        store.migrate().await.map_err(|e| match e {
            StoreError::Unavailable(detail) => StoreError::Unavailable(format!(
                "cannot reach PostgreSQL at {}: {detail}",
                redacted(&target.url)
            )),
            other => other,
        })?;
        Ok(store)
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        // Replicas starting together may both create the schema: the loser's error is harmless.
        // The name was checked by `valid_schema`: nothing but [a-z0-9_].
        let create = sqlx::AssertSqlSafe(format!("CREATE SCHEMA IF NOT EXISTS {}", self.schema));
        if let Err(e) = sqlx::query(create).execute(&self.pool).await {
            let e = failed(e);
            if !matches!(e, StoreError::Conflict(_)) {
                return Err(e);
            }
        }
        sqlx::migrate!("./migrations")
            .run(&self.pool)
            .await
            .map_err(|e| match e {
                sqlx::migrate::MigrateError::Execute(e) => failed(e),
                other => corrupt(format!("migrating the store: {other}")),
            })
    }

    /// Removes `target`'s schema and everything in it (for tests, and for tearing a deployment
    /// down), over a connection of its own.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the database cannot be reached or the name is not valid.
    pub async fn drop_schema(target: &PostgresTarget) -> Result<(), StoreError> {
        use sqlx::Connection;
        if !valid_schema(&target.schema) {
            return Err(StoreError::Unavailable(format!(
                "the schema name {:?} is not valid",
                target.schema
            )));
        }
        let mut conn = sqlx::PgConnection::connect(&target.url)
            .await
            .map_err(failed)?;
        let drop = sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {} CASCADE", target.schema));
        sqlx::query(drop).execute(&mut conn).await.map_err(failed)?;
        conn.close().await.map_err(failed)
    }

    /// The schema this store works in.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Whether the database answers now.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when it does not.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(failed)?;
        Ok(())
    }

    /// Closes the pool.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

#[cfg(test)]
mod tests;
