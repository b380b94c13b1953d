//! One live MCP client session with an upstream server.

use std::{
    collections::HashSet,
    future::Future,
    sync::{Arc, Mutex as SyncMutex},
    time::Duration,
};

use async_trait::async_trait;
use base64::Engine as _;
use quarry_domain::{
    Body, CacheHint, CacheScope as DomainScope, Content, ServerSpec, Timestamp, sanitize_label,
    sanitize_mime_type,
};
use quarry_ports::{
    Fetched, TraceContext, UpstreamError, UpstreamListing, UpstreamResource, UpstreamSession,
    UpstreamTemplate,
};
use rmcp::{
    ClientCacheConfig, RoleClient,
    model::{
        CacheScope, ClientRequest, PaginatedRequestParams, ReadResourceRequestParams,
        RequestMetaObject, ResourceContents, SubscribeRequestParams,
    },
    service::{Peer, RunningService, ServiceError},
};
use tokio::{process::Child, sync::Mutex};

use crate::{
    correlated::Skipped,
    coverage::Coverage,
    eras::is_modern,
    errors::from_service,
    handler::UpstreamHandler,
    listen::{self, Listens},
};

/// What a session's transport sees and tells it: listing entries it left out as malformed, and
/// the loss of the session's subscriptions.
pub(crate) type Seen = (Arc<SyncMutex<Skipped>>, Arc<Coverage>);

/// A session: the rmcp service, its peer handle, and the child process behind it, if any.
pub(crate) struct RmcpSession {
    spec: ServerSpec,
    peer: Peer<RoleClient>,
    offers_resources: bool,
    offers_subscriptions: bool,
    /// What it subscribed to with `resources/subscribe` (2025-11-25).
    coverage: Arc<Coverage>,
    max_content_bytes: u64,
    service: Mutex<Option<RunningService<RoleClient, UpstreamHandler>>>,
    child: Mutex<Option<Child>>,
    /// Listing entries the transport left out as malformed.
    skipped: Arc<SyncMutex<Skipped>>,
    /// The session speaks 2026-07-28: changes come on `subscriptions/listen` streams, shared with
    /// the server's other sessions over HTTP.
    modern: Option<Arc<Listens>>,
    /// The task that hears of changes to the resource list.
    list_changes: Option<tokio::task::AbortHandle>,
    /// The current request's trace, put in each request's `_meta`.
    trace: Option<Arc<dyn TraceContext>>,
}

impl std::fmt::Debug for RmcpSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RmcpSession")
            .field("server", &self.spec.name)
            .field("offers_resources", &self.offers_resources)
            .finish_non_exhaustive()
    }
}

impl RmcpSession {
    pub(crate) async fn new(
        spec: ServerSpec,
        service: RunningService<RoleClient, UpstreamHandler>,
        child: Option<Child>,
        max_content_bytes: u64,
        (skipped, coverage): Seen,
        streams: &listen::Shared,
    ) -> Self {
        let peer = service.peer().clone();
        // Quarry keeps its own cache with its own keys and invalidation; a second, hidden cache
        // under it would serve content Quarry believes it refreshed.
        peer.set_response_cache_config(ClientCacheConfig::disabled())
            .await;
        let resources = service
            .peer_info()
            .and_then(|info| info.capabilities.resources.clone());
        let is_modern = service
            .peer_info()
            .is_some_and(|info| is_modern(&info.protocol_version));
        let (server, observer) = service.service().observer();
        let modern = is_modern.then(|| streams.streams(&spec, observer.clone()));
        // The resource list's changes: asked at once, heard for the life of the session.
        let list_changes = (is_modern
            && resources
                .as_ref()
                .is_some_and(|r| r.list_changed == Some(true)))
        .then(|| {
            let listening = listen::list_changes(peer.clone(), server, observer, spec.timeout);
            tokio::spawn(listening).abort_handle()
        });
        Self {
            modern,
            list_changes,
            spec,
            peer,
            offers_resources: resources.is_some(),
            offers_subscriptions: resources.is_some_and(|r| r.subscribe == Some(true)),
            coverage,
            max_content_bytes,
            service: Mutex::new(Some(service)),
            child: Mutex::new(child),
            skipped,
            trace: None,
        }
    }

    /// This session, its requests carrying the trace `trace` tells.
    pub(crate) fn traced(mut self, trace: Option<Arc<dyn TraceContext>>) -> Self {
        self.trace = trace;
        self
    }

    /// `_meta` with the current trace's `traceparent`, when there is one.
    fn trace_meta(&self) -> Option<RequestMetaObject> {
        let traceparent = self.trace.as_ref()?.traceparent()?;
        let mut meta = RequestMetaObject::default();
        meta.insert("traceparent".into(), traceparent.into());
        Some(meta)
    }

    fn timeout_ms(&self) -> u64 {
        u64::try_from(self.spec.timeout.as_millis()).unwrap_or(u64::MAX)
    }

    /// Runs one request under the server's deadline. Dropping the request on timeout makes rmcp
    /// send `notifications/cancelled` upstream.
    async fn call<T>(
        &self,
        reading: bool,
        request: impl Future<Output = Result<T, ServiceError>>,
    ) -> Result<T, UpstreamError> {
        if self.peer.is_transport_closed() {
            return Err(UpstreamError::Unreachable(
                "the connection to the server closed".into(),
            ));
        }
        match tokio::time::timeout(self.spec.timeout, request).await {
            Err(_) => Err(UpstreamError::Timeout(self.timeout_ms())),
            Ok(result) => result.map_err(|e| from_service(e, reading)),
        }
    }

    /// Follows `next_cursor` until the last page, the page bound, or a cursor seen before.
    async fn paginate<T, F, Fut>(&self, mut fetch: F) -> Result<(Vec<T>, bool), UpstreamError>
    where
        F: FnMut(Option<PaginatedRequestParams>) -> Fut,
        Fut: Future<Output = Result<(Vec<T>, Option<String>), ServiceError>>,
    {
        let mut items = Vec::new();
        let mut seen = HashSet::new();
        let mut cursor: Option<String> = None;
        for _ in 0..self.spec.max_pages {
            let meta = self.trace_meta();
            let params = match (cursor.clone(), meta) {
                (None, None) => None,
                (cursor, meta) => {
                    let mut params = PaginatedRequestParams::default().with_cursor(cursor);
                    params.meta = meta;
                    Some(params)
                }
            };
            let (page, next) = self.call(false, fetch(params)).await?;
            items.extend(page);
            match next {
                None => return Ok((items, false)),
                Some(next) if !seen.insert(next.clone()) => {
                    tracing::warn!(server = %self.spec.name, "upstream repeated a pagination cursor; listing stopped there");
                    return Ok((items, true));
                }
                Some(next) => cursor = Some(next),
            }
        }
        tracing::warn!(server = %self.spec.name, max_pages = self.spec.max_pages, "listing stopped at the page bound");
        Ok((items, true))
    }
}

fn parse_time(text: Option<&String>) -> Option<Timestamp> {
    text.and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&chrono::Utc))
}

/// What a 2026-07-28 upstream said of a result's freshness, when it gave a `ttlMs` (a scope
/// alone says nothing of how long: Quarry's own TTL applies). A missing scope is private.
fn hint_of(ttl_ms: Option<u64>, scope: Option<CacheScope>) -> Option<CacheHint> {
    let scope = match scope {
        Some(CacheScope::Public) => DomainScope::Public,
        _ => DomainScope::Private,
    };
    ttl_ms.map(|ms| CacheHint::new(Duration::from_millis(ms), scope))
}

fn optional_label(text: Option<&String>) -> Option<String> {
    text.map(|t| sanitize_label(t))
}

#[async_trait]
impl UpstreamSession for RmcpSession {
    async fn list_resources(&self) -> Result<UpstreamListing, UpstreamError> {
        if !self.offers_resources {
            return Ok(UpstreamListing::default());
        }
        let peer = &self.peer;
        // Whatever an earlier listing on this session left in the counter is not this one's.
        self.skipped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        // The listing is as fresh as its least fresh page, and private if any page is.
        let said: SyncMutex<Option<CacheHint>> = SyncMutex::new(None);
        let said_ref = &said;
        let listed = self
            .paginate(|params| async move {
                let page = peer.list_resources(params).await?;
                if let Some(hint) = hint_of(page.ttl_ms, page.cache_scope) {
                    let mut held = said_ref.lock().unwrap_or_else(|e| e.into_inner());
                    *held = Some(held.map_or(hint, |h| h.and(hint)));
                }
                Ok((page.resources, page.next_cursor))
            })
            .await;
        let (skipped, skip_reason) = self
            .skipped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let (resources, truncated) = match listed {
            Ok(found) => found,
            Err(UpstreamError::MethodNotFound) => return Ok(UpstreamListing::default()),
            Err(e) => return Err(e),
        };
        let resources = resources
            .into_iter()
            .map(|r| UpstreamResource {
                last_modified: parse_time(
                    r.annotations
                        .as_ref()
                        .and_then(|a| a.last_modified.as_ref()),
                ),
                name: sanitize_label(&r.name),
                title: optional_label(r.title.as_ref()),
                description: optional_label(r.description.as_ref()),
                mime_type: r.mime_type.as_deref().and_then(sanitize_mime_type),
                size: r.size,
                uri: r.uri,
            })
            .collect();
        Ok(UpstreamListing {
            resources,
            truncated,
            skipped,
            skip_reason,
            hint: said.into_inner().unwrap_or_else(|e| e.into_inner()),
        })
    }

    async fn list_templates(&self) -> Result<Vec<UpstreamTemplate>, UpstreamError> {
        if !self.offers_resources {
            return Ok(Vec::new());
        }
        let peer = &self.peer;
        let listed = self
            .paginate(|params| async move {
                let page = peer.list_resource_templates(params).await?;
                Ok((page.resource_templates, page.next_cursor))
            })
            .await;
        match listed {
            Ok((templates, _)) => Ok(templates
                .into_iter()
                .map(|t| UpstreamTemplate {
                    name: sanitize_label(&t.name),
                    description: optional_label(t.description.as_ref()),
                    mime_type: t.mime_type.as_deref().and_then(sanitize_mime_type),
                    uri_template: t.uri_template,
                })
                .collect()),
            Err(UpstreamError::MethodNotFound) => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    async fn read(&self, uri: &str, max_bytes: u64) -> Result<Fetched, UpstreamError> {
        let max_bytes = max_bytes.min(self.max_content_bytes);
        let result = self
            .call(
                true,
                self.peer.read_resource({
                    let mut params = ReadResourceRequestParams::new(uri);
                    params.meta = self.trace_meta();
                    params
                }),
            )
            .await
            .map_err(|e| match e {
                // The transport refused the message; report it against the content limit.
                UpstreamError::TooLarge { size, .. } => UpstreamError::TooLarge {
                    size: size.saturating_mul(3) / 4,
                    limit: self.max_content_bytes,
                },
                other => other,
            })?;
        let ttl = result.ttl_ms.map(Duration::from_millis);
        let private = result.cache_scope == Some(CacheScope::Private);
        let mut contents = result.contents;
        // A read may return several parts (a directory, say); the one with the requested URI is
        // the resource, else the first.
        let index = contents
            .iter()
            .position(|c| content_uri(c) == uri)
            .unwrap_or(0);
        if contents.is_empty() {
            return Err(UpstreamError::Protocol(
                "the server returned no contents".into(),
            ));
        }
        let content = match contents.swap_remove(index) {
            ResourceContents::TextResourceContents {
                mime_type, text, ..
            } => Content {
                mime_type: mime_type.as_deref().and_then(sanitize_mime_type),
                body: Body::Text(text),
            },
            ResourceContents::BlobResourceContents {
                mime_type, blob, ..
            } => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(blob.as_bytes())
                    .map_err(|e| {
                        UpstreamError::Protocol(format!("blob is not valid base64: {e}"))
                    })?;
                Content {
                    mime_type: mime_type.as_deref().and_then(sanitize_mime_type),
                    body: Body::Blob(bytes),
                }
            }
            _ => {
                return Err(UpstreamError::Protocol(
                    "unsupported resource contents".into(),
                ));
            }
        };
        if content.len() > max_bytes {
            return Err(UpstreamError::TooLarge {
                size: content.len(),
                limit: max_bytes,
            });
        }
        Ok(Fetched {
            content,
            ttl,
            private,
        })
    }

    async fn subscribe(&self, uri: &str) -> Result<bool, UpstreamError> {
        if !self.offers_subscriptions {
            return Ok(false);
        }
        if let Some(listens) = &self.modern {
            // Acknowledged without the URI: the server will not announce its changes, and asking
            // again would not change its mind.
            return listens.subscribe(&self.peer, uri, self.spec.timeout).await;
        }
        if self.coverage.claim(uri) {
            // 2025-11-25: resources/subscribe, which rmcp marks legacy.
            #[allow(deprecated)]
            let outcome = self
                .call(false, self.peer.subscribe(SubscribeRequestParams::new(uri)))
                .await
                .map(|()| true);
            if outcome.is_err() {
                self.coverage.release(uri);
            }
            return outcome;
        }
        Ok(true)
    }

    async fn ping(&self) -> Result<(), UpstreamError> {
        if self.modern.is_some() {
            // 2026-07-28 has no ping: a discovery round trip shows the server answers.
            let discover = self.peer.discover(RequestMetaObject::default());
            return self.call(false, discover).await.map(|_| ());
        }
        let ping = self
            .peer
            .send_request(ClientRequest::PingRequest(Default::default()));
        self.call(false, ping).await.map(|_| ())
    }

    fn is_closed(&self) -> bool {
        self.peer.is_transport_closed()
    }

    async fn close(&self) {
        if let Some(task) = &self.list_changes {
            task.abort();
        }
        if let Some(listens) = &self.modern {
            listens.session_closed();
        }
        if let Some(service) = self.service.lock().await.take() {
            let _ = tokio::time::timeout(Duration::from_secs(2), service.cancel()).await;
        }
        if let Some(mut child) = self.child.lock().await.take() {
            // Closing stdin (done by the cancel above) lets a well-behaved server exit; give it a
            // moment, then kill. Either way it is reaped, never left a zombie.
            if tokio::time::timeout(Duration::from_millis(500), child.wait())
                .await
                .is_err()
            {
                let _ = child.kill().await;
            }
        }
        // Closed for good (a failed health check, an eviction, new credentials, shutdown): what
        // it subscribed to is heard of no more.
        self.coverage.lost("the session was closed").await;
    }
}

fn content_uri(c: &ResourceContents) -> &str {
    match c {
        ResourceContents::TextResourceContents { uri, .. }
        | ResourceContents::BlobResourceContents { uri, .. } => uri,
        _ => "",
    }
}
