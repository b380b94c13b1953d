//! Serving agents over streamable HTTP end to end: `quarry serve --http 127.0.0.1:0`, asked
//! with raw requests where the transport's guards are the point (Host, Origin, credentials,
//! sessions) and with rmcp's own streamable HTTP client where an agent's work is.

use std::{net::SocketAddr, path::Path, process::Stdio, time::Duration};

use quarry_testkit::scrape;
use rmcp::{
    ServiceExt,
    model::ClientConfig,
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};

use crate::{
    policy::config,
    support::{Client, QUARRY, call, call_error, http_fixture, http_server},
};

pub(crate) const ALICE_KEY: &str = "alice-key-0123456789abcdef0123456789abcdef";
pub(crate) const BOB_KEY: &str = "bob-key-fedcba9876543210fedcba9876543210fe";

/// A gateway serving HTTP (and stdio's pipes unused), killed when dropped.
pub(crate) struct Served {
    pub(crate) child: tokio::process::Child,
    pub(crate) addr: SocketAddr,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// `quarry serve --http 127.0.0.1:0 ARGS` in `dir` with `config`; waits for its address.
pub(crate) async fn served(dir: &Path, config: &str, args: &[&str]) -> Served {
    served_on(dir, config, "127.0.0.1:0", args).await
}

/// `quarry serve --http ADDR ARGS` in `dir` with `config`; waits for its address.
pub(crate) async fn served_on(dir: &Path, config: &str, addr: &str, args: &[&str]) -> Served {
    served_env(dir, config, addr, args, &[]).await
}

/// `quarry serve --http ADDR ARGS` in `dir` with `config` and `env`; waits for its address.
pub(crate) async fn served_env(
    dir: &Path,
    config: &str,
    addr: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Served {
    std::fs::write(dir.join("quarry.toml"), config).unwrap();
    let log = std::fs::File::create(dir.join("stderr.log")).unwrap();
    let child = tokio::process::Command::new(QUARRY)
        .args(["serve", "--http", addr, "--config"])
        .arg(dir.join("quarry.toml"))
        .args(args)
        .current_dir(dir)
        .env_remove("QUARRY_CONFIG")
        .env("QUARRY_STORE_PATH", dir.join("quarry.db"))
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    for _ in 0..500 {
        let text = std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default();
        // The whole line: stderr may take it in more than one write.
        if let Some(line) = text
            .split("serving MCP on ")
            .nth(1)
            .and_then(|rest| rest.split_once('\n'))
            .map(|(line, _)| line)
        {
            let rest = line.split("://").nth(1).unwrap();
            let addr = rest.split('/').next().unwrap().parse().unwrap();
            return Served { child, addr };
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "not serving: {}",
        std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default()
    );
}

pub(crate) const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;

/// A raw POST of `body` to `/mcp` with `headers` (each `Name: value`), Host `host`.
pub(crate) async fn post(
    addr: SocketAddr,
    host: &str,
    headers: &[&str],
    body: &str,
) -> (u16, String, String) {
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for h in headers {
        request.push_str(h);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    request.push_str(body);
    scrape::send(addr, &request).await
}

pub(crate) fn session_of(head: &str) -> Option<String> {
    head.lines()
        .find_map(|l| l.strip_prefix("mcp-session-id: "))
        .map(str::to_owned)
}

/// rmcp's streamable HTTP client on `addr`, with `key` as its bearer credential.
pub(crate) async fn agent(addr: SocketAddr, key: Option<&str>) -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut config = StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"));
    if let Some(key) = key {
        config = config.auth_header(key);
    }
    ClientConfig::default()
        .serve(StreamableHttpClientTransport::from_config(config))
        .await
        .unwrap()
}

// traces: TR-1 — a Host that is not allowlisted is 403 and opens no session; loopback Hosts
// (with the port) pass.
#[tokio::test(flavor = "multi_thread")]
async fn tr_1_a_foreign_host_gets_403_and_no_session() {
    let dir = tempfile::tempdir().unwrap();
    let gw = served(dir.path(), "", &[]).await;
    for host in ["evil.example", "evil.example:80", "127.0.0.1.nip.io"] {
        let (status, head, _) = post(gw.addr, host, &[], INITIALIZE).await;
        assert_eq!(status, 403, "{host}: {head}");
        assert!(session_of(&head).is_none(), "{host}: a session was opened");
    }
    for host in [
        format!("127.0.0.1:{}", gw.addr.port()),
        format!("localhost:{}", gw.addr.port()),
    ] {
        let (status, head, body) = post(gw.addr, &host, &[], INITIALIZE).await;
        assert_eq!(status, 200, "{host}: {head}{body}");
        assert!(session_of(&head).is_some());
    }
    // The operator's routes are behind the same guard.
    let metrics = "GET /metrics HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n";
    assert_eq!(scrape::send(gw.addr, metrics).await.0, 403);
}

// traces: TR-2 — an Origin that is not allowlisted (`null` included) is 403; requests without
// one pass; an allowlisted one passes.
#[tokio::test(flavor = "multi_thread")]
async fn tr_2_origins_are_checked_and_null_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let gw = served(
        dir.path(),
        "[http]\nallowed_origins = [\"http://localhost:3000\"]\n",
        &[],
    )
    .await;
    let host = format!("127.0.0.1:{}", gw.addr.port());
    for origin in [
        "null",
        "http://evil.example",
        "http://localhost:3001",
        "https://localhost:3000",
    ] {
        let header = format!("Origin: {origin}");
        let (status, head, _) = post(gw.addr, &host, &[&header], INITIALIZE).await;
        assert_eq!(status, 403, "{origin}: {head}");
    }
    let (status, _, _) = post(
        gw.addr,
        &host,
        &["Origin: http://localhost:3000"],
        INITIALIZE,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(post(gw.addr, &host, &[], INITIALIZE).await.0, 200);
}

// traces: TR-3 — loopback is the default and the only plain-HTTP address; another is refused at
// start with a clear message (E001), before anything listens.
#[tokio::test(flavor = "multi_thread")]
async fn tr_3_a_non_loopback_address_refuses_to_start() {
    let (code, stderr) = crate::support::serve_refused(&["--http", "0.0.0.0:0"]);
    assert_eq!(code, Some(11), "{stderr}");
    assert!(
        stderr.contains("HTTPS with inbound authentication only")
            && stderr.contains("TLS-terminating proxy"),
        "{stderr}"
    );
}

pub(crate) fn keyed(extra: &str) -> String {
    let digest = |key: &str| {
        let mut child = std::process::Command::new(QUARRY)
            .args(["api-key", "hash"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(format!("{key}\n").as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    format!(
        "{extra}[http.api_keys]\nalice = {:?}\nbob = {:?}\n",
        digest(ALICE_KEY),
        digest(BOB_KEY)
    )
}

// traces: TR-5, OA-4 — with API keys, a request without a known key is 401 (with a Bearer
// challenge), a key in the URL is refused; a session belongs to the agent that opened it: its id
// with another agent's key is 404, as an unknown id is, and with the owner's key it works.
#[tokio::test(flavor = "multi_thread")]
async fn tr_5_a_session_belongs_to_the_agent_that_opened_it() {
    let dir = tempfile::tempdir().unwrap();
    let gw = served(dir.path(), &keyed(""), &[]).await;
    let host = format!("127.0.0.1:{}", gw.addr.port());
    let (status, head, _) = post(gw.addr, &host, &[], INITIALIZE).await;
    assert_eq!(status, 401);
    assert!(head.contains("www-authenticate: bearer"), "{head}");
    let wrong = post(
        gw.addr,
        &host,
        &["Authorization: Bearer not-a-key-of-anyone-at-all-000000"],
        INITIALIZE,
    )
    .await;
    assert_eq!(wrong.0, 401);
    let in_url = format!(
        "POST /mcp?access_token={ALICE_KEY} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
    );
    assert_eq!(scrape::send(gw.addr, &in_url).await.0, 400);

    let alice = format!("Authorization: Bearer {ALICE_KEY}");
    let bob = format!("Authorization: Bearer {BOB_KEY}");
    let (status, head, _) = post(gw.addr, &host, &[&alice], INITIALIZE).await;
    assert_eq!(status, 200, "{head}");
    let session = session_of(&head).unwrap();
    let sid = format!("Mcp-Session-Id: {session}");
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(
        post(gw.addr, &host, &[&alice, &sid], initialized).await.0,
        202
    );
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    let (status, _, body) = post(
        gw.addr,
        &host,
        &[&bob, &sid, "MCP-Protocol-Version: 2025-11-25"],
        list,
    )
    .await;
    assert_eq!(status, 404, "bob used alice's session: {body}");
    let (status, _, body) = post(
        gw.addr,
        &host,
        &[&alice, &sid, "MCP-Protocol-Version: 2025-11-25"],
        list,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("read_mcp_resource"));
    let unknown = "Mcp-Session-Id: 00000000-0000-4000-8000-000000000000";
    assert_eq!(
        post(
            gw.addr,
            &host,
            &[&alice, unknown, "MCP-Protocol-Version: 2025-11-25"],
            list
        )
        .await
        .0,
        404
    );
}

// traces: OA-7, SR-005.1 — each API key's agent is who the policy and the audit trail see:
// alice (notes only) reads notes and is denied wiki; bob reads the protected item of his
// tenant; their records name them, the transport and the client's address.
#[tokio::test(flavor = "multi_thread")]
async fn each_key_is_its_agent_for_the_policy_and_the_trail() {
    let notes = http_fixture("notes", 3).await;
    let wiki = http_fixture("wiki", 3).await;
    let dir = tempfile::tempdir().unwrap();
    let gw = served(
        dir.path(),
        &keyed(&config(&notes.url, &wiki.url, "root", "")),
        &[],
    )
    .await;
    let alice = agent(gw.addr, Some(ALICE_KEY)).await;
    let bob = agent(gw.addr, Some(BOB_KEY)).await;
    call(
        &alice,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://notes/fixture_3A//item/1"}),
    )
    .await;
    let (code, _) = call_error(
        &alice,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://wiki/fixture_3A//item/1"}),
    )
    .await;
    assert_eq!(code, "E004");
    call(
        &bob,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://notes/fixture_3A//item/2"}),
    )
    .await;
    let (code, _) = call_error(
        &alice,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://notes/fixture_3A//item/2"}),
    )
    .await;
    assert_eq!(
        code, "E004",
        "the protected item is bob's tenant's, not alice's"
    );
    // Natively too.
    let native = alice.list_all_resources().await.unwrap();
    assert!(native.iter().all(|r| r.uri.starts_with("mcp://notes/")));
    alice.cancel().await.unwrap();
    bob.cancel().await.unwrap();
    let out = std::process::Command::new(QUARRY)
        .args(["audit", "export", "--config"])
        .arg(dir.path().join("quarry.toml"))
        .env("QUARRY_STORE_PATH", dir.path().join("quarry.db"))
        .output()
        .unwrap();
    let records: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let reads: Vec<(String, String)> = records
        .iter()
        .filter(|r| r["entry"]["action"] == "read")
        .map(|r| {
            (
                r["entry"]["agent"].as_str().unwrap().to_owned(),
                r["entry"]["decision"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        reads,
        [
            ("alice", "allow"),
            ("alice", "deny"),
            ("bob", "allow"),
            ("alice", "deny")
        ]
        .map(|(a, d)| (a.to_owned(), d.to_owned()))
    );
    for r in records.iter().filter(|r| r["entry"]["action"] == "read") {
        assert_eq!(r["entry"]["transport"], "http");
        assert!(
            r["entry"]["client_address"]
                .as_str()
                .unwrap()
                .starts_with("127.0.0.1:"),
            "{r}"
        );
    }
}

// Stdio and HTTP at once: the stdio agent and an HTTP agent are served by one process.
#[tokio::test(flavor = "multi_thread")]
async fn stdio_and_http_serve_at_once() {
    let notes = http_fixture("notes", 3).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("quarry.toml");
    std::fs::write(&path, http_server("notes", &notes.url)).unwrap();
    let log = std::fs::File::create(dir.path().join("stderr.log")).unwrap();
    let mut cmd = tokio::process::Command::new(QUARRY);
    cmd.args(["serve", "--stdio", "--http", "127.0.0.1:0", "--config"])
        .arg(&path)
        .env_remove("QUARRY_CONFIG")
        .env("QUARRY_STORE_PATH", dir.path().join("quarry.db"));
    let (transport, _) = rmcp::transport::TokioChildProcess::builder(cmd)
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap();
    let stdio = ClientConfig::default().serve(transport).await.unwrap();
    let mut addr = None;
    for _ in 0..500 {
        let text = std::fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default();
        if let Some(rest) = text.split("serving MCP on http://").nth(1) {
            addr = Some(
                rest.split('/')
                    .next()
                    .unwrap()
                    .parse::<SocketAddr>()
                    .unwrap(),
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let http = agent(addr.expect("an HTTP address"), None).await;
    let item = json!({"resource_uri": "mcp://notes/fixture_3A//item/1"});
    let a = call(&stdio, "read_mcp_resource", item.clone()).await;
    let b = call(&http, "read_mcp_resource", item).await;
    assert_eq!(a["content"], b["content"]);
    assert_eq!(b["cached"], true, "one gateway, one cache");
    http.cancel().await.unwrap();
    stdio.cancel().await.unwrap();
}
