//! The composition root: the only place that knows every adapter and picks one per port.

use std::sync::Arc;

use quarry_cache_lru::LruContentCache;
use quarry_domain::Error;
use quarry_mcp_client::RmcpConnector;
use quarry_ports::SystemClock;

use crate::{
    config::Settings,
    service::{ResourceService, ServiceOptions},
};

/// Builds the resource service the settings describe: rmcp upstreams, the in-memory LRU cache,
/// the system clock.
///
/// # Errors
/// E012 when the HTTP client for upstreams cannot be built.
pub fn build(settings: &Settings) -> Result<Arc<ResourceService>, Error> {
    let connector = RmcpConnector::new(settings.max_resource_bytes).map_err(|e| {
        tracing::error!("{e}");
        Error::internal()
    })?;
    Ok(Arc::new(ResourceService::new(
        settings.servers.clone(),
        Arc::new(connector),
        Arc::new(LruContentCache::new(settings.cache_max_bytes)),
        Arc::new(SystemClock),
        ServiceOptions {
            cache_enabled: settings.cache_enabled,
            cache_ttl: settings.cache_ttl,
            max_resource_bytes: settings.max_resource_bytes,
            classifier: settings.classifier.clone(),
        },
    )))
}
