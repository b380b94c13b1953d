//! `purge_mcp_cache`: dropping cached content and listings (everything, one server's, or one
//! resource's). Versions are kept.

use quarry_domain::{Error, IdempotencyKey, Payload, ResourceUri, ServerName};
use quarry_ports::{PurgeReport, ResourceKey};
use serde_json::json;

use crate::ResourceService;

impl ResourceService {
    pub(crate) async fn purge_cache(
        &self,
        server: Option<ServerName>,
        uri: Option<ResourceUri>,
        key: Option<IdempotencyKey>,
    ) -> Result<PurgeReport, Error> {
        let payload = Payload::of(&json!({ "server": server, "resource_uri": uri }))?;
        self.idempotency
            .once("purge_mcp_cache", key, payload, || async {
                if let Some(s) = &server {
                    self.upstreams.by_name(s)?;
                }
                if let Some(uri) = uri {
                    self.upstreams.by_name(uri.server())?;
                    let key = ResourceKey::new(uri.server().clone(), uri.upstream());
                    let existed = self.cache.get_stale(&key).await.is_some();
                    self.cache.invalidate(&key).await;
                    return Ok(PurgeReport {
                        contents: u64::from(existed),
                        listings: 0,
                    });
                }
                let contents = self.cache.purge(server.clone()).await;
                let listings = self.listings.drop_listings(server.clone()).await;
                Ok(PurgeReport { contents, listings })
            })
            .await
    }
}
