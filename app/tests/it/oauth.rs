//! OAuth 2 to upstreams end to end: a fixture MCP server behind a real authorization server
//! (the testkit's, on loopback), and `quarry serve`, `quarry auth login | refresh | configure`
//! against them. The authorization server misbehaves where a promise is at stake: it rotates
//! refresh tokens, revokes grants, answers slowly, and sends the wrong `state` or `iss`.

use std::{path::Path, time::Duration};

use quarry_testkit::{
    fixture::{self, FixtureArgs, HttpFixture},
    oauth::{CLIENT_ID, CLIENT_SECRET, TestAuthServer},
};
use serde_json::{Value, json};

use crate::{
    auth::{assert_nowhere, gateway, quarry, quarry_auth},
    support::{call, call_error},
};

/// A fixture named `notes` with `resources` items, behind `auth`.
async fn protected(auth: &TestAuthServer, resources: u32) -> HttpFixture {
    let args = FixtureArgs {
        name: "notes".into(),
        resources,
        ..FixtureArgs::default()
    };
    fixture::serve_http_oauth(args, auth, None).await.unwrap()
}

/// A test authorization server, `notes` behind it with `resources` items, and a folder whose
/// configuration names it.
async fn world(resources: u32) -> (TestAuthServer, HttpFixture, tempfile::TempDir) {
    let auth = TestAuthServer::start().await.unwrap();
    let notes = protected(&auth, resources).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("quarry.toml"), config(&notes.url)).unwrap();
    (auth, notes, dir)
}

/// The configuration for `notes` at `url`, its OAuth endpoints allowed on loopback.
fn config(url: &str) -> String {
    format!("[servers.notes]\nendpoint = {url:?}\noauth_allow_private_network = true\n")
}

fn item(n: u32) -> String {
    format!("mcp://notes/fixture_3A//item/{n}")
}

/// Stores `credentials` (an oauth2 credentials object) for `notes`, testing it unless told not.
fn configure(dir: &Path, credentials: &Value, test: bool) -> (i32, String, String) {
    let mut args = vec![
        "configure",
        "notes",
        "--type",
        "oauth2",
        "--from-env",
        "SECRET",
    ];
    if !test {
        args.push("--no-test");
    }
    quarry_auth(dir, &args, Some(&credentials.to_string()))
}

/// A stored credential whose access token has expired, with the grant's refresh token.
fn expired_grant(auth: &TestAuthServer) -> Value {
    let (access, refresh) = auth.grant();
    json!({
        "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET,
        "access_token": access,
        "refresh_token": refresh,
        "expires_at": 1_000_000_000,
        "issuer": auth.issuer,
        "token_endpoint": format!("{}/token", auth.issuer),
        "token_endpoint_auth_method": "client_secret_basic",
    })
}

// traces: REQ-071-038, REQ-071-042, REQ-071-048 — client credentials: `quarry auth configure
// --type oauth2` stores a machine client, its test obtains a token (discovery from the server's
// 401), reads carry it; a wrong client secret is refused by the authorization server and the
// test says E005.
#[tokio::test(flavor = "multi_thread")]
async fn oauth_client_credentials_reach_the_upstream_and_a_wrong_secret_is_e005() {
    let (auth, notes, dir) = world(1).await;

    let machine = json!({
        "grant_type": "client_credentials",
        "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET,
    });
    let (code, out, err) = configure(dir.path(), &machine, true);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("connection test: connected"), "{out}");
    assert_eq!(auth.token_requests(), 1);

    let client = gateway(dir.path(), &config(&notes.url)).await;
    let read = call(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": item(1)}),
    )
    .await;
    assert!(
        read["content"].as_str().unwrap().contains("item 1"),
        "{read}"
    );
    let listing = call(&client, "list_mcp_resources", json!({"server": "notes"})).await;
    assert_eq!(listing["servers"][0]["authenticated"], true, "{listing}");
    client.cancel().await.unwrap();

    let wrong = json!({
        "grant_type": "client_credentials",
        "client_id": CLIENT_ID,
        "client_secret": "not-the-secret",
    });
    let (code, out, err) = configure(dir.path(), &wrong, true);
    assert_eq!(code, 15, "{out}{err}");
    assert!(
        err.contains("E005") && err.contains("invalid_client"),
        "{err}"
    );
    assert_nowhere(dir.path(), CLIENT_SECRET, &[out, err]);
}

/// Twenty reads at once through `client`, of items `first..first + 20`; their results.
async fn twenty_reads(client: &crate::support::Client, first: u32) -> Vec<String> {
    let mut reads = tokio::task::JoinSet::new();
    for n in first..first + 20 {
        let peer = client.peer().clone();
        reads.spawn(async move {
            let Value::Object(args) = json!({"resource_uri": item(n)}) else {
                unreachable!()
            };
            peer.call_tool(
                rmcp::model::CallToolRequestParams::new("read_mcp_resource").with_arguments(args),
            )
            .await
            .unwrap()
        });
    }
    let mut results = Vec::new();
    while let Some(done) = reads.join_next().await {
        let result = done.unwrap();
        assert_ne!(result.is_error, Some(true), "{result:?}");
        results.push(format!("{result:?}"));
    }
    results
}

// traces: REQ-071-048, UC-6, UC-9 — twenty concurrent reads with an expired access token against
// a rotating refresh token make exactly one token request, whether the gateway sees the expiry
// coming or the server refuses all twenty at once (slowly answered, so the twenty overlap); the
// rotated refresh token was sealed before use (a restarted gateway reads without any token
// request), and no token is in any file Quarry wrote.
#[tokio::test(flavor = "multi_thread")]
async fn uc_6_twenty_concurrent_reads_with_an_expired_token_make_one_refresh() {
    let (auth, notes, dir) = world(40).await;
    let grant = expired_grant(&auth);
    let (code, out, err) = configure(dir.path(), &grant, false);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(auth.token_requests(), 0);

    let client = gateway(dir.path(), &config(&notes.url)).await;
    let mut results = twenty_reads(&client, 1).await;
    assert_eq!(auth.token_requests(), 1, "twenty callers, one refresh");
    auth.expire_access_tokens();
    auth.set_token_delay(Duration::from_millis(300));
    results.extend(twenty_reads(&client, 21).await);
    assert_eq!(auth.token_requests(), 2, "twenty refusals, one refresh");
    auth.set_token_delay(Duration::ZERO);
    client.cancel().await.unwrap();

    // The new tokens were stored: a new gateway reads with them, asking for none.
    let client = gateway(dir.path(), &config(&notes.url)).await;
    call(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": item(1)}),
    )
    .await;
    assert_eq!(auth.token_requests(), 2);
    client.cancel().await.unwrap();

    let old_refresh = grant["refresh_token"].as_str().unwrap();
    assert_nowhere(dir.path(), old_refresh, &results);
    for token in ["at", "rt"] {
        assert_nowhere(dir.path(), &format!("{token}-{}-3", auth.tag()), &results);
    }
}

// traces: UC-13, REQ-071-047, REQ-071-048 — when the grant is revoked, reads fail with E005 naming
// `quarry auth login`, the status says authenticating, and a second read fails without asking
// the authorization server again; `quarry auth login --follow` signs in (registering the client
// dynamically) and reads work again; `quarry auth refresh` renews the token now.
#[tokio::test(flavor = "multi_thread")]
async fn uc_13_a_revoked_grant_fails_fast_until_quarry_auth_login() {
    let (auth, notes, dir) = world(2).await;
    let (code, out, err) = configure(dir.path(), &expired_grant(&auth), false);
    assert_eq!(code, 0, "{out}{err}");
    auth.revoke();

    let client = gateway(dir.path(), &config(&notes.url)).await;
    let (code, message) = call_error(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": item(1)}),
    )
    .await;
    assert_eq!(code, "E005", "{message}");
    assert!(message.contains("quarry auth login notes"), "{message}");
    let asked = auth.token_requests();
    let (code, _) = call_error(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": item(2)}),
    )
    .await;
    assert_eq!(code, "E005");
    assert_eq!(
        auth.token_requests(),
        asked,
        "no second try against a revoked grant"
    );
    let listing = call(&client, "list_mcp_resources", json!({"server": "notes"})).await;
    assert_eq!(
        listing["servers"][0]["status"], "authenticating",
        "{listing}"
    );

    let (code, out, err) = quarry_auth(dir.path(), &["login", "notes", "--follow"], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("signed in to 'notes'") && out.contains("connected"),
        "{out}"
    );
    assert_eq!(auth.registrations(), 0, "the stored client is reused");
    // The running gateway picks up the new sign-in from the vault.
    let read = call(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": item(2)}),
    )
    .await;
    assert!(
        read["content"].as_str().unwrap().contains("item 2"),
        "{read}"
    );
    client.cancel().await.unwrap();

    let before = auth.token_requests();
    let (code, out, err) = quarry_auth(dir.path(), &["refresh", "notes", "--json"], None);
    assert_eq!(code, 0, "{out}{err}");
    let result: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(result["success"], true, "{result}");
    assert_eq!(result["connection_status"], "connected", "{result}");
    assert_eq!(auth.token_requests(), before + 1);
}

// traces: REQ-071-038, UC-3 — a sign-in with no stored credential registers Quarry dynamically,
// and its output says where it signed in; `--json` gives the AuthResult.
#[tokio::test(flavor = "multi_thread")]
async fn quarry_auth_login_registers_a_client_and_signs_in() {
    let (auth, _notes, dir) = world(1).await;
    let (code, out, err) = quarry_auth(dir.path(), &["login", "notes", "--follow", "--json"], None);
    assert_eq!(code, 0, "{out}{err}");
    let result: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(result["success"], true, "{result}");
    assert_eq!(auth.registrations(), 1);
    let (code, out, err) = quarry_auth(dir.path(), &["test", "notes"], None);
    assert_eq!(code, 0, "{out}{err}");
    assert_nowhere(
        dir.path(),
        &format!("dcr-secret-{}", auth.tag()),
        &[out, err],
    );
}

// traces: UC-3, UC-12 — a redirect whose `state` is not the one sent, or whose `iss` names
// another issuer, aborts the sign-in (E005 saying which), and nothing is stored.
#[tokio::test(flavor = "multi_thread")]
async fn uc_3_uc_12_a_redirect_with_another_state_or_issuer_is_refused() {
    for (wrong, said) in [("state", "state"), ("iss", "issuer")] {
        let auth = TestAuthServer::start().await.unwrap();
        if wrong == "state" {
            auth.send_wrong_state();
        } else {
            auth.send_wrong_iss();
        }
        let notes = protected(&auth, 1).await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("quarry.toml"), config(&notes.url)).unwrap();
        let (code, out, err) = quarry_auth(dir.path(), &["login", "notes", "--follow"], None);
        assert_eq!(code, 15, "{wrong}: {out}{err}");
        assert!(
            err.contains(said) && err.contains("refused"),
            "{wrong}: {err}"
        );
        assert_eq!(auth.token_requests(), 0, "{wrong}: no code is exchanged");
        let (code, _, err) = quarry_auth(dir.path(), &["remove", "notes"], None);
        assert_eq!(code, 11, "{wrong}: {err}");
        assert!(
            err.contains("no credential"),
            "{wrong}: nothing was stored: {err}"
        );
    }
}

// traces: UC-1, UC-2 — OAuth endpoints on loopback are refused unless the server's
// configuration allows them (the message names the setting); protected-resource metadata for
// another resource is refused before any authorization request.
#[tokio::test(flavor = "multi_thread")]
async fn uc_1_uc_2_internal_endpoints_and_foreign_metadata_are_refused() {
    let auth = TestAuthServer::start().await.unwrap();
    let notes = protected(&auth, 1).await;
    let dir = tempfile::tempdir().unwrap();
    let strict = format!("[servers.notes]\nendpoint = {:?}\n", notes.url);
    std::fs::write(dir.path().join("quarry.toml"), &strict).unwrap();
    let (code, _, err) = quarry_auth(dir.path(), &["login", "notes", "--follow"], None);
    assert_eq!(code, 15, "{err}");
    assert!(
        err.contains("internal address") && err.contains("oauth_allow_private_network"),
        "{err}"
    );
    assert_eq!(auth.registrations() + auth.token_requests(), 0);

    let liar = fixture::serve_http_oauth(
        FixtureArgs::default(),
        &auth,
        Some("https://evil.example/mcp".into()),
    )
    .await
    .unwrap();
    std::fs::write(dir.path().join("quarry.toml"), config(&liar.url)).unwrap();
    let (code, _, err) = quarry_auth(dir.path(), &["login", "notes", "--follow"], None);
    assert_eq!(code, 15, "{err}");
    assert!(
        err.contains("evil.example") && err.contains("not for this server"),
        "{err}"
    );
    assert_eq!(auth.registrations() + auth.token_requests(), 0);
}

// traces: UC-6 — the gateway is killed (SIGKILL) while its refresh request is in flight; after a
// restart the stored credential still opens and works: a refresh was either stored or never
// happened, so one of the two refresh tokens is always kept.
#[tokio::test(flavor = "multi_thread")]
async fn uc_6_sigkill_during_refresh_loses_no_credential() {
    let (auth, _notes, dir) = world(2).await;
    let (code, out, err) = configure(dir.path(), &expired_grant(&auth), false);
    assert_eq!(code, 0, "{out}{err}");
    auth.set_token_delay(Duration::from_secs(30));

    let mut child = quarry(dir.path(), &["read", &item(1)])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let waited = std::time::Instant::now();
    while !auth
        .state
        .token_request_waiting
        .load(std::sync::atomic::Ordering::SeqCst)
    {
        assert!(
            waited.elapsed() < Duration::from_secs(20),
            "no refresh began"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    auth.set_token_delay(Duration::ZERO);

    let out = quarry(dir.path(), &["read", &item(2)]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("item 2"));
}
