//! A resource's version history, and reading one of its past versions from the store.

use quarry_domain::{
    CacheHint, CacheScope, Error, ErrorCode, ReadResourceResult, ResourceUri, ResourceVersion,
    VersionSelector,
};
use quarry_ports::{ReadRequest, ResourceKey};

use crate::{
    ResourceService,
    excerpt::{Provenance, excerpt},
    store_failed,
};

impl ResourceService {
    /// `list_mcp_resource_versions`: every recorded version, oldest first.
    pub(crate) async fn history(&self, uri: &ResourceUri) -> Result<Vec<ResourceVersion>, Error> {
        self.upstream_for(uri.server()).await?;
        let key = ResourceKey::new(uri.server().clone(), uri.upstream());
        self.versions.history(&key).await.map_err(store_failed)
    }

    /// A read of one recorded version: its content as it was then, checked against its checksum.
    pub(crate) async fn read_version(
        &self,
        request: &ReadRequest,
        key: &ResourceKey,
        wanted: &VersionSelector,
    ) -> Result<ReadResourceResult, Error> {
        let Some((version, content)) = self
            .versions
            .find(key, wanted)
            .await
            .map_err(store_failed)?
        else {
            let shown = match wanted {
                VersionSelector::Number(n) => n.to_string(),
                VersionSelector::Etag(etag) => etag.clone(),
            };
            return Err(Error::new(
                ErrorCode::E002,
                format!("no version {shown:?} of {} is recorded", request.uri),
            ));
        };
        let Some(content) = content else {
            return Err(Error::new(
                ErrorCode::E002,
                format!(
                    "the content of {} of {} is no longer kept (see versions.retain_count)",
                    version.version, request.uri
                ),
            ));
        };
        if request.validate_checksum
            && self.hasher.sha256(content.bytes()).checksum() != version.checksum
        {
            return Err(Error::new(
                ErrorCode::E006,
                format!(
                    "stored content of {} of {} fails its checksum",
                    version.version, request.uri
                ),
            ));
        }
        excerpt(
            request,
            &content,
            Provenance {
                version: Some(version),
                // A recorded version never changes: it stays as fresh as anything Quarry caches.
                cache: CacheHint::new(self.options.cache_ttl, CacheScope::Public),
                ..Provenance::default()
            },
        )
    }
}
