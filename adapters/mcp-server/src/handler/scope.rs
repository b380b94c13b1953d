//! Each request's own server: who calls (the transport's [`Caller`]), what the transport knows
//! of the request for its audit record (its ids, what its time bound leaves), and, over HTTP,
//! its place in the transport's bounds, kept while the request is handled.

use quarry_domain::Principal;
use quarry_ports::RequestMeta;
use rmcp::{
    ErrorData, RoleServer,
    model::{CallToolResponse, RequestMetaObject, ServerResult},
    service::RequestContext,
};
use serde_json::Value;

use super::GatewayServer;

/// Who an HTTP request is from, as the transport's authentication found: put in the request's
/// extensions, read back from rmcp's request context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Caller {
    pub(crate) principal: Principal,
    pub(crate) address: Option<std::net::SocketAddr>,
    /// What its token was granted (None: every tool).
    pub(crate) scopes: crate::http::Granted,
}

/// A read `http::direct` answers without rmcp.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum DirectRead {
    /// `resources/read` of this URI.
    Resource(String),
    /// `tools/call` of `read_mcp_resource` with these arguments.
    Tool(Option<rmcp::model::JsonObject>),
}

/// The `_meta` key under which a host may pass the id of its own operation.
pub(crate) const HOST_REQUEST_ID_KEY: &str = "io.quarry/host_request_id";

/// The id the agent's host gave its own operation, from a request's `_meta` (at most 128
/// characters; anything else is ignored).
pub(crate) fn host_request_id(meta: &RequestMetaObject) -> Option<String> {
    meta.0
        .get(HOST_REQUEST_ID_KEY)
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty() && id.len() <= 128)
        .map(str::to_owned)
}

/// What the transport knows of a request: its JSON-RPC id and, when the host passed one as a
/// short string, the host's own id for it.
pub(super) fn request_meta(context: &RequestContext<RoleServer>) -> RequestMeta {
    let host = host_request_id(&context.meta);
    RequestMeta {
        mcp_request_id: Some(context.id.to_string()),
        host_request_id: host,
        ..RequestMeta::default()
    }
}

/// The HTTP request's parts, which rmcp puts in a request's (or a notification's) extensions.
fn parts(extensions: &rmcp::model::Extensions) -> Option<&axum::http::request::Parts> {
    extensions.get::<axum::http::request::Parts>()
}

impl GatewayServer {
    /// This server for one request: the caller's gateway, told what the transport knows of it,
    /// holding the request's place in the transport's bounds until it is dropped.
    pub(super) async fn scoped(&self, context: &RequestContext<RoleServer>) -> Self {
        let held = parts(&context.extensions)
            .and_then(|parts| parts.extensions.get::<crate::http::Claim>())
            .and_then(crate::http::Claim::keep);
        let meta = RequestMeta {
            answer_within: held.as_deref().and_then(crate::http::Hold::answer_within),
            ..request_meta(context)
        };
        Self {
            _held: held,
            ..self.scoped_by(&context.extensions, meta).await
        }
    }

    /// This server for what `extensions` (a request's or a notification's) say of the caller.
    pub(super) async fn scoped_by(
        &self,
        extensions: &rmcp::model::Extensions,
        meta: RequestMeta,
    ) -> Self {
        let caller = parts(extensions)
            .and_then(|parts| parts.extensions.get::<Caller>())
            .cloned();
        self.scoped_as(caller, meta).await
    }

    /// `read` for `caller`, answered without rmcp's request context: a request that
    /// `http::direct` takes (see there). `id` is the request's JSON-RPC id and
    /// `host_request_id` what its `_meta` gave, as `request_meta` would take them;
    /// `answer_within` what the transport's time bound leaves, as `scoped` takes it. The
    /// result is what the handler gives rmcp for the same request, before rmcp shapes it for
    /// the request's era.
    pub(crate) async fn read_for(
        &self,
        caller: Caller,
        id: &rmcp::model::RequestId,
        host_request_id: Option<String>,
        answer_within: Option<std::time::Duration>,
        read: DirectRead,
    ) -> Result<ServerResult, ErrorData> {
        let meta = RequestMeta {
            mcp_request_id: Some(id.to_string()),
            host_request_id,
            client_address: None,
            answer_within,
        };
        let me = self.scoped_as(Some(caller), meta).await;
        match read {
            DirectRead::Resource(uri) => me.native_read_as(uri).await.map(ServerResult::from),
            DirectRead::Tool(arguments) => Ok(ServerResult::from(CallToolResponse::from(
                me.read_tool(arguments).await,
            ))),
        }
    }

    /// This server for `caller` (None: the transport names no one, as over stdio).
    async fn scoped_as(&self, caller: Option<Caller>, mut meta: RequestMeta) -> Self {
        let mut options = self.options.clone();
        let gateway = match (&self.agents, caller) {
            (Some(agents), Some(caller)) => {
                meta.client_address = caller.address.map(|a| a.to_string());
                options.principal = caller.principal.clone();
                agents.for_agent(&caller.principal).await
            }
            _ => self.gateway.clone(),
        };
        Self {
            gateway: gateway.for_request(meta),
            agents: None,
            options,
            subscribed: self.subscribed.clone(),
            sessions: self.sessions.clone(),
            _held: None,
        }
    }
}
