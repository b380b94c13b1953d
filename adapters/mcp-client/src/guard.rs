//! Enforcing the content limit while a stdio upstream's message is still arriving.
//!
//! rmcp drops a line longer than its limit but leaves the request that waits for it hanging until
//! its deadline. [`LineGuard`] sits between the child's stdout and rmcp: it passes lines through,
//! and once a line outgrows the limit it stops forwarding it (memory stays bounded), ends the cut
//! line (rmcp ignores the unparsable stub), and — when it can tell which request the line answers
//! from the line's first or last bytes — answers that request at once with a JSON-RPC error that
//! the session maps to "too large".
//!
//! It also answers, at once, a line the JSON parser would reject for a lone UTF-16 surrogate
//! escape (`"\ud800"` with no low half): rmcp drops an unparsable line without a word, so its
//! request would wait for its deadline. The line is cut where the surrogate shows and its
//! request gets the "unparsable" answer, which the session maps to a bad response.

use std::{
    collections::VecDeque,
    io,
    pin::Pin,
    task::{Context, Poll},
};

use tokio::io::{AsyncRead, ReadBuf};

/// The JSON-RPC error code of the synthetic "too large" answer.
pub(crate) const TOO_LARGE_CODE: i32 = -32_050;
/// The JSON-RPC error code of the synthetic "could not be parsed" answer.
pub(crate) const UNPARSABLE_CODE: i32 = -32_051;
/// The field of that answer's `data` that carries the message's size in bytes (at least).
pub(crate) const SIZE_FIELD: &str = "size";
/// The field of that answer's `data` that carries the limit in bytes.
pub(crate) const LIMIT_FIELD: &str = "limit";

const EDGE: usize = 256;

/// Guards an upstream's stdout: no line longer than `limit` bytes gets through.
#[derive(Debug)]
pub(crate) struct LineGuard<R> {
    inner: R,
    limit: usize,
    line_len: usize,
    discarding: bool,
    /// Why the line being discarded was cut.
    cut: Cut,
    escapes: Escapes,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    out: VecDeque<u8>,
    scratch: Box<[u8]>,
    eof: bool,
}

impl<R> LineGuard<R> {
    pub(crate) fn new(inner: R, limit: usize) -> Self {
        Self {
            inner,
            limit,
            line_len: 0,
            discarding: false,
            cut: Cut::TooLarge,
            escapes: Escapes::default(),
            head: Vec::with_capacity(EDGE),
            tail: VecDeque::with_capacity(EDGE),
            out: VecDeque::new(),
            scratch: vec![0; 64 * 1024].into_boxed_slice(),
            eof: false,
        }
    }

    fn take(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let (line, newline) = match bytes.iter().position(|&b| b == b'\n') {
                Some(i) => (&bytes[..i], true),
                None => (bytes, false),
            };
            self.take_line_part(line);
            if newline {
                self.end_line();
                bytes = &bytes[line.len() + 1..];
            } else {
                bytes = &[];
            }
        }
    }

    fn take_line_part(&mut self, part: &[u8]) {
        let room = EDGE.saturating_sub(self.head.len());
        self.head.extend_from_slice(&part[..room.min(part.len())]);
        let allowed = self.limit.saturating_sub(self.line_len);
        self.line_len += part.len();
        if !self.discarding {
            // What may go through: within the size limit, and before a lone surrogate.
            let mut pass = part.len().min(allowed);
            let mut cut = (part.len() > allowed).then_some(Cut::TooLarge);
            if let Some(at) = self.escapes.scan(&part[..pass]) {
                pass = at;
                cut = Some(Cut::Unparsable);
            }
            self.out.extend(&part[..pass]);
            let Some(cut) = cut else { return };
            self.discarding = true;
            self.cut = cut;
        }
        let keep = &part[part.len().saturating_sub(EDGE)..];
        self.tail.extend(keep);
        while self.tail.len() > EDGE {
            self.tail.pop_front();
        }
    }

    fn end_line(&mut self) {
        self.out.push_back(b'\n');
        if self.discarding {
            let tail: Vec<u8> = self.tail.iter().copied().collect();
            match (response_id(&self.head, &tail), self.cut) {
                (Some(id), Cut::Unparsable) => {
                    let answer = format!(
                        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{{\"code\":{UNPARSABLE_CODE},\"message\":\"the response is not valid JSON: a lone UTF-16 surrogate escape\"}}}}\n"
                    );
                    self.out.extend(answer.as_bytes());
                }
                (Some(id), Cut::TooLarge) => {
                    // The sizes travel as values in `data`; the message is for people.
                    let answer = format!(
                        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{{\"code\":{TOO_LARGE_CODE},\"message\":\"the response is over the size limit\",\"data\":{{\"{SIZE_FIELD}\":{},\"{LIMIT_FIELD}\":{}}}}}}}\n",
                        self.line_len, self.limit
                    );
                    self.out.extend(answer.as_bytes());
                }
                (None, cut) => tracing::warn!(
                    bytes = self.line_len,
                    limit = self.limit,
                    ?cut,
                    "an upstream message was dropped and its request is unknown; it will time out"
                ),
            }
        }
        self.line_len = 0;
        self.discarding = false;
        self.escapes = Escapes::default();
        self.head.clear();
        self.tail.clear();
    }
}

/// Why a line was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    TooLarge,
    Unparsable,
}

/// Follows `\u` escapes through a line, across reads, to find a lone UTF-16 surrogate: a high
/// half not followed at once by `\u` and a low half, or a low half without a high one before it.
#[derive(Debug, Default)]
struct Escapes {
    state: EscapeState,
    /// The last escape was a high surrogate; the next must be its low half.
    high: bool,
}

#[derive(Debug, Default, Clone, Copy)]
enum EscapeState {
    #[default]
    Text,
    Backslash,
    Hex(u8, u16),
}

impl Escapes {
    /// The index in `bytes` at which a lone surrogate shows, if one does.
    fn scan(&mut self, bytes: &[u8]) -> Option<usize> {
        for (i, &b) in bytes.iter().enumerate() {
            self.state = match (self.state, b) {
                (EscapeState::Text, b'\\') => EscapeState::Backslash,
                (EscapeState::Text, _) if self.high => return Some(i),
                (EscapeState::Text, _) => EscapeState::Text,
                (EscapeState::Backslash, b'u') => EscapeState::Hex(0, 0),
                (EscapeState::Backslash, _) if self.high => return Some(i),
                (EscapeState::Backslash, _) => EscapeState::Text,
                (EscapeState::Hex(n, v), _) => {
                    let Some(digit) = (b as char).to_digit(16) else {
                        // Not an escape JSON allows: the parser will say so; not ours to judge.
                        self.high = false;
                        self.state = EscapeState::Text;
                        continue;
                    };
                    let v = (v << 4) | digit as u16;
                    if n < 3 {
                        EscapeState::Hex(n + 1, v)
                    } else {
                        let (high, low) = (
                            (0xD800..=0xDBFF).contains(&v),
                            (0xDC00..=0xDFFF).contains(&v),
                        );
                        if (self.high && !low) || (!self.high && low) {
                            return Some(i);
                        }
                        self.high = high;
                        EscapeState::Text
                    }
                }
            };
        }
        None
    }
}

/// The id of a JSON-RPC response, read from its first bytes (`{"jsonrpc":"2.0","id":7,...`, as
/// rmcp writes) or its last ones (`...,"jsonrpc":"2.0","id":7}`, as the TypeScript SDK writes).
fn response_id(head: &[u8], tail: &[u8]) -> Option<String> {
    let head = String::from_utf8_lossy(head);
    let tail = String::from_utf8_lossy(tail);
    let from_head = head
        .strip_prefix("{\"jsonrpc\":\"2.0\",\"id\":")
        .and_then(|rest| rest.split([',', '}']).next());
    let from_tail = tail
        .strip_suffix('}')
        .and_then(|rest| {
            rest.rsplit_once("\"jsonrpc\":\"2.0\",\"id\":")
                .map(|(_, id)| id)
        })
        .or_else(|| {
            tail.strip_suffix('}')
                .and_then(|rest| rest.rsplit_once("\"id\":").map(|(_, id)| id))
                .filter(|id| !id.contains(','))
        });
    from_head
        .or(from_tail)
        .map(str::trim)
        .filter(|id| is_plain_id(id))
        .map(str::to_owned)
}

fn is_plain_id(id: &str) -> bool {
    let number = !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit() || b == b'-');
    let string = id.len() >= 2
        && id.starts_with('"')
        && id.ends_with('"')
        && id[1..id.len() - 1]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    number || string
}

impl<R: AsyncRead + Unpin> AsyncRead for LineGuard<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if !this.out.is_empty() {
                let n = this.out.len().min(buf.remaining());
                let (a, b) = this.out.as_slices();
                let from_a = n.min(a.len());
                buf.put_slice(&a[..from_a]);
                buf.put_slice(&b[..n - from_a]);
                this.out.drain(..n);
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            let mut read = ReadBuf::new(&mut this.scratch);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {
                    let n = read.filled().len();
                    if n == 0 {
                        this.eof = true;
                    } else {
                        let chunk = this.scratch[..n].to_vec();
                        this.take(&chunk);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    async fn guarded(input: &[u8], limit: usize) -> String {
        let mut out = String::new();
        LineGuard::new(input, limit)
            .read_to_string(&mut out)
            .await
            .unwrap();
        out
    }

    #[tokio::test]
    async fn short_lines_pass_through_unchanged() {
        let input = b"{\"a\":1}\n{\"b\":2}\npartial";
        assert_eq!(guarded(input, 100).await.as_bytes(), input);
    }

    #[tokio::test]
    async fn a_long_rmcp_style_response_is_cut_and_answered() {
        let long = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":\"{}\"}}\n{{\"next\":1}}\n",
            "x".repeat(1000)
        );
        let out = guarded(long.as_bytes(), 100).await;
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0].len(), 100, "the cut stub");
        assert!(
            lines[1].starts_with("{\"jsonrpc\":\"2.0\",\"id\":7,\"error\":{\"code\":-32050"),
            "{}",
            lines[1]
        );
        assert_eq!(lines[2], "{\"next\":1}", "the following message is intact");
    }

    #[tokio::test]
    async fn a_long_typescript_style_response_is_answered_from_its_tail() {
        let long = format!(
            "{{\"result\":{{\"text\":\"{}\"}},\"jsonrpc\":\"2.0\",\"id\":\"req-3\"}}\n",
            "y".repeat(5000)
        );
        let out = guarded(long.as_bytes(), 64).await;
        assert!(
            out.lines()
                .nth(1)
                .unwrap()
                .contains("\"id\":\"req-3\",\"error\""),
            "{out}"
        );
    }

    #[tokio::test]
    async fn a_lone_surrogate_is_answered_at_once_and_pairs_pass() {
        let bad =
            "{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"text\":\"a\\ud800b\"}}\n{\"next\":1}\n";
        let out = guarded(bad.as_bytes(), 1000).await;
        let lines: Vec<&str> = out.lines().collect();
        assert!(
            lines[1].contains("\"id\":4,\"error\":{\"code\":-32051"),
            "{out}"
        );
        assert_eq!(lines[2], "{\"next\":1}");
        for fine in [
            "{\"t\":\"\\ud83d\\ude00 pair\"}\n",
            "{\"t\":\"\\\\ud800 an escaped backslash, not an escape\"}\n",
            "{\"t\":\"\\u00e9 \\n\"}\n",
        ] {
            assert_eq!(guarded(fine.as_bytes(), 1000).await, fine, "{fine}");
        }
        for lone in [
            "{\"t\":\"\\udc00\"}\n",
            "{\"t\":\"\\ud800\\n\"}\n",
            "{\"t\":\"\\ud800\\u0041\"}\n",
        ] {
            assert_ne!(guarded(lone.as_bytes(), 1000).await, lone, "{lone}");
        }
    }

    #[tokio::test]
    async fn a_surrogate_pair_split_across_reads_passes() {
        let text = b"{\"t\":\"\\ud83d\\ude00\"}\n";
        let mut guard = LineGuard::new(&b""[..], 1000);
        for chunk in text.chunks(3) {
            LineGuard::take(&mut guard, chunk);
        }
        let out: Vec<u8> = guard.out.iter().copied().collect();
        assert_eq!(out, text);
    }

    #[tokio::test]
    async fn a_long_line_without_a_recognisable_id_is_only_dropped() {
        let long = format!(
            "{{\"method\":\"notify\",\"params\":\"{}\"}}\n",
            "z".repeat(500)
        );
        let out = guarded(long.as_bytes(), 50).await;
        assert_eq!(out.lines().count(), 1);
        assert_eq!(out.len(), 51);
    }
}
