//! `era_of` and `read_asked` take exactly what rmcp would take as it stands, in either era (a
//! `resources/read` or a `read_mcp_resource` call, nothing else), and the statuses are rmcp's.

#![allow(clippy::unwrap_used)]

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

use super::*;

const URI: &str = "mcp://notes/fixture_3A//item/1";

fn headers(lines: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in lines {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

/// The headers of a read the direct path takes, with `change` applied: a header set anew
/// (an empty value removes it) or, with `+`, added beside it.
fn with(change: &[(&str, &str)]) -> HeaderMap {
    changed(
        vec![
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "resources/read"),
            ("mcp-name", URI),
        ],
        change,
    )
}

/// `base` with `change` applied, as `with` describes.
fn changed<'a>(mut base: Vec<(&'a str, &'a str)>, change: &[(&'a str, &'a str)]) -> HeaderMap {
    for (name, value) in change {
        if let Some(added) = name.strip_prefix('+') {
            base.push((added, value));
        } else {
            base.retain(|(n, _)| n != name);
            if !value.is_empty() {
                base.push((name, value));
            }
        }
    }
    headers(&base)
}

/// The stateless read `headers` and `body` ask for, if the direct path takes it.
fn asked(headers: &HeaderMap, body: &[u8]) -> Option<Read> {
    era_of(headers, false).and_then(|era| read_asked(era, headers, body))
}

/// The read `headers` and `body` ask for on a session, if the direct path takes it;
/// `held_here`: the guard marked the session.
fn asked_on_session(held_here: bool, headers: &HeaderMap, body: &[u8]) -> Option<Read> {
    era_of(headers, held_here)
        .filter(|era| *era == Era::Session)
        .and_then(|era| read_asked(era, headers, body))
}

/// The headers of a session's read the direct path takes, with `change` applied as in `with`.
fn on_session(change: &[(&str, &str)]) -> HeaderMap {
    changed(
        vec![
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", "2025-11-25"),
            ("mcp-session-id", "abc"),
        ],
        change,
    )
}

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
    })
}

fn body(message: &Value) -> Vec<u8> {
    serde_json::to_vec(message).unwrap()
}

fn read_body(meta: Value) -> Vec<u8> {
    body(
        &json!({"jsonrpc": "2.0", "id": 7, "method": "resources/read",
        "params": {"uri": URI, "_meta": meta}}),
    )
}

#[test]
fn a_plain_2026_read_is_taken_with_its_id_and_host_request_id() {
    assert_eq!(
        asked(&with(&[]), &read_body(meta())),
        Some(Read {
            id: RequestId::Number(7),
            read: DirectRead::Resource(URI.into()),
            host_request_id: None,
        })
    );
    let mut given = meta();
    given["io.quarry/host_request_id"] = json!("op-1");
    let string_id = body(
        &json!({"jsonrpc": "2.0", "id": "r-1", "method": "resources/read",
        "params": {"uri": URI, "_meta": given}}),
    );
    let read = asked(&with(&[]), &string_id).unwrap();
    assert_eq!(read.id, RequestId::String("r-1".into()));
    assert_eq!(read.host_request_id.as_deref(), Some("op-1"));
    // Parameters of Content-Type and the order of Accept do not matter.
    let loose = with(&[
        ("content-type", "application/json; charset=utf-8"),
        ("accept", "text/event-stream, application/json"),
    ]);
    assert!(asked(&loose, &read_body(meta())).is_some());
}

#[test]
fn any_header_rmcp_would_judge_otherwise_leaves_the_request_to_rmcp() {
    let cases: [&[(&str, &str)]; 14] = [
        &[("+mcp-session-id", "abc")],
        &[("+origin", "http://localhost:1234")],
        &[("mcp-protocol-version", "2025-11-25")],
        &[("mcp-protocol-version", "")],
        &[("+mcp-protocol-version", "2026-07-28")],
        &[("mcp-method", "")],
        &[("mcp-method", "resources/list")],
        &[("+mcp-method", "resources/read")],
        &[("mcp-name", "")],
        &[("mcp-name", "mcp://notes/fixture_3A//item/2")],
        &[("mcp-name", "=?base64?bWNw?=")],
        &[("accept", "application/json, text/event-stream;q=1")],
        &[("accept", "application/json")],
        &[("content-type", "text/plain")],
    ];
    for change in cases {
        assert_eq!(asked(&with(change), &read_body(meta())), None, "{change:?}");
    }
}

#[test]
fn any_body_but_one_complete_2026_read_is_left_to_rmcp() {
    let mut old = meta();
    old["io.modelcontextprotocol/protocolVersion"] = json!("2025-11-25");
    let mut no_capabilities = meta();
    no_capabilities
        .as_object_mut()
        .unwrap()
        .remove("io.modelcontextprotocol/clientCapabilities");
    let one = json!({"jsonrpc": "2.0", "id": 7, "method": "resources/read",
        "params": {"uri": URI, "_meta": meta()}});
    let cases = [
        read_body(old),
        read_body(no_capabilities),
        body(
            &json!({"jsonrpc": "2.0", "id": 7, "method": "resources/read",
            "params": {"uri": URI}}),
        ),
        body(
            &json!({"jsonrpc": "2.0", "id": 7, "method": "resources/list",
            "params": {"_meta": meta()}}),
        ),
        body(&json!({"jsonrpc": "2.0", "method": "resources/read",
            "params": {"uri": URI, "_meta": meta()}})),
        body(&json!([one])),
        b"{not json".to_vec(),
        Vec::new(),
    ];
    for case in cases {
        assert_eq!(
            asked(&with(&[]), &case),
            None,
            "{}",
            String::from_utf8_lossy(&case)
        );
    }
}

#[test]
fn errors_get_the_statuses_rmcp_gives_them() {
    let status = |code| status_of(Some(&ErrorData::new(code, "x", None)));
    assert_eq!(status(ErrorCode::HEADER_MISMATCH), StatusCode::BAD_REQUEST);
    assert_eq!(
        status(ErrorCode::UNSUPPORTED_PROTOCOL_VERSION),
        StatusCode::BAD_REQUEST
    );
    assert_eq!(status(ErrorCode::METHOD_NOT_FOUND), StatusCode::NOT_FOUND);
    assert_eq!(status(ErrorCode::INVALID_PARAMS), StatusCode::OK);
    assert_eq!(status(ErrorCode::INTERNAL_ERROR), StatusCode::OK);
    assert_eq!(status_of(None), StatusCode::OK);
}

#[test]
fn a_plain_read_on_a_session_held_here_is_taken() {
    let plain = body(
        &json!({"jsonrpc": "2.0", "id": 9, "method": "resources/read",
        "params": {"uri": URI, "_meta": {"io.quarry/host_request_id": "op-9"}}}),
    );
    assert_eq!(
        asked_on_session(true, &on_session(&[]), &plain),
        Some(Read {
            id: RequestId::Number(9),
            read: DirectRead::Resource(URI.into()),
            host_request_id: Some("op-9".into()),
        })
    );
    // Not marked by the guard (another agent's, not held here, or due to pass through rmcp).
    assert_eq!(asked_on_session(false, &on_session(&[]), &plain), None);
}

#[test]
fn a_session_read_rmcp_would_judge_otherwise_is_left_to_rmcp() {
    let plain = body(
        &json!({"jsonrpc": "2.0", "id": 9, "method": "resources/read", "params": {"uri": URI}}),
    );
    let header_cases: [&[(&str, &str)]; 10] = [
        &[("+mcp-session-id", "abd")],
        &[("+origin", "http://localhost:1234")],
        &[("mcp-protocol-version", "2025-06-18")],
        &[("mcp-protocol-version", "2026-07-28")],
        &[("mcp-protocol-version", "")],
        &[("+mcp-method", "resources/read")],
        &[("+mcp-name", URI)],
        &[("accept", "application/json, text/event-stream;q=1")],
        &[("accept", "application/json")],
        &[("content-type", "text/plain")],
    ];
    for change in header_cases {
        assert_eq!(
            asked_on_session(true, &on_session(change), &plain),
            None,
            "{change:?}"
        );
    }
    let body_cases = [
        // A version in `_meta` is rmcp's to check.
        body(
            &json!({"jsonrpc": "2.0", "id": 9, "method": "resources/read",
            "params": {"uri": URI, "_meta": {"io.modelcontextprotocol/protocolVersion": "2025-11-25"}}}),
        ),
        body(&json!({"jsonrpc": "2.0", "id": 9, "method": "resources/list", "params": {}})),
        body(&json!({"jsonrpc": "2.0", "method": "resources/read", "params": {"uri": URI}})),
        body(
            &json!([{"jsonrpc": "2.0", "id": 9, "method": "resources/read",
            "params": {"uri": URI}}]),
        ),
        b"{not json".to_vec(),
    ];
    for case in body_cases {
        assert_eq!(
            asked_on_session(true, &on_session(&[]), &case),
            None,
            "{}",
            String::from_utf8_lossy(&case)
        );
    }
}

/// A `tools/call` of `tool` with `arguments` (and more `params`, merged in).
fn call_body(tool: &str, arguments: &Value, more: &Value) -> Vec<u8> {
    let mut params = json!({"name": tool, "arguments": arguments});
    for (key, value) in more.as_object().unwrap() {
        params[key] = value.clone();
    }
    body(&json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": params}))
}

/// The headers of a stateless `read_mcp_resource` call the direct path takes.
fn with_tool(change: &[(&str, &str)]) -> HeaderMap {
    let mut change = change.to_vec();
    change.splice(
        0..0,
        [
            ("mcp-method", "tools/call"),
            ("mcp-name", "read_mcp_resource"),
        ],
    );
    with(&change)
}

#[test]
fn a_read_mcp_resource_call_is_taken_in_either_era_with_its_arguments() {
    let arguments = json!({"resource_uri": URI, "offset": 2});
    let expected = |id| Read {
        id: RequestId::Number(id),
        read: DirectRead::Tool(arguments.as_object().cloned()),
        host_request_id: None,
    };
    let stateless = call_body("read_mcp_resource", &arguments, &json!({"_meta": meta()}));
    assert_eq!(asked(&with_tool(&[]), &stateless), Some(expected(8)));
    let on_a_session = call_body("read_mcp_resource", &arguments, &json!({}));
    assert_eq!(
        asked_on_session(true, &on_session(&[]), &on_a_session),
        Some(expected(8))
    );
    // No arguments at all is the tool's to refuse, as rmcp's path does.
    let bare = body(&json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
        "params": {"name": "read_mcp_resource"}}));
    assert_eq!(
        asked_on_session(true, &on_session(&[]), &bare).map(|r| r.read),
        Some(DirectRead::Tool(None))
    );
}

#[test]
fn any_other_tool_call_or_a_mismatched_one_is_left_to_rmcp() {
    let arguments = json!({"resource_uri": URI});
    let stateless = call_body("read_mcp_resource", &arguments, &json!({"_meta": meta()}));
    let header_cases: [&[(&str, &str)]; 5] = [
        // Another tool named in the header is not even parsed.
        &[("mcp-name", "list_mcp_resources")],
        &[("mcp-name", "")],
        &[("mcp-name", "=?base64?cmVhZF9tY3BfcmVzb3VyY2U=?=")],
        // The header says one method and the body is another.
        &[("mcp-method", "resources/read")],
        &[("mcp-protocol-version", "2025-11-25")],
    ];
    for change in header_cases {
        assert_eq!(asked(&with_tool(change), &stateless), None, "{change:?}");
    }
    let body_cases = [
        call_body("list_mcp_resources", &json!({}), &json!({"_meta": meta()})),
        call_body("read_mcp_resource", &arguments, &json!({})),
        call_body(
            "read_mcp_resource",
            &arguments,
            &json!({"_meta": meta(), "requestState": "s"}),
        ),
        call_body(
            "read_mcp_resource",
            &arguments,
            &json!({"_meta": meta(), "inputResponses": {}}),
        ),
    ];
    for case in &body_cases {
        assert_eq!(
            asked(&with_tool(&[]), case),
            None,
            "{}",
            String::from_utf8_lossy(case)
        );
    }
    // On a session: another tool, and the multi-round-trip fields.
    for case in [
        call_body("list_mcp_resources", &json!({}), &json!({})),
        call_body(
            "read_mcp_resource",
            &arguments,
            &json!({"requestState": "s"}),
        ),
    ] {
        assert_eq!(
            asked_on_session(true, &on_session(&[]), &case),
            None,
            "{}",
            String::from_utf8_lossy(&case)
        );
    }
}

/// The headers of an `initialize` the direct path takes, with `change` applied as in `with`.
fn opening(change: &[(&str, &str)]) -> HeaderMap {
    changed(
        vec![
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
        ],
        change,
    )
}

fn initialize_body(params: &Value) -> Vec<u8> {
    body(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}))
}

fn initialize_params(version: &str) -> Value {
    json!({"protocolVersion": version, "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}})
}

#[test]
fn a_plain_initialize_is_taken_with_its_id_and_parameters() {
    let plain = initialize_body(&initialize_params("2025-11-25"));
    let (id, params) = initialize_asked(&opening(&[]), &plain).unwrap();
    assert_eq!(id, RequestId::Number(1));
    assert_eq!(params.protocol_version, ProtocolVersion::V_2025_11_25);
    assert_eq!(params.client_info.name, "t");
    // A version header equal to the body's is what rmcp takes too.
    let named = opening(&[("mcp-protocol-version", "2025-11-25")]);
    assert!(initialize_asked(&named, &plain).is_some());
    // An older version is taken here too: whether it negotiates 2025-11-25 is the handler's.
    let older = initialize_body(&initialize_params("2025-06-18"));
    assert!(initialize_asked(&opening(&[]), &older).is_some());
}

#[test]
fn an_initialize_rmcp_would_judge_otherwise_is_left_to_rmcp() {
    let plain = initialize_body(&initialize_params("2025-11-25"));
    let header_cases: [&[(&str, &str)]; 9] = [
        // A session already: rmcp's to refuse.
        &[("mcp-session-id", "abc")],
        &[("origin", "http://localhost:1234")],
        // A header that differs from the body's version, or given twice.
        &[("mcp-protocol-version", "2025-06-18")],
        &[
            ("mcp-protocol-version", "2025-11-25"),
            ("+mcp-protocol-version", "2025-11-25"),
        ],
        &[("mcp-method", "initialize")],
        &[("mcp-name", "x")],
        &[("accept", "application/json, text/event-stream;q=1")],
        &[("accept", "application/json")],
        &[("content-type", "text/plain")],
    ];
    for change in header_cases {
        assert!(
            initialize_asked(&opening(change), &plain).is_none(),
            "{change:?}"
        );
    }
    let mut with_meta = initialize_params("2025-11-25");
    with_meta["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2025-11-25"});
    let body_cases = [
        initialize_body(&with_meta),
        body(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})),
        body(&json!({"jsonrpc": "2.0", "method": "initialize",
            "params": initialize_params("2025-11-25")})),
        body(&json!([{"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": initialize_params("2025-11-25")}])),
        body(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})),
        b"{not json".to_vec(),
    ];
    for case in body_cases {
        assert!(
            initialize_asked(&opening(&[]), &case).is_none(),
            "{}",
            String::from_utf8_lossy(&case)
        );
    }
}

#[test]
fn only_a_plain_initialized_notification_is_acknowledged_here() {
    let told = body(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    assert!(initialized_told(&on_session(&[]), &told));
    assert!(initialized_told(
        &on_session(&[("mcp-protocol-version", "")]),
        &told
    ));
    let header_cases: [&[(&str, &str)]; 5] = [
        &[("+origin", "http://localhost:1234")],
        &[("mcp-protocol-version", "2025-06-18")],
        &[("+mcp-method", "notifications/initialized")],
        &[("accept", "application/json")],
        &[("content-type", "text/plain")],
    ];
    for change in header_cases {
        assert!(!initialized_told(&on_session(change), &told), "{change:?}");
    }
    let body_cases = [
        body(
            &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 1}}),
        ),
        body(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})),
        body(&json!([{"jsonrpc": "2.0", "method": "notifications/initialized"}])),
        b"{not json".to_vec(),
    ];
    for case in body_cases {
        assert!(
            !initialized_told(&on_session(&[]), &case),
            "{}",
            String::from_utf8_lossy(&case)
        );
    }
}
