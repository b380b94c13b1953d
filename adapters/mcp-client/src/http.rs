//! The HTTP client under rmcp's streamable HTTP transport: reqwest, with the answers to one
//! request kept to that request.
//!
//! rmcp hands a request the first response it finds on the request's event stream, whatever its
//! id, and drops an event it cannot parse without a word; an event over the size bound, or a
//! JSON body that does not parse, fails the request as if the connection had died. Here, on the
//! stream that answers one request:
//! - a response carrying another request's id is dropped (and logged), so a stray response in
//!   the `initialize` answer no longer fails the handshake;
//! - an event over the bound ends the stream with a "too large" answer to the request (rmcp's
//!   bound keeps at most that many bytes of it);
//! - when the stream ends after an event with the request's id went by and no answer was taken
//!   (rmcp stops reading once it has one), that event did not parse: the request gets an
//!   "unparsable" answer at once.
//!
//! A JSON body over the bound, or one that is not a JSON-RPC message, answers its request the
//! same way. These answers are the ones the stdio transport gives (`answers.rs`): each fails one
//! request, and the session lives on.

use std::{
    collections::HashMap,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use futures::{Stream, StreamExt, stream::BoxStream};
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::{
    model::{ClientJsonRpcMessage, ClientRequest, ErrorData, RequestId, ServerJsonRpcMessage},
    transport::streamable_http_client::{
        SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
        StreamableHttpResponseLimits,
    },
};
use sse_stream::Sse;

mod events;
mod post;

use quarry_domain::sanitize_label;

use crate::answers::{EDGE, id_of, too_large, unauthorized, unparsable};

type Events = BoxStream<'static, Result<Sse, SseError>>;

/// reqwest for rmcp, answering a request whose answer cannot be delivered (see the module).
#[derive(Debug, Clone)]
pub(crate) struct GuardedHttp {
    inner: reqwest::Client,
    refusals: Refusals,
}

impl GuardedHttp {
    pub(crate) fn new(inner: reqwest::Client) -> Self {
        Self {
            inner,
            refusals: Refusals::default(),
        }
    }

    /// Where this client notes that the server refused its credentials.
    pub(crate) fn refusals(&self) -> Refusals {
        self.refusals.clone()
    }
}

/// The last time the server refused the client's credentials (HTTP 401 or 403, or a TLS alert
/// about its certificate), and why; and the last TLS failure of another kind.
#[derive(Debug, Clone, Default)]
pub(crate) struct Refusals(Arc<std::sync::Mutex<(Option<String>, Option<String>)>>);

impl Refusals {
    pub(crate) fn last(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).0.clone()
    }

    pub(crate) fn tls(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).1.clone()
    }

    fn note(&self, why: String) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).0 = Some(why);
    }

    fn note_tls(&self, why: String) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).1 = Some(why);
    }
}

/// What a TLS failure in `error`'s chain of causes says, if there is one: (about the client
/// certificate, the description).
fn tls_failure(error: &(dyn std::error::Error + 'static)) -> Option<(bool, String)> {
    let mut cause = Some(error);
    while let Some(e) = cause {
        let text = format!("{e:?}");
        // Alerts the server sends when it does not accept the client's certificate (rustls
        // answers a certificate from a CA it does not trust with decrypt_error).
        let about_the_client = [
            "CertificateRequired",
            "BadCertificate",
            "UnknownCA",
            "CertificateUnknown",
            "CertificateExpired",
            "CertificateRevoked",
            "UnsupportedCertificate",
            "AccessDenied",
            "DecryptError",
        ]
        .iter()
        .any(|alert| text.contains(&format!("AlertReceived({alert})")));
        if about_the_client {
            return Some((
                true,
                "the server refused the client certificate (TLS handshake)".into(),
            ));
        }
        if text.contains("PeerIncompatible") || text.contains("ProtocolVersion") {
            return Some((
                false,
                "the server does not speak TLS 1.3; allow TLS 1.2 for it with tls_min_version = \"1.2\"".into(),
            ));
        }
        if text.contains("InvalidCertificate") {
            return Some((
                false,
                format!(
                    "the server's certificate is not trusted: {}",
                    sanitize_label(&e.to_string())
                ),
            ));
        }
        cause = e.source();
    }
    None
}

/// Why `error` is the server refusing the client's credentials, if it is.
fn refusal<E: std::error::Error + Send + Sync + 'static>(
    error: &StreamableHttpError<E>,
) -> Option<String> {
    if let StreamableHttpError::Client(e) = error
        && let Some((true, why)) = tls_failure(e)
    {
        return Some(why);
    }
    match error {
        StreamableHttpError::AuthRequired(_) => Some("HTTP 401, authentication required".into()),
        StreamableHttpError::InsufficientScope(_) => {
            Some("HTTP 403, the credential lacks a scope the server requires".into())
        }
        StreamableHttpError::UnexpectedServerResponse(why)
            if why.starts_with("HTTP 401") || why.starts_with("HTTP 403") =>
        {
            Some(why.chars().take(8).collect::<String>() + ", the server refused the credential")
        }
        _ => None,
    }
}

fn is_initialize(message: &ClientJsonRpcMessage) -> bool {
    matches!(message, ClientJsonRpcMessage::Request(r) if matches!(r.request, ClientRequest::InitializeRequest(_)))
}

impl StreamableHttpClient for GuardedHttp {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let (id, handshake) = (request_id(&message), is_initialize(&message));
        let response = self
            .inner
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await;
        self.guard(id, handshake, usize::MAX, response)
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let (id, handshake) = (request_id(&message), is_initialize(&message));
        let limit = limits.max_sse_event_size;
        let response = post::post(
            &self.inner,
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await;
        self.guard(id, handshake, limit, response)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<Events, StreamableHttpError<Self::Error>> {
        self.inner
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<Events, StreamableHttpError<Self::Error>> {
        self.inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

fn request_id(message: &ClientJsonRpcMessage) -> Option<RequestId> {
    match message {
        ClientJsonRpcMessage::Request(request) => Some(request.id.clone()),
        _ => None,
    }
}

impl GuardedHttp {
    /// The answer to the POST of request `id` (none: a notification or a response, left as it
    /// is), with `limit` the bound its events were read with. A refusal of the credentials is
    /// noted; during the `handshake` failures stay failures (they end it, and the connector
    /// reads the refusal), while its event stream is still kept to its own answer.
    fn guard<E: std::error::Error + Send + Sync + 'static>(
        &self,
        id: Option<RequestId>,
        handshake: bool,
        limit: usize,
        response: Result<StreamableHttpPostResponse, StreamableHttpError<E>>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<E>> {
        let refused = response.as_ref().err().and_then(refusal);
        if let Some(why) = &refused {
            self.refusals.note(why.clone());
        }
        if let Err(StreamableHttpError::Client(e)) = &response
            && let Some((false, why)) = tls_failure(e)
        {
            self.refusals.note_tls(why);
        }
        let Some(id) = id else { return response };
        if handshake && response.is_err() {
            return response;
        }
        let answer = |error: ErrorData| {
            Ok(StreamableHttpPostResponse::Json(
                ServerJsonRpcMessage::error(error, Some(id.clone())),
                None,
            ))
        };
        if let Some(why) = refused {
            return answer(unauthorized(&why));
        }
        match response {
            Ok(StreamableHttpPostResponse::Sse(events, session)) => Ok(
                StreamableHttpPostResponse::Sse(Answers::new(events, id, limit).boxed(), session),
            ),
            Err(StreamableHttpError::ResponseBodyTooLarge { max_size }) => {
                answer(too_large(max_size.saturating_add(1), max_size))
            }
            Err(StreamableHttpError::UnexpectedServerResponse(why)) => answer(unparsable(&why)),
            other => other,
        }
    }
}

/// The events that answer one request (see the module).
struct Answers {
    events: Events,
    id: RequestId,
    limit: usize,
    /// An event carrying the request's id has gone by.
    seen: bool,
    done: bool,
}

impl Answers {
    fn new(events: Events, id: RequestId, limit: usize) -> Self {
        Self {
            events,
            id,
            limit,
            seen: false,
            done: false,
        }
    }

    /// The event that answers the request with `error`; the stream ends after it.
    fn answer(&mut self, error: ErrorData) -> Sse {
        self.done = true;
        let message = ServerJsonRpcMessage::error(error, Some(self.id.clone()));
        Sse {
            event: Some("message".into()),
            data: serde_json::to_string(&message).ok(),
            ..Sse::default()
        }
    }
}

/// What a message event's data says of the request it answers.
enum Carries {
    /// The request's own answer (or something with its id).
    Ours,
    /// A response to another request.
    Stray(RequestId),
    /// A notification, a request of the server's, or nothing readable.
    Other,
}

fn carries(data: &str, ours: &RequestId) -> Carries {
    let bytes = data.as_bytes();
    let Some(id) = id_of(bytes) else {
        return Carries::Other;
    };
    if same_id(&id, ours) {
        return Carries::Ours;
    }
    let edge = bytes.len().min(EDGE);
    let has_method = |part: &[u8]| part.windows(9).any(|w| w == b"\"method\":");
    if has_method(&bytes[..edge]) || has_method(&bytes[bytes.len() - edge..]) {
        Carries::Other
    } else {
        Carries::Stray(id)
    }
}

/// Ids compare as rmcp compares them: `7` and `"7"` are one id.
fn same_id(a: &RequestId, b: &RequestId) -> bool {
    let plain = |id: &RequestId| match id {
        RequestId::Number(n) => n.to_string(),
        RequestId::String(s) => s.to_string(),
    };
    a == b || plain(a) == plain(b)
}

fn is_message(event: &Sse) -> bool {
    matches!(event.event.as_deref(), None | Some("" | "message"))
}

impl Stream for Answers {
    type Item = Result<Sse, SseError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if self.done {
                return Poll::Ready(None);
            }
            let next = match self.events.poll_next_unpin(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(next) => next,
            };
            return Poll::Ready(match next {
                Some(Ok(event)) => {
                    if let Some(data) = event.data.as_deref().filter(|_| is_message(&event)) {
                        match carries(data, &self.id) {
                            Carries::Ours => self.seen = true,
                            Carries::Stray(other) => {
                                tracing::debug!(
                                    "dropped a response to request {other} sent with the answer to request {}",
                                    self.id
                                );
                                continue;
                            }
                            Carries::Other => {}
                        }
                    }
                    Some(Ok(event))
                }
                Some(Err(e)) if is_over_bound(&e) => {
                    let limit = self.limit;
                    Some(Ok(self.answer(too_large(limit.saturating_add(1), limit))))
                }
                // rmcp reads on only while it has no answer: the one that went by was dropped.
                Some(Err(_)) | None if self.seen => {
                    Some(Ok(self.answer(unparsable("the JSON-RPC parser refused it"))))
                }
                other => other,
            });
        }
    }
}

/// An event over the bound (ours, on a POST's events; or rmcp's, whose error type is private but
/// whose message is not).
fn is_over_bound(error: &SseError) -> bool {
    matches!(error, SseError::Body(e) if e.to_string().contains("exceeded the maximum size"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(data: &str) -> Result<Sse, SseError> {
        Ok(Sse {
            event: Some("message".into()),
            data: Some(data.into()),
            ..Sse::default()
        })
    }

    async fn answers(events: Vec<Result<Sse, SseError>>) -> Vec<String> {
        Answers::new(
            futures::stream::iter(events).boxed(),
            RequestId::Number(7),
            100,
        )
        .map(|e| {
            e.map(|e| e.data.unwrap_or_default())
                .unwrap_or_else(|e| format!("error: {e}"))
        })
        .collect()
        .await
    }

    #[tokio::test]
    async fn a_response_to_another_request_is_dropped_and_a_request_of_the_server_kept() {
        let got = answers(vec![
            event(r#"{"jsonrpc":"2.0","id":987654321,"result":{}}"#),
            event(r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#),
            event(r#"{"jsonrpc":"2.0","id":7,"result":{}}"#),
        ])
        .await;
        // (rmcp stops reading at the answer; read on, the stream would add an "unparsable" one.)
        assert_eq!(
            got[..2],
            [
                r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#,
                r#"{"jsonrpc":"2.0","id":7,"result":{}}"#,
            ]
        );
    }

    #[tokio::test]
    async fn a_stream_that_ends_after_its_answer_went_by_adds_an_unparsable_answer() {
        let got = answers(vec![event(
            r#"{"jsonrpc":"2.0","id":7,"result":{"t":"\ud800"}}"#,
        )])
        .await;
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(
            got[1].contains(&crate::answers::UNPARSABLE_CODE.to_string()),
            "{got:?}"
        );
        assert!(got[1].contains(r#""id":7"#), "{got:?}");
    }

    #[tokio::test]
    async fn a_stream_that_ends_without_its_answer_ends_as_it_is() {
        let got = answers(vec![event(
            r#"{"jsonrpc":"2.0","method":"notifications/message"}"#,
        )])
        .await;
        assert_eq!(got.len(), 1, "{got:?}");
    }

    #[tokio::test]
    async fn an_event_over_the_bound_is_a_too_large_answer() {
        let over = SseError::Body("SSE event exceeded the maximum size of 100 bytes".into());
        let got = answers(vec![Err(over), event("never read")]).await;
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(
            got[0].contains(&crate::answers::TOO_LARGE_CODE.to_string()),
            "{got:?}"
        );
        assert!(got[0].contains(r#""limit":100"#), "{got:?}");
    }
}
