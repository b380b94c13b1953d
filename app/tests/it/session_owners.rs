//! Sessions no longer in use, through the real binary: one rmcp has ended for idleness leaves
//! nothing of its owner behind; one rmcp would keep alive on the changes it is told of, whose
//! client went away, is closed; one whose client listens on its `GET` stream, hearing those
//! changes, stays open and its opener's, and its record stays in the session store.

use std::{net::SocketAddr, time::Duration};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

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
const SUBSCRIBE: &str = r#"{"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{"uri":"mcp://ticks/fixture_3A//counter"}}"#;

/// The sum of `sessions=N` over the log lines that say `what`.
fn forgotten(log: &str, what: &str) -> usize {
    log.lines()
        .filter(|l| l.contains(what))
        .filter_map(|l| l.split("sessions=").nth(1))
        .filter_map(|n| n.split_whitespace().next()?.parse::<usize>().ok())
        .sum()
}

/// A `GET` stream opened on the session whose header line is `sid`, kept open while the
/// connection it returns lives; the answer's head must say an event stream.
async fn listen(addr: SocketAddr, host: &str, key: &str, sid: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET /mcp HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n{key}\r\n{sid}\r\n{VERSION}\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0_u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(stream.read(&mut byte).await.unwrap(), 1, "closed: {head:?}");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("content-type: text/event-stream"), "{head}");
    stream
}

// traces: TR-4, TR-5, REQ-071-036 — a session unused for http.session_idle_seconds (no request,
// no GET stream open) is closed and leaves nothing of its owner behind: one rmcp ends itself,
// and one subscribed to a resource that keeps changing, which rmcp would keep alive on the
// changes it sends to a client that went away. Both ids are 404 to everyone after. A session
// whose client listens on its GET stream, hearing the changes, is in use: it stays open, its
// record in the store is kept (a replica can take it over), and it is its opener's: another
// agent presenting its id gets 404, the opener is answered.
#[tokio::test(flavor = "multi_thread")]
async fn unused_sessions_are_closed_and_forgotten_and_a_listened_one_stays_its_openers() {
    let dir = tempfile::tempdir().unwrap();
    let config = keyed(&format!(
        "{}[http]\nsession_idle_seconds = 10\n",
        stdio_fixture("ticks", &["--tick-ms", "300"])
    ));
    let gw = served_env(dir.path(), &config, "127.0.0.1:0", &[], &[FORGETTING]).await;
    let host = format!("127.0.0.1:{}", gw.addr.port());
    let alice = format!("Authorization: Bearer {ALICE_KEY}");
    let bob = format!("Authorization: Bearer {BOB_KEY}");
    // All opened by rmcp (an event stream asked for first), so that rmcp holds them.
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
    let listened = open().await;
    let left = open().await;
    let ended = open().await;
    for sid in [&listened, &left] {
        let (status, _, body) = post(gw.addr, &host, &[&alice, sid, VERSION], SUBSCRIBE).await;
        assert_eq!(status, 200, "{body}");
    }
    let _stream = listen(gw.addr, &host, &alice, &listened).await;

    // No session sends a request now. rmcp ends the unsubscribed one after 10 s; the guard
    // closes the one subscribed without a stream; the store forgets those two, and keeps the
    // record of the one listened to, which the guard touches while its stream is open.
    let log = || std::fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default();
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    loop {
        let said = log();
        if forgotten(&said, "owners of sessions rmcp has ended forgotten") >= 2
            && forgotten(&said, "idle sessions forgotten") >= 2
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not all forgotten within 40 s: {said}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // A few sweeps more: the listened-to session is neither closed nor forgotten.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let said = log();
    assert_eq!(
        forgotten(&said, "owners of sessions rmcp has ended forgotten"),
        2,
        "{said}"
    );
    assert_eq!(
        forgotten(&said, "sessions unused for their idle time closed"),
        1,
        "{said}"
    );
    assert_eq!(
        forgotten(&said, "idle sessions forgotten"),
        2,
        "the store keeps the record of the session listened to: {said}"
    );

    let (status, _, body) = post(gw.addr, &host, &[&bob, &listened, VERSION], LIST).await;
    assert_eq!(status, 404, "bob used alice's session: {body}");
    let (status, _, body) = post(gw.addr, &host, &[&alice, &listened, VERSION], LIST).await;
    assert_eq!(status, 200, "alice's session, held by rmcp: {body}");
    assert!(body.contains("read_mcp_resource"), "{body}");
    for sid in [&left, &ended] {
        for who in [&bob, &alice] {
            let (status, _, body) = post(gw.addr, &host, &[who, sid, VERSION], LIST).await;
            assert_eq!(status, 404, "a closed session: {body}");
        }
    }
}
