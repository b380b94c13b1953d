//! Where Quarry gets what it checks tokens with, end to end: the issuer's key set over HTTP
//! (refused while it cannot be fetched, refetched at a bounded rate, recovered without a
//! restart), a key set from a file, and RFC 7662 introspection for opaque tokens.

use std::time::Duration;

use quarry_testkit::issuer::{INTROSPECTION_CLIENT, INTROSPECTION_SECRET, TestIssuer, now};
use serde_json::json;

use crate::{
    http::{INITIALIZE, post, served_env},
    resource_server::{bearer, free_port, gateway, host, oauth, resource},
};

// traces: OA-3 — a key set that cannot be fetched means every token is refused, never
// accepted; tokens naming unknown keys cannot make Quarry hammer the issuer; once the key set
// answers again, service resumes without a restart.
#[tokio::test(flavor = "multi_thread")]
async fn oa_3_an_unreachable_key_set_refuses_and_recovers() {
    let issuer = TestIssuer::start().await.unwrap();
    issuer.set_available(false);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = format!(
        "[http.oauth]\nresource = {:?}\nissuer = {:?}\njwks_url = {:?}\njwks_min_refetch_seconds = 2\n",
        resource(port),
        issuer.issuer,
        issuer.jwks_url
    );
    let gw = gateway(dir.path(), &config, port).await;
    let token = issuer.sign(&issuer.claims("alice", "resources:read", &resource(port)));
    let (status, head, _) = post(gw.addr, &host(gw.addr), &[&bearer(&token)], INITIALIZE).await;
    assert_eq!(status, 401, "{head}");
    issuer.set_available(true);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (status, head, _) = post(gw.addr, &host(gw.addr), &[&bearer(&token)], INITIALIZE).await;
    assert_eq!(status, 200, "once the key set answers: {head}");
    // Twenty tokens naming a key that does not exist, at once: at most one fetch for them all.
    let before = issuer.jwks_fetches();
    let rogue = issuer.sign_unknown_key(&issuer.claims("mallory", "", &resource(port)));
    let asks = (0..20).map(|_| {
        let rogue = rogue.clone();
        let addr = gw.addr;
        tokio::spawn(async move {
            post(addr, &host(addr), &[&bearer(&rogue)], INITIALIZE)
                .await
                .0
        })
    });
    for ask in asks {
        assert_eq!(ask.await.unwrap(), 401);
    }
    let fetched = issuer.jwks_fetches() - before;
    assert!(fetched <= 1, "{fetched} fetches for 20 unknown-key tokens");
}

// Opaque tokens go to the issuer's RFC 7662 endpoint: an active one for this resource passes, a
// revoked one and one for another audience are 401, and an endpoint that does not answer means
// refusal.
#[tokio::test(flavor = "multi_thread")]
async fn opaque_tokens_are_introspected_and_refused_when_inactive_or_unverifiable() {
    let issuer = TestIssuer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let extra = format!(
        "introspection_url = {:?}\nintrospection_client_id = {INTROSPECTION_CLIENT:?}\n\
         introspection_client_secret_env = \"QUARRY_TEST_INTROSPECTION_SECRET\"",
        issuer.introspection_url
    );
    let gw = served_env(
        dir.path(),
        &oauth(&issuer, port, &extra),
        &format!("127.0.0.1:{port}"),
        &[],
        &[("QUARRY_TEST_INTROSPECTION_SECRET", INTROSPECTION_SECRET)],
    )
    .await;
    let active = issuer.opaque(
        &json!({"sub": "alice", "aud": resource(port), "iss": issuer.issuer,
        "scope": "resources:read", "exp": now() + 600}),
    );
    let elsewhere = issuer.opaque(&json!({"sub": "alice", "aud": "https://other.example",
        "scope": "resources:read", "exp": now() + 600}));
    let (status, head, _) = post(gw.addr, &host(gw.addr), &[&bearer(&active)], INITIALIZE).await;
    assert_eq!(status, 200, "{head}");
    let (status, _, _) = post(gw.addr, &host(gw.addr), &[&bearer(&elsewhere)], INITIALIZE).await;
    assert_eq!(status, 401);
    issuer.revoke(&active);
    let (status, _, _) = post(gw.addr, &host(gw.addr), &[&bearer(&active)], INITIALIZE).await;
    assert_eq!(status, 401, "revoked");
    let again = issuer.opaque(
        &json!({"sub": "alice", "aud": resource(port), "iss": issuer.issuer,
        "scope": "resources:read", "exp": now() + 600}),
    );
    issuer.set_available(false);
    let (status, _, _) = post(gw.addr, &host(gw.addr), &[&bearer(&again)], INITIALIZE).await;
    assert_eq!(status, 401, "unverifiable");
    assert!(issuer.introspections() >= 4);
}

// The issuer's keys from a file (`jwks_file`): its tokens pass and others' are refused; a file
// that cannot be read refuses to start (E001), before anything listens.
#[tokio::test(flavor = "multi_thread")]
async fn a_key_set_from_a_file_is_used_and_a_missing_one_refuses_to_start() {
    let issuer = TestIssuer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("jwks.json");
    std::fs::write(&keys, issuer.jwks().to_string()).unwrap();
    issuer.set_available(false);
    let port = free_port();
    let config = format!(
        "[http.oauth]\nresource = {:?}\nissuer = {:?}\njwks_file = {keys:?}\n",
        resource(port),
        issuer.issuer
    );
    let gw = gateway(dir.path(), &config, port).await;
    let good = issuer.sign(&issuer.claims("alice", "resources:read", &resource(port)));
    let (status, head, _) = post(gw.addr, &host(gw.addr), &[&bearer(&good)], INITIALIZE).await;
    assert_eq!(status, 200, "{head}");
    let rogue = issuer.sign_unknown_key(&issuer.claims("alice", "resources:read", &resource(port)));
    let (status, _, _) = post(gw.addr, &host(gw.addr), &[&bearer(&rogue)], INITIALIZE).await;
    assert_eq!(status, 401);
    drop(gw);

    let missing = tempfile::tempdir().unwrap();
    let config_path = missing.path().join("quarry.toml");
    std::fs::write(
        &config_path,
        format!(
            "[http.oauth]\nresource = {:?}\nissuer = {:?}\njwks_file = \"/nonexistent/jwks.json\"\n",
            resource(port),
            issuer.issuer
        ),
    )
    .unwrap();
    let (code, stderr) = crate::support::serve_refused(&[
        "--http",
        "127.0.0.1:0",
        "--config",
        config_path.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(11), "{stderr}");
    assert!(stderr.contains("http.oauth.jwks_file"), "{stderr}");
}

// A verified token is remembered, not believed past its time: one that expires while
// remembered is refused from then on (no leeway here), and a fresh one still passes.
#[tokio::test(flavor = "multi_thread")]
async fn a_remembered_token_is_refused_once_it_expires() {
    let issuer = TestIssuer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let gw = gateway(
        dir.path(),
        &oauth(&issuer, port, "leeway_seconds = 0"),
        port,
    )
    .await;
    let mut claims = issuer.claims("alice", "resources:read", &resource(port));
    claims["exp"] = json!(now() + 2);
    let short = issuer.sign(&claims);
    for _ in 0..3 {
        let (status, head, _) = post(gw.addr, &host(gw.addr), &[&bearer(&short)], INITIALIZE).await;
        assert_eq!(status, 200, "{head}");
    }
    tokio::time::sleep(Duration::from_millis(3100)).await;
    let (status, head, _) = post(gw.addr, &host(gw.addr), &[&bearer(&short)], INITIALIZE).await;
    assert_eq!(status, 401, "{head}");
    assert!(head.contains("expired"), "{head}");
    let fresh = issuer.sign(&issuer.claims("alice", "resources:read", &resource(port)));
    let (status, _, _) = post(gw.addr, &host(gw.addr), &[&bearer(&fresh)], INITIALIZE).await;
    assert_eq!(status, 200);
}
