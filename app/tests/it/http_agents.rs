//! What an agent's credential and an upstream's content can and cannot do over HTTP: curl with a
//! foreign Host or Origin gets 403, the agent's key never reaches an upstream, a resource that
//! gives instructions is returned as data and nothing else happens, and clients reusing JSON-RPC
//! ids get their own answers.

use std::time::Duration;

use serde_json::{Value, json};

use crate::{
    http::{ALICE_KEY, INITIALIZE, agent, keyed, post, served, session_of},
    support::{QUARRY, call, http_fixture, http_server},
};

// traces: TR-1, TR-2 — curl, as an operator would try it: a foreign Host or Origin is 403,
// and the same request with neither is answered.
#[tokio::test(flavor = "multi_thread")]
async fn curl_with_a_foreign_host_or_origin_gets_403() {
    let dir = tempfile::tempdir().unwrap();
    let gw = served(dir.path(), "", &[]).await;
    let url = format!("http://{}/mcp", gw.addr);
    let curl = |extra: &[&str]| {
        let out = std::process::Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST"])
            .args(["-H", "Content-Type: application/json"])
            .args(["-H", "Accept: application/json, text/event-stream"])
            .args(extra)
            .args(["--data", INITIALIZE, &url])
            .output()
            .expect("curl (Debian: apt-get install curl)");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(curl(&["-H", "Host: evil.example"]), "403");
    assert_eq!(curl(&["-H", "Origin: https://evil.example"]), "403");
    assert_eq!(curl(&["-H", "Origin: null"]), "403");
    assert_eq!(curl(&[]), "200");
}

// traces: OA-6 — the agent's key authenticates it to Quarry and goes no further: the upstream
// (which records every Authorization header it receives) sees none of it.
#[tokio::test(flavor = "multi_thread")]
async fn oa_6_the_agents_key_never_reaches_an_upstream() {
    let notes = http_fixture("notes", 3).await;
    let dir = tempfile::tempdir().unwrap();
    let gw = served(dir.path(), &keyed(&http_server("notes", &notes.url)), &[]).await;
    let alice = agent(gw.addr, Some(ALICE_KEY)).await;
    call(&alice, "list_mcp_resources", json!({})).await;
    call(
        &alice,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://notes/fixture_3A//item/1", "use_cache": false}),
    )
    .await;
    alice.cancel().await.unwrap();
    assert!(notes.server.reads() >= 1, "the read reached the upstream");
    let seen = notes.server.traces().authorizations;
    assert!(seen.iter().all(|a| !a.contains(ALICE_KEY)), "{seen:?}");
}

// Prompt injection: a resource whose text tells the agent to remove credentials and register a
// server comes back as data, labelled untrusted, and nothing else happens: one read at the
// upstream, no credential or registry change, one record.
#[tokio::test(flavor = "multi_thread")]
async fn a_resource_that_gives_instructions_is_returned_as_data_and_nothing_else_happens() {
    let notes = http_fixture("notes", 3).await;
    let dir = tempfile::tempdir().unwrap();
    let gw = served(
        dir.path(),
        &format!(
            "{}[registry]\nallow_tool_registration = true\n",
            http_server("notes", &notes.url)
        ),
        &[],
    )
    .await;
    let client = agent(gw.addr, None).await;
    let reads = notes.server.reads();
    let read = call(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://notes/fixture_3A//injection.txt"}),
    )
    .await;
    assert_eq!(read["content"], quarry_testkit::fixture::INJECTION);
    assert_eq!(read["origin"]["untrusted"], true);
    assert_eq!(read["origin"]["server"], "notes");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        notes.server.reads(),
        reads + 1,
        "nothing but the read reached the upstream"
    );
    let listing = call(&client, "list_mcp_resources", json!({})).await;
    assert_eq!(
        listing["servers"].as_array().unwrap().len(),
        1,
        "no server was added"
    );
    client.cancel().await.unwrap();
    let out = std::process::Command::new(QUARRY)
        .args(["audit", "export", "--config"])
        .arg(dir.path().join("quarry.toml"))
        .env("QUARRY_STORE_PATH", dir.path().join("quarry.db"))
        .output()
        .unwrap();
    let actions: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["entry"]["action"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(actions, ["read", "list"], "no other tool ran");
}

// traces: TR-6 — two sessions sending the same JSON-RPC id at the same time each get their own
// answer.
#[tokio::test(flavor = "multi_thread")]
async fn tr_6_clients_reusing_request_ids_get_their_own_answers() {
    let notes = http_fixture("notes", 4).await;
    let dir = tempfile::tempdir().unwrap();
    let gw = served(dir.path(), &http_server("notes", &notes.url), &[]).await;
    let host = format!("127.0.0.1:{}", gw.addr.port());
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let sid = session_of(&post(gw.addr, &host, &[], INITIALIZE).await.1).unwrap();
        let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        let header = format!("Mcp-Session-Id: {sid}");
        assert_eq!(post(gw.addr, &host, &[&header], initialized).await.0, 202);
        sessions.push(header);
    }
    let read = |n: u32| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"read_mcp_resource","arguments":{{"resource_uri":"mcp://notes/fixture_3A//item/{n}"}}}}}}"#
        )
    };
    let headers: Vec<[&str; 2]> = sessions
        .iter()
        .map(|h| [h.as_str(), "MCP-Protocol-Version: 2025-11-25"])
        .collect();
    for _ in 0..5 {
        let (first, second) = (read(1), read(2));
        let (a, b) = tokio::join!(
            post(gw.addr, &host, &headers[0], &first),
            post(gw.addr, &host, &headers[1], &second),
        );
        let (one, two) = (
            quarry_testkit::fixture::item_text(1),
            quarry_testkit::fixture::item_text(2),
        );
        let quoted = |t: &str| serde_json::to_string(t).unwrap();
        assert!(
            a.2.contains(&quoted(&one)) && !a.2.contains(&quoted(&two)),
            "{}",
            a.2
        );
        assert!(
            b.2.contains(&quoted(&two)) && !b.2.contains(&quoted(&one)),
            "{}",
            b.2
        );
    }
}
