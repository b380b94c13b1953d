//! The transport to a stdio child process: newline-delimited JSON-RPC, read and parsed here.
//!
//! rmcp's own line transport buffers a line whole before it parses it and drops what does not
//! parse without a word, so a request whose answer is too large or malformed waits for its
//! deadline, and a refused message is held (and half-parsed) in memory. This transport keeps at
//! most `limit` bytes of a line: once a line outgrows it, what was kept is released and only its
//! first and last bytes are remembered, to read the id of the request it answers. That request
//! is answered at once with a "too large" error (size and limit as values in its `data`); a
//! response that does not parse gets an "unparsable" error the same way. A line without a
//! readable id is dropped and logged.

use std::{collections::VecDeque, future::Future, io, sync::Arc};

use crate::answers::{EDGE, id_of, response_id, too_large, unparsable};
use rmcp::{
    RoleClient,
    model::{ErrorData, JsonRpcMessage, RequestId},
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::Transport,
};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    sync::Mutex,
};

/// Bytes read from the child at a time.
const CHUNK: usize = 64 * 1024;

/// A child's stdin and stdout as an rmcp transport.
#[derive(Debug)]
pub(crate) struct ChildTransport<R, W> {
    reader: R,
    writer: Arc<Mutex<Option<W>>>,
    lines: Lines,
    /// Bytes read but not yet split into lines, and how far they have been.
    read: Vec<u8>,
    at: usize,
    /// Where a read lands: `read` changes only once a read has completed.
    scratch: Box<[u8]>,
}

impl<R, W> ChildTransport<R, W> {
    pub(crate) fn new(reader: R, writer: W, limit: usize) -> Self {
        Self {
            reader,
            writer: Arc::new(Mutex::new(Some(writer))),
            lines: Lines::new(limit),
            read: Vec::new(),
            at: 0,
            scratch: vec![0; CHUNK].into_boxed_slice(),
        }
    }
}

/// What one complete line is.
#[derive(Debug, PartialEq)]
enum Line {
    /// A line within the limit.
    Whole(Vec<u8>),
    /// A line over the limit, of `len` bytes, with its first and last bytes.
    TooLong {
        len: usize,
        head: Vec<u8>,
        tail: Vec<u8>,
    },
}

/// Splits bytes into lines, keeping at most `limit` bytes of the one in progress.
#[derive(Debug)]
struct Lines {
    limit: usize,
    line: Vec<u8>,
    len: usize,
    over: bool,
    head: Vec<u8>,
    tail: VecDeque<u8>,
}

impl Lines {
    fn new(limit: usize) -> Self {
        Self {
            limit,
            line: Vec::new(),
            len: 0,
            over: false,
            head: Vec::with_capacity(EDGE),
            tail: VecDeque::with_capacity(EDGE),
        }
    }

    /// Takes part of a line (no newline in it).
    fn take(&mut self, part: &[u8]) {
        self.len += part.len();
        if !self.over {
            if self.line.len() + part.len() <= self.limit {
                self.line.extend_from_slice(part);
                return;
            }
            // Over the limit: keep only the ends, and give back what was held.
            self.over = true;
            let line = std::mem::take(&mut self.line);
            self.head = line[..line.len().min(EDGE)].to_vec();
            self.push_tail(&line[line.len().saturating_sub(EDGE)..]);
        }
        let room = EDGE.saturating_sub(self.head.len());
        self.head.extend_from_slice(&part[..room.min(part.len())]);
        self.push_tail(&part[part.len().saturating_sub(EDGE)..]);
    }

    fn push_tail(&mut self, bytes: &[u8]) {
        self.tail.extend(bytes);
        while self.tail.len() > EDGE {
            self.tail.pop_front();
        }
    }

    /// Ends the line in progress.
    fn end(&mut self) -> Line {
        let line = if self.over {
            Line::TooLong {
                len: self.len,
                head: std::mem::take(&mut self.head),
                tail: self.tail.drain(..).collect(),
            }
        } else {
            Line::Whole(std::mem::take(&mut self.line))
        };
        self.len = 0;
        self.over = false;
        self.head.clear();
        self.tail.clear();
        line
    }
}

fn answer(id: RequestId, error: ErrorData) -> RxJsonRpcMessage<RoleClient> {
    JsonRpcMessage::error(error, Some(id))
}

/// The message a complete line is, if any; `limit` is only for the "too large" answer.
fn message(line: Line, limit: usize) -> Option<RxJsonRpcMessage<RoleClient>> {
    match line {
        Line::TooLong { len, head, tail } => {
            let Some(id) = response_id(&head, &tail) else {
                tracing::warn!(
                    bytes = len,
                    limit,
                    "an upstream message over the limit was dropped and its request is unknown"
                );
                return None;
            };
            Some(answer(id, too_large(len, limit)))
        }
        Line::Whole(bytes) => {
            let text = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(&bytes);
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            if text.iter().all(u8::is_ascii_whitespace) {
                return None;
            }
            match serde_json::from_slice(text) {
                Ok(message) => Some(message),
                Err(e) => {
                    let id = id_of(text);
                    let is_response = text.windows(9).any(|w| w == b"\"result\":")
                        || text.windows(8).any(|w| w == b"\"error\":");
                    match id {
                        Some(id) if is_response => Some(answer(id, unparsable(&e.to_string()))),
                        _ => {
                            tracing::debug!("ignored an upstream message that does not parse: {e}");
                            None
                        }
                    }
                }
            }
        }
    }
}

impl<R, W> Transport<RoleClient> for ChildTransport<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let writer = self.writer.clone();
        async move {
            let mut bytes = serde_json::to_vec(&item).map_err(io::Error::other)?;
            bytes.push(b'\n');
            let mut writer = writer.lock().await;
            let Some(writer) = writer.as_mut() else {
                return Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    "the transport is closed",
                ));
            };
            writer.write_all(&bytes).await?;
            writer.flush().await
        }
    }

    // Cancel-safe: rmcp polls this inside a `select!`. Bytes read are kept in `self.read` and
    // the line in progress in `self.lines` until they are used, and a read that is dropped
    // before it completes reads nothing.
    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            while self.at < self.read.len() {
                let rest = &self.read[self.at..];
                match rest.iter().position(|&b| b == b'\n') {
                    Some(i) => {
                        self.lines.take(&rest[..i]);
                        self.at += i + 1;
                        if let Some(message) = message(self.lines.end(), self.lines.limit) {
                            return Some(message);
                        }
                    }
                    None => {
                        self.lines.take(rest);
                        self.at = self.read.len();
                    }
                }
            }
            let n = match self.reader.read(&mut self.scratch).await {
                Ok(0) => return None,
                Ok(n) => n,
                Err(e) => {
                    tracing::debug!("reading from the upstream failed: {e}");
                    return None;
                }
            };
            self.read.clear();
            self.read.extend_from_slice(&self.scratch[..n]);
            self.at = 0;
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        drop(self.writer.lock().await.take());
        Ok(())
    }
}

#[cfg(test)]
mod tests;
