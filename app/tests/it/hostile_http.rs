//! The hostile upstreams of `hostile.rs` over streamable HTTP: stray ids, malformed listing
//! entries, answers that do not parse, are cut off, are too large or never come each fail only
//! their own request, at once, and open no circuit; a redirect elsewhere is not followed.

use std::time::{Duration, Instant};

use quarry_testkit::{
    fixture::{self, FixtureArgs},
    hostile::HttpHostile,
};
use serde_json::json;

use crate::{
    hostile::{fails_at_once_and_opens_no_circuit, refuses_over_limit_content},
    supervision::gateway_pid,
    support::{Client, call, call_error, gateway, http_server},
};

const ONE: &str = "mcp://hostile/hostile_3A//one";

/// Reads `hostile://one` and checks its text: the server still serves.
async fn still_serves(client: &Client) {
    let one = call(
        client,
        "read_mcp_resource",
        json!({"resource_uri": ONE, "use_cache": false}),
    )
    .await;
    assert_eq!(one["content"], "one");
}

// traces: RC-6 — over HTTP, a response with an id nobody asked for in the `initialize` answer's
// event stream is dropped: the server works.
#[tokio::test(flavor = "multi_thread")]
async fn rc_6_a_stray_response_during_an_http_handshake_does_not_stop_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let hostile = HttpHostile::start(&["--stray-id-on-init"]).await;
    let client = gateway(dir.path(), &hostile.server_section("hostile", "")).await;
    let listing = call(&client, "list_mcp_resources", json!({"server": "hostile"})).await;
    assert_eq!(listing["total_count"], 1, "{listing}");
    assert_eq!(listing["servers"][0]["status"], "connected", "{listing}");
    still_serves(&client).await;
    client.cancel().await.unwrap();
}

// traces: RC-7 — over HTTP, malformed listing entries are skipped and counted, never the page.
#[tokio::test(flavor = "multi_thread")]
async fn rc_7_malformed_http_listing_entries_are_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let hostile = HttpHostile::start(&["--malformed-entries"]).await;
    let client = gateway(dir.path(), &hostile.server_section("hostile", "")).await;
    let listing = call(&client, "list_mcp_resources", json!({"server": "hostile"})).await;
    assert_eq!(listing["total_count"], 1, "{listing}");
    assert_eq!(listing["resources"][0]["uri"], ONE);
    assert_eq!(listing["servers"][0]["skipped_entries"], 2, "{listing}");
    client.cancel().await.unwrap();
}

// traces: RC-8 — over HTTP, an event whose data the JSON parser rejects (a lone surrogate escape)
// fails its own request at once with a clear error; however often it happens, no circuit opens.
#[tokio::test(flavor = "multi_thread")]
async fn rc_8_an_unparsable_http_answer_fails_its_request_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let hostile = HttpHostile::start(&[]).await;
    let client = gateway(
        dir.path(),
        &hostile.server_section("hostile", "timeout = 20"),
    )
    .await;
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

// traces: AV-2 — over HTTP, an answer cut off halfway (the connection closes mid-message) fails
// its request with E003 well within the timeout; the next read succeeds, and however often it
// happens no circuit opens.
#[tokio::test(flavor = "multi_thread")]
async fn av_2_an_http_answer_cut_off_mid_message_fails_only_its_request() {
    let dir = tempfile::tempdir().unwrap();
    let hostile = HttpHostile::start(&[]).await;
    let client = gateway(
        dir.path(),
        &hostile.server_section("hostile", "timeout = 20"),
    )
    .await;
    fails_at_once_and_opens_no_circuit(&client, "cut", 6, Duration::from_secs(2), "").await;
    client.cancel().await.unwrap();
}

// traces: RC-8 — over HTTP, a read that hangs times out (E009) while a dozen reads of another
// resource on the same server succeed at once, and six timeouts in a row open no circuit.
#[tokio::test(flavor = "multi_thread")]
async fn rc_8_a_hanging_http_read_opens_no_circuit() {
    let dir = tempfile::tempdir().unwrap();
    let files = fixture::serve_http(
        FixtureArgs {
            name: "files".into(),
            slow_ms: 60_000,
            ..FixtureArgs::default()
        },
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let config =
        http_server("files", &files.url).replace("\n\n", "\ntimeout = 1\nretry_attempts = 0\n\n");
    let client = std::sync::Arc::new(gateway(dir.path(), &config).await);
    let hello =
        json!({"resource_uri": "mcp://files/fixture_3A//text/hello.txt", "use_cache": false});
    let slow = json!({"resource_uri": "mcp://files/fixture_3A//slow"});
    call(&client, "read_mcp_resource", hello.clone()).await;
    let stuck = {
        let (client, slow) = (client.clone(), slow.clone());
        tokio::spawn(async move { call_error(&client, "read_mcp_resource", slow).await })
    };
    let started = Instant::now();
    let reads: Vec<_> = (0..12)
        .map(|_| {
            let (client, hello) = (client.clone(), hello.clone());
            tokio::spawn(async move { call(&client, "read_mcp_resource", hello).await })
        })
        .collect();
    for read in reads {
        assert_eq!(read.await.unwrap()["content"], "Hello from files!\n");
    }
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(stuck.await.unwrap().0, "E009");
    for _ in 0..6 {
        let (code, message) = call_error(&client, "read_mcp_resource", slow.clone()).await;
        assert_eq!(code, "E009", "{message}");
    }
    let after = call(&client, "read_mcp_resource", hello).await;
    assert_eq!(after["content"], "Hello from files!\n", "no circuit opened");
}

// traces: RC-4 — over HTTP, content over the limit (just over the transport's bound, and four
// times the limit) is E008 in under a second, the session lives on, and the gateway's peak
// memory grows by less than twice the limit.
#[tokio::test(flavor = "multi_thread")]
async fn rc_4_over_limit_http_content_is_refused_at_once_within_twice_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let hostile = HttpHostile::start(&[]).await;
    let config = hostile.server_section("hostile", "") + "[security]\nmax_resource_size_mb = 4\n";
    let client = gateway(dir.path(), &config).await;
    refuses_over_limit_content(&client, gateway_pid(dir.path()), 4 * 1024 * 1024).await;
    client.cancel().await.unwrap();
}

/// A loopback HTTP server that answers every request with `response`, counting requests and
/// keeping the last one's head.
async fn canned(response: String) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let heads = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut buf = vec![0u8; 64 * 1024];
            let n = stream.read(&mut buf).await.unwrap_or(0);
            heads
                .lock()
                .unwrap()
                .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            let _ = stream.write_all(response.as_bytes()).await;
        }
    });
    (url, seen)
}

// traces: UC-5 — an upstream that redirects to another origin does not get Quarry's credential
// replayed there: the redirect is not followed (the read fails, E003), and the other origin
// receives nothing.
#[tokio::test(flavor = "multi_thread")]
async fn uc_5_credentials_are_not_replayed_to_a_redirect_target() {
    let (elsewhere, reached) =
        canned("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into()).await;
    let (redirecting, asked) = canned(format!(
        "HTTP/1.1 307 Temporary Redirect\r\nLocation: {elsewhere}/mcp\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = http_server("notes", &format!("{redirecting}/mcp")) + "retry_attempts = 0\n";
    std::fs::write(dir.path().join("quarry.toml"), &config).unwrap();
    crate::auth::store_key(dir.path(), "notes");
    let client = gateway(dir.path(), &config).await;
    let (code, message) = call_error(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://notes/fixture_3A//text/hello.txt"}),
    )
    .await;
    assert_eq!(code, "E003", "{message}");
    client.cancel().await.unwrap();
    let asked = asked.lock().unwrap().clone();
    assert!(
        asked.iter().any(|head| head.contains(crate::auth::KEY)),
        "the upstream itself got the key: {asked:?}"
    );
    assert!(
        reached.lock().unwrap().is_empty(),
        "the redirect was followed"
    );
}
