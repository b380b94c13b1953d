//! Sessions and subscriptions that outlive their replica: two `quarry serve --http` on one
//! PostgreSQL schema and one Redis prefix, behind a relay standing in for the load balancer. A
//! replica is killed (no goodbye) and the balancer sends its clients to the other.
//! A session opened outside rmcp is handed to it once, however many of its requests ask at once.

// resources/subscribe is what a 2025-11-25 client sends; rmcp marks it legacy.
#![allow(deprecated)]

use std::{net::SocketAddr, time::Duration};

use quarry_testkit::services::Relay;
use rmcp::{
    ServiceExt,
    model::SubscribeRequestParams,
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::json;
use tokio::sync::mpsc;

use crate::{
    eras::modern,
    replicas::{Shared, replica},
    subscriptions::{Hears, hear, listen, until_updated},
    support::{http_fixture, http_server},
};

const NOTE: &str = "mcp://notes/fixture_3A//text/hello.txt";
const COUNTER: &str = "mcp://notes/fixture_3A//counter";

/// Two replicas on one schema and prefix (removed with `_shared`) in `dir`, in front of the
/// notes fixture; API keys for alice and bob when `keyed`.
struct Deployment {
    _shared: Shared,
    notes: quarry_testkit::fixture::HttpFixture,
    dir: tempfile::TempDir,
    a: crate::http::Served,
    b: crate::http::Served,
}

impl Deployment {
    async fn start(keyed: bool) -> Self {
        let shared = Shared::new();
        let notes = http_fixture("notes", 2).await;
        let servers = http_server("notes", &notes.url);
        let config = shared.config(&if keyed {
            crate::http::keyed(&servers)
        } else {
            servers
        });
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (
            replica(&dir.path().join("a"), &config).await,
            replica(&dir.path().join("b"), &config).await,
        );
        Self {
            _shared: shared,
            notes,
            dir,
            a,
            b,
        }
    }
}

/// A resource's text, read natively (`resources/read`).
async fn text_of(
    client: &rmcp::service::RunningService<rmcp::RoleClient, Hears>,
    uri: &str,
) -> String {
    let read = client
        .peer()
        .read_resource(rmcp::model::ReadResourceRequestParams::new(uri))
        .await
        .unwrap();
    let json = serde_json::to_value(&read).unwrap();
    json["contents"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Bumps the upstream's counter every half second until `hearing` hears of it (a taken-over
/// subscription is made again in the background, so the first bump may come before it).
async fn bump_until_heard(
    notes: &quarry_testkit::fixture::HttpFixture,
    hearing: &mut mpsc::UnboundedReceiver<String>,
) {
    while hearing.try_recv().is_ok() {}
    let bumping = async {
        loop {
            notes.server.bump().await;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    tokio::select! {
        () = hear(hearing, COUNTER) => {}
        () = bumping => {}
    }
}

// traces: REQ-071-036 — a 2025-11-25 session opened through replica A, with a subscription,
// goes on through replica B once A is killed: the same session id is served (the client may
// not re-initialize), and B announces the subscribed resource's changes on the stream the
// client reopens.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_and_its_subscription_go_on_through_b_when_a_is_killed() {
    let Deployment {
        _shared,
        notes,
        dir,
        mut a,
        b,
    } = Deployment::start(false).await;
    let mut balancer = Relay::start(a.addr).await;
    let front = SocketAddr::from(([127, 0, 0, 1], balancer.port()));

    let _ = rustls::crypto::ring::default_provider().install_default();
    // No silent re-initialization: a session B did not take over fails the test.
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("http://{front}/mcp"))
            .reinit_on_expired_session(false),
    );
    let (heard, mut hearing) = mpsc::unbounded_channel();
    let client = Hears(heard).serve(transport).await.unwrap();
    assert_eq!(text_of(&client, NOTE).await, "Hello from notes!\n");
    client
        .peer()
        .subscribe(SubscribeRequestParams::new(COUNTER))
        .await
        .unwrap();
    bump_until_heard(&notes, &mut hearing).await;

    // A dies; the balancer sends the client to B.
    a.child.kill().await.unwrap();
    balancer.switch(b.addr).await;
    let started = std::time::Instant::now();
    // Not read before: rmcp's client cache cannot answer it, B must.
    let counter = text_of(&client, COUNTER).await;
    assert!(counter.starts_with("count="), "{counter}");
    eprintln!(
        "first answer through B {:?} after the switch",
        started.elapsed()
    );
    let listed = client.peer().list_all_resources().await.unwrap();
    assert!(listed.iter().any(|r| r.uri == COUNTER), "{listed:?}");

    // The subscription made through A is announced by B.
    tokio::time::timeout(
        Duration::from_secs(20),
        bump_until_heard(&notes, &mut hearing),
    )
    .await
    .expect("no resources/updated through B within 20 s of the switch");
    eprintln!(
        "change announced through B {:?} after the switch",
        started.elapsed()
    );
    let said = std::fs::read_to_string(dir.path().join("b/stderr.log")).unwrap();
    assert!(
        said.contains("taking over a session another process opened"),
        "B took the session over: {said}"
    );
}

// traces: REQ-071-036 — a session is its opener's on every replica: another agent presenting
// its id to the replica that did not open it gets 404, as for an unknown session.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_taken_over_is_still_only_its_openers() {
    let Deployment {
        _shared,
        notes: _notes,
        dir: _dir,
        a,
        b,
    } = Deployment::start(true).await;
    let alice = format!("Authorization: Bearer {}", crate::http::ALICE_KEY);
    let bob = format!("Authorization: Bearer {}", crate::http::BOB_KEY);
    let host = |addr: SocketAddr| format!("127.0.0.1:{}", addr.port());
    let (status, head, body) =
        crate::http::post(a.addr, &host(a.addr), &[&alice], crate::http::INITIALIZE).await;
    assert_eq!(status, 200, "{head}{body}");
    let id = crate::http::session_of(&head).expect("a session");
    let session = format!("Mcp-Session-Id: {id}");
    let ping = r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;
    let (status, head, _) = crate::http::post(b.addr, &host(b.addr), &[&bob, &session], ping).await;
    assert_eq!(status, 404, "bob may not take alice's session over: {head}");
    let (status, head, body) =
        crate::http::post(b.addr, &host(b.addr), &[&alice, &session], ping).await;
    assert_eq!(
        status, 200,
        "alice's session, taken over by B: {head}{body}"
    );
}

// traces: REQ-071-036 — a 2026-07-28 client needs no session: its requests are answered by
// whichever replica they reach, and a subscriptions/listen stream cut by its replica's death is
// opened again through the balancer and hears the next change.
#[tokio::test(flavor = "multi_thread")]
async fn a_2026_client_is_served_by_either_replica_and_listens_again_after_a_death() {
    let Deployment {
        _shared,
        notes,
        dir: _dir,
        mut a,
        b,
    } = Deployment::start(false).await;
    for addr in [a.addr, b.addr, a.addr] {
        let (status, answer) =
            modern(addr, "resources/read", Some(NOTE), json!({"uri": NOTE})).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(
            answer["result"]["contents"][0]["text"], "Hello from notes!\n",
            "{answer}"
        );
    }

    let mut balancer = Relay::start(a.addr).await;
    let front = SocketAddr::from(([127, 0, 0, 1], balancer.port()));
    let wanted = json!({"resourceSubscriptions": [COUNTER]});
    let bump_while = |stream| async {
        let bumping = async {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                notes.server.bump().await;
            }
        };
        tokio::select! {
            seen = until_updated(stream, 20, &[COUNTER]) => seen,
            () = bumping => unreachable!(),
        }
    };
    bump_while(listen(front, 1, wanted.clone()).await).await;

    // A dies while a listen stream is open on it: the stream ends, not hangs.
    let mut stream = listen(front, 2, wanted.clone()).await;
    a.child.kill().await.unwrap();
    balancer.switch(b.addr).await;
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while let Ok(Some(_)) = stream.chunk().await {}
    })
    .await;
    assert!(ended.is_ok(), "the dead replica's stream did not end");
    bump_while(listen(front, 3, wanted).await).await;
}

// traces: REQ-071-036 — on the embedded default, a session outlives a restart of the gateway:
// the new process serves the same `Mcp-Session-Id` from the SQLite file; an id never opened is
// still 404.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_outlives_a_restart_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let notes = http_fixture("notes", 2).await;
    let config = http_server("notes", &notes.url);
    let mut first = crate::http::served(dir.path(), &config, &[]).await;
    let host = |addr: SocketAddr| format!("127.0.0.1:{}", addr.port());
    let (status, head, _) =
        crate::http::post(first.addr, &host(first.addr), &[], crate::http::INITIALIZE).await;
    assert_eq!(status, 200, "{head}");
    let id = crate::http::session_of(&head).expect("a session");
    first.child.kill().await.unwrap();

    let second = crate::http::served(dir.path(), &config, &[]).await;
    let read = json!({"jsonrpc": "2.0", "id": 2, "method": "resources/read",
        "params": {"uri": NOTE}})
    .to_string();
    let (status, head, body) = crate::http::post(
        second.addr,
        &host(second.addr),
        &[&format!("Mcp-Session-Id: {id}")],
        &read,
    )
    .await;
    assert_eq!(status, 200, "{head}{body}");
    let answer = crate::eras::message(&body);
    assert_eq!(
        answer["result"]["contents"][0]["text"], "Hello from notes!\n",
        "{answer}"
    );
    let never = format!("Mcp-Session-Id: {}", "0".repeat(64));
    let (status, _, _) = crate::http::post(second.addr, &host(second.addr), &[&never], &read).await;
    assert_eq!(status, 404, "an id never opened");
}

// traces: REQ-071-036, TR-4 — a session opened outside rmcp is handed to it by its first
// request that is not a read; when many come at once (an SDK client's `GET` stream and its
// first calls), one hands it over and the others wait for it: every one is answered, none
// with a 500 from a second takeover of a session rmcp already holds.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_handed_to_rmcp_by_many_requests_at_once_answers_each() {
    let dir = tempfile::tempdir().unwrap();
    let gw = crate::http::served(dir.path(), "", &[]).await;
    let host = format!("127.0.0.1:{}", gw.addr.port());
    for round in 0..60 {
        let (status, head, _) =
            crate::http::post(gw.addr, &host, &[], crate::http::INITIALIZE).await;
        assert_eq!(status, 200, "{head}");
        let sid = format!(
            "Mcp-Session-Id: {}",
            crate::http::session_of(&head).unwrap()
        );
        let calls: Vec<_> = (0..12)
            .map(|n| {
                let (addr, host, sid) = (gw.addr, host.clone(), sid.clone());
                let list = format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"tools/list"}}"#);
                tokio::spawn(async move {
                    let headers = [sid.as_str(), "MCP-Protocol-Version: 2025-11-25"];
                    crate::http::post(addr, &host, &headers, &list).await
                })
            })
            .collect();
        for call in calls {
            let (status, head, body) = call.await.unwrap();
            assert_eq!(status, 200, "round {round}: {head}{body}");
            assert!(body.contains("read_mcp_resource"), "round {round}: {body}");
        }
    }
}
