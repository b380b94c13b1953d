//! An agent connected over stdio lists and reads across several upstreams.

use base64::Engine as _;
use quarry_testkit::fixture;
use serde_json::{Value, json};

use crate::support::{call, call_error, gateway, http_fixture, http_server, stdio_fixture};

const FILES_TOTAL: u64 = 6 + 10;
const NOTES_TOTAL: u64 = 6 + 5;

pub(crate) async fn two_upstreams() -> (
    tempfile::TempDir,
    quarry_testkit::fixture::HttpFixture,
    crate::support::Client,
) {
    let dir = tempfile::tempdir().unwrap();
    let notes = http_fixture("notes", 5).await;
    let config = stdio_fixture("files", &["--resources", "10", "--page-size", "3"])
        + &http_server("notes", &notes.url);
    let client = gateway(dir.path(), &config).await;
    (dir, notes, client)
}

fn uris(result: &Value) -> Vec<String> {
    result["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uri"].as_str().unwrap().to_owned())
        .collect()
}

// traces: REQ-071-001, REQ-071-002, REQ-071-003, REQ-071-004, REQ-071-005, REQ-071-006, REQ-071-007
#[tokio::test]
async fn agent_lists_across_a_stdio_and_an_http_upstream() {
    let (_dir, _notes, client) = two_upstreams().await;

    let all = call(&client, "list_mcp_resources", json!({"limit": 1000})).await;
    assert_eq!(all["total_count"], FILES_TOTAL + NOTES_TOTAL);
    assert_eq!(all["partial"], false);
    let servers = all["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 2);
    for s in servers {
        assert_eq!(s["status"], "connected", "{s}");
        let expected = if s["server_name"] == "files" {
            FILES_TOTAL
        } else {
            NOTES_TOTAL
        };
        assert_eq!(s["resource_count"], expected);
        assert!(s["last_used"].is_string());
    }
    // Newest first: the two hello.txt (2026-01-03), then the two blobs (2026-01-02), then the
    // undated ones by URI.
    let listed = uris(&all);
    assert_eq!(
        &listed[..4],
        [
            "mcp://files/fixture_3A//text/hello.txt",
            "mcp://notes/fixture_3A//text/hello.txt",
            "mcp://files/fixture_3A//blob/bytes.bin",
            "mcp://notes/fixture_3A//blob/bytes.bin",
        ]
    );
    let rest = listed[4..].to_vec();
    let mut sorted = rest.clone();
    sorted.sort();
    assert_eq!(rest, sorted);
    let first = &all["resources"][0];
    assert_eq!(first["name"], "hello");
    assert_eq!(first["resource_type"], "file");
    assert_eq!(first["mime_type"], "text/plain");
    assert_eq!(first["size"], 18);
    assert_eq!(first["modified_at"], "2026-01-03T00:00:00Z");
    assert_eq!(first["is_protected"], false);
    assert_eq!(
        first["metadata"]["upstream_uri"],
        "fixture://text/hello.txt"
    );
    assert_eq!(
        first["metadata"]["classification"],
        "default rule 6: extension in [md, txt, json, yaml, yml, toml, csv, tsv, xml, html, pdf, png, jpg, jpeg, gif, svg, rs, py, js, ts, go, java, c, h, log, ini, cfg, conf]"
    );

    // By server name, and by id.
    let files = call(
        &client,
        "list_mcp_resources",
        json!({"server": "files", "limit": 1000}),
    )
    .await;
    assert_eq!(files["total_count"], FILES_TOTAL);
    assert!(uris(&files).iter().all(|u| u.starts_with("mcp://files/")));
    let id = files["servers"][0]["server_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let by_id = call(&client, "list_mcp_resources", json!({"server": id})).await;
    assert_eq!(by_id["total_count"], FILES_TOTAL);

    // By type: no false positives, and the count is of matches only.
    let typed = call(
        &client,
        "list_mcp_resources",
        json!({"filter_type": "file"}),
    )
    .await;
    assert_eq!(
        typed["total_count"], 4,
        "hello.txt and snow.txt on each server"
    );
    assert!(
        typed["resources"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["resource_type"] == "file")
    );

    // Pages partition the listing and every page reports the same total.
    let mut walked = Vec::new();
    let mut offset = 0;
    loop {
        let page = call(
            &client,
            "list_mcp_resources",
            json!({"limit": 4, "offset": offset}),
        )
        .await;
        assert_eq!(page["total_count"], FILES_TOTAL + NOTES_TOTAL);
        let got = uris(&page);
        if got.is_empty() {
            break;
        }
        offset += got.len();
        walked.extend(got);
    }
    assert_eq!(walked, listed);

    let bare = call(
        &client,
        "list_mcp_resources",
        json!({"include_metadata": false, "limit": 1}),
    )
    .await;
    assert_eq!(bare["resources"][0]["metadata"], json!({}));
    client.cancel().await.unwrap();
}

// traces: REQ-071-019, REQ-071-021, REQ-071-022, REQ-071-023, REQ-071-032, RC-1
#[tokio::test]
async fn reads_return_upstream_bytes_exactly_and_the_second_read_comes_from_cache() {
    let (_dir, _notes, client) = two_upstreams().await;

    let uri = "mcp://notes/fixture_3A//text/hello.txt";
    let first = call(&client, "read_mcp_resource", json!({"resource_uri": uri})).await;
    assert_eq!(first["content"], fixture::hello_text("notes"));
    assert_eq!(first["bytes_content"], Value::Null);
    assert_eq!(first["mime_type"], "text/plain");
    assert_eq!(first["size"], 18);
    assert_eq!(first["content_range"], "bytes 0-17/18");
    assert_eq!(first["cached"], false);
    assert_eq!(first["cached_at"], Value::Null);
    assert_eq!(
        first["origin"],
        json!({"server": "notes", "upstream_uri": "fixture://text/hello.txt", "untrusted": true})
    );

    let second = call(&client, "read_mcp_resource", json!({"resource_uri": uri})).await;
    assert_eq!(second["cached"], true);
    assert!(second["cached_at"].is_string());
    assert_eq!(second["content"], first["content"]);

    let blob = call(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://files/fixture_3A//blob/bytes.bin"}),
    )
    .await;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(blob["bytes_content"].as_str().unwrap())
        .unwrap();
    assert_eq!(bytes, fixture::blob_bytes());
    assert_eq!(blob["content"], Value::Null);
    assert_eq!(blob["mime_type"], "application/octet-stream");
    assert_eq!(blob["size"], 256);

    let snow = call(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://files/fixture_3A//unicode/snow.txt"}),
    )
    .await;
    assert_eq!(snow["content"], fixture::SNOW);

    let range = call(&client, "read_mcp_resource", json!({"resource_uri": "mcp://files/fixture_3A//blob/bytes.bin", "offset": 250, "limit": 100})).await;
    assert_eq!(range["content_range"], "bytes 250-255/256");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_upstream_error_answer_is_e013_and_opens_no_circuit() {
    let (_dir, _notes, client) = two_upstreams().await;
    let failing = json!({"resource_uri": "mcp://files/fixture_3A//fail"});
    for _ in 0..8 {
        let (code, message) = call_error(&client, "read_mcp_resource", failing.clone()).await;
        assert_eq!(code, "E013", "{message}");
        assert!(
            message.contains("-32603") && message.contains("this resource always fails"),
            "{message}"
        );
    }
    let fine = call(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://files/fixture_3A//counter"}),
    )
    .await;
    assert_eq!(fine["success"], true);
    client.cancel().await.unwrap();
}

// traces: RC-7 — a server whose cursor loops sends its first page again: each gateway URI is
// listed once, and the listing says it is partial.
#[tokio::test]
async fn rc_7_a_looping_cursor_lists_each_resource_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = stdio_fixture(
        "loop",
        &["--resources", "20", "--page-size", "5", "--repeat-cursor"],
    );
    let client = gateway(dir.path(), &config).await;
    let listing = call(&client, "list_mcp_resources", json!({"limit": 1000})).await;
    let listed = uris(&listing);
    let mut distinct = listed.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(listed.len(), distinct.len(), "{listed:?}");
    assert_eq!(listing["total_count"], 5, "{listing}");
    assert_eq!(listing["partial"], true, "{listing}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn serve_starts_with_no_configuration_and_zero_upstreams() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(crate::support::QUARRY);
    cmd.args(["serve", "--stdio"])
        .current_dir(dir.path())
        .env_remove("QUARRY_CONFIG")
        .env("QUARRY_STORE_PATH", dir.path().join("quarry.db"));
    let (transport, _) = rmcp::transport::TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let client = rmcp::ServiceExt::serve(rmcp::model::ClientConfig::default(), transport)
        .await
        .unwrap();
    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 12);
    let empty = call(&client, "list_mcp_resources", json!({})).await;
    assert_eq!(empty["total_count"], 0);
    assert_eq!(empty["servers"], json!([]));
    assert!(client.list_all_resources().await.unwrap().is_empty());
    client.cancel().await.unwrap();
}

// Upstreams without resources (no capability, or -32601 to resources/list) are normal.
#[tokio::test]
async fn upstreams_without_resources_are_normal_not_failures() {
    let dir = tempfile::tempdir().unwrap();
    let config = stdio_fixture("tools", &["--no-resources"]) + &stdio_fixture("files", &[]);
    let client = gateway(dir.path(), &config).await;
    let all = call(&client, "list_mcp_resources", json!({})).await;
    assert_eq!(all["partial"], false);
    assert_eq!(all["total_count"], 6);
    let tools = all["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["server_name"] == "tools")
        .unwrap();
    assert_eq!(tools["status"], "connected");
    assert_eq!(tools["resource_count"], 0);
    assert_eq!(tools["last_error"], Value::Null);
    client.cancel().await.unwrap();
}

// traces: RC-1 — the aggregated resources through MCP's own resources/list, templates and read,
// each read's contents labelled with their origin and as untrusted.
#[tokio::test]
async fn native_resource_methods_serve_the_aggregate() {
    let (_dir, _notes, client) = two_upstreams().await;
    let resources = client.list_all_resources().await.unwrap();
    assert_eq!(resources.len() as u64, FILES_TOTAL + NOTES_TOTAL);
    assert!(resources.iter().all(|r| r.uri.starts_with("mcp://")));
    let templates = client.list_all_resource_templates().await.unwrap();
    let item = templates
        .iter()
        .find(|t| t.uri_template == "mcp://files/fixture_3A//item/{n}")
        .unwrap();
    let expanded = item.uri_template.replace("{n}", "77");
    let read = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            expanded.clone(),
        ))
        .await
        .unwrap();
    match &read.contents[0] {
        rmcp::model::ResourceContents::TextResourceContents { text, meta, .. } => {
            assert_eq!(text, &fixture::item_text(77));
            // The content says where it came from and that it is untrusted data.
            let origin = meta
                .as_ref()
                .and_then(|m| m.get("io.quarry/origin"))
                .cloned();
            assert_eq!(
                origin,
                Some(
                    json!({"server": "files", "upstream_uri": "fixture://item/77", "untrusted": true})
                )
            );
        }
        other => panic!("{other:?}"),
    }
    // The same templates through the tool, for hosts that only show tools; a URI filled in
    // from one reads like any other.
    let listed = call(
        &client,
        "list_mcp_resource_templates",
        json!({"server": "files"}),
    )
    .await;
    let through_tool: Vec<&str> = listed["templates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["uri_template"].as_str().unwrap())
        .collect();
    assert!(
        through_tool.contains(&"mcp://files/fixture_3A//item/{n}"),
        "{listed}"
    );
    assert!(
        listed["templates"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["server"] == "files")
    );
    let tool_read = call(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": expanded}),
    )
    .await;
    assert_eq!(tool_read["content"], fixture::item_text(77));
    let blob = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "mcp://notes/fixture_3A//blob/bytes.bin",
        ))
        .await
        .unwrap();
    match &blob.contents[0] {
        rmcp::model::ResourceContents::BlobResourceContents { blob, .. } => {
            assert_eq!(
                base64::engine::general_purpose::STANDARD
                    .decode(blob)
                    .unwrap(),
                fixture::blob_bytes()
            );
        }
        other => panic!("{other:?}"),
    }
    let missing = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "mcp://notes/nope",
        ))
        .await
        .unwrap_err();
    assert!(
        missing.to_string().contains("E002") || format!("{missing:?}").contains("E002"),
        "{missing:?}"
    );
    let forged = client
        .list_resources(Some(
            rmcp::model::PaginatedRequestParams::default().with_cursor(Some("x'; drop".into())),
        ))
        .await
        .unwrap_err();
    assert!(format!("{forged:?}").contains("cursor"), "{forged:?}");
    client.cancel().await.unwrap();
}

// traces: RC-3 — two servers exposing the same upstream URI never shadow each other: each has
// its own gateway URI, its own content (cached apart) and its own origin.
#[tokio::test]
async fn rc_3_the_same_upstream_uri_on_two_servers_never_shadows() {
    let notes = http_fixture("notes", 1).await;
    let wiki = http_fixture("wiki", 1).await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}{}",
        http_server("notes", &notes.url),
        http_server("wiki", &wiki.url)
    );
    let client = gateway(dir.path(), &config).await;
    let listing = call(&client, "list_mcp_resources", json!({"limit": 1000})).await;
    let listed = uris(&listing);
    for server in ["notes", "wiki"] {
        let uri = format!("mcp://{server}/fixture_3A//text/hello.txt");
        assert_eq!(
            listed.iter().filter(|u| **u == uri).count(),
            1,
            "{listed:?}"
        );
    }
    for _ in 0..2 {
        for server in ["notes", "wiki"] {
            let uri = format!("mcp://{server}/fixture_3A//text/hello.txt");
            let read = call(&client, "read_mcp_resource", json!({"resource_uri": uri})).await;
            assert_eq!(read["content"], fixture::hello_text(server));
            assert_eq!(read["origin"]["server"], server);
            assert_eq!(read["origin"]["upstream_uri"], "fixture://text/hello.txt");
        }
    }
    // Each upstream was read once; the second round came from each server's own cache entry.
    assert_eq!((notes.server.reads(), wiki.server.reads()), (1, 1));
    client.cancel().await.unwrap();
}
