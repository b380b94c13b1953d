//! MCP 2026-07-28 beside 2025-11-25 through the real binary: stateless requests with `_meta`,
//! the caching hints Quarry gives (what is left of its own entry, clamped by the upstream's,
//! private once policy decided), -32602 with the URI for a missing resource, the header and
//! `_meta` checks of TR-9, and transparent mode.

use std::{net::SocketAddr, time::Duration};

use serde_json::{Value, json};

use crate::{
    http::{post, served},
    policy::config,
    support::{http_fixture, serve_refused, stdio_fixture},
};

pub(crate) const MODERN: &str = "2026-07-28";

/// The `_meta` every 2026-07-28 request carries.
pub(crate) fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw-2026", "version": "1"},
    })
}

/// The JSON-RPC response in a body: plain JSON (chunked or not) or the last `data:` of an event
/// stream.
pub(crate) fn message(body: &str) -> Value {
    if let Ok(value) = serde_json::from_str(body) {
        return value;
    }
    body.lines()
        .map(|l| l.strip_prefix("data:").unwrap_or(l))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .rfind(|m| m.get("id").is_some())
        .unwrap_or_else(|| panic!("no JSON-RPC response in {body:?}"))
}

/// A stateless 2026-07-28 request (id 7): the protocol version header, `Mcp-Method` and (for
/// a request about one thing) `Mcp-Name`, and `params._meta`. Returns the status and message.
pub(crate) async fn modern(
    addr: SocketAddr,
    method: &str,
    name: Option<&str>,
    params: Value,
) -> (u16, Value) {
    let (status, head, body) = modern_raw(addr, method, name, params).await;
    if body.trim().is_empty() {
        return (status, json!({"head": head}));
    }
    (status, message(&body))
}

/// [`modern`]'s request, answered as it came: the status, the head and the body.
pub(crate) async fn modern_raw(
    addr: SocketAddr,
    method: &str,
    name: Option<&str>,
    mut params: Value,
) -> (u16, String, String) {
    params["_meta"] = meta();
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).to_string();
    let version = format!("MCP-Protocol-Version: {MODERN}");
    let method_header = format!("Mcp-Method: {method}");
    let name_header = name.map(|n| format!("Mcp-Name: {n}"));
    let mut headers = vec![version.as_str(), method_header.as_str()];
    headers.extend(name_header.as_deref());
    post(addr, &format!("127.0.0.1:{}", addr.port()), &headers, &body).await
}

fn ttl(result: &Value) -> u64 {
    result["ttlMs"]
        .as_u64()
        .unwrap_or_else(|| panic!("no ttlMs in {result}"))
}

// traces: REQ-071-016 — a read's ttlMs is what is left of Quarry's own entry, clamped by the
// upstream's hint, and counts down on later hits; the upstream's private stays private.
#[tokio::test(flavor = "multi_thread")]
async fn a_reads_ttl_is_what_is_left_of_quarrys_entry_clamped_by_the_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}{}[cache]\nttl_seconds = 300\n",
        stdio_fixture("short", &["--ttl-ms", "60000"]),
        stdio_fixture("mine", &["--private"]),
    );
    let gw = served(dir.path(), &config, &[]).await;
    let short = "mcp://short/fixture_3A//text/hello.txt";
    let (_, first) = modern(
        gw.addr,
        "resources/read",
        Some(short),
        json!({"uri": short}),
    )
    .await;
    let first = &first["result"];
    assert_eq!(first["cacheScope"], "public", "{first}");
    assert!(
        (55_000..=60_000).contains(&ttl(first)),
        "the upstream said 60 s, Quarry keeps 300 s: {first}"
    );
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let (_, again) = modern(
        gw.addr,
        "resources/read",
        Some(short),
        json!({"uri": short}),
    )
    .await;
    assert!(
        ttl(&again["result"]) <= ttl(first) - 1_000,
        "a later hit has less left: {} then {}",
        first,
        again["result"]
    );

    let mine = "mcp://mine/fixture_3A//text/hello.txt";
    let (_, private) = modern(gw.addr, "resources/read", Some(mine), json!({"uri": mine})).await;
    let private = &private["result"];
    assert_eq!(private["cacheScope"], "private", "{private}");
    assert!(
        ttl(private) > 290_000,
        "Quarry's own TTL applies: {private}"
    );
}

// traces: REQ-071-016 — a listing is as short-lived as its shortest part: one server that
// cannot be listed makes it 0; with every server listed it is Quarry's listing TTL.
#[tokio::test(flavor = "multi_thread")]
async fn a_listing_takes_the_shortest_ttl_of_its_parts() {
    let dir = tempfile::tempdir().unwrap();
    let up = http_fixture("up", 2).await;
    let down = http_fixture("down", 1).await;
    let config = format!(
        "{}{}[cache]\nttl_seconds = 120\n",
        crate::support::http_server("up", &up.url),
        crate::support::http_server("down", &down.url),
    );
    let gw = served(dir.path(), &config, &[]).await;
    let (_, listed) = modern(gw.addr, "resources/list", None, json!({})).await;
    let listed = &listed["result"];
    assert_eq!(listed["cacheScope"], "public", "{listed}");
    assert!((110_000..=120_000).contains(&ttl(listed)), "{listed}");
    down.stop();
    // The cached listing of `down` still counts while fresh: purge it so it is asked again.
    let (_, purged) = modern(
        gw.addr,
        "tools/call",
        Some("purge_mcp_cache"),
        json!({"name": "purge_mcp_cache", "arguments": {"server": "down"}}),
    )
    .await;
    assert!(purged.get("result").is_some(), "{purged}");
    let (_, partial) = modern(gw.addr, "resources/list", None, json!({})).await;
    assert_eq!(ttl(&partial["result"]), 0, "{}", partial["result"]);
}

// traces: REQ-071-016, PO-1 — once policy decides what an agent sees, what it is given is
// private to it, whatever the upstream said.
#[tokio::test(flavor = "multi_thread")]
async fn what_policy_decided_is_private() {
    let dir = tempfile::tempdir().unwrap();
    let notes = http_fixture("notes", 3).await;
    let wiki = http_fixture("wiki", 1).await;
    let gw = served(dir.path(), &config(&notes.url, &wiki.url, "alice", ""), &[]).await;
    let (_, listed) = modern(gw.addr, "resources/list", None, json!({})).await;
    assert_eq!(listed["result"]["cacheScope"], "private", "{listed}");
    let uri = "mcp://notes/fixture_3A//item/1";
    let (_, read) = modern(gw.addr, "resources/read", Some(uri), json!({"uri": uri})).await;
    assert_eq!(read["result"]["cacheScope"], "private", "{read}");
    assert!(ttl(&read["result"]) > 0, "{read}");
}

// traces: REQ-071-036 — a 2026-07-28 request answered with nothing before its result is one
// JSON body, not an event stream of one event.
#[tokio::test(flavor = "multi_thread")]
async fn a_stateless_answer_is_one_json_body() {
    let dir = tempfile::tempdir().unwrap();
    let gw = served(dir.path(), &stdio_fixture("a", &[]), &[]).await;
    let uri = "mcp://a/fixture_3A//text/hello.txt";
    let (status, head, body) =
        modern_raw(gw.addr, "resources/read", Some(uri), json!({"uri": uri})).await;
    assert_eq!(status, 200, "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{head}"
    );
    assert!(!body.contains("data:"), "not an event stream: {body}");
    let answer = message(&body);
    assert_eq!(answer["id"], 7, "{answer}");
    assert!(
        answer["result"]["contents"][0]["text"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "{answer}"
    );
}

// traces: REQ-071-022 — a resource the upstream does not have is -32602 with its URI for a
// 2026-07-28 client, never an empty contents.
#[tokio::test(flavor = "multi_thread")]
async fn a_missing_resource_is_32602_with_its_uri() {
    let dir = tempfile::tempdir().unwrap();
    let gw = served(dir.path(), &stdio_fixture("a", &[]), &[]).await;
    let uri = "mcp://a/fixture_3A//nothing/here";
    let (_, answer) = modern(gw.addr, "resources/read", Some(uri), json!({"uri": uri})).await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert_eq!(answer["error"]["data"]["uri"], uri, "{answer}");
    assert_eq!(answer["error"]["data"]["error_code"], "E002", "{answer}");
    assert!(answer.get("result").is_none(), "{answer}");
}

// traces: TR-9 — an Mcp-Method or Mcp-Name header that disagrees with the body is refused
// with the spec's error, before anything is read.
#[tokio::test(flavor = "multi_thread")]
async fn tr_9_a_header_that_disagrees_with_the_body_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let gw = served(
        dir.path(),
        &stdio_fixture("a", &["--announce-reads", "reads.txt"]),
        &[],
    )
    .await;
    let uri = "mcp://a/fixture_3A//text/hello.txt";
    let host = format!("127.0.0.1:{}", gw.addr.port());
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read",
        "params": {"uri": uri, "_meta": meta()}})
    .to_string();
    let version = format!("MCP-Protocol-Version: {MODERN}");
    let other_name = "Mcp-Name: mcp://a/fixture_3A//text/other.txt".to_owned();
    for headers in [
        vec![version.as_str(), "Mcp-Method: tools/list", "Mcp-Name: x"],
        vec![
            version.as_str(),
            "Mcp-Method: resources/read",
            other_name.as_str(),
        ],
    ] {
        let (status, head, answer) = post(gw.addr, &host, &headers, &body).await;
        assert_eq!(status, 400, "{headers:?}: {head}{answer}");
        let answer = message(&answer);
        // -32020: the header does not match the body (SEP-2243).
        assert_eq!(answer["error"]["code"], -32020, "{headers:?}: {answer}");
    }
    assert!(
        !dir.path().join("reads.txt").exists(),
        "a refused request reached the upstream"
    );
}

// traces: TR-9 — invalid `_meta` (no clientCapabilities, a protocol version that is not a
// string) is refused with -32602 naming what is wrong.
#[tokio::test(flavor = "multi_thread")]
async fn tr_9_invalid_meta_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let gw = served(dir.path(), &stdio_fixture("a", &[]), &[]).await;
    let host = format!("127.0.0.1:{}", gw.addr.port());
    let version = format!("MCP-Protocol-Version: {MODERN}");
    let headers = [version.as_str(), "Mcp-Method: resources/list"];
    let no_capabilities = json!({"jsonrpc": "2.0", "id": 4, "method": "resources/list",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN}}});
    let (status, _, answer) = post(gw.addr, &host, &headers, &no_capabilities.to_string()).await;
    let answer = message(&answer);
    assert!(status >= 400 || answer.get("error").is_some(), "{answer}");
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("clientCapabilities"),
        "{answer}"
    );
}

// traces: TR-9 — a protocol version Quarry does not speak gets the spec's error listing the
// versions it does.
#[tokio::test(flavor = "multi_thread")]
async fn tr_9_an_unsupported_version_lists_the_supported_ones() {
    let dir = tempfile::tempdir().unwrap();
    let gw = served(dir.path(), &stdio_fixture("a", &[]), &[]).await;
    let host = format!("127.0.0.1:{}", gw.addr.port());
    let mut meta = meta();
    meta["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "resources/list",
        "params": {"_meta": meta}});
    let headers = [
        "MCP-Protocol-Version: 2099-01-01",
        "Mcp-Method: resources/list",
    ];
    let (status, head, answer) = post(gw.addr, &host, &headers, &body.to_string()).await;
    assert_eq!(status, 400, "{head}{answer}");
    let answer = message(&answer);
    assert_eq!(answer["error"]["code"], -32022, "{answer}");
    let supported = answer["error"]["data"]["supported"].to_string();
    for version in ["2025-11-25", MODERN] {
        assert!(supported.contains(version), "{version} missing: {answer}");
    }
}

// traces: REQ-071-001 — transparent mode publishes the only server's resources and templates
// with their own URIs, and reads them by those URIs; server/discover answers.
#[tokio::test(flavor = "multi_thread")]
async fn transparent_mode_publishes_the_upstreams_own_uris() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}expose = \"native\"\n",
        stdio_fixture("solo", &["--conformance"])
    );
    let gw = served(dir.path(), &config, &[]).await;
    let (_, discovered) = modern(gw.addr, "server/discover", None, json!({})).await;
    let versions = discovered["result"]["supportedVersions"].to_string();
    assert!(
        versions.contains(MODERN) && versions.contains("2025-11-25"),
        "{discovered}"
    );
    let (_, listed) = modern(gw.addr, "resources/list", None, json!({})).await;
    let uris: Vec<&str> = listed["result"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uri"].as_str().unwrap())
        .collect();
    assert!(uris.contains(&"test://static-text"), "{uris:?}");
    assert!(uris.contains(&"fixture://text/hello.txt"), "{uris:?}");
    assert!(uris.iter().all(|u| !u.starts_with("mcp://")), "{uris:?}");
    let (_, read) = modern(
        gw.addr,
        "resources/read",
        Some("test://static-text"),
        json!({"uri": "test://static-text"}),
    )
    .await;
    let contents = &read["result"]["contents"][0];
    assert_eq!(contents["uri"], "test://static-text", "{read}");
    assert_eq!(
        contents["text"],
        quarry_testkit::fixture::STATIC_TEXT,
        "{read}"
    );
    let (_, templates) = modern(gw.addr, "resources/templates/list", None, json!({})).await;
    assert!(
        templates
            .to_string()
            .contains("\"test://template/{id}/data\""),
        "{templates}"
    );
}

// traces: REQ-071-001 — the gateway URI form is the only form with several servers: `native`
// beside a second server is refused at start (E001, exit 11), saying why.
#[test]
fn transparent_mode_is_refused_beside_another_server() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}expose = \"native\"\n\n{}",
        stdio_fixture("solo", &[]),
        stdio_fixture("other", &[])
    );
    let path = dir.path().join("quarry.toml");
    std::fs::write(&path, config).unwrap();
    let (code, stderr) = serve_refused(&["--config", path.to_str().unwrap()]);
    assert_eq!(code, Some(11), "{stderr}");
    assert!(
        stderr.contains("E001") && stderr.contains("only server"),
        "{stderr}"
    );
}

// traces: REQ-071-016 — the tool catalogue and the (empty) prompt list never change while Quarry
// runs and are the same for every caller: public, as long as Quarry's cache TTL; a prompt asked
// for by name is -32602 (Quarry has none, and relays none).
#[tokio::test(flavor = "multi_thread")]
async fn the_catalogue_and_the_empty_prompt_list_are_public_and_long_lived() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!("{}[cache]\nttl_seconds = 600\n", stdio_fixture("a", &[]));
    let gw = served(dir.path(), &config, &[]).await;
    for method in ["tools/list", "prompts/list"] {
        let (_, listed) = modern(gw.addr, method, None, json!({})).await;
        let listed = &listed["result"];
        assert_eq!(listed["cacheScope"], "public", "{method}: {listed}");
        assert_eq!(ttl(listed), 600_000, "{method}: {listed}");
    }
    let (_, prompts) = modern(gw.addr, "prompts/list", None, json!({})).await;
    assert_eq!(prompts["result"]["prompts"], json!([]), "{prompts}");
    let (_, asked) = modern(
        gw.addr,
        "prompts/get",
        Some("summarise"),
        json!({"name": "summarise"}),
    )
    .await;
    assert_eq!(asked["error"]["code"], -32602, "{asked}");
}
