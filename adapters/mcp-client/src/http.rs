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
//!
//! A 404 to the session's id means the server forgot the session (it restarted, or expired it):
//! rmcp opens a new one and sends the request again, but the subscriptions of the old one are
//! gone, and [`Coverage`] is told.

use std::{collections::HashMap, sync::Arc};

use futures::{StreamExt, stream::BoxStream};
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::{
    model::{ClientJsonRpcMessage, ClientRequest, ErrorData, RequestId, ServerJsonRpcMessage},
    transport::streamable_http_client::{
        SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
        StreamableHttpResponseLimits,
    },
};
use sse_stream::Sse;

mod drain;
mod events;
mod post;
mod refusals;
mod stream;

pub(crate) use refusals::Refusals;
use refusals::{refusal, tls_failure};
use stream::Answers;

use crate::{
    answers::{too_large, unauthorized, unparsable},
    coverage::Coverage,
    oauth::challenge_of,
};
use quarry_ports::AccessTokens;

type Events = BoxStream<'static, Result<Sse, SseError>>;

/// reqwest for rmcp, answering a request whose answer cannot be delivered (see the module).
/// For an OAuth server, every request carries the token `tokens` holds now; a refused token is
/// reported to it and the request sent once more with the token it gives instead.
#[derive(Debug, Clone)]
pub(crate) struct GuardedHttp {
    inner: reqwest::Client,
    refusals: Refusals,
    tokens: Option<Arc<dyn AccessTokens>>,
    coverage: Arc<Coverage>,
}

type PostResult = Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>;

impl GuardedHttp {
    /// `inner`, sending what `tokens` holds, for a session whose subscriptions `coverage` holds.
    pub(crate) fn new(
        inner: reqwest::Client,
        tokens: Option<Arc<dyn AccessTokens>>,
        coverage: Arc<Coverage>,
    ) -> Self {
        Self {
            inner,
            refusals: Refusals::default(),
            tokens,
            coverage,
        }
    }

    /// A 404 to the session's id: the server forgot the session and what it subscribed to.
    async fn noticed(&self, response: PostResult) -> PostResult {
        if matches!(response, Err(StreamableHttpError::SessionExpired)) {
            self.coverage.lost("the server forgot the session").await;
        }
        response
    }

    /// The header a GET or DELETE carries: the current token, if there is one.
    async fn bearer(&self, given: Option<String>) -> Option<String> {
        match &self.tokens {
            Some(tokens) => tokens
                .current()
                .await
                .ok()
                .flatten()
                .map(|t| t.expose().to_owned()),
            None => given,
        }
    }

    /// POSTs with the current token; when the server refuses it, once more with the one the
    /// token holder gives instead. The second value says why no token could be had.
    async fn post_with_tokens(
        &self,
        tokens: &Arc<dyn AccessTokens>,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> (PostResult, Option<String>) {
        let gave_up = |e: quarry_ports::UpstreamError| {
            let why = match e {
                quarry_ports::UpstreamError::Unauthorized(why) => why,
                other => other.to_string(),
            };
            (
                Err(StreamableHttpError::AuthRequired(
                    rmcp::transport::streamable_http_client::AuthRequiredError::new(String::new()),
                )),
                Some(why),
            )
        };
        let sent = match tokens.current().await {
            Ok(token) => token,
            Err(e) => return gave_up(e),
        };
        let send = |token: Option<String>| {
            post::post(
                &self.inner,
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
                limits,
            )
        };
        let first = send(sent.as_ref().map(|t| t.expose().to_owned())).await;
        let challenge = match &first {
            Err(StreamableHttpError::AuthRequired(e)) => {
                challenge_of(&e.www_authenticate_header, false)
            }
            Err(StreamableHttpError::InsufficientScope(e)) => {
                challenge_of(&e.www_authenticate_header, true)
            }
            Err(StreamableHttpError::UnexpectedServerResponse(why))
                if why.starts_with("HTTP 401") =>
            {
                quarry_ports::Challenge::default()
            }
            _ => return (first, None),
        };
        match tokens.refused(sent, challenge).await {
            Ok(token) => (send(Some(token.expose().to_owned())).await, None),
            Err(e) => gave_up(e),
        }
    }

    /// Where this client notes that the server refused its credentials.
    pub(crate) fn refusals(&self) -> Refusals {
        self.refusals.clone()
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
        let auth_header = self.bearer(auth_header).await;
        let response = self
            .inner
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await;
        let response = self.noticed(response).await;
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
        let (response, gave_up) = match &self.tokens {
            Some(tokens) => {
                self.post_with_tokens(tokens, uri, message, session_id, custom_headers, limits)
                    .await
            }
            None => (
                post::post(
                    &self.inner,
                    uri,
                    message,
                    session_id,
                    auth_header,
                    custom_headers,
                    limits,
                )
                .await,
                None,
            ),
        };
        let response = self.noticed(response).await;
        if let Some(why) = gave_up {
            self.refusals.note(why.clone());
            let Some(id) = id.filter(|_| !handshake) else {
                return response;
            };
            return Ok(StreamableHttpPostResponse::Json(
                ServerJsonRpcMessage::error(unauthorized(&why), Some(id)),
                None,
            ));
        }
        self.guard(id, handshake, limit, response)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        let auth_header = self.bearer(auth_header).await;
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
        let auth_header = self.bearer(auth_header).await;
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
        let auth_header = self.bearer(auth_header).await;
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
