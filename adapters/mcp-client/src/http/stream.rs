//! The events that answer one request: responses with another request's id dropped, an event
//! over the bound turned into a "too large" answer, and an answer that went by unparsed turned
//! into an "unparsable" one (see `http.rs`).

use std::{
    pin::Pin,
    task::{Context, Poll},
};

use futures::{Stream, StreamExt};
use rmcp::{
    model::{ErrorData, RequestId, ServerJsonRpcMessage},
    transport::streamable_http_client::SseError,
};
use sse_stream::Sse;

use super::Events;
use crate::answers::{EDGE, id_of, too_large, unparsable};

/// The events that answer one request (see the module).
pub(super) struct Answers {
    events: Events,
    id: RequestId,
    limit: usize,
    /// An event carrying the request's id has gone by.
    seen: bool,
    done: bool,
}

impl Answers {
    pub(super) fn new(events: Events, id: RequestId, limit: usize) -> Self {
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
