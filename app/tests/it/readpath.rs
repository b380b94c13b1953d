//! The read path through the binary: versions, invalidation on upstream announcements, degraded
//! mode with a killed upstream, agent-sized results, purge.

use std::time::{Duration, Instant};

use quarry_testkit::fixture;
use serde_json::{Value, json};

use crate::support::{QUARRY, call, call_error, gateway, http_fixture, http_server, stdio_fixture};

/// SHA-256 with the crypto adapter (itself checked against the FIPS 180-4 vectors).
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use quarry_ports::ContentHasher as _;
    quarry_crypto_ring::RingHasher.sha256(bytes).hex()
}

// traces: REQ-071-024, REQ-071-025, REQ-071-026, REQ-071-027, SR-001.1, SR-001.3, SR-001.4, CA-2
// v1 -> the upstream changes and announces it -> the next read is v2, no read returns the old
// content after the announcement, and v1 is still readable with its checksum.
#[tokio::test(flavor = "multi_thread")]
async fn ca_2_an_announced_change_becomes_v2_and_v1_stays_readable() {
    let dir = tempfile::tempdir().unwrap();
    let notes = http_fixture("notes", 0).await;
    let client = gateway(dir.path(), &http_server("notes", &notes.url)).await;
    let uri = "mcp://notes/fixture_3A//counter";

    let v1 = call(&client, "read_mcp_resource", json!({"resource_uri": uri})).await;
    assert_eq!(v1["content"], fixture::counter_text(0));
    assert_eq!(v1["version"]["version"], "v1");
    assert_eq!(
        v1["version"]["checksum"],
        format!("sha256:{}", sha256_hex(fixture::counter_text(0).as_bytes()))
    );
    assert_eq!(
        v1["version"]["etag"],
        sha256_hex(fixture::counter_text(0).as_bytes())[..16]
    );
    let cached = call(&client, "read_mcp_resource", json!({"resource_uri": uri})).await;
    assert_eq!(cached["cached"], true);

    // The gateway subscribed when it cached the content; a change upstream is announced.
    let changed = Instant::now();
    notes.server.bump().await;
    let v2 = loop {
        let r = call(&client, "read_mcp_resource", json!({"resource_uri": uri})).await;
        if r["content"] == fixture::counter_text(1).as_str() {
            break r;
        }
        assert!(
            changed.elapsed() < Duration::from_secs(10),
            "the announcement never invalidated the cache"
        );
    };
    eprintln!(
        "invalidation after resources/updated, seen by a polling reader: {:?}",
        changed.elapsed()
    );
    assert_eq!(v2["cached"], false);
    assert_eq!(v2["version"]["version"], "v2");

    let old = call(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": uri, "version": "v1"}),
    )
    .await;
    assert_eq!(old["content"], fixture::counter_text(0));
    assert_eq!(old["version"], v1["version"]);
    let by_etag = call(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": uri, "version": v1["version"]["etag"]}),
    )
    .await;
    assert_eq!(by_etag["content"], fixture::counter_text(0));

    let history = call(
        &client,
        "list_mcp_resource_versions",
        json!({"resource_uri": uri}),
    )
    .await;
    let versions = history["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 2);
    assert_eq!(
        versions[1]["checksum"],
        format!("sha256:{}", sha256_hex(fixture::counter_text(1).as_bytes()))
    );

    let listed = call(&client, "list_mcp_resources", json!({"use_cache": false})).await;
    let counter = listed["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["uri"] == uri)
        .unwrap();
    assert_eq!(counter["version"], "v2");
    assert!(counter["created_at"].is_string());

    let (code, _) = call_error(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": uri, "version": "v3"}),
    )
    .await;
    assert_eq!(code, "E002");
    client.cancel().await.unwrap();
}

// traces: AV-5 — kill the upstream process: cached content is served marked stale with the
// upstream's error; what was never cached fails with E003/E009.
#[tokio::test(flavor = "multi_thread")]
async fn av_5_a_killed_upstream_leaves_cached_content_served_stale() {
    use tokio::io::AsyncBufReadExt;
    let dir = tempfile::tempdir().unwrap();
    let mut upstream = tokio::process::Command::new(QUARRY)
        .args(["fixture", "--http", "127.0.0.1:0", "--name", "notes"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(upstream.stdout.take().unwrap()).lines();
    let url = lines.next_line().await.unwrap().unwrap();
    let config = format!(
        "{}retry_attempts = 0\ntimeout = 3\n\n[cache]\nttl_seconds = 0\n",
        http_server("notes", &url).trim_end()
    );
    let config = config.replacen(
        &format!("endpoint = {url:?}"),
        &format!("endpoint = {url:?}\n"),
        1,
    );
    let client = gateway(dir.path(), &config).await;
    let uri = "mcp://notes/fixture_3A//text/hello.txt";
    let fresh = call(&client, "read_mcp_resource", json!({"resource_uri": uri})).await;
    assert_eq!(
        (fresh["cached"].clone(), fresh["stale"].clone()),
        (json!(false), json!(false))
    );

    upstream.kill().await.unwrap();
    upstream.wait().await.unwrap();

    let stale = call(&client, "read_mcp_resource", json!({"resource_uri": uri})).await;
    assert_eq!(stale["stale"], true);
    assert_eq!(stale["cached"], true);
    assert_eq!(stale["content"], fixture::hello_text("notes"));
    let code = stale["upstream_error"]["error_code"].as_str().unwrap();
    assert!(code == "E003" || code == "E009", "{stale}");

    let (code, message) = call_error(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://notes/fixture_3A//counter"}),
    )
    .await;
    assert!(code == "E003" || code == "E009", "{code}: {message}");
    let listing = call(&client, "list_mcp_resources", json!({"use_cache": false})).await;
    assert_eq!(listing["partial"], true);
    assert_eq!(listing["servers"][0]["status"], "error");
    client.cancel().await.unwrap();
}

// Agent-sized results: a resource larger than the inline limit comes back in parts an agent can
// walk with next_offset, each well under the host's output cap.
#[tokio::test]
async fn large_reads_come_back_in_parts_within_the_inline_limit() {
    let dir = tempfile::tempdir().unwrap();
    let config = stdio_fixture("files", &["--big-kb", "100"]) + "[results]\ninline_limit_kb = 16\n";
    let client = gateway(dir.path(), &config).await;
    let uri = "mcp://files/fixture_3A//big.txt";
    let mut text = String::new();
    let mut offset = 0u64;
    let mut parts = 0;
    loop {
        let part = call(
            &client,
            "read_mcp_resource",
            json!({"resource_uri": uri, "offset": offset}),
        )
        .await;
        let content = part["content"].as_str().unwrap();
        assert!(content.len() <= 16 * 1024);
        assert!(
            part.to_string().len() < 20 * 1024,
            "the whole result stays agent-sized"
        );
        text.push_str(content);
        parts += 1;
        match part["next_offset"].as_u64() {
            Some(next) => {
                assert!(
                    part["note"]
                        .as_str()
                        .unwrap()
                        .contains(&format!("offset={next}"))
                );
                offset = next;
            }
            None => break,
        }
    }
    assert_eq!(parts, 7);
    assert_eq!(text, fixture::big_text(100));
    client.cancel().await.unwrap();
}

// traces: SR-002.2, REQ-071-016, REQ-071-017
#[tokio::test]
async fn listings_report_cache_use_and_purge_resets_it() {
    let dir = tempfile::tempdir().unwrap();
    let client = gateway(dir.path(), &stdio_fixture("files", &[])).await;
    let first = call(&client, "list_mcp_resources", json!({})).await;
    assert_eq!(first["cached_count"], 0);
    assert_eq!(first["cache_age_seconds"], Value::Null);
    let second = call(&client, "list_mcp_resources", json!({})).await;
    assert_eq!(second["cached_count"], 6);
    assert!(second["cache_age_seconds"].is_u64());
    call(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://files/fixture_3A//counter"}),
    )
    .await;
    let purged = call(&client, "purge_mcp_cache", json!({"server": "files"})).await;
    assert_eq!(purged["purged_contents"], 1);
    assert_eq!(purged["purged_listings"], 1);
    let third = call(&client, "list_mcp_resources", json!({})).await;
    assert_eq!(third["cached_count"], 0);
    let read = call(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://files/fixture_3A//counter"}),
    )
    .await;
    assert_eq!(read["cached"], false);
    let (code, _) = call_error(&client, "purge_mcp_cache", json!({"server": "nosuch"})).await;
    assert_eq!(code, "E003");
    let (code, _) = call_error(&client, "purge_mcp_cache", json!({"resource_uri": "nope"})).await;
    assert_eq!(code, "E001");
    client.cancel().await.unwrap();
}

// The CLI shows the history and the version and checksum of what it read.
#[tokio::test(flavor = "multi_thread")]
async fn the_cli_reads_versions_and_lists_history() {
    let dir = tempfile::tempdir().unwrap();
    let notes = http_fixture("notes", 0).await;
    std::fs::write(
        dir.path().join("quarry.toml"),
        http_server("notes", &notes.url),
    )
    .unwrap();
    let quarry = |args: &[&str]| {
        let mut cmd = tokio::process::Command::new(QUARRY);
        cmd.args(args)
            .current_dir(dir.path())
            .env_remove("QUARRY_CONFIG")
            .env("QUARRY_STORE_PATH", dir.path().join("quarry.db"));
        async move { cmd.output().await.unwrap() }
    };
    let uri = "mcp://notes/fixture_3A//counter";
    let first = quarry(&["read", uri]).await;
    assert_eq!(first.stdout, fixture::counter_text(0).as_bytes());
    assert!(String::from_utf8_lossy(&first.stderr).contains("v1 sha256:"));
    notes.server.bump().await;
    let second = quarry(&["read", uri]).await;
    assert_eq!(second.stdout, fixture::counter_text(1).as_bytes());
    let old = quarry(&["read", "--version", "v1", uri]).await;
    assert_eq!(
        old.stdout,
        fixture::counter_text(0).as_bytes(),
        "the history outlives the process"
    );
    let table = quarry(&["versions", uri]).await;
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(
        text.starts_with("VERSION") && text.contains("\nv1 ") && text.contains("\nv2 "),
        "{text}"
    );
    let json: Value =
        serde_json::from_slice(&quarry(&["versions", "--json", uri]).await.stdout).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 2);
    let bad = quarry(&["read", "--version", "v7", uri]).await;
    assert_eq!(bad.status.code(), Some(12));
}

// traces: AV-4 — a stampede on a fresh gateway: 10,000 concurrent reads of 100 resources all
// succeed, and concurrent misses share upstream reads, so the upstream (counting at the fixture)
// is read at most once per resource. The hundred first versions, recorded at once (together,
// in the store), are each the resource's v1 with its own content's checksum, and each history
// holds exactly that one version.
#[tokio::test(flavor = "multi_thread")]
async fn av_4_a_cold_stampede_reads_each_upstream_resource_once() {
    let dir = tempfile::tempdir().unwrap();
    let notes = http_fixture("notes", 100).await;
    let client = std::sync::Arc::new(gateway(dir.path(), &http_server("notes", &notes.url)).await);
    let reads: Vec<_> = (0..10_000)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                let uri = format!("mcp://notes/fixture_3A//item/{}", i % 100 + 1);
                client
                    .read_resource(rmcp::model::ReadResourceRequestParams::new(uri))
                    .await
            })
        })
        .collect();
    for r in reads {
        let result = r.await.unwrap().unwrap();
        assert_eq!(result.contents.len(), 1);
    }
    let upstream_reads = notes.server.reads();
    assert_eq!(
        upstream_reads, 100,
        "upstream reads for 10,000 reads of 100 resources"
    );
    for n in 1..=100 {
        let uri = format!("mcp://notes/fixture_3A//item/{n}");
        let read = call(&client, "read_mcp_resource", json!({"resource_uri": uri})).await;
        let checksum = format!("sha256:{}", sha256_hex(fixture::item_text(n).as_bytes()));
        assert_eq!(read["content"], fixture::item_text(n));
        assert_eq!(read["version"]["version"], "v1", "{uri}");
        assert_eq!(read["version"]["checksum"], checksum, "{uri}");
        let history = call(
            &client,
            "list_mcp_resource_versions",
            json!({"resource_uri": uri}),
        )
        .await;
        let versions = history["versions"].as_array().unwrap();
        assert_eq!(versions.len(), 1, "{uri}: {versions:?}");
        assert_eq!(versions[0]["checksum"], checksum, "{uri}");
    }
}
