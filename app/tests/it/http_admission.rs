//! Requests handled at once across agents (`http.max_requests_in_flight`): past the bound a
//! request waits its turn, within its time, instead of being refused; a request whose client
//! hangs up keeps its turn until its work ends; a 2026-07-28 listener, which stays open, holds
//! no turn.

use std::time::{Duration, Instant};

use quarry_testkit::fixture::HttpFixture;
use serde_json::json;
use tempfile::TempDir;

use crate::{
    direct_reads::hang_up_once_upstream,
    eras::modern_raw,
    http::{Served, post, served},
    http_bounds::{session, slow_notes, slow_read},
    subscriptions::listen,
    support::http_server,
};

/// A gateway handling one request at a time, in front of the `notes` fixture whose `slow` item
/// takes 700 ms: the fixture, the gateway's folder and the gateway, its `Host`, and the header
/// of a session opened on it.
async fn one_turn() -> (HttpFixture, TempDir, Served, String, String) {
    one_turn_with(700, "").await
}

/// [`one_turn`] with the slow item taking `ms`, and `extra` lines in the `[http]` table.
async fn one_turn_with(ms: u64, extra: &str) -> (HttpFixture, TempDir, Served, String, String) {
    let notes = slow_notes(ms).await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}[http]\nmax_requests_in_flight = 1\n{extra}",
        http_server("notes", &notes.url)
    );
    let gw = served(dir.path(), &config, &[]).await;
    let host = format!("127.0.0.1:{}", gw.addr.port());
    let sid = session(gw.addr, &host).await;
    (notes, dir, gw, host, sid)
}

type Answer = (u16, String, String);

/// On the session `sid` of a [`one_turn`] gateway: a slow read (id 1), and a `tools/list` (id 9)
/// sent once the read reached the upstream, so that it waits for the only turn. Both answers,
/// and how long the list took.
async fn list_while_a_slow_read_holds_the_turn(
    notes: &HttpFixture,
    gw: &Served,
    host: &str,
    sid: &str,
) -> (Answer, Answer, Duration) {
    let headers = [sid, "MCP-Protocol-Version: 2025-11-25"];
    let list = r#"{"jsonrpc":"2.0","id":9,"method":"tools/list"}"#;
    let slow_body = slow_read(1);
    let (slow, (listed, took)) = tokio::join!(post(gw.addr, host, &headers, &slow_body), async {
        let deadline = Instant::now() + Duration::from_secs(10);
        while notes.server.reads() == 0 {
            assert!(
                Instant::now() < deadline,
                "the slow read never reached the upstream"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let sent = Instant::now();
        let answer = post(gw.addr, host, &headers, list).await;
        (answer, sent.elapsed())
    });
    (slow, listed, took)
}

// traces: TR-8 — past http.max_requests_in_flight a request waits for a turn and is answered
// once the request before it ends, not refused.
#[tokio::test(flavor = "multi_thread")]
async fn past_the_bound_a_request_waits_its_turn() {
    let (notes, _dir, gw, host, sid) = one_turn().await;
    // Once the slow read reached the upstream it holds the only turn, for the 700 ms the
    // upstream takes from there.
    let (slow, listed, took) =
        list_while_a_slow_read_holds_the_turn(&notes, &gw, &host, &sid).await;
    assert_eq!(slow.0, 200, "{}", slow.2);
    assert!(slow.2.contains("slow"), "{}", slow.2);
    assert_eq!(listed.0, 200, "waited, not refused: {}", listed.1);
    assert!(listed.2.contains("read_mcp_resource"), "{}", listed.2);
    assert!(
        took >= Duration::from_millis(500),
        "the tools/list sent while the slow read held the only turn was answered in {took:?}"
    );
}

// traces: TR-8 — a request whose client hangs up keeps its turn until its work ends: with one
// turn, a read hung up on once it reached the upstream still holds it for the 700 ms the upstream
// takes, so hanging up does not let more work in than the bound.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_hung_up_on_keeps_its_turn_until_its_work_ends() {
    let (notes, _dir, gw, host, sid) = one_turn().await;
    let body = slow_read(1);
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n{sid}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    hang_up_once_upstream(gw.addr, &request, &notes).await;
    let sent = Instant::now();
    let headers = [sid.as_str(), "MCP-Protocol-Version: 2025-11-25"];
    let list = r#"{"jsonrpc":"2.0","id":9,"method":"tools/list"}"#;
    let (status, _, answer) = post(gw.addr, &host, &headers, list).await;
    let waited = sent.elapsed();
    assert_eq!(status, 200, "waited, not refused: {answer}");
    assert!(answer.contains("read_mcp_resource"), "{answer}");
    assert!(
        waited >= Duration::from_millis(500),
        "the tools/list sent after the hang-up, while the hung-up read still ran, was answered in {waited:?}"
    );
}

// traces: TR-8 — a 2026-07-28 subscriptions/listen stream stays open without holding a turn:
// with one turn and a listener open, a read is answered.
#[tokio::test(flavor = "multi_thread")]
async fn a_listener_holds_no_turn() {
    let dir = tempfile::tempdir().unwrap();
    let notes = crate::support::http_fixture("notes", 2).await;
    let config = format!(
        "{}[http]\nmax_requests_in_flight = 1\n",
        http_server("notes", &notes.url)
    );
    let gw = served(dir.path(), &config, &[]).await;
    let stream = listen(
        gw.addr,
        5,
        json!({"resourceSubscriptions": ["mcp://notes/fixture_3A//item/1"]}),
    )
    .await;
    let uri = "mcp://notes/fixture_3A//item/2";
    let (status, _, answer) = tokio::time::timeout(
        Duration::from_secs(10),
        modern_raw(gw.addr, "resources/read", Some(uri), json!({"uri": uri})),
    )
    .await
    .expect("the read was answered while the listener stayed open");
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("\"contents\""), "{answer}");
    drop(stream);
}

// traces: TR-8 — a request on a session whose time runs out while it waits for its turn gets
// what rmcp's event stream would have ended with: the JSON-RPC error for it (E009, naming the
// bound), status 200, not a 504 its client would take for a broken transport. The read holding
// the only turn is cut at its bound too, and keeps the turn until its work ends.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_request_cut_while_it_waits_for_its_turn_gets_its_error() {
    let (notes, _dir, gw, host, sid) = one_turn_with(2500, "request_timeout_seconds = 1\n").await;
    let (slow, waiting, _) = list_while_a_slow_read_holds_the_turn(&notes, &gw, &host, &sid).await;
    for (status, head, body, id) in [
        (slow.0, &slow.1, &slow.2, 1),
        (waiting.0, &waiting.1, &waiting.2, 9),
    ] {
        assert_eq!(status, 200, "{head}{body}");
        let error = body
            .lines()
            .filter_map(|l| l.strip_prefix("data: ").or(Some(l)))
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|m| m.get("error").is_some())
            .unwrap_or_else(|| panic!("no JSON-RPC error: {head}{body}"));
        assert_eq!(error["id"], json!(id), "{error}");
        let message = error["error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with("E009"), "{error}");
        assert!(message.contains("http.request_timeout_seconds"), "{error}");
    }
    assert!(
        waiting
            .1
            .to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{}",
        waiting.1
    );
}
