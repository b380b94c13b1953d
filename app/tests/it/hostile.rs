//! Upstreams that misbehave the way real servers do — stray ids, malformed listing entries,
//! answers that do not parse or are too large, reads that hang — against the real binary: each
//! fails only its own request, at once, and opens no circuit.

use std::time::{Duration, Instant};

use quarry_testkit::hostile::server_section;
use serde_json::json;

use crate::{
    supervision::gateway_pid,
    support::{Client, call, call_error, gateway, stdio_fixture},
};

// traces: RC-6 — a response with an id nobody asked for, sent during the handshake, is dropped:
// the server works (before, every connection attempt failed and the server never did).
#[tokio::test(flavor = "multi_thread")]
async fn rc_6_a_stray_response_during_the_handshake_does_not_stop_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let config = server_section("hostile", &["--stray-id-on-init"], "");
    let client = gateway(dir.path(), &config).await;
    let listing = call(&client, "list_mcp_resources", json!({"server": "hostile"})).await;
    assert_eq!(listing["total_count"], 1, "{listing}");
    assert_eq!(listing["servers"][0]["status"], "connected", "{listing}");
    let one = call(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://hostile/hostile_3A//one"}),
    )
    .await;
    assert_eq!(one["content"], "one");
    client.cancel().await.unwrap();
}

// traces: RC-8 — an answer the JSON parser would reject (a lone surrogate escape) fails its own
// request at once with a clear error, not at its deadline; the server keeps serving, and
// however often it happens no circuit opens.
#[tokio::test(flavor = "multi_thread")]
async fn rc_8_an_unparsable_answer_fails_its_request_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = server_section("hostile", &[], "timeout = 20\n");
    let client = gateway(dir.path(), &config).await;
    fails_at_once_and_opens_no_circuit(
        &client,
        "surrogate",
        7,
        Duration::from_secs(1),
        "does not parse",
    )
    .await;
    client.cancel().await.unwrap();
}

// traces: RC-8 — with a real upstream process: a resource whose read hangs times out (E009) at
// the server's timeout while a dozen reads of another resource on the same server succeed at
// once, and six timeouts in a row (over the circuit threshold) open no circuit, because the
// session still answers a ping.
#[tokio::test(flavor = "multi_thread")]
async fn rc_8_a_hanging_read_on_a_live_upstream_opens_no_circuit() {
    let dir = tempfile::tempdir().unwrap();
    let config = stdio_fixture("files", &["--slow-ms", "60000"])
        .replace("\n\n", "\ntimeout = 1\nretry_attempts = 0\n\n");
    let client = std::sync::Arc::new(gateway(dir.path(), &config).await);
    let hello =
        json!({"resource_uri": "mcp://files/fixture_3A//text/hello.txt", "use_cache": false});
    call(&client, "read_mcp_resource", hello.clone()).await;
    let stuck = {
        let client = client.clone();
        tokio::spawn(async move {
            call_error(
                &client,
                "read_mcp_resource",
                json!({"resource_uri": "mcp://files/fixture_3A//slow"}),
            )
            .await
        })
    };
    let started = Instant::now();
    for _ in 0..12 {
        let fine = call(&client, "read_mcp_resource", hello.clone()).await;
        assert_eq!(fine["content"], "Hello from files!\n");
    }
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(stuck.await.unwrap().0, "E009");
    for _ in 0..6 {
        let (code, message) = call_error(
            &client,
            "read_mcp_resource",
            json!({"resource_uri": "mcp://files/fixture_3A//slow"}),
        )
        .await;
        assert_eq!(code, "E009", "{message}");
    }
    let after = call(&client, "read_mcp_resource", hello).await;
    assert_eq!(after["content"], "Hello from files!\n", "no circuit opened");
}

// traces: RC-7 — one malformed entry in a listing page is skipped and counted, never the page:
// every other entry is listed, and the server's status says how many were left out and why.
#[tokio::test(flavor = "multi_thread")]
async fn rc_7_malformed_listing_entries_are_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let config = server_section("hostile", &["--malformed-entries"], "");
    let client = gateway(dir.path(), &config).await;
    let listing = call(&client, "list_mcp_resources", json!({"server": "hostile"})).await;
    assert_eq!(listing["total_count"], 1, "{listing}");
    assert_eq!(
        listing["resources"][0]["uri"],
        "mcp://hostile/hostile_3A//one"
    );
    let status = &listing["servers"][0];
    assert_eq!(status["status"], "connected", "{status}");
    assert_eq!(status["skipped_entries"], 2, "{status}");
    assert!(
        status["skipped_reason"]
            .as_str()
            .is_some_and(|r| !r.is_empty()),
        "{status}"
    );
    client.cancel().await.unwrap();
}

// traces: RC-4 — content over the limit (just over the transport's bound, and four times the
// limit) is E008 in under a second, and the gateway's peak memory grows by less than twice the
// limit: the message is cut as it arrives, and what was kept of it is given back.
#[tokio::test(flavor = "multi_thread")]
async fn rc_4_over_limit_content_is_refused_at_once_within_twice_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    // The hostile server makes a text of any size at once, so the time measured is Quarry's.
    let config = server_section("hostile", &[], "") + "[security]\nmax_resource_size_mb = 4\n";
    let client = gateway(dir.path(), &config).await;
    refuses_over_limit_content(&client, gateway_pid(dir.path()), 4 * 1024 * 1024).await;
    client.cancel().await.unwrap();
}

/// Reads `hostile://sized/N` just over the transport's bound and four times the limit (`limit`
/// bytes, the configured `max_resource_size_mb`): each is E008 in under a second, the server
/// then still serves, and the gateway's peak memory grows by less than twice the limit.
pub(crate) async fn refuses_over_limit_content(client: &Client, quarry: u32, limit: u64) {
    let one = json!({"resource_uri": "mcp://hostile/hostile_3A//one", "use_cache": false});
    call(client, "read_mcp_resource", one.clone()).await;
    let before = quarry_testkit::procs::peak_rss_bytes(quarry);
    // The transport's bound is 4/3 of the limit (base64) plus 64 KiB.
    let just_over_the_bound = limit * 4 / 3 + 128 * 1024;
    for size in [just_over_the_bound, 4 * limit] {
        let started = Instant::now();
        let (code, message) = call_error(
            client,
            "read_mcp_resource",
            json!({"resource_uri": format!("mcp://hostile/hostile_3A//sized/{size}")}),
        )
        .await;
        assert_eq!(code, "E008", "{size}: {message}");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{size}: {:?}",
            started.elapsed()
        );
        assert_eq!(
            call(client, "read_mcp_resource", one.clone()).await["content"],
            "one"
        );
    }
    let growth = quarry_testkit::procs::peak_rss_bytes(quarry).saturating_sub(before);
    assert!(
        growth < 2 * limit,
        "peak memory grew by {growth} bytes for a {limit}-byte limit"
    );
}

/// Reads `hostile://NAME` `times` times (more than the circuit's threshold): each fails with E003
/// within `within`, its message saying `saying`; then `hostile://one` still reads (no circuit
/// opened).
pub(crate) async fn fails_at_once_and_opens_no_circuit(
    client: &Client,
    name: &str,
    times: usize,
    within: Duration,
    saying: &str,
) {
    let uri = format!("mcp://hostile/hostile_3A//{name}");
    for _ in 0..times {
        let started = Instant::now();
        let (code, message) =
            call_error(client, "read_mcp_resource", json!({"resource_uri": uri})).await;
        assert!(started.elapsed() < within, "{uri}: {:?}", started.elapsed());
        assert_eq!(code, "E003", "{message}");
        assert!(message.contains(saying), "{message}");
    }
    let one = json!({"resource_uri": "mcp://hostile/hostile_3A//one", "use_cache": false});
    assert_eq!(
        call(client, "read_mcp_resource", one).await["content"],
        "one",
        "no circuit opened"
    );
}
