//! Server-sent events from a response body, bounded per event without ever holding more than
//! the bound: the event in progress is kept as the chunks it arrived in (no buffer that grows by
//! doubling and copies itself), joined once when the event is complete. An event that outgrows
//! the bound ends the stream with an error saying so; what was kept of it is given back.

use std::{
    collections::VecDeque,
    pin::Pin,
    task::{Context, Poll},
};

use bytes::Bytes;
use futures::{Stream, StreamExt, stream::BoxStream};
use rmcp::transport::streamable_http_client::SseError;
use sse_stream::Sse;

/// The error an event over the bound ends the stream with (its words are what `Answers` reads).
#[derive(Debug, thiserror::Error)]
#[error("SSE event exceeded the maximum size of {0} bytes")]
pub(crate) struct EventTooLarge(pub(crate) usize);

/// The events of `body`, each at most `max_event` bytes of field text.
pub(crate) fn events<E>(
    body: impl Stream<Item = Result<Bytes, E>> + Send + 'static,
    max_event: usize,
) -> BoxStream<'static, Result<Sse, SseError>>
where
    E: std::error::Error + Send + Sync + 'static,
{
    Events {
        body: body.boxed(),
        max_event,
        pending: Vec::new(),
        pending_len: 0,
        event: Sse::default(),
        event_len: 0,
        ready: VecDeque::new(),
        skip_lf: false,
        done: false,
    }
    .boxed()
}

struct Events<E> {
    body: BoxStream<'static, Result<Bytes, E>>,
    max_event: usize,
    /// The line in progress, as the chunks it arrived in.
    pending: Vec<Bytes>,
    pending_len: usize,
    event: Sse,
    /// Bytes of field text in the event so far.
    event_len: usize,
    ready: VecDeque<Sse>,
    /// A CR ended the last line: a LF right after it belongs to it.
    skip_lf: bool,
    done: bool,
}

impl<E> Events<E> {
    /// Takes one chunk of the body; false when the event in progress outgrew the bound.
    fn take_chunk(&mut self, chunk: Bytes) -> bool {
        let mut at = 0;
        let bytes = chunk.as_ref();
        while at < bytes.len() {
            if self.skip_lf {
                self.skip_lf = false;
                if bytes[at] == b'\n' {
                    at += 1;
                    continue;
                }
            }
            match bytes[at..].iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(i) => {
                    self.skip_lf = bytes[at + i] == b'\r';
                    if i > 0 {
                        self.pending.push(chunk.slice(at..at + i));
                        self.pending_len += i;
                    }
                    at += i + 1;
                    if !self.end_line() {
                        return false;
                    }
                }
                None => {
                    self.pending.push(chunk.slice(at..));
                    self.pending_len += bytes.len() - at;
                    at = bytes.len();
                }
            }
            if self.event_len + self.pending_len > self.max_event {
                self.pending = Vec::new();
                self.event = Sse::default();
                return false;
            }
        }
        true
    }

    /// The line in progress is complete: a field of the event, or (empty) its end.
    fn end_line(&mut self) -> bool {
        let line: Vec<u8> = match self.pending.len() {
            0 => Vec::new(),
            _ => {
                let mut line = Vec::with_capacity(self.pending_len);
                for part in self.pending.drain(..) {
                    line.extend_from_slice(&part);
                }
                line
            }
        };
        self.pending_len = 0;
        if line.is_empty() {
            let event = std::mem::take(&mut self.event);
            self.event_len = 0;
            if event != Sse::default() {
                self.ready.push_back(event);
            }
            return true;
        }
        self.event_len += line.len() + 1;
        if self.event_len > self.max_event {
            self.event = Sse::default();
            return false;
        }
        let text = String::from_utf8_lossy(&line);
        let (field, value) = match text.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (text.as_ref(), ""),
        };
        match field {
            "data" => match &mut self.event.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.event.data = Some(value.to_owned()),
            },
            "event" => self.event.event = Some(value.to_owned()),
            "id" if !value.contains('\0') => self.event.id = Some(value.to_owned()),
            "retry" => self.event.retry = value.trim().parse().ok().or(self.event.retry),
            // Comments (":...") and unknown fields are ignored, as the SSE standard says.
            _ => {}
        }
        true
    }
}

impl<E: std::error::Error + Send + Sync + 'static> Stream for Events<E> {
    type Item = Result<Sse, SseError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Poll::Ready(Some(Ok(event)));
            }
            if self.done {
                return Poll::Ready(None);
            }
            match self.body.poll_next_unpin(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(chunk))) => {
                    if !self.take_chunk(chunk) {
                        self.done = true;
                        let max = self.max_event;
                        return Poll::Ready(Some(Err(SseError::Body(Box::new(EventTooLarge(
                            max,
                        ))))));
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    self.done = true;
                    return Poll::Ready(Some(Err(SseError::Body(Box::new(e)))));
                }
                Poll::Ready(None) => {
                    self.done = true;
                    // A last event without its blank line is still dispatched.
                    if !self.pending.is_empty() {
                        self.end_line();
                    }
                    let event = std::mem::take(&mut self.event);
                    if event != Sse::default() {
                        self.ready.push_back(event);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn parse(chunks: &[&str], max: usize) -> Vec<Result<Sse, String>> {
        let body = futures::stream::iter(
            chunks
                .iter()
                .map(|c| Ok::<_, std::io::Error>(Bytes::copy_from_slice(c.as_bytes())))
                .collect::<Vec<_>>(),
        );
        events(body, max)
            .map(|e| e.map_err(|e| e.to_string()))
            .collect()
            .await
    }

    fn data(e: &Result<Sse, String>) -> Option<&str> {
        e.as_ref().ok().and_then(|s| s.data.as_deref())
    }

    #[tokio::test]
    async fn events_split_anywhere_parse_as_the_standard_says() {
        let got = parse(
            &[
                "event: mess",
                "age\nid: 7\nretry: 30\ndata: {\"a\"",
                ":1}\n\n: a comment\r\ndata: x\r\n",
                "data: y\r\r\ndata: last",
            ],
            1024,
        )
        .await;
        assert_eq!(got.len(), 3, "{got:?}");
        let first = got[0].as_ref().unwrap();
        assert_eq!(
            (
                first.event.as_deref(),
                first.id.as_deref(),
                first.retry,
                first.data.as_deref()
            ),
            (Some("message"), Some("7"), Some(30), Some("{\"a\":1}"))
        );
        assert_eq!(data(&got[1]), Some("x\ny"));
        assert_eq!(data(&got[2]), Some("last"));
    }

    #[tokio::test]
    async fn an_event_over_the_bound_ends_the_stream_saying_so() {
        let big = format!("data: {}\n\n", "x".repeat(100));
        let got = parse(
            &["data: ok\n\n", &big[..50], &big[50..], "data: never\n\n"],
            64,
        )
        .await;
        assert_eq!(data(&got[0]), Some("ok"));
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(
            got[1]
                .as_ref()
                .unwrap_err()
                .contains("exceeded the maximum size of 64 bytes")
        );
    }
}
