//! A streamable HTTP client cheap enough not to hide the gateways' differences: one keep-alive
//! HTTP/1.1 connection per session, requests written whole, answers (JSON or an event stream)
//! read into one buffer and checked by searching, not parsed, inside the timed loop.

use std::{net::SocketAddr, time::Duration};

use anyhow::{Context, Result, bail};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// One MCP session (2025-11-25) on one connection.
pub(crate) struct Session {
    stream: TcpStream,
    addr: SocketAddr,
    host: String,
    path: String,
    session: Option<String>,
    version: String,
    /// 2026-07-28: no session; every request says who asks in `_meta` and names itself in
    /// headers.
    stateless: bool,
    buf: Vec<u8>,
    next_id: u64,
}

/// An answer: the status and the JSON-RPC message (the last `data:` of an event stream).
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
}

impl Answer {
    /// A JSON-RPC result (not an error) came back.
    pub(crate) fn ok(&self) -> bool {
        self.status == 200 && memchr::memmem::find(&self.body, b"\"result\":").is_some()
    }

    /// The answer as JSON, for checks outside the timed loop.
    pub(crate) fn json(&self) -> Result<serde_json::Value> {
        serde_json::from_slice(&self.body).context("the answer is not JSON")
    }
}

impl Session {
    /// Connects to `url` (`http://127.0.0.1:PORT/path`) and opens a session.
    pub(crate) async fn open(url: &str) -> Result<Self> {
        Self::connect(url, false)
            .await
            .with_context(|| format!("opening a session at {url}"))
    }

    /// Connects to `url` for stateless 2026-07-28 requests (no session).
    pub(crate) async fn stateless(url: &str) -> Result<Self> {
        Self::connect(url, true)
            .await
            .with_context(|| format!("connecting to {url}"))
    }

    async fn connect(url: &str, stateless: bool) -> Result<Self> {
        let rest = url.strip_prefix("http://").context("an http:// URL")?;
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        let addr: SocketAddr = host.parse().context("a literal address")?;
        let stream = tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(addr))
            .await
            .context("connect timed out")??;
        stream.set_nodelay(true)?;
        let mut session = Self {
            stream,
            addr,
            host: host.to_owned(),
            path: format!("/{path}"),
            session: None,
            version: "2025-11-25".into(),
            stateless: false,
            buf: Vec::with_capacity(4096),
            next_id: 1,
        };
        if stateless {
            session.version = "2026-07-28".into();
            session.stateless = true;
            return Ok(session);
        }
        let init = session
            .call(
                "initialize",
                r#"{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"quarry-bench","version":"1"}}"#,
            )
            .await?;
        if !init.ok() {
            bail!(
                "initialize failed ({}): {}",
                init.status,
                String::from_utf8_lossy(&init.body)
            );
        }
        if let Some(v) = init.json()?["result"]["protocolVersion"].as_str() {
            session.version = v.to_owned();
        }
        session
            .send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await
            .context("notifications/initialized")?;
        Ok(session)
    }

    /// `resources/read` of `uri`.
    pub(crate) async fn read(&mut self, uri: &str) -> Result<Answer> {
        let params = format!(r#"{{"uri":{}}}"#, serde_json::to_string(uri)?);
        self.request("resources/read", &params, Some(uri)).await
    }

    /// `tools/call` of `name` with `arguments` (a JSON object).
    pub(crate) async fn tool(&mut self, name: &str, arguments: &str) -> Result<Answer> {
        let params = format!(r#"{{"name":"{name}","arguments":{arguments}}}"#);
        self.request("tools/call", &params, Some(name)).await
    }

    /// Every resource `resources/list` gives, following cursors; the count.
    pub(crate) async fn list_all(&mut self) -> Result<usize> {
        let mut cursor: Option<String> = None;
        let mut count = 0;
        loop {
            let params = match &cursor {
                Some(c) => format!(r#"{{"cursor":{}}}"#, serde_json::to_string(c)?),
                None => "{}".into(),
            };
            let answer = self.call("resources/list", &params).await?;
            if !answer.ok() {
                bail!(
                    "resources/list failed: {}",
                    String::from_utf8_lossy(&answer.body)
                );
            }
            let v = answer.json()?;
            count += v["result"]["resources"].as_array().map_or(0, Vec::len);
            match v["result"]["nextCursor"].as_str() {
                Some(next) if !next.is_empty() => cursor = Some(next.to_owned()),
                _ => return Ok(count),
            }
        }
    }

    /// A request and its answer.
    pub(crate) async fn call(&mut self, method: &str, params: &str) -> Result<Answer> {
        self.request(method, params, None).await
    }

    async fn request(&mut self, method: &str, params: &str, name: Option<&str>) -> Result<Answer> {
        let id = self.next_id;
        self.next_id += 1;
        let body = if self.stateless {
            let rest = params.strip_prefix('{').context("params are an object")?;
            let comma = if rest.trim_start().starts_with('}') {
                ""
            } else {
                ","
            };
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{"_meta":{META}{comma}{rest}}}"#
            )
        } else {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#)
        };
        let mut headers = String::new();
        if self.stateless {
            headers = format!("Mcp-Method: {method}\r\n");
            if let Some(name) = name {
                headers.push_str(&format!("Mcp-Name: {name}\r\n"));
            }
        }
        self.post_with(&body, &headers).await
    }

    /// A notification (answered 202 with no body).
    async fn send(&mut self, body: &str) -> Result<()> {
        let answer = self.post(body).await?;
        if !(200..300).contains(&answer.status) {
            bail!("notification refused with {}", answer.status);
        }
        Ok(())
    }

    async fn post(&mut self, body: &str) -> Result<Answer> {
        self.post_with(body, "").await
    }

    async fn post_with(&mut self, body: &str, headers: &str) -> Result<Answer> {
        let mut request = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: {}\r\nContent-Length: {}\r\n",
            self.path,
            self.host,
            self.version,
            body.len()
        );
        if let Some(s) = &self.session {
            request.push_str("Mcp-Session-Id: ");
            request.push_str(s);
            request.push_str("\r\n");
        }
        request.push_str(headers);
        request.push_str("\r\n");
        request.push_str(body);
        let sent = self.stream.write_all(request.as_bytes()).await;
        if sent.is_ok() {
            match self.response().await {
                Err(e) if self.buf.is_empty() && is_closed(&e) => {}
                answer => return answer,
            }
        }
        // The server closed the idle keep-alive connection (uvicorn does after 5 s), before
        // answering: as any HTTP client would, open another and send the request again.
        self.stream = TcpStream::connect(self.addr).await?;
        self.stream.set_nodelay(true)?;
        self.stream.write_all(request.as_bytes()).await?;
        self.response().await
    }

    /// Reads one HTTP response: headers, then a body by length or by chunks.
    async fn response(&mut self) -> Result<Answer> {
        self.buf.clear();
        let head_end = loop {
            if let Some(i) = memchr::memmem::find(&self.buf, b"\r\n\r\n") {
                break i + 4;
            }
            self.fill().await?;
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end]).into_owned();
        let status: u16 = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .context("no status")?;
        let mut length = None;
        let mut chunked = false;
        let mut events = false;
        for line in head.lines().skip(1) {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match name.to_ascii_lowercase().as_str() {
                "content-length" => length = value.parse::<usize>().ok(),
                "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
                "content-type" => events = value.starts_with("text/event-stream"),
                "mcp-session-id" => self.session = Some(value.to_owned()),
                _ => {}
            }
        }
        let mut body = self.buf.split_off(head_end);
        if let Some(n) = length {
            while body.len() < n {
                self.buf.clear();
                self.fill().await?;
                body.extend_from_slice(&self.buf);
            }
        } else if chunked {
            body = self.dechunk(body).await?;
        } else if status != 202 && status != 204 {
            bail!("an answer with neither length nor chunks ({status})");
        }
        if events {
            body = last_event(&body);
        }
        Ok(Answer { status, body })
    }

    async fn dechunk(&mut self, mut raw: Vec<u8>) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut at = 0;
        loop {
            let line_end = loop {
                if let Some(i) = memchr::memmem::find(&raw[at..], b"\r\n") {
                    break at + i;
                }
                self.more(&mut raw).await?;
            };
            let size_text = std::str::from_utf8(&raw[at..line_end])?;
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                .context("a chunk size")?;
            let start = line_end + 2;
            while raw.len() < start + size + 2 {
                self.more(&mut raw).await?;
            }
            if size == 0 {
                return Ok(out);
            }
            out.extend_from_slice(&raw[start..start + size]);
            at = start + size + 2;
        }
    }

    async fn more(&mut self, raw: &mut Vec<u8>) -> Result<()> {
        self.buf.clear();
        self.fill().await?;
        raw.extend_from_slice(&self.buf);
        Ok(())
    }

    async fn fill(&mut self) -> Result<()> {
        // Read into the buffer itself: 10,000 sessions must not each hold a read array.
        self.buf.reserve(16 * 1024);
        let n = tokio::time::timeout(Duration::from_secs(60), self.stream.read_buf(&mut self.buf))
            .await
            .context("no answer in 60 s")??;
        if n == 0 {
            bail!(CLOSED);
        }
        Ok(())
    }
}

/// Who asks, in every 2026-07-28 request.
const META: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"quarry-bench","version":"1"}}"#;

fn is_closed(e: &anyhow::Error) -> bool {
    e.to_string() == CLOSED
        || e.downcast_ref::<std::io::Error>().is_some_and(|e| {
            matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            )
        })
}

const CLOSED: &str = "the connection closed";

/// The last `data:` payload of an event stream (the answer; earlier ones are notifications or
/// priming events).
fn last_event(stream: &[u8]) -> Vec<u8> {
    let mut last: &[u8] = b"";
    for line in stream.split(|&b| b == b'\n') {
        if let Some(data) = line.strip_prefix(b"data:") {
            let data = data.strip_prefix(b" ").unwrap_or(data);
            let data = data.strip_suffix(b"\r").unwrap_or(data);
            if !data.is_empty() {
                last = data;
            }
        }
    }
    last.to_vec()
}
