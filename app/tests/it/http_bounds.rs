//! The HTTP transport's bounds end to end: session ids, the session cap, body and in-flight
//! limits, draining on stop, and HTTPS (TLS 1.3 only) from the configured certificate.

use std::{net::SocketAddr, process::Stdio, time::Duration};

use quarry_testkit::scrape;
use rmcp::{
    ServiceExt,
    model::ClientConfig,
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};

use crate::{
    http::{ALICE_KEY, INITIALIZE, keyed, post, served, session_of},
    support::{QUARRY, http_server},
};

// traces: TR-4, TR-8 — session ids carry 244 random bits (64 hex digits, visible ASCII); a
// request other than initialize without one is 400; a deleted session is 404 afterwards; past
// http.max_sessions a new session is 503; a body over http.max_body_kb is 413.
#[tokio::test(flavor = "multi_thread")]
async fn tr_4_sessions_are_random_bounded_and_end() {
    let dir = tempfile::tempdir().unwrap();
    let gw = served(
        dir.path(),
        "[http]\nmax_sessions = 2\nmax_body_kb = 4\n",
        &[],
    )
    .await;
    let host = format!("127.0.0.1:{}", gw.addr.port());
    let (status, head, _) = post(gw.addr, &host, &[], INITIALIZE).await;
    assert_eq!(status, 200);
    let first = session_of(&head).unwrap();
    assert_eq!(first.len(), 64, "{first}");
    assert!(first.bytes().all(|b| b.is_ascii_hexdigit()));
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    let (status, _, body) = post(gw.addr, &host, &["MCP-Protocol-Version: 2025-11-25"], list).await;
    assert_eq!(status, 400, "{body}");
    let second = session_of(&post(gw.addr, &host, &[], INITIALIZE).await.1).unwrap();
    assert_ne!(first, second);
    let (status, _, body) = post(gw.addr, &host, &[], INITIALIZE).await;
    assert_eq!(status, 503, "a third session past the cap: {body}");
    let delete = format!(
        "DELETE /mcp HTTP/1.1\r\nHost: {host}\r\nMcp-Session-Id: {first}\r\nConnection: close\r\n\r\n"
    );
    assert!(scrape::send(gw.addr, &delete).await.0 < 300);
    let sid = format!("Mcp-Session-Id: {first}");
    assert_eq!(
        post(
            gw.addr,
            &host,
            &[&sid, "MCP-Protocol-Version: 2025-11-25"],
            list
        )
        .await
        .0,
        404
    );
    assert_eq!(
        post(gw.addr, &host, &[], INITIALIZE).await.0,
        200,
        "room again after the delete"
    );
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{{"pad":"{}"}}}}"#,
        "x".repeat(8 * 1024)
    );
    let second_sid = format!("Mcp-Session-Id: {second}");
    assert_eq!(
        post(
            gw.addr,
            &host,
            &[&second_sid, "MCP-Protocol-Version: 2025-11-25"],
            &big
        )
        .await
        .0,
        413
    );
}

pub(crate) async fn slow_fixture() -> quarry_testkit::fixture::HttpFixture {
    slow_notes(700).await
}

/// The fixture `notes` over HTTP, `fixture://slow` answering after `ms`.
pub(crate) async fn slow_notes(ms: u64) -> quarry_testkit::fixture::HttpFixture {
    quarry_testkit::fixture::serve_http(
        quarry_testkit::fixture::FixtureArgs {
            name: "notes".into(),
            slow_ms: ms,
            ..Default::default()
        },
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap()
}

/// A gateway in front of `notes` at `url` whose requests must end within a second.
pub(crate) fn within_a_second(url: &str) -> String {
    format!(
        "{}[http]\nrequest_timeout_seconds = 1\n",
        http_server("notes", url)
    )
}

/// An initialized session on `addr`: its header.
pub(crate) async fn session(addr: SocketAddr, host: &str) -> String {
    let sid = session_of(&post(addr, host, &[], INITIALIZE).await.1).unwrap();
    let header = format!("Mcp-Session-Id: {sid}");
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(post(addr, host, &[&header], initialized).await.0, 202);
    header
}

pub(crate) fn slow_read(id: u32) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"read_mcp_resource","arguments":{{"resource_uri":"mcp://notes/fixture_3A//slow","use_cache":false}}}}}}"#
    )
}

// traces: TR-8 — an agent's requests in flight are bounded (http.max_requests_per_agent): past
// the bound, 429 at once with Retry-After, while the others are answered.
#[tokio::test(flavor = "multi_thread")]
async fn tr_8_an_agents_requests_in_flight_are_bounded() {
    let notes = slow_fixture().await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}[http]\nmax_requests_per_agent = 2\n",
        http_server("notes", &notes.url)
    );
    let gw = served(dir.path(), &config, &[]).await;
    let host = format!("127.0.0.1:{}", gw.addr.port());
    let sid = session(gw.addr, &host).await;
    let headers = [sid.as_str(), "MCP-Protocol-Version: 2025-11-25"];
    let (r1, r2, r3) = (slow_read(1), slow_read(2), slow_read(3));
    let (a, b, c) = tokio::join!(
        post(gw.addr, &host, &headers, &r1),
        post(gw.addr, &host, &headers, &r2),
        async {
            tokio::time::sleep(Duration::from_millis(150)).await;
            let started = std::time::Instant::now();
            (post(gw.addr, &host, &headers, &r3).await, started.elapsed())
        },
    );
    assert_eq!((a.0, b.0), (200, 200));
    let ((status, head, _), took) = c;
    assert_eq!(status, 429, "{head}");
    assert!(head.contains("retry-after"), "{head}");
    assert!(
        took < Duration::from_millis(500),
        "refused at once, not after waiting: {took:?}"
    );
    // The bound is per agent and the slots come back.
    assert_eq!(post(gw.addr, &host, &headers, &slow_read(4)).await.0, 200);
}

// Stopping drains: a read in flight when the gateway is told to stop (SIGTERM) is answered,
// then the process exits.
#[tokio::test(flavor = "multi_thread")]
async fn a_stopping_gateway_answers_what_is_in_flight() {
    let notes = slow_fixture().await;
    let dir = tempfile::tempdir().unwrap();
    let mut gw = served(dir.path(), &http_server("notes", &notes.url), &[]).await;
    let host = format!("127.0.0.1:{}", gw.addr.port());
    let sid = session(gw.addr, &host).await;
    let headers = [sid.as_str(), "MCP-Protocol-Version: 2025-11-25"];
    let body = slow_read(1);
    let pid = gw.child.id().unwrap();
    let (answer, ()) = tokio::join!(post(gw.addr, &host, &headers, &body), async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    });
    assert_eq!(answer.0, 200, "{}", answer.2);
    assert!(answer.2.contains("slow"), "the read's answer: {}", answer.2);
    let status = tokio::time::timeout(Duration::from_secs(10), gw.child.wait())
        .await
        .expect("the gateway stopped")
        .unwrap();
    assert!(status.success(), "{status:?}");
}

/// A reqwest client that trusts `ca` (PEM) and speaks the TLS versions given.
fn tls_client(
    ca: &str,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> rustls::ClientConfig {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(versions)
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth()
}

// traces: TR-3 — HTTPS from the certificate and key in the configuration, TLS 1.3 only: an
// agent with its key works over it; a TLS 1.2 client and a plain-HTTP request get nothing; a
// non-loopback address with TLS but no API keys refuses to start.
#[tokio::test(flavor = "multi_thread")]
async fn https_serves_tls_1_3_with_the_configured_certificate() {
    let pki = quarry_testkit::tls::TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cert.pem"), &pki.server.cert).unwrap();
    std::fs::write(dir.path().join("key.pem"), &pki.server.key).unwrap();
    let tls = "[http]\ntls_cert_file = \"cert.pem\"\ntls_key_file = \"key.pem\"\n\n";
    let gw = served(dir.path(), &keyed(tls), &[]).await;
    let client = reqwest::Client::builder()
        .use_preconfigured_tls(tls_client(&pki.ca, &[&rustls::version::TLS13]))
        .build()
        .unwrap();
    let config = StreamableHttpClientTransportConfig::with_uri(format!(
        "https://localhost:{}/mcp",
        gw.addr.port()
    ))
    .auth_header(ALICE_KEY);
    let alice = ClientConfig::default()
        .serve(StreamableHttpClientTransport::with_client(client, config))
        .await
        .unwrap();
    let tools = alice.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "read_mcp_resource"));
    alice.cancel().await.unwrap();

    let old = tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls_client(
        &pki.ca,
        &[&rustls::version::TLS12],
    )));
    let tcp = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    assert!(
        old.connect(name, tcp).await.is_err(),
        "a TLS 1.2 handshake was accepted"
    );
    let plain = "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    let mut tcp = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tcp.write_all(plain.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut answer)).await;
    assert!(
        !String::from_utf8_lossy(&answer).contains("200 OK"),
        "plain HTTP was answered"
    );

    // Beyond loopback, TLS alone is not enough: the agents must be named by keys.
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("cert.pem"), &pki.server.cert).unwrap();
    std::fs::write(other.path().join("key.pem"), &pki.server.key).unwrap();
    std::fs::write(other.path().join("quarry.toml"), tls).unwrap();
    let out = std::process::Command::new(QUARRY)
        .args(["serve", "--http", "0.0.0.0:0", "--config"])
        .arg(other.path().join("quarry.toml"))
        .current_dir(other.path())
        .env("QUARRY_STORE_PATH", other.path().join("quarry.db"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(11), "{stderr}");
    assert!(stderr.contains("[http.api_keys]"), "{stderr}");
}

// traces: TR-8, AU-1 — a request's answer must end within http.request_timeout_seconds: a
// read the upstream takes longer over is ended with a JSON-RPC error for that request (E009,
// naming the bound) well before the upstream would have answered, and the gateway serves on;
// the read's audit record says E009 too.
#[tokio::test(flavor = "multi_thread")]
async fn tr_8_a_request_past_the_total_time_bound_gets_a_clear_error() {
    let notes = slow_notes(4000).await;
    let dir = tempfile::tempdir().unwrap();
    let gw = served(dir.path(), &within_a_second(&notes.url), &[]).await;
    let host = format!("127.0.0.1:{}", gw.addr.port());
    let sid = session(gw.addr, &host).await;
    let headers = [sid.as_str(), "MCP-Protocol-Version: 2025-11-25"];
    let started = std::time::Instant::now();
    let (status, _, body) = post(gw.addr, &host, &headers, &slow_read(41)).await;
    let took = started.elapsed();
    assert_eq!(status, 200);
    assert!(body.contains(r#""id":41"#), "{body}");
    assert!(body.contains("E009"), "{body}");
    assert!(body.contains("http.request_timeout_seconds"), "{body}");
    assert!(
        took < Duration::from_millis(3000),
        "cut at the bound: {took:?}"
    );
    let list = r#"{"jsonrpc":"2.0","id":42,"method":"tools/list"}"#;
    assert_eq!(post(gw.addr, &host, &headers, list).await.0, 200);
    // The read runs on until the upstream answers, and is recorded as what its client got.
    let records = crate::direct_reads::read_records(dir.path(), 1).await;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["mcp_request_id"], "41", "{records:?}");
    assert_eq!(records[0]["error_code"], "E009", "{records:?}");
}

/// A raw GET of `/mcp` with `headers`: the event stream, read until it ends (or 3 s).
async fn get_stream(addr: SocketAddr, host: &str, headers: &[&str]) -> (u16, String) {
    let mut request = format!(
        "GET /mcp HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\nConnection: close\r\n"
    );
    for h in headers {
        request.push_str(h);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stream, request.as_bytes())
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(
        Duration::from_secs(3),
        tokio::io::AsyncReadExt::read_to_end(&mut stream, &mut answer),
    )
    .await;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// POSTs `body` and hangs up once the stream's first event id has come: that id.
async fn first_event_id(addr: SocketAddr, host: &str, headers: &[&str], body: &str) -> String {
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
        body.len()
    );
    for h in headers {
        request.push_str(h);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    request.push_str(body);
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stream, request.as_bytes())
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::io::AsyncReadExt::read(&mut stream, &mut buf)
            .await
            .unwrap();
        assert!(
            n > 0,
            "the stream ended first: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&seen);
        if let Some(id) = text.lines().find_map(|l| l.strip_prefix("id: ")) {
            assert!(!text.contains("\"result\""), "answered before the hang-up");
            return id.to_owned();
        }
    }
}

// traces: TR-4, TR-5 — `Last-Event-ID` resumes only the stream it came from: a client that hung
// up on a slow read gets its answer by resuming in its session; the same event id in another
// session of the same agent replays nothing of it, and with another agent's key the first
// session is 404. (The read's `Accept` has a weight, so rmcp answers it as an event stream: a
// read the direct path answers is one JSON body, with no stream to resume.)
#[tokio::test(flavor = "multi_thread")]
async fn last_event_id_resumes_only_its_own_stream() {
    let notes = slow_fixture().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = served(dir.path(), &keyed(&http_server("notes", &notes.url)), &[]).await;
    let host = format!("127.0.0.1:{}", gw.addr.port());
    let alice = format!("Authorization: Bearer {ALICE_KEY}");
    let open = || async {
        let sid = session_of(&post(gw.addr, &host, &[&alice], INITIALIZE).await.1).unwrap();
        let header = format!("Mcp-Session-Id: {sid}");
        let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        assert_eq!(
            post(gw.addr, &host, &[&alice, &header], initialized)
                .await
                .0,
            202
        );
        header
    };
    let first = open().await;
    let second = open().await;
    let version = "MCP-Protocol-Version: 2025-11-25";
    let streamed = "Accept: text/event-stream;q=1";
    let id = first_event_id(
        gw.addr,
        &host,
        &[&alice, &first, version, streamed],
        &slow_read(5),
    )
    .await;
    let last = format!("Last-Event-ID: {id}");
    let (status, other) = get_stream(gw.addr, &host, &[&alice, &second, version, &last]).await;
    assert!(
        !other.contains(r#""id":5"#),
        "another session's stream: {status} {other}"
    );
    let bob = "Authorization: Bearer bob-key-fedcba9876543210fedcba9876543210fe";
    let (status, _) = get_stream(gw.addr, &host, &[bob, &first, version, &last]).await;
    assert_eq!(status, 404);
    let (status, own) = get_stream(gw.addr, &host, &[&alice, &first, version, &last]).await;
    assert_eq!(status, 200, "{own}");
    assert!(own.contains(r#""id":5"#), "resumed: {own}");
    assert!(own.contains("slow"), "the read's answer: {own}");
}

// traces: TR-8 — header sizes are bounded: a request with 1 MiB of header, or with 500 header
// lines, is refused (431) without taking the gateway down; the next request is answered.
#[tokio::test(flavor = "multi_thread")]
async fn tr_8_oversized_headers_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let gw = served(dir.path(), "", &[]).await;
    let host = format!("127.0.0.1:{}", gw.addr.port());
    let big = format!("X-Filler: {}", "a".repeat(1024 * 1024));
    let many: Vec<String> = (0..500).map(|i| format!("X-Filler-{i}: x")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    for headers in [vec![big.as_str()], many] {
        let mut request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\nConnection: close\r\n",
            INITIALIZE.len()
        );
        for h in &headers {
            request.push_str(h);
            request.push_str("\r\n");
        }
        request.push_str("\r\n");
        request.push_str(INITIALIZE);
        let mut stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
        // The gateway may stop reading once the bound is passed: a failed write is fine.
        let _ = tokio::io::AsyncWriteExt::write_all(&mut stream, request.as_bytes()).await;
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::io::AsyncReadExt::read_to_end(&mut stream, &mut answer),
        )
        .await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with("HTTP/1.1 431"),
            "{} headers: {:?}",
            headers.len(),
            answer.lines().next()
        );
    }
    assert_eq!(post(gw.addr, &host, &[], INITIALIZE).await.0, 200);
}
