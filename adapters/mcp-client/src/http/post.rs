//! One POST of the streamable HTTP transport, made here rather than by rmcp's reqwest client so
//! that a response's events are read by [`super::events`] (bounded without doubling buffers);
//! everything else is answered as rmcp's own client answers it.

use std::{collections::HashMap, sync::Arc};

use futures::StreamExt;
use reqwest::{
    StatusCode,
    header::{ACCEPT, CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER, WWW_AUTHENTICATE},
};
use rmcp::{
    model::{ClientJsonRpcMessage, ClientRequest, ServerJsonRpcMessage},
    transport::streamable_http_client::{
        AuthRequiredError, HttpStatusError, InsufficientScopeError, StreamableHttpError,
        StreamableHttpPostResponse, StreamableHttpResponseLimits,
    },
};

use super::{drain::DrainOnDrop, events::events};

const SESSION_ID: &str = "mcp-session-id";
const EVENT_STREAM: &str = "text/event-stream";
const JSON: &str = "application/json";
/// Headers the transport sets itself; a custom header may not take them.
const RESERVED: &[&str] = &["accept", SESSION_ID, "last-event-id"];

type Error = StreamableHttpError<reqwest::Error>;

fn is(content_type: Option<&str>, mime: &str) -> bool {
    content_type.is_some_and(|ct| {
        ct.split(';')
            .next()
            .is_some_and(|essence| essence.trim().eq_ignore_ascii_case(mime))
    })
}

/// The `scope` a `WWW-Authenticate` challenge names, if any.
fn scope_of(challenge: &str) -> Option<String> {
    let at = challenge.to_ascii_lowercase().find("scope=")? + "scope=".len();
    let rest = &challenge[at..];
    match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next().map(str::to_owned),
        None => rest
            .split([',', ';', ' '])
            .next()
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
    }
}

/// The body, at most `max` bytes of it.
async fn bounded_body(response: reqwest::Response, max: usize) -> Result<Vec<u8>, Error> {
    if response
        .content_length()
        .is_some_and(|n| usize::try_from(n).map_or(true, |n| n > max))
    {
        return Err(StreamableHttpError::ResponseBodyTooLarge { max_size: max });
    }
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(StreamableHttpError::Client)?;
        if body.len() + chunk.len() > max {
            return Err(StreamableHttpError::ResponseBodyTooLarge { max_size: max });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The W3C Trace Context header.
const TRACEPARENT: &str = "traceparent";

/// The `traceparent` a read or a listing carries in its `_meta` (the requests the session
/// traces), if it is a well-formed one.
fn traceparent(message: &ClientJsonRpcMessage) -> Option<HeaderValue> {
    use rmcp::model::ClientRequest;
    let ClientJsonRpcMessage::Request(request) = message else {
        return None;
    };
    let meta = match &request.request {
        ClientRequest::ReadResourceRequest(r) => r.params.meta.as_ref(),
        ClientRequest::ListResourcesRequest(r) => r.params.as_ref().and_then(|p| p.meta.as_ref()),
        _ => None,
    }?;
    let value = meta.get(TRACEPARENT)?.as_str()?;
    let well_formed =
        value.len() == 55 && value.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    well_formed
        .then(|| HeaderValue::from_str(value).ok())
        .flatten()
}

/// POSTs `message` and reads what comes back.
pub(super) async fn post(
    client: &reqwest::Client,
    uri: Arc<str>,
    message: ClientJsonRpcMessage,
    session_id: Option<Arc<str>>,
    auth_header: Option<String>,
    custom_headers: HashMap<HeaderName, HeaderValue>,
    limits: StreamableHttpResponseLimits,
) -> Result<StreamableHttpPostResponse, Error> {
    let mut request = client
        .post(uri.as_ref())
        .header(ACCEPT, format!("{EVENT_STREAM}, {JSON}"));
    if let Some(token) = auth_header {
        request = request.bearer_auth(token);
    }
    for (name, value) in custom_headers {
        if RESERVED
            .iter()
            .any(|r| name.as_str().eq_ignore_ascii_case(r))
        {
            return Err(StreamableHttpError::ReservedHeaderConflict(
                name.to_string(),
            ));
        }
        request = request.header(name, value);
    }
    let attached = session_id.is_some();
    let listens = matches!(
        &message,
        ClientJsonRpcMessage::Request(r)
            if matches!(r.request, ClientRequest::SubscriptionsListenRequest(_))
    );
    if let Some(id) = &session_id {
        request = request.header(SESSION_ID, id.as_ref());
    }
    // The request's trace, from its `_meta`, for the upstream's HTTP layer too.
    if let Some(traceparent) = traceparent(&message) {
        request = request.header(TRACEPARENT, traceparent);
    }
    let response = request
        .json(&message)
        .send()
        .await
        .map_err(StreamableHttpError::Client)?;
    let status = response.status();
    let header = |name: &HeaderName| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let challenge = header(&WWW_AUTHENTICATE);
    let content_type = header(&CONTENT_TYPE);
    let session = header(&HeaderName::from_static(SESSION_ID));
    let retry_after = header(&RETRY_AFTER);
    if let Some(challenge) = challenge.clone() {
        if status == StatusCode::UNAUTHORIZED {
            return Err(StreamableHttpError::AuthRequired(AuthRequiredError::new(
                challenge,
            )));
        }
        if status == StatusCode::FORBIDDEN {
            let scope = scope_of(&challenge);
            return Err(StreamableHttpError::InsufficientScope(
                InsufficientScopeError::new(challenge, scope),
            ));
        }
    }
    if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
        return Ok(StreamableHttpPostResponse::Accepted);
    }
    if status == StatusCode::NOT_FOUND && attached {
        return Err(StreamableHttpError::SessionExpired);
    }
    let awaits_no_response = !matches!(message, ClientJsonRpcMessage::Request(_));
    if status.is_success() && response.content_length() == Some(0) && awaits_no_response {
        return Ok(StreamableHttpPostResponse::Accepted);
    }
    if !status.is_success() {
        // A JSON-RPC error in the body is the answer; otherwise the status is.
        if is(content_type.as_deref(), JSON) && status != StatusCode::TOO_MANY_REQUESTS {
            if let Ok(body) = bounded_body(response, limits.max_json_response_size).await
                && let Ok(error @ ServerJsonRpcMessage::Error(_)) =
                    serde_json::from_slice::<ServerJsonRpcMessage>(&body)
            {
                return Ok(StreamableHttpPostResponse::Json(error, session));
            }
        } else {
            drop(response);
        }
        if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
            return Err(StreamableHttpError::HttpStatus(HttpStatusError::new(
                status.as_u16(),
                retry_after,
            )));
        }
        return Err(StreamableHttpError::UnexpectedServerResponse(
            format!("HTTP {status}").into(),
        ));
    }
    if is(content_type.as_deref(), EVENT_STREAM) {
        // A subscription's stream has no end to wait for: dropped, it is over, and the closed
        // connection is what tells the server at once.
        let stream = if listens {
            events(response.bytes_stream(), limits.max_sse_event_size)
        } else {
            // Read to its end even after rmcp has its answer, so the connection is kept.
            let body = DrainOnDrop::new(response.bytes_stream());
            events(body, limits.max_sse_event_size)
        };
        return Ok(StreamableHttpPostResponse::Sse(stream, session));
    }
    if is(content_type.as_deref(), JSON) {
        let body = bounded_body(response, limits.max_json_response_size).await?;
        return match serde_json::from_slice::<ServerJsonRpcMessage>(&body) {
            Ok(message) => Ok(StreamableHttpPostResponse::Json(message, session)),
            Err(_) if awaits_no_response => Ok(StreamableHttpPostResponse::Accepted),
            Err(e) => Err(StreamableHttpError::UnexpectedServerResponse(
                format!("the JSON body is not a JSON-RPC message: {e}").into(),
            )),
        };
    }
    if awaits_no_response {
        return Ok(StreamableHttpPostResponse::Accepted);
    }
    Err(StreamableHttpError::UnexpectedContentType(content_type))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_challenge_names_its_scope_quoted_or_not() {
        assert_eq!(
            scope_of(r#"Bearer error="insufficient_scope", scope="files:read files:write""#),
            Some("files:read files:write".into())
        );
        assert_eq!(
            scope_of("Bearer scope=admin, realm=x"),
            Some("admin".into())
        );
        assert_eq!(scope_of("Bearer realm=x"), None);
    }
}
