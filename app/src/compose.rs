//! The composition root: the only place that knows every adapter and picks one per port.

use std::sync::Arc;

use quarry_cache_lru::LruContentCache;
use quarry_domain::Error;
use quarry_mcp_client::RmcpConnector;
use quarry_ports::SystemClock;
use quarry_store_sqlite::SqliteStore;

use crate::{
    config::Settings,
    service::{ResourceService, ServiceOptions, Stores},
};

/// Builds the resource service the settings describe: rmcp upstreams, the in-memory LRU cache,
/// the SQLite store, the system clock.
///
/// # Errors
/// E012 when the HTTP client for upstreams cannot be built or the store cannot be opened (the
/// message names the file and the key that sets it).
pub async fn build(settings: &Settings) -> Result<Arc<ResourceService>, Error> {
    let connector = RmcpConnector::new(settings.max_resource_bytes).map_err(|e| {
        tracing::error!("{e}");
        Error::internal()
    })?;
    let store = match &settings.store_path {
        Some(path) => SqliteStore::open(path, settings.retention)
            .await
            .map_err(|e| {
                Error::new(
                    quarry_domain::ErrorCode::E012,
                    format!("{e} (set [store] path in the configuration, or QUARRY_STORE_PATH)"),
                )
            })?,
        None => SqliteStore::in_memory(settings.retention)
            .await
            .map_err(|e| {
                tracing::error!("{e}");
                Error::internal()
            })?,
    };
    let store = Arc::new(store);
    let stores = Stores {
        versions: store.clone(),
        registry: store.clone(),
        idempotency: store,
    };
    let service = Arc::new(ResourceService::new(
        settings.servers.clone(),
        Arc::new(connector),
        Arc::new(LruContentCache::new(settings.cache_max_bytes)),
        stores,
        Arc::new(SystemClock),
        ServiceOptions {
            cache_enabled: settings.cache_enabled,
            cache_ttl: settings.cache_ttl,
            max_resource_bytes: settings.max_resource_bytes,
            classifier: settings.classifier.clone(),
            supervision: settings.supervision,
            allow_tool_registration: settings.allow_tool_registration,
            allow_tool_commands: settings.allow_tool_commands,
        },
    ));
    service.load_registry().await?;
    Ok(service)
}
