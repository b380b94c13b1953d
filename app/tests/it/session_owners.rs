//! What a replica keeps of a session's owner, through the real binary: forgotten once rmcp has
//! ended the session (idle, with no request to hear its 404), kept while rmcp still holds it,
//! even when the session store has forgotten it.

use std::time::Duration;

use crate::{
    http::{ALICE_KEY, BOB_KEY, INITIALIZE, keyed, post, served_env, session_of},
    support::stdio_fixture,
};

/// Quarry's log with what the session guard and the session store forget.
const FORGETTING: (&str, &str) = (
    "QUARRY_LOG",
    "info,quarry_mcp_server::http::guard=debug,quarry_mcp_server::http::sessions=debug",
);

const VERSION: &str = "MCP-Protocol-Version: 2025-11-25";
const LIST: &str = r#"{"jsonrpc":"2.0","id":9,"method":"tools/list"}"#;

/// The sum of `sessions=N` over the log lines that say `what`.
fn forgotten(log: &str, what: &str) -> usize {
    log.lines()
        .filter(|l| l.contains(what))
        .filter_map(|l| l.split("sessions=").nth(1))
        .filter_map(|n| n.split_whitespace().next()?.parse::<usize>().ok())
        .sum()
}

// traces: TR-5, REQ-071-036 — a session rmcp has ended for idleness leaves nothing of its owner
// behind on the replica (a gateway whose clients vanish without a DELETE would otherwise keep
// one line per session for its whole life), and its id is 404 to everyone; a session rmcp
// still holds, kept alive by the changes it is told of, stays its opener's after the store
// forgot it: another agent presenting its id gets 404, the opener is answered.
#[tokio::test(flavor = "multi_thread")]
async fn an_ended_sessions_owner_is_forgotten_and_a_held_ones_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let config = keyed(&format!(
        "{}[http]\nsession_idle_seconds = 10\n",
        stdio_fixture("ticks", &["--tick-ms", "300"])
    ));
    let gw = served_env(dir.path(), &config, "127.0.0.1:0", &[], &[FORGETTING]).await;
    let host = format!("127.0.0.1:{}", gw.addr.port());
    let alice = format!("Authorization: Bearer {ALICE_KEY}");
    let bob = format!("Authorization: Bearer {BOB_KEY}");
    // Both opened by rmcp (an event stream asked for first), so that rmcp's idle timer ends them.
    let open = async || {
        let weighted = "Accept: text/event-stream;q=1";
        let (status, head, body) = post(gw.addr, &host, &[&alice, weighted], INITIALIZE).await;
        assert_eq!(status, 200, "{head}{body}");
        let sid = format!("Mcp-Session-Id: {}", session_of(&head).unwrap());
        let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        assert_eq!(
            post(gw.addr, &host, &[&alice, &sid], initialized).await.0,
            202
        );
        sid
    };
    let held = open().await;
    let ended = open().await;
    let subscribe = r#"{"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{"uri":"mcp://ticks/fixture_3A//counter"}}"#;
    let (status, _, body) = post(gw.addr, &host, &[&alice, &held, VERSION], subscribe).await;
    assert_eq!(status, 200, "{body}");

    // Neither session sends anything now. rmcp ends the unsubscribed one after 10 s; the store
    // forgets both; the subscribed one lives on in rmcp on the changes it is told of.
    let log = || std::fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default();
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    loop {
        let said = log();
        if forgotten(&said, "owners of sessions rmcp has ended forgotten") >= 1
            && forgotten(&said, "idle sessions forgotten") >= 2
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "nothing forgotten within 40 s: {said}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // A few sweeps more: the held session's owner is not among what is forgotten.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        forgotten(&log(), "owners of sessions rmcp has ended forgotten"),
        1,
        "{}",
        log()
    );

    let (status, _, body) = post(gw.addr, &host, &[&bob, &held, VERSION], LIST).await;
    assert_eq!(status, 404, "bob used alice's session: {body}");
    let (status, _, body) = post(gw.addr, &host, &[&alice, &held, VERSION], LIST).await;
    assert_eq!(status, 200, "alice's session, held by rmcp: {body}");
    assert!(body.contains("read_mcp_resource"), "{body}");
    for who in [&bob, &alice] {
        let (status, _, body) = post(gw.addr, &host, &[who, &ended, VERSION], LIST).await;
        assert_eq!(status, 404, "an ended session: {body}");
    }
}
