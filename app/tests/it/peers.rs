//! Real peer servers from npm behind the gateway.

use base64::Engine as _;
use quarry_testkit::peers;
use rmcp::{ServiceExt, model::ClientConfig, transport::TokioChildProcess};
use serde_json::json;

use crate::{
    resource_server::{World, resource, world},
    support::{call, call_error, gateway},
};

// The acceptance: the 100-resource paginated server-everything lists all 100 and every one
// reads correctly (odd text, even blob), byte for byte what a direct client reads.
#[tokio::test]
async fn server_everything_lists_all_100_and_every_read_matches_a_direct_read() {
    let everything = peers::require(peers::SERVER_EVERYTHING);
    let dir = tempfile::tempdir().unwrap();
    let script = everything.script.display().to_string();
    let config =
        format!("[servers.everything]\ncommand = \"node\"\nargs = [{script:?}, \"stdio\"]\n");
    let client = gateway(dir.path(), &config).await;

    let mut direct_cmd = tokio::process::Command::new("node");
    direct_cmd.args([script.as_str(), "stdio"]);
    let (transport, _) = TokioChildProcess::builder(direct_cmd)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let direct = ClientConfig::default().serve(transport).await.unwrap();

    let listing = call(
        &client,
        "list_mcp_resources",
        json!({"server": "everything", "limit": 1000}),
    )
    .await;
    assert_eq!(listing["total_count"], 100);
    assert_eq!(listing["partial"], false);
    let resources = listing["resources"].as_array().unwrap();
    assert_eq!(resources.len(), 100);
    for id in 1..=100 {
        let uri = format!("mcp://everything/test_3A//static/resource/{id}");
        assert!(
            resources.iter().any(|r| r["uri"] == uri.as_str()),
            "{uri} listed"
        );
        let read = call(&client, "read_mcp_resource", json!({"resource_uri": uri})).await;
        let want = direct
            .read_resource(rmcp::model::ReadResourceRequestParams::new(format!(
                "test://static/resource/{id}"
            )))
            .await
            .unwrap();
        match &want.contents[0] {
            rmcp::model::ResourceContents::TextResourceContents { text, .. } => {
                assert_eq!(id % 2, 1, "odd ids are text");
                assert_eq!(read["content"], text.as_str(), "{uri}");
                assert_eq!(read["size"], text.len());
            }
            rmcp::model::ResourceContents::BlobResourceContents { blob, .. } => {
                assert_eq!(id % 2, 0, "even ids are blobs");
                let got = base64::engine::general_purpose::STANDARD
                    .decode(read["bytes_content"].as_str().unwrap())
                    .unwrap();
                let expected = base64::engine::general_purpose::STANDARD
                    .decode(blob)
                    .unwrap();
                assert_eq!(got, expected, "{uri}");
            }
            other => panic!("{other:?}"),
        }
    }
    // server-everything answers an unknown resource with -32603 "Unknown resource: ...": that is
    // "not found" (E002), not an unreachable server, and the server stays connected.
    for _ in 0..6 {
        let (code, message) = call_error(
            &client,
            "read_mcp_resource",
            json!({"resource_uri": "mcp://everything/test_3A//static/resource/100000"}),
        )
        .await;
        assert_eq!(code, "E002", "{message}");
    }
    let status = call(
        &client,
        "list_mcp_resources",
        json!({"server": "everything", "limit": 1}),
    )
    .await;
    assert_eq!(status["servers"][0]["status"], "connected", "{status}");
    direct.cancel().await.unwrap();
    client.cancel().await.unwrap();
}

// A tools-only real server answers -32601 to resources/list: listed as zero resources, connected.
#[tokio::test]
async fn server_filesystem_has_no_resources_and_that_is_normal() {
    let fs = peers::require(peers::SERVER_FILESYSTEM);
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[servers.fs]\ncommand = \"node\"\nargs = [{:?}, {:?}]\n",
        fs.script.display().to_string(),
        dir.path().display().to_string()
    );
    let client = gateway(dir.path(), &config).await;
    let listing = call(&client, "list_mcp_resources", json!({})).await;
    assert_eq!(listing["total_count"], 0);
    assert_eq!(listing["partial"], false);
    assert_eq!(listing["servers"][0]["status"], "connected");
    assert_eq!(listing["servers"][0]["last_error"], serde_json::Value::Null);
    client.cancel().await.unwrap();
}

// traces: SR-001.1, SR-001.4, REQ-071-024, REQ-071-027 — a real server whose template content
// changes every second: each change read is a new version, and the first stays readable with a
// checksum that matches its bytes.
#[tokio::test]
async fn server_everything_2026_changing_content_becomes_versions() {
    let everything = peers::require(peers::SERVER_EVERYTHING_2026);
    let dir = tempfile::tempdir().unwrap();
    let script = everything.script.display().to_string();
    let config = format!("[servers.demo]\ncommand = \"node\"\nargs = [{script:?}, \"stdio\"]\n");
    let client = gateway(dir.path(), &config).await;

    let listing = call(
        &client,
        "list_mcp_resources",
        json!({"server": "demo", "filter_type": "file"}),
    )
    .await;
    assert!(listing["total_count"].as_u64().unwrap() >= 7, "{listing}");
    assert!(
        listing["resources"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["uri"].as_str().unwrap().ends_with(".md"))
    );

    let uri = "mcp://demo/demo_3A//resource/dynamic/text/1";
    let first = call(&client, "read_mcp_resource", json!({"resource_uri": uri})).await;
    assert_eq!(first["version"]["version"], "v1");
    // Read afresh until the upstream's content moves on (it changes about once a second); a read
    // of unchanged content is v1 again, so the first different one must be v2.
    let started = std::time::Instant::now();
    let second = loop {
        let again = call(
            &client,
            "read_mcp_resource",
            json!({"resource_uri": uri, "use_cache": false}),
        )
        .await;
        if again["content"] != first["content"] {
            break again;
        }
        assert_eq!(
            again["version"]["version"], "v1",
            "the same content is the same version"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "the upstream never changed the content"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(second["version"]["version"], "v2");

    let v1 = call(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": uri, "version": "v1"}),
    )
    .await;
    assert_eq!(v1["content"], first["content"]);
    let hex = crate::readpath::sha256_hex(first["content"].as_str().unwrap().as_bytes());
    assert_eq!(v1["version"]["checksum"], format!("sha256:{hex}"));
    client.cancel().await.unwrap();
}

// A second client implementation: the official Python SDK drives `quarry serve` over stdio, in
// 2025-11-25 and in 2026-07-28.
#[test]
fn the_python_sdk_lists_and_reads_through_quarry() {
    let (python, script) = peers::python_sdk();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("quarry.toml");
    std::fs::write(
        &config,
        crate::support::stdio_fixture("files", &["--resources", "3"]),
    )
    .unwrap();
    // 2025-11-25, then 2026-07-28: the SDK speaks both.
    for (era, protocol) in [(None, "2025-11-25"), (Some("--modern"), "2026-07-28")] {
        let out = std::process::Command::new(&python)
            .arg(&script)
            .args(era)
            .arg(crate::support::QUARRY)
            .arg(&config)
            .env("QUARRY_STORE_PATH", dir.path().join("quarry.db"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(summary["protocol"], protocol, "{summary}");
        assert_eq!(summary["total_count"], 9);
        assert_eq!(summary["native_resources"], 9);
        assert_eq!(summary["read"], "bytes 0-17/18");
    }
}

// The official Python SDK over streamable HTTP, once with a bearer token from the issuer and
// once with an API key, each in both eras: the same smoke check as over stdio (tools, listing,
// reads through the tools and natively).
#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_lists_and_reads_over_http_with_a_token_and_a_key() {
    let (python, script) = peers::python_sdk();
    let World {
        issuer,
        port,
        gw,
        dir: _dir,
    } = world(
        &crate::http::keyed(&crate::support::stdio_fixture(
            "files",
            &["--resources", "3"],
        )),
        "",
    )
    .await;
    let token = issuer.sign(&issuer.claims("alice", "resources:read", &resource(port)));
    let credentials = [token.as_str(), crate::http::ALICE_KEY];
    for (credential, era) in credentials
        .iter()
        .flat_map(|c| [(c, None), (c, Some("--modern"))])
    {
        let out = tokio::process::Command::new(&python)
            .arg(&script)
            .args(era)
            .arg("--http")
            .arg(format!("http://{}/mcp", gw.addr))
            .arg(credential)
            .output()
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(summary["native_resources"], summary["total_count"]);
        assert_eq!(summary["read"], "bytes 0-17/18");
    }
}

/// `mcp-inspector --cli URL --transport http ARGS` with `token`: its exit code and stdout.
async fn inspect(url: &str, token: &str, args: &[&str]) -> (Option<i32>, String) {
    let (node, launcher) = peers::inspector();
    let out = tokio::process::Command::new(node)
        .arg(launcher)
        .args(["--cli", url, "--transport", "http", "--header"])
        .arg(format!("Authorization: Bearer {token}"))
        .args(args)
        .output()
        .await
        .unwrap();
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

// The MCP Inspector's command line drives `quarry serve --http` with a bearer token from the
// issuer: the tools, a listing and a read through them, and MCP's own resources/list and
// resources/read; a token for another audience gets nothing.
#[tokio::test(flavor = "multi_thread")]
async fn the_mcp_inspector_lists_and_reads_over_http_with_a_token() {
    let World {
        issuer,
        port,
        gw,
        dir: _dir,
    } = world(
        &crate::support::stdio_fixture("files", &["--resources", "3"]),
        "",
    )
    .await;
    let url = format!("http://{}/mcp", gw.addr);
    let token = issuer.sign(&issuer.claims("alice", "resources:read", &resource(port)));
    let (code, out) = inspect(&url, &token, &["--method", "tools/list"]).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("list_mcp_resource_templates"), "{out}");
    let (code, out) = inspect(
        &url,
        &token,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "list_mcp_resources",
            "--tool-arg",
            "limit=2",
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("total_count"), "{out}");
    let (code, out) = inspect(&url, &token, &["--method", "resources/list"]).await;
    assert_eq!(code, Some(0), "{out}");
    let uri = out
        .split('"')
        .find(|s| s.starts_with("mcp://files/"))
        .unwrap_or_else(|| panic!("no gateway URI listed: {out}"))
        .to_owned();
    let (code, out) = inspect(&url, &token, &["--method", "resources/read", "--uri", &uri]).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("io.quarry/origin"), "{out}");
    let (code, out) = inspect(
        &url,
        &token,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "read_mcp_resource",
            "--tool-arg",
            &format!("resource_uri={uri}"),
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("content_range"), "{out}");
    let foreign =
        issuer.sign(&issuer.claims("alice", "resources:read", "https://other.example/mcp"));
    let (code, out) = inspect(&url, &foreign, &["--method", "tools/list"]).await;
    assert_ne!(code, Some(0), "{out}");
}
