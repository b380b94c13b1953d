//! HTTPS upstreams: a private CA trusted per server, TLS 1.3 unless a server allows 1.2, and a
//! client certificate (mutual TLS) as a credential, against fixtures made with a test PKI.

use std::path::Path;

use quarry_testkit::{
    fixture::{self, FixtureArgs, HttpFixture},
    tls::{ServerTls, TestPki},
};
use serde_json::json;

use crate::support::{QUARRY, call, call_error, gateway};

const NOTE: &str = "mcp://notes/fixture_3A//text/hello.txt";

async fn https(pki: &TestPki, require_client_cert: bool, tls12_only: bool) -> HttpFixture {
    fixture::serve_https(
        FixtureArgs {
            name: "notes".into(),
            ..FixtureArgs::default()
        },
        &ServerTls {
            pki: pki.clone(),
            require_client_cert,
            tls12_only,
        },
    )
    .await
    .unwrap()
}

/// A `[servers.notes]` section trusting the PKI's CA (written into `dir`).
fn section(dir: &Path, pki: &TestPki, url: &str, extra: &str) -> String {
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, &pki.ca).unwrap();
    format!(
        "[servers.notes]\nendpoint = {url:?}\ntls_ca_file = {:?}\n{extra}\n[registry]\nallow_tool_registration = true\n",
        ca.display().to_string()
    )
}

// traces: REQ-071-039, UC-11 — a client certificate is a credential: without it the server's
// TLS handshake refuses Quarry (E005, saying so); a certificate and key that do not belong
// together are refused before storage (E001); the right pair reads through `quarry serve`.
#[tokio::test(flavor = "multi_thread")]
async fn uc_11_a_client_certificate_authenticates_over_mutual_tls() {
    let pki = TestPki::new();
    let notes = https(&pki, true, false).await;
    let dir = tempfile::tempdir().unwrap();
    let client = gateway(dir.path(), &section(dir.path(), &pki, &notes.url, "")).await;

    let (code, message) =
        call_error(&client, "read_mcp_resource", json!({"resource_uri": NOTE})).await;
    assert_eq!(code, "E005", "{message}");
    assert!(message.contains("client certificate"), "{message}");

    let (code, message) = call_error(
        &client,
        "mcp_auth_configure",
        json!({"server": "notes", "auth_type": "certificate",
               "credentials": {"certificate": pki.client.cert, "private_key": pki.stranger.key}}),
    )
    .await;
    assert_eq!(code, "E001", "{message}");
    assert!(!message.contains("PRIVATE KEY"), "{message}");

    let (code, message) = call_error(
        &client,
        "mcp_auth_configure",
        json!({"server": "notes", "auth_type": "certificate",
               "credentials": {"certificate": pki.stranger.cert, "private_key": pki.stranger.key}}),
    )
    .await;
    assert_eq!(code, "E005", "a certificate from another CA: {message}");

    let configured = call(
        &client,
        "mcp_auth_configure",
        json!({"server": "notes", "auth_type": "certificate",
               "credentials": {"certificate": pki.client.cert, "private_key": pki.client.key}}),
    )
    .await;
    assert_eq!(configured["connection_status"], "connected", "{configured}");
    let read = call(&client, "read_mcp_resource", json!({"resource_uri": NOTE})).await;
    assert_eq!(read["content"], "Hello from notes!\n");
    client.cancel().await.unwrap();
    let db = std::fs::read(dir.path().join("quarry.db")).unwrap();
    let key_line = pki.client.key.lines().nth(1).unwrap();
    assert!(
        !db.windows(key_line.len()).any(|w| w == key_line.as_bytes()),
        "the key is sealed"
    );
}

// Upstream HTTPS demands TLS 1.3: a server that speaks only 1.2 is refused with a
// message naming the setting that allows it; with tls_min_version = "1.2" it is read, and the
// gateway warns at start. A server whose CA is not trusted is refused.
#[tokio::test(flavor = "multi_thread")]
async fn upstream_https_needs_tls_1_3_unless_a_server_allows_1_2() {
    let pki = TestPki::new();
    let old = https(&pki, false, true).await;
    let dir = tempfile::tempdir().unwrap();
    let client = gateway(dir.path(), &section(dir.path(), &pki, &old.url, "")).await;
    let (code, message) =
        call_error(&client, "read_mcp_resource", json!({"resource_uri": NOTE})).await;
    assert_eq!(code, "E003", "{message}");
    assert!(message.contains("tls_min_version"), "{message}");
    client.cancel().await.unwrap();

    let allowed = section(dir.path(), &pki, &old.url, "tls_min_version = \"1.2\"");
    std::fs::write(dir.path().join("quarry.toml"), &allowed).unwrap();
    let serve = std::process::Command::new(QUARRY)
        .args(["serve", "--config"])
        .arg(dir.path().join("quarry.toml"))
        .env("QUARRY_STORE_PATH", dir.path().join("quarry.db"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&serve.stderr);
    assert!(stderr.contains("accepts TLS 1.2"), "{stderr}");
    let client = gateway(dir.path(), &allowed).await;
    let read = call(&client, "read_mcp_resource", json!({"resource_uri": NOTE})).await;
    assert_eq!(read["content"], "Hello from notes!\n");
    client.cancel().await.unwrap();

    let stranger = TestPki::new();
    let modern = https(&stranger, false, false).await;
    let client = gateway(dir.path(), &section(dir.path(), &pki, &modern.url, "")).await;
    let (code, message) =
        call_error(&client, "read_mcp_resource", json!({"resource_uri": NOTE})).await;
    assert_eq!(code, "E003", "{message}");
    assert!(message.contains("not trusted"), "{message}");
    client.cancel().await.unwrap();
}

// traces: REQ-071-038, REQ-071-042, REQ-071-044 — OAuth 2 over HTTPS through the tools: an agent
// gives `mcp_auth_configure` a machine client (client credentials); the connection test
// discovers the authorization server from the server's 401, obtains a token and reads; a wrong
// secret is E005. The secret is never echoed back.
#[tokio::test(flavor = "multi_thread")]
async fn an_oauth_token_authenticates_to_an_https_upstream() {
    use quarry_testkit::oauth::{CLIENT_ID, CLIENT_SECRET, TestAuthServer};
    let pki = TestPki::new();
    let auth = TestAuthServer::start().await.unwrap();
    let notes = fixture::serve_https_oauth(
        FixtureArgs {
            name: "notes".into(),
            ..FixtureArgs::default()
        },
        &ServerTls {
            pki: pki.clone(),
            require_client_cert: false,
            tls12_only: false,
        },
        &auth,
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = section(
        dir.path(),
        &pki,
        &notes.url,
        "oauth_allow_private_network = true",
    );
    let client = gateway(dir.path(), &config).await;
    let (code, message) =
        call_error(&client, "read_mcp_resource", json!({"resource_uri": NOTE})).await;
    assert_eq!(code, "E005", "{message}");

    let (code, message) = call_error(
        &client,
        "mcp_auth_configure",
        json!({"server": "notes", "auth_type": "oauth2", "credentials": {
            "grant_type": "client_credentials", "client_id": CLIENT_ID, "client_secret": "wrong"}}),
    )
    .await;
    assert_eq!(code, "E005", "{message}");
    assert!(message.contains("invalid_client"), "{message}");

    let configured = call(
        &client,
        "mcp_auth_configure",
        json!({"server": "notes", "auth_type": "oauth2", "credentials": {
            "grant_type": "client_credentials", "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET}}),
    )
    .await;
    assert_eq!(configured["connection_status"], "connected", "{configured}");
    assert!(!configured.to_string().contains(CLIENT_SECRET));
    let read = call(&client, "read_mcp_resource", json!({"resource_uri": NOTE})).await;
    assert_eq!(read["content"], "Hello from notes!\n");
    let refreshed = call(&client, "mcp_auth_refresh", json!({"server": "notes"})).await;
    assert_eq!(refreshed["connection_status"], "connected", "{refreshed}");
    assert!(
        auth.token_requests() >= 3,
        "the wrong secret, the test, the refresh"
    );
    client.cancel().await.unwrap();
}
