//! Toward upstreams: Quarry asks for 2026-07-28 first, falls back to the 2025-11-25 handshake
//! with a server that does not speak it, and remembers which each server speaks; real servers of
//! the older era work behind a client of the newer one.

use std::time::Duration;

use quarry_testkit::peers;
use rmcp::{
    model::{ClientConfig, ProtocolVersion, ReadResourceRequestParams},
    service::{ClientLifecycleMode, ClientServiceExt},
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};

use crate::{
    eras::{MODERN, modern},
    http::served,
    subscriptions::{listen, until_updated},
    support::{call, call_error, gateway, stdio_fixture},
};

fn lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A 2025-11-25 stdio server that writes every method it receives to the file it is given:
/// unknown methods (`server/discover`) are -32601; reading `legacy://crash` ends the process.
const LEGACY_SERVER: &str = r#"
import json, sys
log = open(sys.argv[1], "a")
for line in sys.stdin:
    msg = json.loads(line)
    method, rid = msg.get("method"), msg.get("id")
    log.write(method + "\n"); log.flush()
    if rid is None:
        continue
    reply = {"jsonrpc": "2.0", "id": rid}
    if method == "initialize":
        reply["result"] = {"protocolVersion": "2025-11-25", "capabilities": {"resources": {}}, "serverInfo": {"name": "legacy", "version": "0"}}
    elif method == "resources/list":
        reply["result"] = {"resources": [{"uri": "legacy://hello", "name": "hello"}]}
    elif method == "resources/read":
        if msg["params"]["uri"] == "legacy://crash":
            sys.exit(3)
        reply["result"] = {"contents": [{"uri": msg["params"]["uri"], "text": "hello"}]}
    elif method == "ping":
        reply["result"] = {}
    else:
        reply["error"] = {"code": -32601, "message": "Method not found"}
    sys.stdout.write(json.dumps(reply) + "\n"); sys.stdout.flush()
"#;

// traces: REQ-071-008 — an upstream that speaks 2026-07-28 is spoken to in it; one that does
// not (it answers server/discover with -32601) is asked the legacy way, and once known is asked
// that way at once on its next session.
#[tokio::test(flavor = "multi_thread")]
async fn each_upstream_is_spoken_to_in_the_newest_era_it_speaks_and_that_is_remembered() {
    let dir = tempfile::tempdir().unwrap();
    let (new, old) = (dir.path().join("new.txt"), dir.path().join("old.txt"));
    let script = dir.path().join("legacy.py");
    std::fs::write(&script, LEGACY_SERVER).unwrap();
    let config = format!(
        "{}[servers.old]\ncommand = \"python3\"\nargs = [{:?}, {:?}]\nretry_attempts = 0\n\n",
        stdio_fixture("new", &["--announce-era", new.to_str().unwrap()]),
        script.display().to_string(),
        old.display().to_string(),
    );
    let client = gateway(dir.path(), &config).await;
    let read = call(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://new/fixture_3A//text/hello.txt"}),
    )
    .await;
    assert_eq!(read["content"], "Hello from new!\n");
    assert_eq!(lines(&new), ["discover", MODERN], "new: {:?}", lines(&new));
    let hello = "mcp://old/legacy_3A//hello";
    let read = call(&client, "read_mcp_resource", json!({"resource_uri": hello})).await;
    assert_eq!(read["content"], "hello");
    let first = lines(&old);
    assert_eq!(first[0], "server/discover", "{first:?}");
    assert!(first.contains(&"initialize".to_owned()), "{first:?}");
    // Its process ends; the next session goes straight to the legacy handshake.
    let (code, _) = call_error(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://old/legacy_3A//crash"}),
    )
    .await;
    assert_eq!(code, "E003");
    let mut came_back = false;
    for _ in 0..50 {
        let (failed, _) = crate::support::call_raw(
            &client,
            "read_mcp_resource",
            json!({"resource_uri": hello, "use_cache": false}),
        )
        .await;
        if !failed {
            came_back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(came_back, "the old server never came back");
    let second: Vec<String> = lines(&old).split_off(first.len() + 1);
    assert_eq!(
        second.first().map(String::as_str),
        Some("initialize"),
        "{second:?}"
    );
    assert!(
        !second.contains(&"server/discover".to_owned()),
        "{second:?}"
    );
    client.cancel().await.unwrap();
}

// traces: REQ-071-008 — rmcp's own client in the 2026-07-28 era (server/discover, no session)
// lists, reads and calls tools through Quarry over HTTP.
#[tokio::test(flavor = "multi_thread")]
async fn rmcps_modern_client_works_through_quarry() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let gw = served(dir.path(), &stdio_fixture("a", &[]), &[]).await;
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("http://{}/mcp", gw.addr)),
    );
    let client = ClientConfig::default()
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap();
    assert_eq!(
        client.peer_info().unwrap().protocol_version,
        ProtocolVersion::V_2026_07_28
    );
    let listed = client.list_all_resources().await.unwrap();
    assert!(
        listed
            .iter()
            .any(|r| r.uri == "mcp://a/fixture_3A//text/hello.txt"),
        "{listed:?}"
    );
    let read = client
        .read_resource(ReadResourceRequestParams::new(
            "mcp://a/fixture_3A//text/hello.txt",
        ))
        .await
        .unwrap();
    assert!(format!("{read:?}").contains("Hello from a!"), "{read:?}");
    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 12);
    client.cancel().await.unwrap();
}

/// Quarry serving HTTP in `dir` with `peer` (a server-everything) over stdio as `everything`.
async fn everything_served(
    dir: &std::path::Path,
    peer: (&'static str, &'static str),
) -> crate::http::Served {
    let script = peers::require(peer).script.display().to_string();
    let config =
        format!("[servers.everything]\ncommand = \"node\"\nargs = [{script:?}, \"stdio\"]\n");
    served(dir, &config, &[]).await
}

fn result(answer: &Value) -> &Value {
    assert!(answer.get("error").is_none(), "{answer}");
    &answer["result"]
}

/// A tool called by a 2026-07-28 client; its structured result.
async fn tool(addr: std::net::SocketAddr, name: &str, arguments: Value) -> Value {
    let (_, answer) = modern(
        addr,
        "tools/call",
        Some(name),
        json!({"name": name, "arguments": arguments}),
    )
    .await;
    let out = result(&answer)["structuredContent"].clone();
    assert_eq!(out["success"], true, "{answer}");
    out
}

// traces: REQ-071-008, REQ-071-017 — server-everything 2025.11.25 (a 2025-11-25 server) behind
// a 2026-07-28 client: list, read, versions, and its resources/updated heard on
// subscriptions/listen.
#[tokio::test(flavor = "multi_thread")]
async fn server_everything_2025_behind_a_2026_client() {
    let dir = tempfile::tempdir().unwrap();
    let gw = everything_served(dir.path(), peers::SERVER_EVERYTHING).await;
    let (_, listed) = modern(gw.addr, "resources/list", None, json!({})).await;
    let uris = result(&listed)["resources"].as_array().unwrap().len();
    assert_eq!(uris, 100, "{listed}");
    let uri = "mcp://everything/test_3A//static/resource/1";
    let (_, read) = modern(gw.addr, "resources/read", Some(uri), json!({"uri": uri})).await;
    assert!(result(&read)["contents"][0]["text"].is_string(), "{read}");
    let versions = tool(
        gw.addr,
        "list_mcp_resource_versions",
        json!({"resource_uri": uri}),
    )
    .await;
    assert_eq!(versions["versions"][0]["version"], "v1", "{versions}");

    let stream = listen(gw.addr, 21, json!({"resourceSubscriptions": [uri]})).await;
    // server-everything announces subscribed resources every 10 s.
    let seen = until_updated(stream, 30, &[uri]).await;
    assert!(seen.contains(uri), "{seen}");
}

// traces: REQ-071-008, REQ-071-013 — server-everything 2026.8.31 behind a 2026-07-28 client:
// list, read, and a template whose content changes seen as a new version.
#[tokio::test(flavor = "multi_thread")]
async fn server_everything_2026_behind_a_2026_client() {
    let dir = tempfile::tempdir().unwrap();
    let gw = everything_served(dir.path(), peers::SERVER_EVERYTHING_2026).await;
    let (_, listed) = modern(gw.addr, "resources/list", None, json!({})).await;
    let resources = result(&listed)["resources"].as_array().unwrap().clone();
    assert!(resources.len() >= 7, "{listed}");
    let doc = resources[0]["uri"].as_str().unwrap().to_owned();
    let (_, read) = modern(gw.addr, "resources/read", Some(&doc), json!({"uri": doc})).await;
    assert!(result(&read)["contents"][0]["text"].is_string(), "{read}");
    let (_, templates) = modern(gw.addr, "resources/templates/list", None, json!({})).await;
    let template = result(&templates)["resourceTemplates"][0]["uriTemplate"]
        .as_str()
        .unwrap()
        .to_owned();
    // The template's resource changes every second: two fresh reads a second apart are two
    // versions.
    let dynamic = template.replace(&template[template.find('{').unwrap()..], "1");
    for _ in 0..2 {
        tool(
            gw.addr,
            "read_mcp_resource",
            json!({"resource_uri": dynamic, "use_cache": false}),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(1_100)).await;
    }
    let versions = tool(
        gw.addr,
        "list_mcp_resource_versions",
        json!({"resource_uri": dynamic}),
    )
    .await;
    assert_eq!(
        versions["versions"].as_array().unwrap().len(),
        2,
        "{versions}"
    );
}
