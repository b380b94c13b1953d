//! Reading one resource: through the cache, from the upstream on a miss, with versions.
//!
//! A miss fetches from the upstream (retrying a dead connection as the server's policy says),
//! hashes the content, records its version, caches it (for as long as the configuration and the
//! upstream's `ttlMs` allow, per principal when the upstream marks it private) and subscribes to
//! the upstream's change notifications. Cached bytes are re-hashed before they are served; a
//! corrupt entry is dropped and refetched. With the upstream down, expired cached content is
//! served marked stale, with the upstream's error beside it. Concurrent misses of one content
//! (for one principal) share one upstream read.

use std::{sync::Arc, time::Duration};

use quarry_domain::{
    CacheHint, CacheScope, Content, Error, ErrorCode, Principal, ReadResourceResult,
    ResourceVersion, Timestamp,
};
use quarry_ports::{CachedContent, Fetched, ReadRequest, ResourceKey};

use crate::{
    ResourceService,
    excerpt::{Provenance, excerpt},
    upstream::{Attempts, Upstream},
};

/// What one upstream read produced, shared by every caller that missed at once.
#[derive(Debug)]
pub(crate) struct Kept {
    content: Arc<Content>,
    version: Option<ResourceVersion>,
    /// When the content was fetched, if it came from the cache after all.
    cached_at: Option<Timestamp>,
    /// How long it stays fresh, and for whom.
    cache: CacheHint,
}

/// What is left of a cache entry at `now`: private when it is kept for one principal.
fn entry_hint(entry: &CachedContent, now: Timestamp) -> CacheHint {
    let scope = if entry.partition.is_some() {
        CacheScope::Private
    } else {
        CacheScope::Public
    };
    CacheHint::until(entry.expires_at, now, scope)
}

fn is_upstream_down(e: &Error) -> bool {
    matches!(e.code(), ErrorCode::E003 | ErrorCode::E009)
}

impl ResourceService {
    /// `read_mcp_resource` and `resources/read`.
    pub(crate) async fn read(&self, request: ReadRequest) -> Result<ReadResourceResult, Error> {
        let upstream = self.upstream_for(request.uri.server()).await?;
        self.check_protected(&upstream, &request.uri).await?;
        let key = ResourceKey::new(request.uri.server().clone(), request.uri.upstream());
        if let Some(wanted) = &request.version {
            return self.read_version(&request, &key, wanted).await;
        }
        let caching = self.options.cache_enabled && request.use_cache;
        if caching {
            let now = self.clock.now();
            let fresh = self.cache.get(&key, now).await;
            if let Some(hit) = self.usable(&key, fresh, &request).await {
                upstream.used();
                let how = Provenance {
                    cached_at: Some(hit.cached_at),
                    stale: None,
                    version: hit.version.clone(),
                    cache: entry_hint(&hit, now),
                };
                return excerpt(&request, &hit.content, how);
            }
        }
        let kept = if caching && let Some(this) = self.owned() {
            self.content_flights
                .run(
                    (key.clone(), request.principal.clone()),
                    || {
                        // Copies for the caller that starts the flight only: in a burst of
                        // misses most callers join one.
                        let (u, k, r) = (upstream.clone(), key.clone(), request.clone());
                        async move {
                            // The flight before this one may have cached it since this caller
                            // looked: then it is served from there, not fetched again.
                            let checked = ReadRequest {
                                validate_checksum: true,
                                ..r
                            };
                            let now = this.clock.now();
                            if let Some(hit) = this
                                .usable(&k, this.cache.get(&k, now).await, &checked)
                                .await
                            {
                                return Ok(Arc::new(Kept {
                                    cache: entry_hint(&hit, now),
                                    content: hit.content,
                                    version: hit.version,
                                    cached_at: Some(hit.cached_at),
                                }));
                            }
                            this.fetch_and_keep(&u, &k, &checked.principal).await
                        }
                    },
                    || Err(Error::internal()),
                )
                .await
        } else {
            self.fetch_and_keep(&upstream, &key, &request.principal)
                .await
        };
        match kept {
            Ok(kept) => excerpt(
                &request,
                &kept.content,
                Provenance {
                    cached_at: kept.cached_at,
                    stale: None,
                    version: kept.version.clone(),
                    cache: kept.cache,
                },
            ),
            Err(e) if caching && is_upstream_down(&e) => {
                let stale = self.cache.get_stale(&key).await;
                let Some(entry) = self.usable(&key, stale, &request).await else {
                    return Err(e);
                };
                tracing::warn!(server = %upstream.name(), "upstream down; serving stale content: {e}");
                // Stale content is served because nothing better is at hand: keep none of it.
                let how = Provenance {
                    cached_at: Some(entry.cached_at),
                    stale: Some(e),
                    version: entry.version.clone(),
                    cache: CacheHint::NONE,
                };
                excerpt(&request, &entry.content, how)
            }
            Err(e) => Err(e),
        }
    }

    /// Fetches the content from the upstream, records its version and caches it (unless a
    /// change was announced while the fetch was in flight).
    async fn fetch_and_keep(
        &self,
        upstream: &Upstream,
        key: &ResourceKey,
        principal: &Principal,
    ) -> Result<Arc<Kept>, Error> {
        let (fetched, epoch) = self.fetch(upstream, &key.upstream_uri).await?;
        // One copy of the bytes, shared by the cache entry and this read's callers.
        let content = Arc::new(fetched.content);
        let now = self.clock.now();
        let digest = self.hasher.sha256(content.bytes());
        let version = match self.versions.record(key, digest, &content, now).await {
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
        // cached, so the next read fetches again (and nobody else should keep it either).
        let mut cache = CacheHint::NONE;
        if self.options.cache_enabled
            && self
                .invalidator
                .unchanged_since(upstream.name(), epoch)
                .await
        {
            let entry = CachedContent {
                content: content.clone(),
                digest,
                version: version.clone(),
                partition: fetched.private.then(|| principal.clone()),
                cached_at: now,
                expires_at: self.ttl_until(now, fetched.ttl),
            };
            let said = fetched.ttl.map(|ttl| {
                let scope = if fetched.private {
                    CacheScope::Private
                } else {
                    CacheScope::Public
                };
                CacheHint::new(ttl, scope)
            });
            cache = CacheHint::for_read(entry_hint(&entry, now), said);
            self.cache.put(key.clone(), entry).await;
        }
        Ok(Arc::new(Kept {
            content,
            version,
            cached_at: None,
            cache,
        }))
    }

    /// When content or a listing fetched at `now` stops being fresh: the configured TTL, or the
    /// upstream's hint when shorter.
    pub(crate) fn ttl_until(&self, now: Timestamp, hint: Option<Duration>) -> Timestamp {
        let ttl = hint.map_or(self.options.cache_ttl, |h| h.min(self.options.cache_ttl));
        let ttl = chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::MAX);
        now.checked_add_signed(ttl).unwrap_or(now)
    }

    /// Fetches content, reconnecting and retrying as the server's policy says when the
    /// connection is what failed.
    ///
    /// Also returns the server's invalidation epoch, taken once the session was established,
    /// before subscribing: a subscription that turns out lost advances it after this point.
    async fn fetch(&self, upstream: &Upstream, uri: &str) -> Result<(Fetched, Option<u64>), Error> {
        // The session bounds each request by the server's timeout; the whole read, retries
        // included, gets no more.
        let attempts = Attempts {
            retries: upstream.settings.retry.attempts,
            deadline: None,
            total: Some(upstream.settings.spec.timeout),
        };
        upstream
            .call(attempts, |session| async move {
                // Subscribe before reading (once per URI): a change after this point is
                // announced, and a change during the read makes it uncacheable. The epoch comes
                // first: a stream found lost meanwhile (its URIs no longer heard, though asked
                // for) advances it too.
                let epoch = self.invalidator.epoch(upstream.name()).await;
                if self.options.cache_enabled
                    && let Err(e) = session.subscribe(uri).await
                {
                    tracing::debug!(server = %upstream.name(), "subscribing to updates failed: {e}");
                }
                session
                    .read(uri, self.options.max_resource_bytes)
                    .await
                    .map(|f| (f, epoch))
            })
            .await
            .map_err(|e| e.into_error(upstream.name().as_str()))
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
        if request.validate_checksum && self.hasher.sha256(entry.content.bytes()) != entry.digest {
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
}
