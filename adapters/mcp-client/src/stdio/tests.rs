//! Lines bounded as they arrive, and the answers a cut or unparsable line gets.

use super::*;
use crate::answers::{TOO_LARGE_CODE, UNPARSABLE_CODE};
use serde_json::json;

fn lines_of(input: &[u8], limit: usize) -> Vec<Line> {
    let mut lines = Lines::new(limit);
    let mut out = Vec::new();
    // Small chunks, so that lines cross reads.
    for chunk in input.chunks(7) {
        let mut rest = chunk;
        while let Some(i) = rest.iter().position(|&b| b == b'\n') {
            lines.take(&rest[..i]);
            out.push(lines.end());
            rest = &rest[i + 1..];
        }
        lines.take(rest);
    }
    out
}

fn error_of(message: Option<RxJsonRpcMessage<RoleClient>>) -> (RequestId, i32, String) {
    match message {
        Some(JsonRpcMessage::Error(e)) => {
            (e.id.unwrap(), e.error.code.0, e.error.message.to_string())
        }
        other => panic!("not an error: {other:?}"),
    }
}

#[test]
fn short_lines_pass_whole_and_a_long_one_keeps_only_its_ends() {
    let long = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":\"{}\"}}",
        "x".repeat(1000)
    );
    let input = format!("{{\"a\":1}}\n{long}\n{{\"b\":2}}\n");
    let lines = lines_of(input.as_bytes(), 100);
    assert_eq!(lines[0], Line::Whole(b"{\"a\":1}".to_vec()));
    let Line::TooLong { len, head, tail } = &lines[1] else {
        panic!("{:?}", lines[1])
    };
    assert_eq!(*len, long.len());
    assert_eq!(head.as_slice(), &long.as_bytes()[..EDGE]);
    assert_eq!(tail.as_slice(), &long.as_bytes()[long.len() - EDGE..]);
    assert_eq!(lines[2], Line::Whole(b"{\"b\":2}".to_vec()));
}

// traces: RC-4 — an answer over the limit is answered at once, with size and limit as values.
#[test]
fn rc_4_a_long_response_is_answered_with_its_id_from_either_end() {
    let rmcp_style = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":\"{}\"}}\n",
        "x".repeat(1000)
    );
    let line = lines_of(rmcp_style.as_bytes(), 100).remove(0);
    let answer = message(line, 100);
    let (id, code, _) = error_of(answer.clone());
    assert_eq!((id, code), (RequestId::Number(7), TOO_LARGE_CODE));
    let Some(JsonRpcMessage::Error(e)) = answer else {
        unreachable!()
    };
    assert_eq!(
        e.error.data,
        Some(json!({"size": rmcp_style.len() - 1, "limit": 100}))
    );

    let ts_style = format!(
        "{{\"result\":{{\"text\":\"{}\"}},\"jsonrpc\":\"2.0\",\"id\":\"req-3\"}}\n",
        "y".repeat(5000)
    );
    let line = lines_of(ts_style.as_bytes(), 64).remove(0);
    assert_eq!(
        error_of(message(line, 64)).0,
        RequestId::String("req-3".into())
    );

    let anonymous = format!(
        "{{\"method\":\"notify\",\"params\":\"{}\"}}\n",
        "z".repeat(500)
    );
    let line = lines_of(anonymous.as_bytes(), 50).remove(0);
    assert!(message(line, 50).is_none(), "no id: dropped");
}

// traces: RC-8 — a response the parser rejects (a lone surrogate escape) is answered at once.
#[test]
fn rc_8_an_unparsable_response_is_answered_with_its_id() {
    let bad = b"{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"text\":\"a\\ud800b\"}}".to_vec();
    let (id, code, text) = error_of(message(Line::Whole(bad), 1000));
    assert_eq!((id, code), (RequestId::Number(4), UNPARSABLE_CODE));
    assert!(text.starts_with("the response does not parse"), "{text}");
    let garbage = b"this is not json".to_vec();
    assert!(
        message(Line::Whole(garbage), 1000).is_none(),
        "no id: ignored"
    );
    let good = b"{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{}}".to_vec();
    assert!(matches!(
        message(Line::Whole(good), 1000),
        Some(JsonRpcMessage::Response(_))
    ));
    assert!(message(Line::Whole(b"  ".to_vec()), 1000).is_none());
}
