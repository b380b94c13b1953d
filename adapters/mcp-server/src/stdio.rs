//! The stdio transport, with a gatekeeper in front of rmcp that answers what rmcp would not.
//!
//! rmcp drops a line that is not JSON without a word (the client waits forever), answers an
//! invalid request without its id, and a `tools/call` without `params` as an unknown method. The
//! gatekeeper reads each line first: malformed JSON gets `-32700` with `id: null`, a batch or an
//! invalid request `-32600` with the request's id when it can be read, a method that needs
//! `params` but has none (or not an object) `-32602`; everything else goes to rmcp unchanged.
//! Every answer, rmcp's and the gatekeeper's, goes out as one whole line through one writer, so
//! stdout carries only whole MCP messages.

use std::sync::Arc;

use quarry_ports::ResourceGateway;
use rmcp::ServiceExt;
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader, DuplexStream},
    sync::mpsc,
};

use crate::{GatewayServer, ServerOptions};

/// The longest line accepted from the client; a longer one is refused (`-32600`) and skipped.
const MAX_LINE: usize = 16 * 1024 * 1024;

/// How much of rmcp's output is in flight to stdout at once. (The copy through this pipe costs
/// about 0.5 ms per MiB of output, measured; larger pipes did not make it cheaper.)
const OUT_BUFFER: usize = 256 * 1024;

/// Methods whose requests must carry `params` (an object).
const NEEDS_PARAMS: &[&str] = &[
    "initialize",
    "tools/call",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "subscriptions/listen",
    "prompts/get",
    "completion/complete",
];

/// Serves `gateway` over this process's stdin and stdout until the client disconnects or
/// `shutdown` resolves. On shutdown, input ends as if the client had closed it: requests already
/// received are still answered (rmcp drains them), then the server stops.
///
/// # Errors
/// When the MCP handshake fails or the transport breaks.
pub async fn serve_stdio(
    gateway: Arc<dyn ResourceGateway>,
    options: ServerOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    let (to_rmcp, rmcp_in) = tokio::io::duplex(256 * 1024);
    let (rmcp_out, from_rmcp) = tokio::io::duplex(OUT_BUFFER);
    let (answers, answered) = mpsc::channel::<String>(64);
    tokio::spawn(async move {
        tokio::select! {
            () = gatekeeper(tokio::io::stdin(), to_rmcp, answers) => {}
            () = shutdown => {}
        }
        // Dropping the pipe's writing end is the end of input.
    });
    let writer = tokio::spawn(write_out(from_rmcp, answered));
    let service = GatewayServer::new(gateway, options)
        .serve((rmcp_in, rmcp_out))
        .await
        .map_err(|e| format!("MCP handshake on stdio failed: {e}"))?;
    let outcome = service
        .waiting()
        .await
        .map_err(|e| format!("the stdio server stopped: {e}"));
    // rmcp's output closed with it: what is left is written before the process goes on.
    let _ = writer.await;
    outcome.map(|_| ())
}

/// Writes rmcp's lines and the gatekeeper's answers to stdout, each line whole. rmcp's bytes are
/// copied as they are (no decoding), a line at a time, so an answer never lands inside another.
async fn write_out(from_rmcp: DuplexStream, mut answered: mpsc::Receiver<String>) {
    let mut stdout = tokio::io::stdout();
    let mut from_rmcp = BufReader::with_capacity(OUT_BUFFER, from_rmcp);
    let mut answers_open = true;
    loop {
        // Until rmcp's output ends: its end is the end of the session (the gatekeeper's answers
        // are to requests rmcp never saw, so none is pending once rmcp is done). Waiting for
        // rmcp's next byte consumes nothing, so an answer can go out between two lines; once a
        // line has begun, it is copied whole before anything else.
        let next = tokio::select! {
            biased;
            ready = from_rmcp.fill_buf() => Next::Rmcp(ready.map(|b| !b.is_empty())),
            answer = answered.recv(), if answers_open => Next::Answer(answer),
        };
        let written = match next {
            Next::Rmcp(Ok(true)) => copy_line(&mut from_rmcp, &mut stdout).await.map(|_| ()),
            Next::Rmcp(_) => break,
            Next::Answer(Some(answer)) => stdout.write_all(format!("{answer}\n").as_bytes()).await,
            Next::Answer(None) => {
                answers_open = false;
                continue;
            }
        };
        if written.is_err() || stdout.flush().await.is_err() {
            break;
        }
    }
}

enum Next {
    Rmcp(std::io::Result<bool>),
    Answer(Option<String>),
}

/// Copies one line (newline included) from `from` to `to`, chunk by chunk as it arrives. False
/// when input ends first.
async fn copy_line(
    from: &mut BufReader<DuplexStream>,
    to: &mut (impl AsyncWriteExt + Unpin),
) -> std::io::Result<bool> {
    loop {
        let chunk = from.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(false);
        }
        let (part, done) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (&chunk[..=i], true),
            None => (chunk, false),
        };
        to.write_all(part).await?;
        let used = part.len();
        from.consume(used);
        if done {
            return Ok(true);
        }
    }
}

/// Reads the client's lines: forwards requests rmcp can answer, answers the others itself.
async fn gatekeeper(
    input: impl AsyncRead + Unpin,
    mut to_rmcp: DuplexStream,
    answers: mpsc::Sender<String>,
) {
    let mut input = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        match read_line(&mut input, &mut line).await {
            Ok(Line::End) | Err(_) => return,
            Ok(Line::TooLong) => {
                let _ = answers
                    .send(error(
                        Value::Null,
                        -32600,
                        "the request is larger than 16 MiB",
                    ))
                    .await;
            }
            Ok(Line::Complete) => match check(&line) {
                Verdict::Forward => {
                    line.push(b'\n');
                    if to_rmcp.write_all(&line).await.is_err() {
                        return;
                    }
                }
                Verdict::Skip => {}
                Verdict::Answer(answer) => {
                    if answers.send(answer).await.is_err() {
                        return;
                    }
                }
            },
        }
    }
}

enum Line {
    Complete,
    TooLong,
    End,
}

/// Reads one line (without its newline) into `out`; a line over [`MAX_LINE`] is skipped to its
/// end without being kept.
async fn read_line(
    input: &mut (impl AsyncBufReadExt + Unpin),
    out: &mut Vec<u8>,
) -> std::io::Result<Line> {
    let mut too_long = false;
    loop {
        let chunk = input.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(if out.is_empty() && !too_long {
                Line::End
            } else if too_long {
                Line::TooLong
            } else {
                Line::Complete
            });
        }
        let (part, done) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (&chunk[..i], Some(i + 1)),
            None => (chunk, None),
        };
        if !too_long {
            if out.len() + part.len() > MAX_LINE {
                too_long = true;
                out.clear();
            } else {
                out.extend_from_slice(part);
            }
        }
        let used = done.unwrap_or(chunk.len());
        input.consume(used);
        if done.is_some() {
            return Ok(if too_long {
                Line::TooLong
            } else {
                Line::Complete
            });
        }
    }
}

enum Verdict {
    Forward,
    Skip,
    Answer(String),
}

fn error(id: Value, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

/// What to do with one line from the client.
fn check(line: &[u8]) -> Verdict {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Skip;
    }
    let Ok(message) = serde_json::from_slice::<Value>(line) else {
        return Verdict::Answer(error(
            Value::Null,
            -32700,
            "Parse error: the message is not JSON",
        ));
    };
    let Value::Object(fields) = &message else {
        let what = if message.is_array() {
            "batches are not supported: send one request per message"
        } else {
            "a message must be a JSON object"
        };
        return Verdict::Answer(error(Value::Null, -32600, what));
    };
    let id = fields
        .get("id")
        .filter(|id| id.is_string() || id.is_i64() || id.is_u64())
        .cloned();
    let is_response = fields.contains_key("result") || fields.contains_key("error");
    let method = fields.get("method").and_then(Value::as_str);
    let invalid =
        |why: &str| Verdict::Answer(error(id.clone().unwrap_or(Value::Null), -32600, why));
    if fields.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid("Invalid request: \"jsonrpc\" must be \"2.0\"");
    }
    match (method, is_response) {
        (None, true) => Verdict::Forward,
        (None, false) => invalid("Invalid request: no \"method\""),
        (Some(method), _) => {
            if fields.contains_key("id") && id.is_none() {
                return invalid("Invalid request: \"id\" must be a string or an integer");
            }
            let params_ok = fields.get("params").is_some_and(Value::is_object);
            match &id {
                Some(id) if NEEDS_PARAMS.contains(&method) && !params_ok => Verdict::Answer(error(
                    id.clone(),
                    -32602,
                    &format!("Invalid params: {method} needs \"params\", an object"),
                )),
                _ => Verdict::Forward,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(line: &str) -> Value {
        match check(line.as_bytes()) {
            Verdict::Answer(a) => serde_json::from_str(&a).unwrap(),
            Verdict::Forward => panic!("{line} was forwarded"),
            Verdict::Skip => panic!("{line} was skipped"),
        }
    }

    #[test]
    fn iv_5_bad_messages_get_the_specs_errors_with_the_right_id() {
        let parse = answer("{not json");
        assert_eq!(
            (parse["id"].clone(), parse["error"]["code"].clone()),
            (Value::Null, json!(-32700))
        );
        let batch = answer(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#);
        assert_eq!(batch["error"]["code"], -32600);
        let no_method = answer(r#"{"jsonrpc":"2.0","id":7}"#);
        assert_eq!(
            (no_method["id"].clone(), no_method["error"]["code"].clone()),
            (json!(7), json!(-32600))
        );
        let old = answer(r#"{"jsonrpc":"1.0","id":"a","method":"ping"}"#);
        assert_eq!(
            (old["id"].clone(), old["error"]["code"].clone()),
            (json!("a"), json!(-32600))
        );
        let no_params = answer(r#"{"jsonrpc":"2.0","id":9,"method":"tools/call"}"#);
        assert_eq!(
            (no_params["id"].clone(), no_params["error"]["code"].clone()),
            (json!(9), json!(-32602))
        );
        let bad_params =
            answer(r#"{"jsonrpc":"2.0","id":10,"method":"resources/read","params":[1]}"#);
        assert_eq!(bad_params["error"]["code"], -32602);
    }

    #[test]
    fn good_messages_go_to_rmcp() {
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":{}}"#,
        ] {
            assert!(matches!(check(line.as_bytes()), Verdict::Forward), "{line}");
        }
        assert!(matches!(check(b"   "), Verdict::Skip));
    }

    #[tokio::test]
    async fn lines_are_bounded_and_split_exactly() {
        let long = "x".repeat(MAX_LINE + 10);
        let text = format!("one\n{long}\ntwo");
        let mut input = BufReader::new(text.as_bytes());
        let mut out = Vec::new();
        assert!(matches!(
            read_line(&mut input, &mut out).await.unwrap(),
            Line::Complete
        ));
        assert_eq!(out, b"one");
        out.clear();
        assert!(matches!(
            read_line(&mut input, &mut out).await.unwrap(),
            Line::TooLong
        ));
        assert!(out.is_empty(), "nothing of the long line was kept");
        out.clear();
        assert!(matches!(
            read_line(&mut input, &mut out).await.unwrap(),
            Line::Complete
        ));
        assert_eq!(out, b"two");
        out.clear();
        assert!(matches!(
            read_line(&mut input, &mut out).await.unwrap(),
            Line::End
        ));
    }
}
