//! Listing resources across servers, and the servers' templates and status.
//!
//! Every selected server is asked at once, each under its own deadline; a server that fails
//! makes the listing `partial`, never failed. Each server's listing is cached apart from content
//! (SR-002.4). Candidates are filtered and ordered light; full resources are built for the page
//! only, so a listing of half a million resources costs one small record per resource.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use quarry_domain::{
    CacheHint, CacheScope, Error, ListQuery, ListResourcesResult, Listed, Resource, ResourceType,
    ResourceUri, ServerName, Timestamp, VersionNumber, sanitize_label, sort_and_page,
};
use quarry_ports::{CachedListing, ListedEntry, UpstreamError};
use serde_json::{Map, Value};

use crate::{
    ResourceService,
    upstream::{Attempts, Upstream},
};

mod templates;

/// What one server's listing gave.
#[derive(Debug, Clone)]
pub(crate) struct ServerListing {
    /// Its entries.
    entries: Arc<Vec<ListedEntry>>,
    /// True when it was cut short.
    truncated: bool,
    /// When the cached listing it came from was fetched (`None`: fetched now).
    cached_at: Option<Timestamp>,
    /// How long it stays fresh, and for whom.
    cache: CacheHint,
}

impl ServerListing {
    /// A cached listing as seen at `now`.
    fn cached(hit: CachedListing, now: Timestamp) -> Self {
        Self {
            cache: CacheHint::until(hit.expires_at, now, hit.scope),
            entries: hit.resources,
            truncated: hit.truncated,
            cached_at: Some(hit.fetched_at),
        }
    }
}

/// A listed resource before it is built in full: what ordering and filtering need.
struct Candidate<'a> {
    upstream: &'a Arc<Upstream>,
    entry: &'a ListedEntry,
}

impl Listed for Candidate<'_> {
    fn modified_at(&self) -> Option<Timestamp> {
        self.entry.resource.last_modified
    }
    fn gateway_uri(&self) -> &str {
        &self.entry.gateway_uri
    }
    fn resource_type(&self) -> ResourceType {
        self.entry.resource_type
    }
}

/// Which servers and resources a caller may see (the policy decorator's answer), asked before a
/// listing is paged so that `total_count` counts only what the caller may read.
#[async_trait::async_trait]
pub(crate) trait Visibility: Send + Sync {
    /// May the caller list `server`?
    async fn server(&self, server: &ServerName) -> Result<bool, Error>;
    /// Which of these (server, gateway URI, protected) may the caller read?
    async fn resources(&self, resources: &[(ServerName, String, bool)])
    -> Result<Vec<bool>, Error>;
    /// The error for a server it may not list.
    fn denied(&self, server: &ServerName) -> Error;
}

impl ResourceService {
    /// `list_mcp_resources` and `resources/list`, showing only what `visible` allows.
    pub(crate) async fn list(
        &self,
        query: ListQuery,
        visible: Option<&dyn Visibility>,
    ) -> Result<ListResourcesResult, Error> {
        self.sync_registry().await;
        let mut selected = self.upstreams.select(query.server.as_ref())?;
        if let Some(v) = visible {
            let mut shown = Vec::with_capacity(selected.len());
            for u in selected {
                if v.server(u.name()).await? {
                    shown.push(u);
                } else if query.server.is_some() {
                    return Err(v.denied(u.name()));
                }
            }
            selected = shown;
        }
        let listings =
            futures::future::join_all(selected.iter().map(|u| self.list_one(u, query.use_cache)))
                .await;
        let now = self.clock.now();
        let mut partial = false;
        let mut oldest: Option<Timestamp> = None;
        let mut from_cache: HashSet<ServerName> = HashSet::new();
        let mut held = Vec::with_capacity(selected.len());
        let mut hints = Vec::with_capacity(selected.len());
        for (upstream, listing) in selected.iter().zip(listings) {
            match listing {
                Ok(listing) => {
                    partial |= listing.truncated;
                    if let Some(at) = listing.cached_at {
                        from_cache.insert(upstream.name().clone());
                        oldest = Some(oldest.map_or(at, |o| o.min(at)));
                    }
                    hints.push(listing.cache);
                    held.push((upstream.clone(), listing.entries));
                }
                // A server that could not be listed may list something else a moment later.
                Err(_) => {
                    partial = true;
                    hints.push(CacheHint::NONE);
                }
            }
        }
        // With no server to ask, the (empty) answer lasts until the registry changes, which
        // Quarry does not announce ahead: nothing to keep.
        let cache = CacheHint::combine(hints, visible.is_some(), CacheHint::NONE);
        let mut candidates: Vec<Candidate<'_>> = held
            .iter()
            .flat_map(|(upstream, items)| {
                items.iter().map(move |entry| Candidate { upstream, entry })
            })
            .collect();
        if let Some(v) = visible {
            let asked: Vec<(ServerName, String, bool)> = candidates
                .iter()
                .map(|c| {
                    (
                        c.upstream.name().clone(),
                        c.entry.gateway_uri.to_string(),
                        c.upstream.settings.protection.covers(&c.entry.resource.uri),
                    )
                })
                .collect();
            let keep = v.resources(&asked).await?;
            let mut keep = keep.into_iter();
            candidates.retain(|_| keep.next().unwrap_or(false));
        }
        let page = sort_and_page(candidates, &query);
        // The versions of the page's resources, asked of the store once per server.
        let mut on_page: HashMap<&ServerName, Vec<String>> = HashMap::new();
        for c in &page.items {
            on_page
                .entry(c.upstream.name())
                .or_default()
                .push(c.entry.resource.uri.clone());
        }
        let mut versions: HashMap<&ServerName, HashMap<String, (VersionNumber, Timestamp)>> =
            HashMap::new();
        for (name, uris) in on_page {
            versions.insert(name, self.known_versions(name, &uris).await);
        }
        let mut resources = Vec::with_capacity(page.items.len());
        for c in &page.items {
            let name = c.upstream.name();
            let Some(mut resource) = self.to_resource(c.upstream, c.entry) else {
                continue;
            };
            if let Some((latest, first_seen)) = versions
                .get(name)
                .and_then(|v| v.get(&c.entry.resource.uri))
            {
                resource.version = Some(*latest);
                resource.created_at = Some(*first_seen);
            }
            resources.push(resource);
        }
        let cached_count = resources
            .iter()
            .filter(|r| from_cache.contains(r.uri.server()))
            .count() as u64;
        Ok(ListResourcesResult {
            success: true,
            resources,
            servers: selected.iter().map(|u| u.status()).collect(),
            total_count: page.total_count,
            cached_count,
            cache_age_seconds: oldest
                .map(|at| u64::try_from((now - at).num_seconds()).unwrap_or(0)),
            partial,
            cache,
        })
    }

    /// The latest version and first sighting of each of `uris` (of `server`) that has versions;
    /// a failing store leaves them out (logged) rather than failing the listing.
    async fn known_versions(
        &self,
        server: &ServerName,
        uris: &[String],
    ) -> HashMap<String, (VersionNumber, Timestamp)> {
        match self.versions.summaries(server, uris).await {
            Ok(s) => s
                .into_iter()
                .map(|v| (v.upstream_uri, (v.latest, v.first_seen)))
                .collect(),
            Err(e) => {
                tracing::error!(server = %server, "{e}");
                HashMap::new()
            }
        }
    }

    /// Lists one server under its deadline (from its cached listing when allowed and fresh),
    /// recording what happened in its status. Concurrent misses share one listing.
    pub(crate) async fn list_one(
        &self,
        upstream: &Arc<Upstream>,
        use_cache: bool,
    ) -> Result<ServerListing, UpstreamError> {
        let caching = self.options.cache_enabled && use_cache;
        let now = self.clock.now();
        if caching && let Some(hit) = self.listings.get(upstream.name(), now).await {
            return Ok(ServerListing::cached(hit, now));
        }
        if caching && let Some(this) = self.owned() {
            let u = upstream.clone();
            return self
                .listing_flights
                .run(
                    upstream.name().clone(),
                    move || async move {
                        // The flight before this one may have cached it since this caller looked.
                        let now = this.clock.now();
                        if let Some(hit) = this.listings.get(u.name(), now).await {
                            return Ok(ServerListing::cached(hit, now));
                        }
                        this.list_fresh(&u).await
                    },
                    || {
                        Err(UpstreamError::Unreachable(
                            "the listing was cancelled".into(),
                        ))
                    },
                )
                .await;
        }
        self.list_fresh(upstream).await
    }

    /// Lists one server afresh and caches the listing (unless it changed meanwhile).
    async fn list_fresh(&self, upstream: &Upstream) -> Result<ServerListing, UpstreamError> {
        let caching = self.options.cache_enabled;
        let attempts = Attempts {
            retries: 0,
            deadline: Some(upstream.settings.spec.timeout),
            total: Some(upstream.settings.spec.timeout),
        };
        let outcome = upstream
            .call(attempts, |session| async move {
                let epoch = self.invalidator.epoch(upstream.name()).await;
                session.list_resources().await.map(|l| (l, epoch))
            })
            .await;
        let (listing, epoch) = match outcome {
            Ok(done) => done,
            Err(e) => {
                tracing::warn!(server = %upstream.name(), "listing failed: {e}");
                return Err(e);
            }
        };
        let now = self.clock.now();
        let name = upstream.name();
        let listed = listing.resources.len();
        let resources = Arc::new(self.entries(name, listing.resources, now));
        let left_out = listed - resources.len();
        if left_out > 0 {
            tracing::warn!(server = %name, left_out, "listing entries left out: duplicates, or URIs that could not be read back");
        }
        upstream.listed(
            resources.len() as u64,
            listing.skipped,
            listing.skip_reason.clone(),
        );
        let said = listing
            .hint
            .unwrap_or(CacheHint::new(self.options.cache_ttl, CacheScope::Public));
        let mut cache = CacheHint::NONE;
        if caching && self.invalidator.unchanged_since(name, epoch).await {
            let cached = CachedListing {
                resources: resources.clone(),
                truncated: listing.truncated,
                fetched_at: now,
                expires_at: self.ttl_until(now, listing.hint.map(|h| h.ttl)),
                scope: said.scope,
            };
            cache = CacheHint::until(cached.expires_at, now, cached.scope);
            self.listings.put(name, cached).await;
        }
        Ok(ServerListing {
            entries: resources,
            truncated: listing.truncated,
            cached_at: None,
            cache,
        })
    }

    /// The listing's entries as the gateway publishes them: each gateway URI once (the first
    /// entry wins, within and across pages), without upstream URIs that could not be read back
    /// (empty, NUL, `.`/`..` segments, too long), and with a `lastModified` in the future taken
    /// as now, so a hostile server cannot sort its entries to the top.
    fn entries(
        &self,
        server: &ServerName,
        listed: Vec<quarry_ports::UpstreamResource>,
        now: Timestamp,
    ) -> Vec<ListedEntry> {
        let classifier = &self.options.classifier;
        // A gateway URI is a bijection of the upstream URI, so duplicates are found on the
        // upstream's strings, borrowed: no copy of half a million URIs.
        let keep: Vec<bool> = {
            let mut seen = HashSet::with_capacity(listed.len());
            listed.iter().map(|r| seen.insert(r.uri.as_str())).collect()
        };
        listed
            .into_iter()
            .zip(keep)
            .filter_map(|(mut r, first)| {
                if !first {
                    return None;
                }
                let gateway_uri = ResourceUri::gateway_text(server, &r.uri).ok()?;
                if r.last_modified.is_some_and(|t| t > now) {
                    r.last_modified = Some(now);
                }
                Some(ListedEntry {
                    gateway_uri,
                    resource_type: classifier.type_of(&r.uri, r.mime_type.as_deref()),
                    resource: r,
                })
            })
            .collect()
    }

    /// The full resource of a listed entry (for the page only). `None` only if the entry's URI
    /// no longer makes a gateway URI, which `entries` already ruled out.
    fn to_resource(&self, upstream: &Upstream, entry: &ListedEntry) -> Option<Resource> {
        let spec = &upstream.settings.spec;
        let r = &entry.resource;
        let uri = ResourceUri::new(spec.name.clone(), &r.uri).ok()?;
        let classified = self
            .options
            .classifier
            .classify(&r.uri, r.mime_type.as_deref());
        let mut metadata = Map::new();
        metadata.insert("server".into(), Value::String(spec.name.to_string()));
        metadata.insert("server_id".into(), Value::String(spec.id.to_string()));
        metadata.insert("upstream_uri".into(), Value::String(r.uri.clone()));
        if let Some(title) = &r.title {
            metadata.insert("title".into(), Value::String(title.clone()));
        }
        if let Some(d) = &r.description {
            metadata.insert("description".into(), Value::String(d.clone()));
        }
        metadata.insert(
            "classification".into(),
            Value::String(classified.explanation),
        );
        let name = if r.name.is_empty() {
            sanitize_label(&r.uri)
        } else {
            r.name.clone()
        };
        Some(Resource {
            uri,
            name,
            resource_type: classified.resource_type,
            size: r.size,
            mime_type: r.mime_type.clone(),
            created_at: None,
            modified_at: r.last_modified,
            version: None,
            is_protected: upstream.settings.protection.covers(&r.uri),
            metadata,
        })
    }
}
