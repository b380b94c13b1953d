//! Bad input from an agent: every case gets its E-code and a clear message, none reaches an
//! upstream it should not, and the gateway keeps serving.

use serde_json::json;

use crate::{
    serve::two_upstreams,
    support::{call, call_error, call_raw, gateway, http_fixture, http_server},
};

// traces: IV-2 — URIs outside the pattern, for unknown servers, with `..` or `%2e%2e`, NUL bytes,
// prefix tricks between server names and 64 KiB: refused with their code, and no upstream call.
#[tokio::test]
async fn iv_2_bad_uris_are_refused_without_an_upstream_call() {
    let dir = tempfile::tempdir().unwrap();
    let notes = http_fixture("notes", 5).await;
    let client = gateway(dir.path(), &http_server("notes", &notes.url)).await;
    let cases = [
        ("http://notes/fixture_3A//item/1", "E001"),
        ("mcp://notes/../fixture_3A//item/1", "E001"),
        ("mcp://notes/a%2e%2e", "E001"),
        ("mcp://notes/fixture_3a//item/1", "E001"),
        ("mcp://notes/a_00b", "E001"),
        ("mcp://notes/a_2Fb", "E001"),
        ("mcp://note/fixture_3A//item/1", "E003"),
        ("mcp://notesx/fixture_3A//item/1", "E003"),
        ("mcp://Notes/fixture_3A//item/1", "E003"),
    ];
    let long = format!("mcp://notes/{}", "a".repeat(65536));
    for (uri, code) in cases.iter().copied().chain([(long.as_str(), "E001")]) {
        let (got, message) =
            call_error(&client, "read_mcp_resource", json!({"resource_uri": uri})).await;
        assert_eq!(got, code, "{uri}: {message}");
    }
    assert_eq!(notes.server.reads(), 0, "no bad URI reached the upstream");
    call(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://notes/fixture_3A//item/1"}),
    )
    .await;
    assert_eq!(notes.server.reads(), 1, "and the counter does count reads");
    client.cancel().await.unwrap();
}

// An upstream's own error answer is E013 with its code and message, never "unreachable", and
// however often it comes it opens no circuit: the server answered.
// traces: IV-1, IV-3, IV-4 — every bad input gets its code and a clear message, and the gateway
// keeps serving.
#[tokio::test]
async fn iv_1_iv_3_iv_4_bad_input_gets_the_right_code_and_never_a_panic() {
    let (_dir, _notes, client) = two_upstreams().await;
    let cases = [
        (
            "read_mcp_resource",
            json!({"resource_uri": "http://files/x"}),
            "E001",
            "must start with mcp://",
        ),
        (
            "read_mcp_resource",
            json!({"resource_uri": "mcp://files/a%2e%2e"}),
            "E001",
            "'%'",
        ),
        (
            "read_mcp_resource",
            json!({"resource_uri": "mcp://files/a_00b"}),
            "E001",
            "NUL",
        ),
        (
            "read_mcp_resource",
            json!({"resource_uri": format!("mcp://files/{}", "a".repeat(65536))}),
            "E001",
            "limit is",
        ),
        (
            "read_mcp_resource",
            json!({"resource_uri": "mcp://nosuch/x"}),
            "E003",
            "'nosuch' is not registered",
        ),
        (
            "read_mcp_resource",
            json!({"resource_uri": "mcp://file/fixture_3A//counter"}),
            "E003",
            "'file' is not registered",
        ),
        (
            "read_mcp_resource",
            json!({"resource_uri": "mcp://files/fixture_3A//missing"}),
            "E002",
            "not found",
        ),
        (
            "read_mcp_resource",
            json!({"resource_uri": "mcp://files/fixture_3A//counter", "offset": -1}),
            "E001",
            "offset",
        ),
        (
            "read_mcp_resource",
            json!({"resource_uri": "mcp://files/fixture_3A//counter", "limit": 10485761}),
            "E001",
            "limit",
        ),
        (
            "read_mcp_resource",
            json!({"resource_uri": "mcp://files/fixture_3A//counter", "offset": 1000}),
            "E007",
            "beyond the end",
        ),
        (
            "read_mcp_resource",
            json!({"resource_uri": "mcp://files/fixture_3A//counter", "version": "v7"}),
            "E002",
            "v7",
        ),
        (
            "read_mcp_resource",
            json!({}),
            "E001",
            "missing field `resource_uri`",
        ),
        (
            "read_mcp_resource",
            json!({"resource_uri": 5}),
            "E001",
            "invalid type",
        ),
        (
            "list_mcp_resources",
            json!({"limit": 0}),
            "E001",
            "limit must be between 1 and 1000",
        ),
        (
            "list_mcp_resources",
            json!({"limit": 1001}),
            "E001",
            "limit must be between 1 and 1000",
        ),
        (
            "list_mcp_resources",
            json!({"offset": -5}),
            "E001",
            "offset must be 0 or more",
        ),
        (
            "list_mcp_resources",
            json!({"limit": 1e300}),
            "E001",
            "invalid type",
        ),
        (
            "list_mcp_resources",
            json!({"limit": "10"}),
            "E001",
            "invalid type",
        ),
        (
            "list_mcp_resources",
            json!({"filter_type": "table"}),
            "E001",
            "not one of file, db",
        ),
        (
            "list_mcp_resources",
            json!({"server": "nosuch"}),
            "E003",
            "not registered",
        ),
        (
            "list_mcp_resources",
            json!({"server": ""}),
            "E001",
            "server must be",
        ),
        (
            "list_mcp_resources",
            json!({"bogus": true}),
            "E001",
            "unknown field `bogus`",
        ),
        (
            "list_mcp_resources",
            json!({"offset": {"deep": [[[[[[[[1]]]]]]]]}}),
            "E001",
            "invalid type",
        ),
    ];
    for (tool, args, code, needle) in cases {
        let (got, message) = call_error(&client, tool, args.clone()).await;
        assert_eq!(got, code, "{tool} {args}: {message}");
        assert!(
            message.contains(needle),
            "{tool} {args}: {message:?} lacks {needle:?}"
        );
        assert!(
            message.len() < 400,
            "messages stay bounded: {}",
            message.len()
        );
    }
    // An unknown tool is a protocol error, not a crash.
    let unknown = client
        .call_tool(rmcp::model::CallToolRequestParams::new("drop_everything"))
        .await;
    assert!(unknown.is_err());
    // Still serving.
    let (is_error, _) = call_raw(&client, "list_mcp_resources", json!({"limit": 1})).await;
    assert!(!is_error);
    client.cancel().await.unwrap();
}
