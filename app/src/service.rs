//! `ResourceService`: the spec's service layer for listing and reading, behind the driving port.
//!
//! Reads check the cache first; a miss fetches from the upstream (retrying a dead connection as
//! the server's policy says), hashes the content, records its version, caches it (for as long as
//! the configuration and the upstream's `ttlMs` allow, per principal when the upstream marks it
//! private) and subscribes to the upstream's change notifications. Cached bytes are re-hashed before
//! they are served; a corrupt entry is dropped and refetched. With the upstream down, expired cached
//! content is served marked stale, with the upstream's error beside it. Listings ask every selected
//! server at once, each under its own deadline, and cache each server's listing apart from content.

use std::{
    collections::HashSet,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use base64::Engine as _;
use quarry_domain::{
    Body, Classifier, Content, Digest, Endpoint, Error, ErrorCode, ListQuery, ListResourcesResult,
    Listed, Origin, ReadResourceResult, Resource, ResourceType, ResourceUri, ResourceVersion,
    ServerName, ServerStatus, Timestamp, UpstreamFailure, VersionSelector, encode_path,
    sort_and_page, template_to_gateway,
};
use quarry_ports::{
    CachedContent, Clock, ContentCache, Fetched, GatewayTemplate, IdempotencyStore, PurgeReport,
    ReadRequest, RegisteredServer, Remembered, RemovedServer, Requester, ResourceGateway,
    ResourceKey, ServerRegistry, UpstreamConnector, UpstreamError, UpstreamObserver,
    UpstreamResource, VersionStore,
};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::{
    config::{RetryPolicy, ServerSettings, Supervision},
    invalidation::Invalidator,
    listings::{CachedListing, ListedEntry, ListingCache},
    upstreams::{Lease, Upstream, Upstreams},
};

/// How the service caches and bounds content.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// Whether content and listings are cached at all.
    pub cache_enabled: bool,
    /// How long cached content and listings stay fresh (an upstream's `ttlMs` can shorten it).
    pub cache_ttl: Duration,
    /// The largest content accepted from an upstream.
    pub max_resource_bytes: u64,
    /// Resource type rules.
    pub classifier: Classifier,
    /// Pools, circuit breakers and supervision of the upstreams.
    pub supervision: Supervision,
    /// Whether agents may add and remove servers through the tools. Off by default: until a
    /// policy decides who may configure the gateway, only operators do.
    pub allow_tool_registration: bool,
    /// Whether agents may also register stdio commands (arbitrary programs) that way.
    pub allow_tool_commands: bool,
}

/// The stores behind the service, one port each (one SQLite file in the embedded default).
#[derive(Debug, Clone)]
pub struct Stores {
    /// Version history.
    pub versions: Arc<dyn VersionStore>,
    /// Servers registered at runtime.
    pub registry: Arc<dyn ServerRegistry>,
    /// Mutation results by idempotency key.
    pub idempotency: Arc<dyn IdempotencyStore>,
}

/// Lists and reads resources across the registered upstream servers.
#[derive(Debug)]
pub struct ResourceService {
    upstreams: Upstreams,
    connector: Arc<dyn UpstreamConnector>,
    cache: Arc<dyn ContentCache>,
    store: Arc<dyn VersionStore>,
    clock: Arc<dyn Clock>,
    options: ServiceOptions,
    listings: Arc<ListingCache>,
    invalidator: Arc<Invalidator>,
    stop: CancellationToken,
    registry: Arc<dyn ServerRegistry>,
    idempotency: Arc<dyn IdempotencyStore>,
    supervising: AtomicBool,
    registry_seen: Mutex<RegistrySeen>,
    /// One lock per idempotency key in use, so concurrent calls with one key run once.
    idempotency_locks: Mutex<KeyLocks>,
}

/// One async lock per (tool, idempotency key) in use.
type KeyLocks = std::collections::HashMap<(String, String), Arc<tokio::sync::Mutex<()>>>;

/// What this process last loaded of the registry, and when it last looked.
#[derive(Debug, Default)]
struct RegistrySeen {
    generation: Option<u64>,
    checked: Option<std::time::Instant>,
}

/// The SHA-256 digest of `bytes`.
pub fn sha256(bytes: &[u8]) -> Digest {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    Digest::new(out)
}

/// The settings of a server registered at runtime.
fn settings_of(record: RegisteredServer) -> ServerSettings {
    ServerSettings {
        spec: record.spec,
        retry: RetryPolicy {
            attempts: record.retry_attempts,
            delay: record.retry_delay,
        },
        pool_size: record.pool_size,
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

/// How a read was answered, for the result's metadata.
#[derive(Debug, Default)]
struct Provenance {
    cached_at: Option<Timestamp>,
    stale: Option<Error>,
    version: Option<ResourceVersion>,
}

fn store_failed(e: impl std::fmt::Display) -> Error {
    tracing::error!("{e}");
    Error::internal()
}

fn is_upstream_down(e: &Error) -> bool {
    matches!(e.code(), ErrorCode::E003 | ErrorCode::E009)
}

impl ResourceService {
    /// A service over `servers`, reaching them through `connector`.
    pub fn new(
        servers: Vec<ServerSettings>,
        connector: Arc<dyn UpstreamConnector>,
        cache: Arc<dyn ContentCache>,
        stores: Stores,
        clock: Arc<dyn Clock>,
        options: ServiceOptions,
    ) -> Self {
        let listings = Arc::new(ListingCache::default());
        let invalidator = Arc::new(Invalidator::new(cache.clone(), listings.clone()));
        Self {
            upstreams: Upstreams::new(servers, options.supervision),
            connector,
            cache,
            store: stores.versions,
            clock,
            options,
            listings,
            invalidator,
            stop: CancellationToken::new(),
            registry: stores.registry,
            idempotency: stores.idempotency,
            supervising: AtomicBool::new(false),
            registry_seen: Mutex::new(RegistrySeen::default()),
            idempotency_locks: Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// Loads the servers registered at runtime (by a tool or `quarry servers add`), beside those
    /// of the configuration file, which win a name clash.
    ///
    /// # Errors
    /// E012 when the registry cannot be read.
    pub async fn load_registry(&self) -> Result<(), Error> {
        let generation = self.registry.generation().await.map_err(store_failed)?;
        let stored = self.registry.servers().await.map_err(store_failed)?;
        let wanted: HashSet<ServerName> = stored.iter().map(|s| s.spec.name.clone()).collect();
        for record in stored {
            if self.upstreams.by_name(&record.spec.name).is_ok() {
                continue;
            }
            match self.upstreams.insert(settings_of(record)) {
                Ok(upstream) => self.supervise_one(&upstream),
                Err(e) => tracing::warn!("a registered server is skipped: {}", e.message()),
            }
        }
        for upstream in self.upstreams.all() {
            let name = upstream.name().clone();
            if !self.upstreams.is_configured(&name) && !wanted.contains(&name) {
                if let Some(gone) = self.upstreams.take(&name) {
                    gone.close(self.options.supervision.drain).await;
                }
                self.invalidator.forget_server(&name).await;
            }
        }
        let mut seen = self.registry_seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.generation = Some(generation);
        seen.checked = Some(std::time::Instant::now());
        Ok(())
    }

    /// Picks up registry changes made by another process, looking at most once a second.
    async fn sync_registry(&self) {
        let due = {
            let seen = self.registry_seen.lock().unwrap_or_else(|e| e.into_inner());
            seen.checked
                .is_none_or(|at| at.elapsed() >= Duration::from_secs(1))
        };
        if !due {
            return;
        }
        let known = {
            let mut seen = self.registry_seen.lock().unwrap_or_else(|e| e.into_inner());
            seen.checked = Some(std::time::Instant::now());
            seen.generation
        };
        match self.registry.generation().await {
            Ok(now) if Some(now) != known => {
                if let Err(e) = self.load_registry().await {
                    tracing::error!("reloading the server registry failed: {}", e.message());
                }
            }
            Ok(_) => {}
            Err(e) => tracing::error!("{e}"),
        }
    }

    fn supervise_one(&self, upstream: &Arc<Upstream>) {
        if !self.supervising.load(Ordering::SeqCst) {
            return;
        }
        let invalidator = self.invalidator.clone();
        let on_new = move |server: ServerName| {
            let invalidator = invalidator.clone();
            tokio::spawn(async move { invalidator.forget_server(&server).await });
        };
        tokio::spawn(upstream.clone().supervise(
            self.connector.clone(),
            self.invalidator.clone(),
            on_new,
            self.stop.child_token(),
        ));
    }

    /// Agents change the registry only where the configuration allows it, and register programs
    /// to run only where it allows that too (E004 otherwise).
    fn check_agent_may_register(
        &self,
        requester: Requester,
        endpoint: Option<&Endpoint>,
    ) -> Result<(), Error> {
        if requester == Requester::Operator {
            return Ok(());
        }
        if !self.options.allow_tool_registration {
            return Err(Error::new(
                ErrorCode::E004,
                "agents may not change the server registry here; an operator can, with `quarry servers add|remove`, \
                 or allow it with registry.allow_tool_registration = true",
            ));
        }
        if matches!(endpoint, Some(Endpoint::Stdio { .. })) && !self.options.allow_tool_commands {
            return Err(Error::new(
                ErrorCode::E004,
                "agents may not register programs to run (stdio servers); an operator can, with \
                 `quarry servers add`, or allow it with registry.allow_tool_commands = true",
            ));
        }
        Ok(())
    }

    /// Runs a mutation once per idempotency key: a repeat with the same payload returns the
    /// first result; another payload under the same key is E010.
    async fn idempotent<T, F, Fut>(
        &self,
        scope: &str,
        key: Option<String>,
        payload: String,
        op: F,
    ) -> Result<T, Error>
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        let Some(key) = key else { return op().await };
        // Calls with the same key wait for each other: the first runs, the others replay it.
        let slot = (scope.to_owned(), key.clone());
        let lock = self
            .idempotency_locks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(slot.clone())
            .or_default()
            .clone();
        let outcome = async {
            let _turn = lock.lock().await;
            let digest = sha256(payload.as_bytes()).hex();
            if let Some(first) = self
                .idempotency
                .recall(scope, &key)
                .await
                .map_err(store_failed)?
            {
                if first.payload_digest != digest {
                    let shown: String = key.chars().take(64).collect();
                    return Err(Error::new(
                        ErrorCode::E010,
                        format!(
                            "idempotency_key {shown:?} was first used with different arguments"
                        ),
                    ));
                }
                return serde_json::from_str(&first.result).map_err(store_failed);
            }
            let result = op().await?;
            let json = serde_json::to_string(&result).map_err(store_failed)?;
            let first = Remembered {
                payload_digest: digest,
                result: json,
            };
            self.idempotency
                .remember(scope, &key, first, self.clock.now())
                .await
                .map_err(store_failed)?;
            Ok(result)
        }
        .await;
        let mut locks = self
            .idempotency_locks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // The map's reference and ours: nobody else is waiting on this key.
        if Arc::strong_count(&lock) <= 2 {
            locks.remove(&slot);
        }
        outcome
    }

    /// Starts supervising every upstream: connect now, reconnect on the backoff schedule after a
    /// failure, check health. For a long-running gateway; one-shot commands connect on demand.
    pub fn start_supervision(&self) {
        self.supervising.store(true, Ordering::SeqCst);
        for upstream in self.upstreams.all() {
            self.supervise_one(&upstream);
        }
    }

    /// Every server's status as last seen, without contacting any.
    pub fn servers_status(&self) -> Vec<ServerStatus> {
        self.upstreams.all().iter().map(|u| u.status()).collect()
    }

    /// Stops supervision, lets requests in flight finish (up to the configured drain time), then
    /// ends every upstream session and stops their child processes.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        self.upstreams
            .close_all(self.options.supervision.drain)
            .await;
    }

    /// The upstream's session; a new session means announcements may have been missed, so what
    /// is cached for the server is dropped.
    async fn session(&self, upstream: &Upstream) -> Result<Lease, UpstreamError> {
        let observer: Arc<dyn UpstreamObserver> = self.invalidator.clone();
        let lease = upstream.lease(self.connector.as_ref(), observer).await?;
        if lease.is_new {
            self.invalidator.forget_server(upstream.name()).await;
        }
        Ok(lease)
    }

    fn ttl_until(&self, now: Timestamp, hint: Option<Duration>) -> Timestamp {
        let ttl = hint.map_or(self.options.cache_ttl, |h| h.min(self.options.cache_ttl));
        let ttl = chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::MAX);
        now.checked_add_signed(ttl).unwrap_or(now)
    }

    /// Lists one server under its deadline (from its cached listing when allowed and fresh),
    /// recording what happened in its status. Returns the resources, whether the listing was cut
    /// short, and when a cached listing was fetched.
    async fn list_one(
        &self,
        upstream: &Upstream,
        use_cache: bool,
    ) -> Result<(Arc<Vec<ListedEntry>>, bool, Option<Timestamp>), UpstreamError> {
        let now = self.clock.now();
        if self.options.cache_enabled
            && use_cache
            && let Some(hit) = self.listings.get(upstream.name(), now)
        {
            return Ok((hit.resources, hit.truncated, Some(hit.fetched_at)));
        }
        let deadline = upstream.settings.spec.timeout;
        let attempt = async {
            let session = self.session(upstream).await?;
            let epoch = self.invalidator.epoch(upstream.name());
            session
                .list_resources()
                .await
                .map(|listing| (listing, epoch))
        };
        let outcome = match tokio::time::timeout(deadline, attempt).await {
            Ok(result) => result,
            Err(_) => Err(UpstreamError::Timeout(
                u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX),
            )),
        };
        match outcome {
            Ok((listing, epoch)) => {
                let now = self.clock.now();
                upstream.used(now);
                upstream.listed(listing.resources.len() as u64);
                let classifier = &self.options.classifier;
                let name = upstream.name();
                let resources = Arc::new(
                    listing
                        .resources
                        .into_iter()
                        // The only upstream URIs without a gateway URI (see ResourceUri::new).
                        .filter(|r| !r.uri.is_empty() && !r.uri.contains('\0'))
                        .map(|r| ListedEntry {
                            gateway_uri: format!("mcp://{name}/{}", encode_path(&r.uri)),
                            resource_type: classifier.type_of(&r.uri, r.mime_type.as_deref()),
                            resource: r,
                        })
                        .collect::<Vec<_>>(),
                );
                if self.options.cache_enabled && self.invalidator.epoch(upstream.name()) == epoch {
                    self.listings.put(
                        upstream.name().clone(),
                        CachedListing {
                            resources: resources.clone(),
                            truncated: listing.truncated,
                            fetched_at: now,
                            expires_at: self.ttl_until(now, None),
                        },
                    );
                }
                Ok((resources, listing.truncated, None))
            }
            Err(e) => {
                tracing::warn!(server = %upstream.name(), "listing failed: {e}");
                upstream.failed(&e);
                Err(e)
            }
        }
    }

    fn to_resource(&self, upstream: &Upstream, r: &UpstreamResource) -> Option<Resource> {
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
            quarry_domain::sanitize_label(&r.uri)
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
            is_protected: false,
            metadata,
        })
    }

    /// Fetches content, reconnecting and retrying as the server's policy says when the
    /// connection is what failed.
    ///
    /// Also returns the server's invalidation epoch, taken once the session was established and
    /// subscribed, before the read.
    async fn fetch(&self, upstream: &Upstream, uri: &str) -> Result<(Fetched, u64), Error> {
        let retry = upstream.settings.retry;
        let mut attempt = 0;
        loop {
            let result = match self.session(upstream).await {
                Ok(session) => {
                    // Subscribe before reading (once per URI and session): a change after this
                    // point is announced, and a change during the read makes it uncacheable.
                    if self.options.cache_enabled
                        && let Err(e) = session.subscribe(uri).await
                    {
                        tracing::debug!(server = %upstream.name(), "subscribing to updates failed: {e}");
                    }
                    let epoch = self.invalidator.epoch(upstream.name());
                    session
                        .read(uri, self.options.max_resource_bytes)
                        .await
                        .map(|f| (f, epoch))
                }
                Err(e) => Err(e),
            };
            match result {
                Ok(done) => {
                    upstream.used(self.clock.now());
                    return Ok(done);
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

    /// A cached entry this principal may be served, with bytes that still match their digest.
    /// A corrupt entry is dropped (E006 in the log) and treated as a miss.
    async fn usable(
        &self,
        key: &ResourceKey,
        entry: Option<CachedContent>,
        request: &ReadRequest,
    ) -> Option<CachedContent> {
        let entry = entry?;
        if entry
            .partition
            .as_ref()
            .is_some_and(|p| p != &request.principal)
        {
            return None;
        }
        if request.validate_checksum && sha256(entry.content.bytes()) != entry.digest {
            tracing::error!(
                code = %ErrorCode::E006,
                server = %key.server,
                "cached content failed its checksum; dropped and refetched"
            );
            self.cache.invalidate(key).await;
            return None;
        }
        Some(entry)
    }

    async fn read_version(
        &self,
        request: &ReadRequest,
        key: &ResourceKey,
        wanted: &str,
    ) -> Result<ReadResourceResult, Error> {
        let selector = VersionSelector::parse(wanted)?;
        let shown: String = wanted.chars().take(64).collect();
        let Some((version, content)) = self
            .store
            .find(key, &selector)
            .await
            .map_err(store_failed)?
        else {
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
        if request.validate_checksum && sha256(content.bytes()).checksum() != version.checksum {
            return Err(Error::new(
                ErrorCode::E006,
                format!(
                    "stored content of {} of {} fails its checksum",
                    version.version, request.uri
                ),
            ));
        }
        render(
            request,
            &content,
            Provenance {
                version: Some(version),
                ..Provenance::default()
            },
        )
    }
}

/// Cuts the requested range (and the inline limit) out of `content` and builds the result.
fn render(
    request: &ReadRequest,
    content: &Content,
    how: Provenance,
) -> Result<ReadResourceResult, Error> {
    let asked = request.range.resolve(content.len())?;
    let mut slice = asked;
    let mut note = None;
    if let Some(cap) = request.inline_limit.filter(|cap| asked.len() > *cap) {
        let mut end = asked.start() + cap;
        // Text is cut on a character boundary so the part returned stays text.
        if let Body::Text(text) = &content.body {
            while end > asked.start() && !text.is_char_boundary(end as usize) {
                end -= 1;
            }
        }
        slice = asked.ending_at(end);
        note = Some(format!(
            "Only bytes {}-{} of the {} asked for are included (the inline limit is {} bytes). Call read_mcp_resource again with offset={} to continue.",
            slice.start(),
            slice.end() - 1,
            asked.len(),
            cap,
            slice.end()
        ));
    }
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
        version: how.version,
        cached: how.cached_at.is_some(),
        cached_at: how.cached_at,
        stale: how.stale.is_some(),
        upstream_error: how.stale.as_ref().map(UpstreamFailure::from),
        next_offset: (slice.end() < asked.end()).then_some(slice.end()),
        note,
        origin: Origin::of(&request.uri),
    })
}

#[async_trait]
impl ResourceGateway for ResourceService {
    async fn list_resources(&self, query: ListQuery) -> Result<ListResourcesResult, Error> {
        self.sync_registry().await;
        let selected = self.upstreams.select(query.server.as_ref())?;
        let listings =
            futures::future::join_all(selected.iter().map(|u| self.list_one(u, query.use_cache)))
                .await;
        let now = self.clock.now();
        let mut partial = false;
        let mut oldest: Option<Timestamp> = None;
        let mut from_cache: HashSet<ServerName> = HashSet::new();
        let mut held = Vec::with_capacity(selected.len());
        for (upstream, listing) in selected.iter().zip(listings) {
            match listing {
                Ok((items, truncated, cached_at)) => {
                    partial |= truncated;
                    if let Some(at) = cached_at {
                        from_cache.insert(upstream.name().clone());
                        oldest = Some(oldest.map_or(at, |o| o.min(at)));
                    }
                    held.push((upstream.clone(), items));
                }
                Err(_) => partial = true,
            }
        }
        // Filter and order light candidates; build full resources for the page only, so a
        // listing of half a million resources costs one small record per resource.
        let candidates: Vec<Candidate<'_>> = held
            .iter()
            .flat_map(|(upstream, items)| {
                items.iter().map(move |entry| Candidate { upstream, entry })
            })
            .collect();
        let page = sort_and_page(candidates, &query);
        let mut versions: std::collections::HashMap<
            ServerName,
            std::collections::HashMap<String, (String, Timestamp)>,
        > = std::collections::HashMap::new();
        let mut resources = Vec::with_capacity(page.items.len());
        for c in &page.items {
            let name = c.upstream.name();
            if !versions.contains_key(name) {
                let known = match self.store.summaries(name).await {
                    Ok(s) => s
                        .into_iter()
                        .map(|v| (v.upstream_uri, (v.latest, v.first_seen)))
                        .collect(),
                    Err(e) => {
                        tracing::error!(server = %name, "{e}");
                        Default::default()
                    }
                };
                versions.insert(name.clone(), known);
            }
            let Some(mut resource) = self.to_resource(c.upstream, &c.entry.resource) else {
                continue;
            };
            if let Some((latest, first_seen)) = versions
                .get(name)
                .and_then(|v| v.get(&c.entry.resource.uri))
            {
                resource.version = Some(latest.clone());
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
        })
    }

    async fn read_resource(&self, request: ReadRequest) -> Result<ReadResourceResult, Error> {
        let upstream = match self.upstreams.by_name(request.uri.server()) {
            Ok(u) => u,
            Err(_) => {
                self.sync_registry().await;
                self.upstreams.by_name(request.uri.server())?
            }
        };
        let key = ResourceKey::new(request.uri.server().clone(), request.uri.upstream());
        if let Some(wanted) = &request.version {
            return self.read_version(&request, &key, wanted).await;
        }
        let caching = self.options.cache_enabled;
        if caching && request.use_cache {
            let fresh = self.cache.get(&key, self.clock.now()).await;
            if let Some(hit) = self.usable(&key, fresh, &request).await {
                upstream.used(self.clock.now());
                let how = Provenance {
                    cached_at: Some(hit.cached_at),
                    stale: None,
                    version: hit.version.clone(),
                };
                return render(&request, &hit.content, how);
            }
        }
        let (fetched, epoch) = match self.fetch(&upstream, request.uri.upstream()).await {
            Ok(done) => done,
            Err(e) if caching && request.use_cache && is_upstream_down(&e) => {
                let stale = self.cache.get_stale(&key).await;
                let Some(entry) = self.usable(&key, stale, &request).await else {
                    return Err(e);
                };
                tracing::warn!(server = %upstream.name(), "upstream down; serving stale content: {e}");
                let how = Provenance {
                    cached_at: Some(entry.cached_at),
                    stale: Some(e),
                    version: entry.version.clone(),
                };
                return render(&request, &entry.content, how);
            }
            Err(e) => return Err(e),
        };
        let now = self.clock.now();
        let digest = sha256(fetched.content.bytes());
        let version = match self.store.record(&key, digest, &fetched.content, now).await {
            Ok(recorded) => {
                if recorded.is_new && recorded.version.version != "v1" {
                    tracing::info!(server = %upstream.name(), version = %recorded.version.version, "new version");
                }
                Some(recorded.version)
            }
            Err(e) => {
                tracing::error!(server = %upstream.name(), "{e}; the read is served without version");
                None
            }
        };
        // A change announced while this fetch was in flight wins: the content is returned but not
        // cached, so the next read fetches again.
        if caching && self.invalidator.epoch(upstream.name()) == epoch {
            let entry = CachedContent {
                content: fetched.content.clone(),
                digest,
                version: version.clone(),
                partition: fetched.private.then(|| request.principal.clone()),
                cached_at: now,
                expires_at: self.ttl_until(now, fetched.ttl),
            };
            self.cache.put(key, entry).await;
        }
        render(
            &request,
            &fetched.content,
            Provenance {
                version,
                ..Provenance::default()
            },
        )
    }

    async fn list_templates(&self) -> Result<Vec<GatewayTemplate>, Error> {
        let all = self.upstreams.all();
        let fetched = futures::future::join_all(all.iter().map(|u| async move {
            let deadline = u.settings.spec.timeout;
            let attempt = async {
                let session = self.session(u).await?;
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
        self.sync_registry().await;
        let all = self.upstreams.all();
        futures::future::join_all(all.iter().map(|u| self.list_one(u, false))).await;
        all.iter().map(|u| u.status()).collect()
    }

    async fn versions(&self, uri: &ResourceUri) -> Result<Vec<ResourceVersion>, Error> {
        self.upstreams.by_name(uri.server())?;
        let key = ResourceKey::new(uri.server().clone(), uri.upstream());
        self.store.history(&key).await.map_err(store_failed)
    }

    async fn purge(
        &self,
        server: Option<ServerName>,
        uri: Option<ResourceUri>,
        idempotency_key: Option<String>,
    ) -> Result<PurgeReport, Error> {
        let payload = format!("{server:?} {uri:?}");
        self.idempotent("purge_mcp_cache", idempotency_key, payload, || async {
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
            let listings = self.listings.drop_listings(server.as_ref());
            Ok(PurgeReport { contents, listings })
        })
        .await
    }

    async fn add_server(
        &self,
        server: RegisteredServer,
        requester: Requester,
        idempotency_key: Option<String>,
    ) -> Result<ServerStatus, Error> {
        self.check_agent_may_register(requester, Some(&server.spec.endpoint))?;
        let payload = format!("{server:?}");
        self.idempotent("add_mcp_server", idempotency_key, payload, || async {
            self.sync_registry().await;
            let upstream = self.upstreams.insert(settings_of(server.clone()))?;
            if let Err(e) = self.registry.save(&server, self.clock.now()).await {
                self.upstreams.take(upstream.name());
                return Err(store_failed(e));
            }
            {
                let mut seen = self.registry_seen.lock().unwrap_or_else(|e| e.into_inner());
                seen.generation = seen.generation.map(|g| g + 1);
            }
            tracing::info!(server = %upstream.name(), endpoint = %upstream.settings.spec.endpoint.display_uri(), "server registered");
            // Connect and list once, so the answer tells whether the server works.
            let _ = self.list_one(&upstream, false).await;
            self.supervise_one(&upstream);
            Ok(upstream.status())
        })
        .await
    }

    async fn remove_server(
        &self,
        name: ServerName,
        requester: Requester,
        idempotency_key: Option<String>,
    ) -> Result<RemovedServer, Error> {
        self.check_agent_may_register(requester, None)?;
        let payload = name.to_string();
        self.idempotent("remove_mcp_server", idempotency_key, payload, || async {
            self.sync_registry().await;
            if self.upstreams.is_configured(&name) {
                return Err(Error::invalid(format!(
                    "server '{name}' comes from the configuration file; remove it there"
                )));
            }
            self.upstreams.by_name(&name)?;
            self.registry.delete(&name).await.map_err(store_failed)?;
            {
                let mut seen = self.registry_seen.lock().unwrap_or_else(|e| e.into_inner());
                seen.generation = seen.generation.map(|g| g + 1);
            }
            let purged_contents = self.cache.purge(Some(name.clone())).await;
            self.listings.drop_listings(Some(&name));
            if let Some(upstream) = self.upstreams.take(&name) {
                upstream.close(self.options.supervision.drain).await;
            }
            tracing::info!(server = %name, "server unregistered");
            Ok(RemovedServer {
                server_name: name.clone(),
                purged_contents,
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests;
