//! A read answered here, without rmcp's per-request machinery: a `resources/read`, or a
//! `tools/call` of `read_mcp_resource`.
//!
//! rmcp serves each stateless request by building a service for it, spawning its loop and the
//! handler's task, and passing the request and its answer through channels between them; a
//! request on a 2025-11-25 session goes through the session's worker and the service's loop by
//! channels too, and its answer comes back as an event stream of its own. Either is about as
//! much work as the read itself when it comes from the cache. The most frequent request a
//! gateway gets, a read (natively or through the tool), is answered here instead, by the same
//! handler code (`GatewayServer::read_for`: the same argument parsing, policy, audit record,
//! cache and error mapping), written as rmcp writes the era's answer: one JSON body (which a
//! client that accepts both must take for a request, in either era); for 2026-07-28 the
//! result's cache hints filled in, a missing resource as `INVALID_PARAMS` and the HTTP status
//! rmcp gives each error; for a session the result without `resultType` (and a tool's
//! structured content only when it is an object), a missing resource as `RESOURCE_NOT_FOUND`,
//! status 200.
//!
//! Only a request rmcp would take as it stands is answered here, with plain `Accept` and
//! `Content-Type` and no `Origin`:
//! - stateless: one `resources/read` or `read_mcp_resource` call naming 2026-07-28 in its header
//!   and its `_meta` (with every key that era requires), and SEP-2243's `Mcp-Method` and
//!   `Mcp-Name` given once each and equal to the body's (the catalogue's tools have no
//!   `Mcp-Param-*` headers to check);
//! - on a session: one such request on a session the guard marked [`HeldHere`] (its caller's,
//!   held by this process, seen by rmcp lately), naming 2025-11-25 in its header, with no
//!   version in its `_meta` and no SEP-2243 headers;
//! - a tool call without the multi-round-trip fields (`inputResponses`, `requestState`), which
//!   are rmcp's to judge.
//!
//! Anything else goes on to rmcp unchanged, which answers or refuses it as always; so no refusal
//! is written here. A session's read cut at the time bound gets what rmcp's event stream,
//! begun by then, would have ended with: the JSON-RPC error for it, status 200 (the guard marks
//! every session request so: [`Hold::cut_as_a_stream_would_be`]).
//!
//! A 2025-11-25 session may be opened here too (`open.rs`).

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
    ServerJsonRpcMessage,
};

use super::{Claim, HeldHere, Hold, Initialize, NotInRmcp, SESSION_ID, sessions::Sessions};
use crate::{
    catalogue::READ_TOOL,
    handler::{Caller, DirectRead, GatewayServer, host_request_id},
};

/// The path rmcp serves MCP on (`serve_http` nests it there).
const MCP_PATH: &str = "/mcp";
const JSON: &str = "application/json";
const EVENTS: &str = "text/event-stream";

/// The era of a read this module answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Era {
    /// 2026-07-28, no session.
    Stateless,
    /// 2025-11-25, on a session this process holds.
    Session,
}

/// A read this module answers.
#[derive(Debug, PartialEq)]
pub(super) struct Read {
    pub(super) id: RequestId,
    pub(super) read: DirectRead,
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

/// Whether `headers` are plain enough for this module: JSON posted, both kinds of answer
/// accepted (plainly), no `Origin`.
fn plain(headers: &HeaderMap) -> bool {
    let plain_json = single(headers, header::CONTENT_TYPE.as_str()).is_some_and(|value| {
        let essence = value.split_once(';').map_or(value, |(e, _)| e);
        essence.trim().eq_ignore_ascii_case(JSON)
    });
    !headers.contains_key(header::ORIGIN) && accepts_both(headers) && plain_json
}

/// The era of the read `headers` may be, if this module may answer it: looked at before the
/// body, so that every other request goes on to rmcp untouched. `held_here`: the guard marked
/// the request's session [`HeldHere`].
fn era_of(headers: &HeaderMap, held_here: bool) -> Option<Era> {
    if !plain(headers) {
        return None;
    }
    let version = single(headers, "mcp-protocol-version");
    if !headers.contains_key(SESSION_ID) {
        // Another tool's call is not read twice: its name is in the header.
        let read = match single(headers, "mcp-method") {
            Some("resources/read") => true,
            Some("tools/call") => single(headers, "mcp-name") == Some(READ_TOOL),
            _ => false,
        };
        let fits = read && version == Some(ProtocolVersion::V_2026_07_28.as_str());
        return fits.then_some(Era::Stateless);
    }
    let fits = held_here
        && single(headers, SESSION_ID).is_some()
        && version == Some(ProtocolVersion::V_2025_11_25.as_str())
        && !headers.contains_key("mcp-method")
        && !headers.contains_key("mcp-name");
    fits.then_some(Era::Session)
}

/// The read `headers` and `body` ask for, when they are a request of `era` this module answers.
pub(super) fn read_asked(era: Era, headers: &HeaderMap, body: &[u8]) -> Option<Read> {
    let v2026 = ProtocolVersion::V_2026_07_28;
    let ClientJsonRpcMessage::Request(request) = serde_json::from_slice(body).ok()? else {
        return None;
    };
    let (read, name) = match &request.request {
        ClientRequest::ReadResourceRequest(read) => (
            DirectRead::Resource(read.params.uri.clone()),
            read.params.uri.as_str(),
        ),
        ClientRequest::CallToolRequest(call)
            if call.params.name == READ_TOOL
                && call.params.input_responses.is_none()
                && call.params.request_state.is_none() =>
        {
            (DirectRead::Tool(call.params.arguments.clone()), READ_TOOL)
        }
        _ => return None,
    };
    let meta = request.request.get_meta();
    match era {
        Era::Stateless => {
            if meta.protocol_version().as_ref() != Some(&v2026)
                || !meta.missing_required_keys(&v2026).is_empty()
            {
                return None;
            }
            // A plain name only: an encoded one (`=?base64?…?=`) is rmcp's to decode.
            let named = single(headers, "mcp-name")?;
            let method = single(headers, "mcp-method")?;
            if named != name || named.starts_with("=?") || method != request.request.method() {
                return None;
            }
        }
        // A version in `_meta` is rmcp's to check against the header's.
        Era::Session if meta.protocol_version().is_some() => return None,
        Era::Session => {}
    }
    Some(Read {
        read,
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

/// Answers `read` for `caller` as rmcp would answer it in `era`, within what the transport's
/// time bound leaves (`answer_within`).
async fn answer(
    server: &GatewayServer,
    caller: Caller,
    (era, read): (Era, Read),
    answer_within: Option<std::time::Duration>,
) -> Response {
    let Read {
        id,
        read,
        host_request_id,
    } = read;
    let answered = server
        .read_for(caller, &id, host_request_id, answer_within, read)
        .await;
    let (message, status) = match answered {
        Ok(mut result) => {
            match era {
                Era::Stateless => result.fill_missing_cache_hints(),
                Era::Session => {
                    result.strip_result_type_for_legacy_peer();
                    result.strip_non_object_output_for_legacy_peer();
                }
            }
            (ServerJsonRpcMessage::response(result, id), StatusCode::OK)
        }
        // An older era keeps its own code for a missing resource; a session's answers are 200.
        Err(error) if era == Era::Session => {
            (ServerJsonRpcMessage::error(error, Some(id)), StatusCode::OK)
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

/// What the layer answers with: the handler, and the transport's sessions.
#[derive(Debug)]
pub(super) struct Direct {
    pub(super) server: Arc<GatewayServer>,
    pub(super) sessions: Arc<Sessions>,
}

/// The whole of `request`'s body (the guard has read it whole already, within
/// `http.max_body_kb`), and the rest of it.
async fn body_of(
    request: Request,
) -> Result<(axum::http::request::Parts, axum::body::Bytes), Response> {
    let (parts, body) = request.into_parts();
    match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => Ok((parts, bytes)),
        Err(_) => Err(super::refuse(
            StatusCode::BAD_REQUEST,
            "the request body could not be read",
        )),
    }
}

/// The layer: a read it takes is answered here, and so is the opening of a session (and its
/// `notifications/initialized`) it may hold; everything else goes on to rmcp.
pub(super) async fn reads(
    State(direct): State<Arc<Direct>>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != axum::http::Method::POST || request.uri().path() != MCP_PATH {
        return next.run(request).await;
    }
    let Some(caller) = request.extensions().get::<Caller>().cloned() else {
        return next.run(request).await;
    };
    let held_here = request.extensions().get::<HeldHere>().is_some();
    if !request.headers().contains_key(SESSION_ID)
        && request.extensions().get::<Initialize>().is_some()
    {
        return open_session(&direct, request, next).await;
    }
    if !held_here && request.extensions().get::<NotInRmcp>().is_some() {
        let (parts, bytes) = match body_of(request).await {
            Ok(read) => read,
            Err(refused) => return refused,
        };
        if initialized_told(&parts.headers, &bytes) {
            return StatusCode::ACCEPTED.into_response();
        }
        return next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await;
    }
    let Some(era) = era_of(request.headers(), held_here) else {
        return next.run(request).await;
    };
    let server = &direct.server;
    // rmcp refuses a version its handler does not list.
    let versions = rmcp::ServerHandler::supported_protocol_versions(server.as_ref());
    let version = match era {
        Era::Stateless => ProtocolVersion::V_2026_07_28,
        Era::Session => ProtocolVersion::V_2025_11_25,
    };
    if !versions.contains(&version) {
        return next.run(request).await;
    }
    let (parts, bytes) = match body_of(request).await {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    match read_asked(era, &parts.headers, &bytes) {
        Some(read) => {
            let tool = matches!(read.read, DirectRead::Tool(_));
            match era {
                Era::Stateless => {
                    tracing::trace!(id = %read.id, tool, "a 2026-07-28 read answered outside rmcp");
                }
                Era::Session => {
                    tracing::trace!(id = %read.id, tool, "a session's read answered outside rmcp");
                }
            }
            // Kept to the read's end, as rmcp's handler keeps it (`GatewayServer::scoped`). A
            // session's read cut at the bound gets a JSON-RPC error, as every request on a
            // session does (the guard marked its hold).
            let held = parts.extensions.get::<Claim>().and_then(Claim::keep);
            let within = held.as_deref().and_then(Hold::answer_within);
            let server = server.clone();
            RunsToItsEnd::new(async move {
                let answer = answer(&server, caller, (era, read), within).await;
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

mod open;

#[cfg(test)]
use open::initialize_asked;
use open::{initialized_told, open_session};

#[cfg(test)]
mod tests;
