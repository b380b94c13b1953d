//! The composition root's choice of store and cache: the embedded SQLite file and this
//! process's memory by default, PostgreSQL and Redis when the configuration says so
//! (`store.backend`, `cache.backend`), for several replicas sharing one truth.

use std::sync::Arc;

use quarry_cache_lru::{InMemoryInvalidationBus, InMemoryListingCache, LruContentCache};
use quarry_cache_redis::{RedisContentCache, RedisInvalidationBus, RedisLink, RedisListingCache};
use quarry_domain::{Error, ErrorCode};
use quarry_ports::{
    AuditLog, ContentCache, CredentialStore, IdempotencyStore, InvalidationBus, ListingCache,
    ServerRegistry, SessionStore, VersionStore,
};
use quarry_store_postgres::{PostgresAudit, PostgresStore, PostgresTarget};
use quarry_store_sqlite::{SqliteAudit, SqliteStore};
use quarry_usecases::GroupCommit;

use super::hasher;
use crate::config::{CacheBackend, Settings, StoreBackend};

/// The store the settings name.
#[derive(Debug, Clone)]
pub(crate) enum Store {
    Sqlite(SqliteStore),
    Postgres(PostgresStore),
}

/// The ports a store serves.
pub(crate) struct StorePorts {
    pub(crate) versions: Arc<dyn VersionStore>,
    pub(crate) registry: Arc<dyn ServerRegistry>,
    pub(crate) idempotency: Arc<dyn IdempotencyStore>,
    pub(crate) credentials: Arc<dyn CredentialStore>,
}

impl Store {
    /// Opens the store the settings name (a private in-memory SQLite with no path).
    ///
    /// # Errors
    /// E012 naming the file or database, and the key that sets it.
    pub(crate) async fn open(settings: &Settings) -> Result<Self, Error> {
        match &settings.backends.store {
            StoreBackend::Sqlite => open_sqlite(settings).await.map(Self::Sqlite),
            StoreBackend::Postgres {
                url,
                schema,
                max_connections,
            } => {
                let target = PostgresTarget {
                    url: url.clone(),
                    schema: schema.clone(),
                };
                PostgresStore::connect(&target, settings.retention, *max_connections)
                    .await
                    .map(Self::Postgres)
                    .map_err(|e| {
                        Error::new(
                            ErrorCode::E012,
                            format!(
                                "{e} (set store.url in the configuration, or QUARRY_STORE_URL)"
                            ),
                        )
                    })
            }
        }
    }

    pub(crate) fn ports(&self) -> StorePorts {
        fn all<S>(s: &Arc<S>) -> StorePorts
        where
            S: VersionStore + ServerRegistry + IdempotencyStore + CredentialStore + 'static,
        {
            StorePorts {
                versions: s.clone(),
                registry: s.clone(),
                idempotency: s.clone(),
                credentials: s.clone(),
            }
        }
        match self {
            Self::Sqlite(s) => all(&Arc::new(s.clone())),
            Self::Postgres(s) => all(&Arc::new(s.clone())),
        }
    }

    /// The HTTP transport's sessions, kept in this store for every replica (and restart).
    pub(crate) fn sessions(&self) -> Arc<dyn SessionStore> {
        match self {
            Self::Sqlite(s) => Arc::new(s.clone()),
            Self::Postgres(s) => Arc::new(s.clone()),
        }
    }

    /// The audit trail kept in this store, chained with SHA-256, its concurrent appends
    /// committed together.
    pub(crate) fn audit(&self) -> Arc<dyn AuditLog> {
        let trail: Arc<dyn AuditLog> = match self {
            Self::Sqlite(s) => Arc::new(SqliteAudit::new(s.clone(), hasher())),
            Self::Postgres(s) => Arc::new(PostgresAudit::new(s.clone(), hasher())),
        };
        Arc::new(GroupCommit::new(trail))
    }
}

async fn open_sqlite(settings: &Settings) -> Result<SqliteStore, Error> {
    match &settings.store_path {
        Some(path) => SqliteStore::open(path, settings.retention)
            .await
            .map_err(|e| {
                Error::new(
                    ErrorCode::E012,
                    format!("{e} (set [store] path in the configuration, or QUARRY_STORE_PATH)"),
                )
            }),
        None => SqliteStore::in_memory(settings.retention)
            .await
            .map_err(|e| {
                tracing::error!("{e}");
                Error::internal()
            }),
    }
}

/// The content cache, listings and invalidation epochs the settings name.
pub(crate) struct Caches {
    pub(crate) content: Arc<dyn ContentCache>,
    pub(crate) listings: Arc<dyn ListingCache>,
    pub(crate) bus: Arc<dyn InvalidationBus>,
}

/// The caches the settings name. Redis is connected on first use: one that is down at start
/// only makes reads go to the upstreams until it is up.
///
/// # Errors
/// E001 when `cache.redis_url` is not a Redis URL.
pub(crate) fn caches(settings: &Settings) -> Result<Caches, Error> {
    Ok(match &settings.backends.cache {
        CacheBackend::Memory => Caches {
            content: Arc::new(LruContentCache::new(settings.cache_max_bytes)),
            listings: Arc::new(InMemoryListingCache::new()),
            bus: Arc::new(InMemoryInvalidationBus::new()),
        },
        CacheBackend::Redis { url, prefix } => {
            let link = RedisLink::open(url, prefix)
                .map_err(|e| Error::invalid(format!("cache.redis_url: {e}")))?;
            Caches {
                content: Arc::new(RedisContentCache::new(
                    link.clone(),
                    settings.cache_max_bytes,
                )),
                listings: Arc::new(RedisListingCache::new(link.clone())),
                bus: Arc::new(RedisInvalidationBus::new(link)),
            }
        }
    })
}
