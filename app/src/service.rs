//! `ResourceService`: the spec's service layer for listing and reading, behind the driving port.
//!
//! Reads check the cache first, fetch on a miss (retrying a dead connection as the server's
//! retry policy says), verify cached bytes against their SHA-256 when asked, and cut the requested
//! byte range. Listings ask every selected server at once, each under its own deadline: one slow
//! or failing server marks the result partial and never fails or stalls the others.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use base64::Engine as _;
use quarry_domain::{
    Body, Classifier, Content, Error, ErrorCode, ListQuery, ListResourcesResult, Origin,
    ReadResourceResult, Resource, ResourceUri, ServerStatus, sort_and_page, template_to_gateway,
};
use quarry_ports::{
    CacheKey, CachedContent, Clock, ContentCache, GatewayTemplate, ReadRequest, ResourceGateway,
    UpstreamConnector, UpstreamError, UpstreamResource,
};
use serde_json::{Map, Value};

use crate::{
    config::ServerSettings,
    upstreams::{Upstream, Upstreams},
};

/// How the service caches and bounds content.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// Whether content is cached at all.
    pub cache_enabled: bool,
    /// How long cached content stays fresh.
    pub cache_ttl: Duration,
    /// The largest content accepted from an upstream.
    pub max_resource_bytes: u64,
    /// Resource type rules.
    pub classifier: Classifier,
}

/// Lists and reads resources across the registered upstream servers.
#[derive(Debug)]
pub struct ResourceService {
    upstreams: Upstreams,
    connector: Arc<dyn UpstreamConnector>,
    cache: Arc<dyn ContentCache>,
    clock: Arc<dyn Clock>,
    options: ServiceOptions,
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

impl ResourceService {
    /// A service over `servers`, reaching them through `connector`.
    pub fn new(
        servers: Vec<ServerSettings>,
        connector: Arc<dyn UpstreamConnector>,
        cache: Arc<dyn ContentCache>,
        clock: Arc<dyn Clock>,
        options: ServiceOptions,
    ) -> Self {
        Self {
            upstreams: Upstreams::new(servers),
            connector,
            cache,
            clock,
            options,
        }
    }

    /// Ends every upstream session and stops their child processes.
    pub async fn shutdown(&self) {
        self.upstreams.close_all().await;
    }

    /// Lists one server under its deadline, recording what happened in its status.
    async fn list_one(
        &self,
        upstream: &Upstream,
    ) -> Result<(Vec<UpstreamResource>, bool), UpstreamError> {
        let deadline = upstream.settings.spec.timeout;
        let attempt = async {
            let session = upstream.session(self.connector.as_ref()).await?;
            session.list_resources().await
        };
        let outcome = match tokio::time::timeout(deadline, attempt).await {
            Ok(result) => result,
            Err(_) => Err(UpstreamError::Timeout(
                u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX),
            )),
        };
        match outcome {
            Ok(listing) => {
                upstream.used(self.clock.now());
                upstream.listed(listing.resources.len() as u64);
                Ok((listing.resources, listing.truncated))
            }
            Err(e) => {
                tracing::warn!(server = %upstream.name(), "listing failed: {e}");
                upstream.failed(&e);
                Err(e)
            }
        }
    }

    fn to_resource(&self, upstream: &Upstream, r: UpstreamResource) -> Option<Resource> {
        let spec = &upstream.settings.spec;
        let uri = match ResourceUri::new(spec.name.clone(), &r.uri) {
            Ok(uri) => uri,
            Err(e) => {
                tracing::warn!(server = %spec.name, "skipping a resource: {}", e.message());
                return None;
            }
        };
        let classified = self
            .options
            .classifier
            .classify(&r.uri, r.mime_type.as_deref());
        let mut metadata = Map::new();
        metadata.insert("server".into(), Value::String(spec.name.to_string()));
        metadata.insert("server_id".into(), Value::String(spec.id.to_string()));
        metadata.insert("upstream_uri".into(), Value::String(r.uri.clone()));
        if let Some(title) = r.title {
            metadata.insert("title".into(), Value::String(title));
        }
        if let Some(d) = r.description {
            metadata.insert("description".into(), Value::String(d));
        }
        metadata.insert(
            "classification".into(),
            Value::String(classified.explanation),
        );
        let name = if r.name.is_empty() {
            quarry_domain::sanitize_label(&r.uri)
        } else {
            r.name
        };
        Some(Resource {
            uri,
            name,
            resource_type: classified.resource_type,
            size: r.size,
            mime_type: r.mime_type,
            created_at: None,
            modified_at: r.last_modified,
            version: None,
            is_protected: false,
            metadata,
        })
    }

    /// Fetches content, reconnecting and retrying as the server's policy says when the
    /// connection is what failed.
    async fn fetch(&self, upstream: &Upstream, uri: &str) -> Result<Content, Error> {
        let retry = upstream.settings.retry;
        let mut attempt = 0;
        loop {
            let result = match upstream.session(self.connector.as_ref()).await {
                Ok(session) => session.read(uri, self.options.max_resource_bytes).await,
                Err(e) => Err(e),
            };
            match result {
                Ok(content) => {
                    upstream.used(self.clock.now());
                    return Ok(content);
                }
                Err(e) => {
                    upstream.failed(&e);
                    if matches!(e, UpstreamError::Unreachable(_)) && attempt < retry.attempts {
                        attempt += 1;
                        let delay = retry.delay_before(attempt);
                        tracing::info!(server = %upstream.name(), attempt, ?delay, "retrying after: {e}");
                        tokio::time::sleep(delay).await;
                        continue;
                    }
                    return Err(e.into_error(upstream.name().as_str()));
                }
            }
        }
    }

    /// A fresh cache hit whose bytes still match their checksum. A corrupt entry is dropped.
    async fn cached(&self, key: &CacheKey, verify: bool) -> Option<CachedContent> {
        let hit = self.cache.get(key, self.clock.now()).await?;
        if verify && sha256(hit.content.bytes()) != hit.sha256 {
            tracing::error!(
                code = %ErrorCode::E006,
                server = %key.server,
                "cached content failed its checksum; dropped and refetched"
            );
            self.cache.invalidate(key).await;
            return None;
        }
        Some(hit)
    }
}

fn render(
    request: &ReadRequest,
    content: &Content,
    cached: Option<&CachedContent>,
) -> Result<ReadResourceResult, Error> {
    let slice = request.range.resolve(content.len())?;
    let bytes = slice.apply(content.bytes());
    let encode = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let (text, blob) = match &content.body {
        // A range of text that splits a UTF-8 character comes back as its exact bytes, never as
        // repaired or invalid text.
        Body::Text(_) => match std::str::from_utf8(bytes) {
            Ok(t) => (Some(t.to_owned()), None),
            Err(_) => (None, Some(encode(bytes))),
        },
        Body::Blob(_) => (None, Some(encode(bytes))),
    };
    Ok(ReadResourceResult {
        success: true,
        uri: request.uri.clone(),
        content: text,
        bytes_content: blob,
        mime_type: content.mime_type.clone(),
        size: slice.total(),
        content_range: slice.content_range(),
        version: None,
        cached: cached.is_some(),
        cached_at: cached.map(|c| c.cached_at),
        origin: Origin::of(&request.uri),
    })
}

#[async_trait]
impl ResourceGateway for ResourceService {
    async fn list_resources(&self, query: ListQuery) -> Result<ListResourcesResult, Error> {
        let selected = self.upstreams.select(query.server.as_ref())?;
        let listings = futures::future::join_all(selected.iter().map(|u| self.list_one(u))).await;
        let mut resources = Vec::new();
        let mut partial = false;
        for (upstream, listing) in selected.iter().zip(listings) {
            match listing {
                Ok((items, truncated)) => {
                    partial |= truncated;
                    resources.extend(
                        items
                            .into_iter()
                            .filter_map(|r| self.to_resource(upstream, r)),
                    );
                }
                Err(_) => partial = true,
            }
        }
        let page = sort_and_page(resources, &query);
        Ok(ListResourcesResult {
            success: true,
            resources: page.items,
            servers: selected.iter().map(|u| u.status()).collect(),
            total_count: page.total_count,
            cached_count: 0,
            partial,
        })
    }

    async fn read_resource(&self, request: ReadRequest) -> Result<ReadResourceResult, Error> {
        let upstream = self.upstreams.by_name(request.uri.server())?;
        if let Some(version) = &request.version {
            let shown: String = version.chars().take(64).collect();
            return Err(Error::new(
                ErrorCode::E002,
                format!("no version {shown:?} of {} is recorded", request.uri),
            ));
        }
        let key = CacheKey::new(request.uri.server().clone(), request.uri.upstream());
        if self.options.cache_enabled
            && request.use_cache
            && let Some(hit) = self.cached(&key, request.validate_checksum).await
        {
            upstream.used(self.clock.now());
            return render(&request, &hit.content, Some(&hit));
        }
        let content = self.fetch(upstream, request.uri.upstream()).await?;
        if self.options.cache_enabled {
            let now = self.clock.now();
            let ttl =
                chrono::Duration::from_std(self.options.cache_ttl).unwrap_or(chrono::Duration::MAX);
            let entry = CachedContent {
                sha256: sha256(content.bytes()),
                content: content.clone(),
                cached_at: now,
                expires_at: now.checked_add_signed(ttl).unwrap_or(now),
            };
            self.cache.put(key, entry).await;
        }
        render(&request, &content, None)
    }

    async fn list_templates(&self) -> Result<Vec<GatewayTemplate>, Error> {
        let all = self.upstreams.all();
        let fetched = futures::future::join_all(all.iter().map(|u| async move {
            let deadline = u.settings.spec.timeout;
            let attempt = async {
                let session = u.session(self.connector.as_ref()).await?;
                session.list_templates().await
            };
            match tokio::time::timeout(deadline, attempt).await {
                Ok(Ok(t)) => t,
                Ok(Err(e)) => {
                    u.failed(&e);
                    Vec::new()
                }
                Err(_) => Vec::new(),
            }
        }))
        .await;
        Ok(all
            .iter()
            .zip(fetched)
            .flat_map(|(u, templates)| {
                templates.into_iter().map(move |t| GatewayTemplate {
                    uri_template: template_to_gateway(u.name(), &t.uri_template),
                    name: t.name,
                    description: t.description,
                    mime_type: t.mime_type,
                })
            })
            .collect())
    }

    async fn servers(&self) -> Vec<ServerStatus> {
        let all = self.upstreams.all();
        futures::future::join_all(all.iter().map(|u| self.list_one(u))).await;
        all.iter().map(|u| u.status()).collect()
    }
}

#[cfg(test)]
mod tests;
