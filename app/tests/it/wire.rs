//! The stdio wire as a raw client sees it: what bad messages get back, and that stdout carries
//! only MCP.

use serde_json::{Value, json};

/// `quarry serve --stdio` with no configuration, spoken to line by line: the child (killed when
/// dropped), its stdin, and its stdout's lines.
fn raw_gateway(
    dir: &std::path::Path,
    env: &[(&str, &str)],
) -> (
    tokio::process::Child,
    tokio::process::ChildStdin,
    tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
) {
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(crate::support::QUARRY)
        .args(["serve", "--stdio"])
        .current_dir(dir)
        .env_remove("QUARRY_CONFIG")
        .env("QUARRY_STORE_PATH", dir.join("quarry.db"))
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    (child, stdin, lines)
}

// traces: IV-5 — malformed JSON gets -32700 with id null, a batch -32600, an invalid request
// -32600 with its id, a tools/call without params -32602 with its id; after each, the next
// request is answered.
#[tokio::test]
async fn iv_5_bad_messages_get_the_specs_errors_and_the_connection_keeps_serving() {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().unwrap();
    let (_child, mut stdin, mut lines) = raw_gateway(dir.path(), &[]);
    let mut next = async || -> Value {
        let line = tokio::time::timeout(std::time::Duration::from_secs(20), lines.next_line())
            .await
            .expect("an answer, not silence")
            .unwrap()
            .expect("stdout open");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("non-JSON on stdout: {line:?}: {e}"))
    };
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    stdin
        .write_all(format!("{init}\n").as_bytes())
        .await
        .unwrap();
    assert_eq!(next().await["id"], 1);
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
        .await
        .unwrap();
    let cases: [(&str, Value, i64); 4] = [
        ("{this is not json", Value::Null, -32700),
        (
            r#"[{"jsonrpc":"2.0","id":5,"method":"ping"}]"#,
            Value::Null,
            -32600,
        ),
        (r#"{"jsonrpc":"2.0","id":6}"#, json!(6), -32600),
        (
            r#"{"jsonrpc":"2.0","id":"seven","method":"tools/call"}"#,
            json!("seven"),
            -32602,
        ),
    ];
    for (n, (bad, id, code)) in cases.into_iter().enumerate() {
        stdin
            .write_all(format!("{bad}\n").as_bytes())
            .await
            .unwrap();
        let answer = next().await;
        assert_eq!(answer["id"], id, "{bad} -> {answer}");
        assert_eq!(answer["error"]["code"], code, "{bad} -> {answer}");
        let ping = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}}\n",
            100 + n
        );
        stdin.write_all(ping.as_bytes()).await.unwrap();
        let pong = next().await;
        assert_eq!(pong["id"], 100 + n, "the next request is answered: {pong}");
        assert!(pong.get("result").is_some(), "{pong}");
    }
}

// traces: TR-7 — malformed JSON on stdin is answered with a JSON-RPC error and stdout carries only
// JSON-RPC messages.
#[tokio::test]
async fn tr_7_stdout_carries_only_mcp_even_after_garbage_input() {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().unwrap();
    let (mut child, mut stdin, mut lines) = raw_gateway(dir.path(), &[("QUARRY_LOG", "debug")]);
    stdin.write_all(b"{this is not json\n").await.unwrap();
    stdin.write_all(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#).await.unwrap();
    stdin.write_all(b"\n").await.unwrap();
    stdin
        .write_all(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await
        .unwrap();
    stdin.write_all(b"\n").await.unwrap();
    stdin
        .write_all(br#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#)
        .await
        .unwrap();
    stdin.write_all(b"\n").await.unwrap();
    let mut seen_tools = false;
    while !seen_tools {
        let line = tokio::time::timeout(std::time::Duration::from_secs(20), lines.next_line())
            .await
            .expect("an answer")
            .unwrap()
            .expect("stdout open");
        let msg: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("non-JSON on stdout: {line:?}: {e}"));
        assert_eq!(msg["jsonrpc"], "2.0", "{line}");
        if msg["id"] == 2 {
            let names: Vec<_> = msg["result"]["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].clone())
                .collect();
            assert_eq!(
                names,
                [
                    json!("list_mcp_resources"),
                    json!("read_mcp_resource"),
                    json!("list_mcp_resource_versions"),
                    json!("list_mcp_resource_templates"),
                    json!("purge_mcp_cache"),
                    json!("add_mcp_server"),
                    json!("remove_mcp_server"),
                    json!("mcp_auth_configure"),
                    json!("mcp_auth_test"),
                    json!("mcp_auth_remove"),
                    json!("mcp_auth_refresh"),
                    json!("mcp_audit_export"),
                ]
            );
            seen_tools = true;
        }
    }
    drop(stdin);
    let status = tokio::time::timeout(std::time::Duration::from_secs(10), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(
        status.success(),
        "closing stdin ends the server cleanly: {status}"
    );
}

// The issue's acceptance: no configuration file, an empty directory, and the tools still serve.
