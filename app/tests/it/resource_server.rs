//! Quarry as an OAuth 2.1 resource server, end to end: `quarry serve --http` with `[http.oauth]`
//! naming a real issuer (testkit's, which publishes a JWKS of keys it generated and answers
//! introspection), asked with raw requests where the challenge and status are the point and with
//! rmcp's client where an agent's work is.

use std::{net::SocketAddr, path::Path};

use quarry_testkit::{
    issuer::{TestIssuer, now},
    scrape,
};
use serde_json::{Value, json};

use crate::{
    http::{INITIALIZE, Served, agent, post, served_on, session_of},
    policy::config as policy_config,
    support::{call, call_error, http_fixture, http_server},
};

/// A port nobody listens on now, so the resource's URL can name it before Quarry starts.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `[http.oauth]` trusting `issuer` for the resource at `port`, with `extra` lines in it.
pub(crate) fn oauth(issuer: &TestIssuer, port: u16, extra: &str) -> String {
    format!(
        "[http.oauth]\nresource = \"http://127.0.0.1:{port}/mcp\"\nissuer = {:?}\njwks_url = {:?}\n\
         jwks_min_refetch_seconds = 0\n{extra}\n",
        issuer.issuer, issuer.jwks_url
    )
}

pub(crate) fn resource(port: u16) -> String {
    format!("http://127.0.0.1:{port}/mcp")
}

/// The gateway on `port` with `config` (its `[http.oauth]` included).
pub(crate) async fn gateway(dir: &Path, config: &str, port: u16) -> Served {
    served_on(dir, config, &format!("127.0.0.1:{port}"), &[]).await
}

/// An issuer, and a gateway trusting it on its own port in its own folder.
pub(crate) struct World {
    pub(crate) issuer: TestIssuer,
    pub(crate) port: u16,
    pub(crate) gw: Served,
    /// Held so the folder outlives the gateway.
    pub(crate) dir: tempfile::TempDir,
}

/// A [`World`] whose configuration is `before` and `[http.oauth]` with `extra` in it.
pub(crate) async fn world(before: &str, extra: &str) -> World {
    let issuer = TestIssuer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = format!("{before}{}", oauth(&issuer, port, extra));
    let gw = gateway(dir.path(), &config, port).await;
    World {
        issuer,
        port,
        gw,
        dir,
    }
}

pub(crate) fn bearer(token: &str) -> String {
    format!("Authorization: Bearer {token}")
}

pub(crate) fn host(addr: SocketAddr) -> String {
    format!("127.0.0.1:{}", addr.port())
}

/// A `tools/call` of `tool` with `arguments`, as a raw JSON-RPC body.
pub(crate) fn tool_call(tool: &str, arguments: &Value) -> String {
    json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}})
    .to_string()
}

pub(crate) const ALL_SCOPES: &str = "resources:read cache:admin servers:admin audit:admin";

// traces: OA-1 — without a token: 401 whose challenge names the metadata document and the
// scope to ask for; a token that is refused says why in `error_description`.
#[tokio::test(flavor = "multi_thread")]
async fn oa_1_no_token_gets_a_challenge_naming_the_metadata() {
    let World {
        issuer: _issuer,
        port,
        gw,
        dir: _dir,
    } = world("", "").await;
    let (status, head, _) = post(gw.addr, &host(gw.addr), &[], INITIALIZE).await;
    assert_eq!(status, 401, "{head}");
    let expected = format!(
        "www-authenticate: bearer resource_metadata=\"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp\", scope=\"resources:read\""
    );
    assert!(head.contains(&expected), "{head}");
    assert!(!head.contains("error="), "no token, so no error: {head}");
    let (status, head, _) = post(
        gw.addr,
        &host(gw.addr),
        &[&bearer("garbage.token.here")],
        INITIALIZE,
    )
    .await;
    assert_eq!(status, 401);
    assert!(head.contains("error=\"invalid_token\""), "{head}");
}

// traces: OA-2 — RFC 9728 metadata, at the well-known path and its path-suffixed form, names the
// resource, its authorization server, every scope a tool requires, and header-only tokens.
#[tokio::test(flavor = "multi_thread")]
async fn oa_2_protected_resource_metadata_names_resource_issuer_and_scopes() {
    let World {
        issuer,
        port,
        gw,
        dir: _dir,
    } = world("", "required_scopes = [\"mcp\"]").await;
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let (status, body) = scrape::get(gw.addr, path).await;
        assert_eq!(status, 200, "{path}: {body}");
        let doc: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(doc["resource"], resource(port));
        assert_eq!(doc["authorization_servers"], json!([issuer.issuer]));
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]));
        let scopes: Vec<&str> = doc["scopes_supported"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        let mut expected = vec!["mcp"];
        expected.extend(quarry_mcp_server::tool_scopes());
        assert_eq!(scopes, expected);
    }
    let (status, _) = scrape::get(gw.addr, "/.well-known/oauth-protected-resource/other").await;
    assert_eq!(status, 404);
}

// traces: OA-3 — every token that is not provably for this resource now is 401 with
// `invalid_token`: another audience, no audience, expired, not yet valid, a key the issuer does
// not publish, another issuer, `alg: none`, HS256 keyed with the public key, a forged or
// tampered signature, no subject. Tokens made right (ES256 and EdDSA) pass.
#[tokio::test(flavor = "multi_thread")]
async fn oa_3_tokens_for_elsewhere_or_out_of_time_or_badly_signed_are_each_401() {
    let World {
        issuer,
        port,
        gw,
        dir: _dir,
    } = world("", "").await;
    let good = issuer.claims("alice", "resources:read", &resource(port));
    let with = |change: &dyn Fn(&mut Value)| {
        let mut c = good.clone();
        change(&mut c);
        c
    };
    let tampered = {
        let token = issuer.sign(&good);
        let parts: Vec<&str> = token.split('.').collect();
        let claims = with(&|c| c["sub"] = json!("root"));
        use base64::Engine;
        let body = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(claims.to_string());
        format!("{}.{body}.{}", parts[0], parts[2])
    };
    let refused = [
        (
            "another audience",
            issuer.sign(&with(&|c| c["aud"] = json!("https://other.example/mcp"))),
        ),
        (
            "no audience",
            issuer.sign(&with(&|c| {
                c.as_object_mut().unwrap().remove("aud");
            })),
        ),
        (
            "expired",
            issuer.sign(&with(&|c| c["exp"] = json!(now() - 3600))),
        ),
        (
            "not yet valid",
            issuer.sign(&with(&|c| c["nbf"] = json!(now() + 3600))),
        ),
        ("an unpublished key", issuer.sign_unknown_key(&good)),
        (
            "another issuer",
            issuer.sign(&with(&|c| c["iss"] = json!("https://evil.example"))),
        ),
        ("alg none", issuer.unsigned(&good)),
        (
            "HS256 with the public key",
            issuer.hmac_with_public_key(&good),
        ),
        ("a forged signature", issuer.sign_forged(&good)),
        ("a tampered payload", tampered),
        (
            "no subject",
            issuer.sign(&with(&|c| {
                c.as_object_mut().unwrap().remove("sub");
            })),
        ),
    ];
    for (what, token) in &refused {
        let (status, head, _) = post(gw.addr, &host(gw.addr), &[&bearer(token)], INITIALIZE).await;
        assert_eq!(status, 401, "{what}: {head}");
        assert!(head.contains("error=\"invalid_token\""), "{what}: {head}");
    }
    for token in [issuer.sign(&good), issuer.sign_eddsa(&good)] {
        let (status, head, _) = post(gw.addr, &host(gw.addr), &[&bearer(&token)], INITIALIZE).await;
        assert_eq!(status, 200, "{head}");
        assert!(session_of(&head).is_some());
    }
}

// traces: OA-6 — a token the issuer made for an upstream (its audience) is refused by Quarry,
// and the agent's own token, used to read through Quarry, never reaches the upstream.
#[tokio::test(flavor = "multi_thread")]
async fn oa_6_a_token_for_an_upstream_is_refused_and_the_agents_goes_no_further() {
    let notes = http_fixture("notes", 3).await;
    let World {
        issuer,
        port,
        gw,
        dir: _dir,
    } = world(&http_server("notes", &notes.url), "").await;
    let upstreams = issuer.sign(&issuer.claims("alice", ALL_SCOPES, &notes.url));
    let (status, head, _) = post(gw.addr, &host(gw.addr), &[&bearer(&upstreams)], INITIALIZE).await;
    assert_eq!(status, 401, "{head}");
    let own = issuer.sign(&issuer.claims("alice", "resources:read", &resource(port)));
    let alice = agent(gw.addr, Some(own.as_str())).await;
    let read = call(
        &alice,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://notes/fixture_3A//item/1", "use_cache": false}),
    )
    .await;
    assert_eq!(read["success"], true);
    alice.cancel().await.unwrap();
    assert!(notes.server.reads() >= 1);
    let seen = notes.server.traces().authorizations;
    assert!(seen.iter().all(|a| !a.contains(&own)), "{seen:?}");
}

// traces: OA-7, SR-005.1 — the token's subject is the agent the policy and the audit trail
// see: alice (notes only) reads notes and is denied wiki, whatever a tool argument says.
#[tokio::test(flavor = "multi_thread")]
async fn oa_7_the_tokens_subject_is_the_agent_policy_and_audit_see() {
    let notes = http_fixture("notes", 3).await;
    let wiki = http_fixture("wiki", 3).await;
    let World {
        issuer,
        port,
        gw,
        dir,
    } = world(&policy_config(&notes.url, &wiki.url, "root", ""), "").await;
    let token = issuer.sign(&issuer.claims("alice", "resources:read", &resource(port)));
    let alice = agent(gw.addr, Some(token.as_str())).await;
    call(
        &alice,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://notes/fixture_3A//item/1"}),
    )
    .await;
    let (code, _) = call_error(
        &alice,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://wiki/fixture_3A//item/1", "agent": "root"}),
    )
    .await;
    assert_eq!(
        code, "E001",
        "an agent named in the arguments is refused, not believed"
    );
    let (code, _) = call_error(
        &alice,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://wiki/fixture_3A//item/1"}),
    )
    .await;
    assert_eq!(code, "E004");
    alice.cancel().await.unwrap();
    drop(gw);
    let text = crate::audit::export(dir.path(), &[]);
    let records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let reads: Vec<&Value> = records
        .iter()
        .filter(|r| r["entry"]["action"] == "read")
        .collect();
    let decisions: Vec<&str> = reads
        .iter()
        .map(|r| r["entry"]["decision"].as_str().unwrap())
        .collect();
    assert_eq!(decisions, ["allow", "deny"], "{text}");
    assert!(
        reads.iter().all(|r| r["entry"]["agent"] == "alice"),
        "{text}"
    );
}

// No log line holds a caller's token, accepted or refused, even at debug level.
#[tokio::test(flavor = "multi_thread")]
async fn no_log_line_contains_the_callers_token() {
    let notes = http_fixture("notes", 3).await;
    let before = format!(
        "[logging]\nlevel = \"debug\"\n\n{}",
        http_server("notes", &notes.url)
    );
    let World {
        issuer,
        port,
        gw,
        dir,
    } = world(&before, "").await;
    let good = issuer.sign(&issuer.claims("alice", "resources:read", &resource(port)));
    let expired = {
        let mut c = issuer.claims("alice", "resources:read", &resource(port));
        c["exp"] = json!(now() - 3600);
        issuer.sign(&c)
    };
    let alice = agent(gw.addr, Some(good.as_str())).await;
    call(
        &alice,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://notes/fixture_3A//item/1"}),
    )
    .await;
    alice.cancel().await.unwrap();
    let (status, _, _) = post(gw.addr, &host(gw.addr), &[&bearer(&expired)], INITIALIZE).await;
    assert_eq!(status, 401);
    drop(gw);
    let log = std::fs::read_to_string(dir.path().join("stderr.log")).unwrap();
    assert!(
        log.contains("refused a bearer token"),
        "the refusal is logged: {log}"
    );
    for token in [&good, &expired] {
        let signature = token.rsplit('.').next().unwrap();
        assert!(!log.contains(signature), "a token reached the log");
    }
}

// traces: OA-4, TR-5 — a token in the query string is refused (400) even when valid; a session
// opened with alice's token is 404 with bob's (valid) token and 401 without one, and keeps
// working with another token of alice's.
#[tokio::test(flavor = "multi_thread")]
async fn oa_4_tr_5_tokens_only_in_the_header_and_a_session_stays_with_its_subject() {
    let World {
        issuer,
        port,
        gw,
        dir: _dir,
    } = world("", "").await;
    let token = |sub: &str| issuer.sign(&issuer.claims(sub, "resources:read", &resource(port)));
    let alice = token("alice");
    let in_url = format!(
        "POST /mcp?access_token={alice} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{INITIALIZE}",
        host(gw.addr),
        INITIALIZE.len()
    );
    let (status, _, _) = scrape::send(gw.addr, &in_url).await;
    assert_eq!(status, 400);

    let (status, head, _) = post(gw.addr, &host(gw.addr), &[&bearer(&alice)], INITIALIZE).await;
    assert_eq!(status, 200);
    let sid = format!("Mcp-Session-Id: {}", session_of(&head).unwrap());
    let version = "MCP-Protocol-Version: 2025-11-25";
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(
        post(
            gw.addr,
            &host(gw.addr),
            &[&bearer(&alice), &sid],
            initialized
        )
        .await
        .0,
        202
    );
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    let bob = token("bob");
    let (status, _, body) = post(
        gw.addr,
        &host(gw.addr),
        &[&bearer(&bob), &sid, version],
        list,
    )
    .await;
    assert_eq!(status, 404, "bob used alice's session: {body}");
    let (status, _, _) = post(gw.addr, &host(gw.addr), &[&sid, version], list).await;
    assert_eq!(status, 401);
    let alice_again = token("alice");
    let (status, _, body) = post(
        gw.addr,
        &host(gw.addr),
        &[&bearer(&alice_again), &sid, version],
        list,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("read_mcp_resource"));
}
