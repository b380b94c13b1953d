//! A 2026-07-28 `resources/read` answered here, without rmcp's per-request machinery.
//!
//! rmcp serves each stateless request by building a service for it, spawning its loop and the
//! handler's task, and passing the request and its answer through channels between them: about
//! as much work as the read itself when it comes from the cache. The most frequent request a
//! gateway gets, a read, is answered here instead, by the same handler code
//! (`GatewayServer::read_for`: the same policy, audit record, cache and error mapping), written
//! as rmcp writes a 2026-07-28 answer: one JSON body, the result's cache hints filled in, a
//! missing resource as `INVALID_PARAMS`, the HTTP status rmcp gives each error.
//!
//! Only a request rmcp would take as it stands is answered here: one `resources/read` naming
//! 2026-07-28 in its header and its `_meta` (with every key that era requires), no session, no
//! `Origin`, plain `Accept` and `Content-Type`, and SEP-2243's `Mcp-Method` and `Mcp-Name` given
//! once each and equal to the body's. Anything else goes on to rmcp unchanged, which answers or
//! refuses it as always; so no refusal is written here.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use axum::{
    body::Body,
    extract::{Request, State},
    http::{HeaderMap, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, ErrorCode, ErrorData, GetMeta, ProtocolVersion, RequestId,
    ServerJsonRpcMessage, ServerResult,
};

use super::{Claim, Hold, SESSION_ID};
use crate::handler::{Caller, GatewayServer, host_request_id};

/// The path rmcp serves MCP on (`serve_http` nests it there).
const MCP_PATH: &str = "/mcp";
const JSON: &str = "application/json";
const EVENTS: &str = "text/event-stream";

/// A read this module answers.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Read {
    pub(super) id: RequestId,
    pub(super) uri: String,
    pub(super) host_request_id: Option<String>,
}

/// The one value of `name`, if it is given exactly once and is text.
fn single<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    value.to_str().ok()
}

/// Whether `Accept` names both JSON and an event stream, plainly (no parameters, no quotes):
/// anything subtler is for rmcp's own parser to judge.
fn accepts_both(headers: &HeaderMap) -> bool {
    let (mut json, mut events) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        if value.contains(['"', ';']) {
            return false;
        }
        for essence in value.split(',').map(str::trim) {
            json |= essence.eq_ignore_ascii_case(JSON);
            events |= essence.eq_ignore_ascii_case(EVENTS);
        }
    }
    json && events
}

/// Whether `headers` are those of a read this module may answer: looked at before the body, so
/// that every other request goes on to rmcp untouched.
fn headers_fit(headers: &HeaderMap) -> bool {
    let plain_json = single(headers, header::CONTENT_TYPE.as_str()).is_some_and(|value| {
        let essence = value.split_once(';').map_or(value, |(e, _)| e);
        essence.trim().eq_ignore_ascii_case(JSON)
    });
    !headers.contains_key(SESSION_ID)
        && !headers.contains_key(header::ORIGIN)
        && single(headers, "mcp-method") == Some("resources/read")
        && single(headers, "mcp-protocol-version") == Some(ProtocolVersion::V_2026_07_28.as_str())
        && accepts_both(headers)
        && plain_json
}

/// The read `headers` and `body` ask for, when they are a request this module answers.
pub(super) fn read_asked(headers: &HeaderMap, body: &[u8]) -> Option<Read> {
    let v2026 = ProtocolVersion::V_2026_07_28;
    if !headers_fit(headers) {
        return None;
    }
    let ClientJsonRpcMessage::Request(request) = serde_json::from_slice(body).ok()? else {
        return None;
    };
    let ClientRequest::ReadResourceRequest(read) = &request.request else {
        return None;
    };
    let meta = request.request.get_meta();
    if meta.protocol_version().as_ref() != Some(&v2026)
        || !meta.missing_required_keys(&v2026).is_empty()
    {
        return None;
    }
    // A plain name only: an encoded one (`=?base64?…?=`) is rmcp's to decode.
    let name = single(headers, "mcp-name")?;
    if name != read.params.uri || name.starts_with("=?") {
        return None;
    }
    Some(Read {
        uri: read.params.uri.clone(),
        host_request_id: host_request_id(meta),
        id: request.id,
    })
}

/// The HTTP status rmcp gives a 2026-07-28 answer (`jsonrpc_http_status` in its transport).
fn status_of(error: Option<&ErrorData>) -> StatusCode {
    match error.map(|e| e.code) {
        Some(
            ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
            | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
            | ErrorCode::HEADER_MISMATCH,
        ) => StatusCode::BAD_REQUEST,
        Some(ErrorCode::METHOD_NOT_FOUND) => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

/// Answers `read` for `caller` as rmcp would answer it on the 2026-07-28 path, within what the
/// transport's time bound leaves (`answer_within`).
async fn answer(
    server: &GatewayServer,
    caller: Caller,
    read: Read,
    answer_within: Option<std::time::Duration>,
) -> Response {
    let Read {
        id,
        uri,
        host_request_id,
    } = read;
    let answered = server
        .read_for(caller, &id, host_request_id, answer_within, uri)
        .await;
    let (message, status) = match answered {
        Ok(response) => {
            let mut result = ServerResult::from(response);
            result.fill_missing_cache_hints();
            (ServerJsonRpcMessage::response(result, id), StatusCode::OK)
        }
        Err(mut error) => {
            // 2026-07-28 has no code of its own for a missing resource.
            if error.code == ErrorCode::RESOURCE_NOT_FOUND {
                error.code = ErrorCode::INVALID_PARAMS;
            }
            let status = status_of(Some(&error));
            (ServerJsonRpcMessage::error(error, Some(id)), status)
        }
    };
    match serde_json::to_vec(&message) {
        Ok(body) => (status, [(header::CONTENT_TYPE, JSON)], body).into_response(),
        Err(e) => {
            tracing::error!("an answer could not be written: {e}");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// A read that runs to its end, audit record included, even when its answer is no longer
/// wanted, as on rmcp's path (whose handler a hang-up or the time bound does not stop): polled
/// in place while it is awaited, and moved to a task of its own if it is dropped before it is
/// done. (Spawning every read instead cost a cached read about 18 % more CPU, the median of
/// eight interleaved rounds: the task and its answer crossed between the runtime's threads.)
struct RunsToItsEnd {
    read: Option<Pin<Box<dyn Future<Output = Response> + Send>>>,
}

impl RunsToItsEnd {
    fn new(read: impl Future<Output = Response> + Send + 'static) -> Self {
        Self {
            read: Some(Box::pin(read)),
        }
    }
}

impl std::fmt::Debug for RunsToItsEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunsToItsEnd")
            .field("done", &self.read.is_none())
            .finish()
    }
}

impl Future for RunsToItsEnd {
    type Output = Response;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Response> {
        let read = self
            .read
            .as_mut()
            .expect("a read is not awaited again once answered");
        let response = std::task::ready!(read.as_mut().poll(cx));
        self.read = None;
        Poll::Ready(response)
    }
}

impl Drop for RunsToItsEnd {
    fn drop(&mut self) {
        if let Some(read) = self.read.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(read);
        }
    }
}

/// The layer: a read it takes is answered here; everything else goes on to rmcp.
pub(super) async fn reads(
    State(server): State<Arc<GatewayServer>>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != axum::http::Method::POST || request.uri().path() != MCP_PATH {
        return next.run(request).await;
    }
    let Some(caller) = request.extensions().get::<Caller>().cloned() else {
        return next.run(request).await;
    };
    // rmcp refuses a version its handler does not list.
    let versions = rmcp::ServerHandler::supported_protocol_versions(server.as_ref());
    if !versions.contains(&ProtocolVersion::V_2026_07_28) {
        return next.run(request).await;
    }
    if !headers_fit(request.headers()) {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    // The guard has read the body whole already (within `http.max_body_kb`).
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return super::refuse(
            StatusCode::BAD_REQUEST,
            "the request body could not be read",
        );
    };
    match read_asked(&parts.headers, &bytes) {
        Some(read) => {
            tracing::trace!(id = %read.id, "a 2026-07-28 read answered outside rmcp");
            // Kept to the read's end, as rmcp's handler keeps it (`GatewayServer::scoped`).
            let held = parts.extensions.get::<Claim>().and_then(Claim::keep);
            let within = held.as_deref().and_then(Hold::answer_within);
            RunsToItsEnd::new(async move {
                let answer = answer(&server, caller, read, within).await;
                drop(held);
                answer
            })
            .await
        }
        None => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
    }
}

#[cfg(test)]
mod tests;
