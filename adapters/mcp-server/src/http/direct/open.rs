//! A 2025-11-25 session opened by the direct path, so that one that only reads never costs rmcp's per-session
//! state: a 2025-11-25 `initialize` (no session header, plain headers as for a read, no SEP-2243
//! headers, a version header if any equal to the body's, no version in `_meta`) that negotiates
//! 2025-11-25 is answered with the handler's own negotiation (`negotiate_initialize`, which rmcp
//! calls too) as one JSON body, and the session is opened in `Sessions::open_here`. Its
//! `notifications/initialized` gets rmcp's 202 here; its reads are answered here; its first other
//! request goes to rmcp, which takes the session over from its record, replaying the handshake,
//! as it takes over another replica's.

use axum::{
    body::Body,
    extract::Request,
    http::{HeaderMap, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, GetMeta, InitializeRequestParams,
    ProtocolVersion, RequestId, ServerJsonRpcMessage, ServerResult,
};

use super::{Direct, JSON, SESSION_ID, body_of, plain};

/// Whether `headers` carry no SEP-2243 header and at most one `MCP-Protocol-Version`, `version`
/// if any: what rmcp would not judge further on a 2025-11-25 session's message.
fn legacy_headers(headers: &HeaderMap, version: &str) -> bool {
    let mut versions = headers.get_all("mcp-protocol-version").iter();
    let fits = match (versions.next(), versions.next()) {
        (None, _) => true,
        (Some(v), None) => v.as_bytes() == version.as_bytes(),
        (Some(_), Some(_)) => false,
    };
    fits && !headers.contains_key("mcp-method") && !headers.contains_key("mcp-name")
}

/// The `initialize` `headers` and `body` ask for, if this module answers it (see the module's
/// notes): its id and parameters.
pub(super) fn initialize_asked(
    headers: &HeaderMap,
    body: &[u8],
) -> Option<(RequestId, InitializeRequestParams)> {
    if !plain(headers) || headers.contains_key(SESSION_ID) {
        return None;
    }
    let ClientJsonRpcMessage::Request(request) = serde_json::from_slice(body).ok()? else {
        return None;
    };
    if request.request.get_meta().protocol_version().is_some() {
        return None;
    }
    let ClientRequest::InitializeRequest(initialize) = request.request else {
        return None;
    };
    legacy_headers(headers, initialize.params.protocol_version.as_str())
        .then_some((request.id, initialize.params))
}

/// Whether `headers` and `body` are a plain `notifications/initialized` on a 2025-11-25 session.
pub(super) fn initialized_told(headers: &HeaderMap, body: &[u8]) -> bool {
    plain(headers)
        && legacy_headers(headers, ProtocolVersion::V_2025_11_25.as_str())
        && matches!(
            serde_json::from_slice(body),
            Ok(ClientJsonRpcMessage::Notification(n))
                if matches!(n.notification, ClientNotification::InitializedNotification(_))
        )
}

/// A session opened here: `initialize` answered as rmcp answers it, when it negotiates
/// 2025-11-25; anything else goes on to rmcp.
pub(super) async fn open_session(direct: &Direct, request: Request, next: Next) -> Response {
    let (parts, bytes) = match body_of(request).await {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    let asked = initialize_asked(&parts.headers, &bytes).and_then(|(id, params)| {
        rmcp::ServerHandler::negotiate_initialize(direct.server.as_ref(), &params)
            .ok()
            .filter(|info| info.protocol_version == ProtocolVersion::V_2025_11_25)
            .map(|info| (id, params, info))
    });
    let Some((id, params, info)) = asked else {
        return next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await;
    };
    let message = ServerJsonRpcMessage::response(ServerResult::InitializeResult(info), id);
    let body = match serde_json::to_vec(&message) {
        Ok(body) => body,
        Err(e) => {
            tracing::error!("an answer could not be written: {e}");
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        }
    };
    let session = direct.sessions.open_here(params);
    tracing::trace!("a session was opened outside rmcp");
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, JSON),
            (
                header::HeaderName::from_static(SESSION_ID),
                session.as_ref(),
            ),
        ],
        body,
    )
        .into_response()
}
