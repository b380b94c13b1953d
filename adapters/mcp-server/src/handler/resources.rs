//! The native MCP resource methods: listing, templates, reading and change subscriptions, in
//! both protocol eras. Results carry the 2026-07-28 caching hints Quarry can vouch for; URIs are
//! published in the gateway form, or, in transparent mode, as the single upstream's own.

use std::{collections::HashSet, sync::Arc, time::Duration};

use quarry_domain::{
    CacheHint, CacheScope, Error, ErrorCode, ListQuery, PageLimit, Resource as DomainResource,
    ResourceUri,
};
use quarry_ports::{ReadRequest, RequestMeta, ResourceChange};
use rmcp::{
    ErrorData, RoleServer,
    model::{
        Annotations, CacheScope as WireScope, Extensions, ListResourceTemplatesResult,
        ListResourcesResult, NotificationNoParam, PaginatedRequestParams,
        ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
        ResourceContents, ResourceListChangedNotification, ResourceTemplate,
        ResourceUpdatedNotification, ResourceUpdatedNotificationParam, ServerNotification,
        SubscriptionFilter,
    },
    service::{Peer, RequestContext, SubscriptionContext},
    transport::streamable_http_server::session::SessionRestoreMarker,
};
use serde_json::{Value, json};

use super::{GatewayServer, ORIGIN_KEY};

/// Page size of the native `resources/list`: the most a listing query gives, so a client
/// walking a large catalogue makes few round trips (10,000 resources in 10 pages, not 100).
const NATIVE_PAGE: i64 = 1000;

/// How often a 2025-11-25 session's change forwarder looks whether its client is gone.
const CLOSED_CHECK: Duration = Duration::from_secs(5);

/// The session a request belongs to, as its `Mcp-Session-Id` header says.
fn session_of(extensions: &Extensions) -> Option<&str> {
    extensions
        .get::<axum::http::request::Parts>()?
        .headers
        .get("mcp-session-id")?
        .to_str()
        .ok()
}

/// The URIs a session subscribed to with `resources/subscribe`, as it sees them.
pub(crate) type Subscribed = Arc<std::sync::Mutex<HashSet<String>>>;

fn wire_scope(scope: CacheScope) -> WireScope {
    match scope {
        CacheScope::Public => WireScope::Public,
        CacheScope::Private => WireScope::Private,
    }
}

/// A JSON-RPC error for the native resource methods, carrying the E-code in `data` (and the
/// URI, for a resource that is not there).
pub(crate) fn protocol_error(error: &Error, uri: Option<&str>) -> ErrorData {
    let mut data = json!({"error_code": error.code().as_str()});
    if let Some(uri) = uri {
        data["uri"] = Value::String(uri.to_owned());
    }
    let message = error.to_string();
    match error.code() {
        ErrorCode::E001 => ErrorData::invalid_params(message, Some(data)),
        // rmcp answers this as -32602 to 2026-07-28 clients (SEP-2164), -32002 to older ones.
        ErrorCode::E002 => ErrorData::resource_not_found(message, Some(data)),
        _ => ErrorData::internal_error(message, Some(data)),
    }
}

impl GatewayServer {
    /// The URI a client sees for `uri`.
    fn shown(&self, uri: &ResourceUri) -> String {
        match &self.options.native {
            Some(native) if uri.server() == native => uri.upstream().to_owned(),
            _ => uri.as_str().to_owned(),
        }
    }

    /// The gateway URI of a URI a client sent.
    fn gateway_uri(&self, shown: &str) -> Result<ResourceUri, Error> {
        match &self.options.native {
            Some(native) => ResourceUri::new(native.clone(), shown),
            None => ResourceUri::parse(shown),
        }
    }

    fn native_resource(&self, r: DomainResource) -> Resource {
        let mut out = Resource::new(self.shown(&r.uri), r.name);
        if let Some(mime) = r.mime_type {
            out = out.with_mime_type(mime);
        }
        if let Some(size) = r.size {
            out = out.with_size(size);
        }
        if let Some(Value::String(d)) = r.metadata.get("description") {
            out = out.with_description(d.clone());
        }
        if let Some(modified) = r.modified_at {
            let mut annotations = Annotations::default();
            annotations.last_modified = Some(modified.to_rfc3339());
            out = out.with_annotations(annotations);
        }
        out
    }

    pub(crate) async fn native_list(
        &self,
        request: Option<PaginatedRequestParams>,
        context: &RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let offset = match request.and_then(|r| r.cursor) {
            None => 0,
            Some(cursor) => cursor
                .parse::<u64>()
                .map_err(|_| ErrorData::invalid_params("E001: unknown cursor", None))?,
        };
        let query = ListQuery {
            limit: PageLimit::new(NATIVE_PAGE).map_err(|e| protocol_error(&e, None))?,
            offset,
            ..ListQuery::default()
        };
        let me = self.scoped(context).await;
        let result = me
            .gateway
            .list_resources(query)
            .await
            .map_err(|e| protocol_error(&e, None))?;
        let next = offset + result.resources.len() as u64;
        let mut page = ListResourcesResult::with_all_items(
            result
                .resources
                .into_iter()
                .map(|r| me.native_resource(r))
                .collect(),
        )
        .with_ttl_ms(result.cache.ttl_ms())
        .with_cache_scope(wire_scope(result.cache.scope));
        page.next_cursor = (next < result.total_count).then(|| next.to_string());
        Ok(page)
    }

    pub(crate) async fn native_templates(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let me = self.scoped(context).await;
        let templates = me
            .gateway
            .list_templates()
            .await
            .map_err(|e| protocol_error(&e, None))?;
        let templates = templates
            .into_iter()
            .map(|t| {
                let native = me.options.native.as_ref() == Some(&t.server);
                let form = if native {
                    t.upstream_template
                } else {
                    t.uri_template
                };
                let mut out = ResourceTemplate::new(form, t.name);
                if let Some(d) = t.description {
                    out = out.with_description(d);
                }
                if let Some(m) = t.mime_type {
                    out = out.with_mime_type(m);
                }
                out
            })
            .collect();
        // Templates are asked of every server each time and never cached: nothing to keep.
        Ok(ListResourceTemplatesResult::with_all_items(templates)
            .with_ttl_ms(CacheHint::NONE.ttl_ms())
            .with_cache_scope(wire_scope(CacheHint::NONE.scope)))
    }

    pub(crate) async fn native_read(
        &self,
        request: ReadResourceRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let me = self.scoped(context).await;
        me.native_read_as(request.uri).await
    }

    /// `resources/read` of `asked` by this server, already scoped to its caller.
    pub(crate) async fn native_read_as(
        &self,
        asked: String,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = self
            .gateway_uri(&asked)
            .map_err(|e| protocol_error(&e, Some(&asked)))?;
        let read = ReadRequest {
            principal: self.options.principal.clone(),
            ..ReadRequest::whole(uri)
        };
        let result = self
            .gateway
            .read_resource(read)
            .await
            .map_err(|e| protocol_error(&e, Some(&asked)))?;
        // Where it came from, and that it is data from a third party, not instructions.
        let mut meta = rmcp::model::MetaObject::default();
        meta.insert(
            ORIGIN_KEY.into(),
            serde_json::to_value(&result.origin).unwrap_or(Value::Null),
        );
        let contents = match (result.content, result.bytes_content) {
            (Some(text), _) => ResourceContents::TextResourceContents {
                uri: asked,
                mime_type: result.mime_type,
                text,
                meta: Some(meta),
            },
            (None, blob) => ResourceContents::BlobResourceContents {
                uri: asked,
                mime_type: result.mime_type,
                blob: blob.unwrap_or_default(),
                meta: Some(meta),
            },
        };
        Ok(ReadResourceResult::new(vec![contents])
            .with_ttl_ms(result.cache.ttl_ms())
            .with_cache_scope(wire_scope(result.cache.scope))
            .into())
    }

    /// `resources/subscribe` (2025-11-25): the upstream is asked to announce changes, and this
    /// session's forwarder passes them on.
    pub(crate) async fn native_subscribe(
        &self,
        shown: String,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let uri = self
            .gateway_uri(&shown)
            .map_err(|e| protocol_error(&e, Some(&shown)))?;
        let me = self.scoped(context).await;
        me.gateway
            .watch(&uri)
            .await
            .map_err(|e| protocol_error(&e, Some(&shown)))?;
        if let (Some(sessions), Some(id)) = (&self.sessions, session_of(&context.extensions)) {
            sessions.subscribed(id, &shown, true).await;
        }
        lock(&self.subscribed).insert(shown);
        Ok(())
    }

    pub(crate) async fn native_unsubscribe(
        &self,
        shown: &str,
        context: &RequestContext<RoleServer>,
    ) {
        lock(&self.subscribed).remove(shown);
        if let (Some(sessions), Some(id)) = (&self.sessions, session_of(&context.extensions)) {
            sessions.subscribed(id, shown, false).await;
        }
    }

    /// For a session taken over from another replica (rmcp marks the replayed handshake): its
    /// subscriptions, as recorded, are made again here, each still subject to the caller's
    /// policy.
    pub(crate) async fn resume_subscriptions(&self, extensions: &Extensions) {
        let (Some(sessions), Some(marker)) =
            (&self.sessions, extensions.get::<SessionRestoreMarker>())
        else {
            return;
        };
        let record = match sessions.find(&marker.id).await {
            Ok(Some(record)) => record,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!("a taken-over session's subscriptions cannot be read: {e}");
                return;
            }
        };
        let me = self.scoped_by(extensions, RequestMeta::default()).await;
        let mut resumed = 0_usize;
        for shown in record.subscriptions {
            let watched = match self.gateway_uri(&shown) {
                Ok(uri) => me.gateway.watch(&uri).await,
                Err(e) => Err(e),
            };
            match watched {
                Ok(()) => {
                    lock(&self.subscribed).insert(shown);
                    resumed += 1;
                }
                Err(e) => {
                    tracing::info!(code = %e.code(), "a subscription was not resumed: {}", e.message());
                }
            }
        }
        tracing::info!(
            subscriptions = resumed,
            "a session taken over resumed its subscriptions"
        );
    }

    /// For a 2025-11-25 session: forwards `list_changed` always, and `updated` for the URIs it
    /// subscribed to, until its client is gone.
    pub(crate) fn forward_changes(&self, peer: Peer<RoleServer>) {
        let mut feed = self.gateway.changes();
        let me = self.clone();
        tokio::spawn(async move {
            let mut check = tokio::time::interval(CLOSED_CHECK);
            loop {
                let change = tokio::select! {
                    change = feed.next() => change,
                    _ = check.tick() => {
                        if peer.is_transport_closed() { return; }
                        continue;
                    }
                };
                let sent = match change {
                    None => return,
                    Some(ResourceChange::Updated(uri)) => {
                        let shown = me.shown(&uri);
                        if !lock(&me.subscribed).contains(&shown) {
                            continue;
                        }
                        peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(shown))
                            .await
                    }
                    Some(ResourceChange::ListChanged(_)) => {
                        peer.notify_resource_list_changed().await
                    }
                };
                if sent.is_err() {
                    return;
                }
            }
        });
    }

    /// `subscriptions/listen` (2026-07-28): what Quarry takes of a filter — the resource list,
    /// and the URIs that name a resource it could serve.
    pub(crate) fn accepted_filter(&self, requested: &SubscriptionFilter) -> SubscriptionFilter {
        let mut accepted = SubscriptionFilter::new();
        accepted.resources_list_changed = requested.resources_list_changed;
        accepted.resource_subscriptions = requested.resource_subscriptions.as_ref().map(|uris| {
            uris.iter()
                .filter(|u| self.gateway_uri(u).is_ok())
                .cloned()
                .collect()
        });
        accepted
    }

    /// Runs one `subscriptions/listen` stream: the upstreams of the URIs it names are asked to
    /// announce changes (those the caller may not read are left out), then every change it
    /// accepted is passed on until the client cancels.
    pub(crate) async fn listen_changes(
        &self,
        context: SubscriptionContext,
    ) -> Result<(), ErrorData> {
        // Not `scoped`: the stream's place in the transport's bounds is the stream's own, held
        // until it ends; this loop may outlive it until its next change.
        let request = context.request_context();
        let me = self
            .scoped_by(&request.extensions, super::request_meta(request))
            .await;
        let mut feed = me.gateway.changes();
        let mut watching: HashSet<String> = HashSet::new();
        for shown in context.accepted().resource_subscriptions.iter().flatten() {
            let Ok(uri) = me.gateway_uri(shown) else {
                continue;
            };
            match me.gateway.watch(&uri).await {
                Ok(()) => {
                    watching.insert(shown.clone());
                }
                Err(e) => {
                    tracing::info!(code = %e.code(), "a subscription was left out: {}", e.message())
                }
            }
        }
        let lists = context.accepted().resources_list_changed == Some(true);
        loop {
            let change = tokio::select! {
                () = context.cancelled() => return Ok(()),
                change = feed.next() => change,
            };
            let notification = match change {
                None => return Ok(()),
                Some(ResourceChange::Updated(uri)) => {
                    let shown = me.shown(&uri);
                    if !watching.contains(&shown) {
                        continue;
                    }
                    ServerNotification::ResourceUpdatedNotification(
                        ResourceUpdatedNotification::new(ResourceUpdatedNotificationParam::new(
                            shown,
                        )),
                    )
                }
                Some(ResourceChange::ListChanged(_)) if lists => {
                    ServerNotification::ResourceListChangedNotification(
                        ResourceListChangedNotification::from(NotificationNoParam::default()),
                    )
                }
                Some(ResourceChange::ListChanged(_)) => continue,
            };
            if context.sink().send(notification).await.is_err() {
                return Ok(());
            }
        }
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
