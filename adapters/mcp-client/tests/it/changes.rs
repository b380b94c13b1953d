//! What upstreams of either era announce, and the caching hints they give.

use std::{sync::Arc, time::Duration};

use quarry_domain::{Endpoint, ServerName, ServerSpec};
use quarry_mcp_client::RmcpConnector;
use quarry_ports::{UpstreamConnector, UpstreamSession};
use quarry_testkit::fixture::{self, FixtureArgs};
use tokio::sync::mpsc;

use super::{MB, connect, observer, stdio_spec};

// traces: CA-2 — upstream announcements reach the observer, and subscriptions are made, with a
// server of either era: resources/subscribe for a 2025-11-25 one, subscriptions/listen streams
// for a 2026-07-28 one.
#[tokio::test]
async fn ca_2_updates_and_list_changes_are_announced_to_the_observer() {
    for legacy in [false, true] {
        announced(legacy).await;
    }
}

/// A fixture serving `args` over HTTP as server "notes", a session to it, and what the session's
/// observer hears.
async fn watched(
    args: FixtureArgs,
) -> (
    fixture::HttpFixture,
    Arc<dyn UpstreamSession>,
    mpsc::UnboundedReceiver<String>,
) {
    let server = fixture::serve_http(args, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let spec = ServerSpec::new(
        ServerName::parse("notes").unwrap(),
        Endpoint::Http {
            url: server.url.clone(),
        },
    );
    let (obs, heard) = observer();
    let session = RmcpConnector::new(MB)
        .unwrap()
        .connect(&spec, None, None, obs)
        .await
        .unwrap();
    (server, session, heard)
}

async fn announced(legacy: bool) {
    let args = FixtureArgs {
        legacy,
        ..FixtureArgs::default()
    };
    let (server, session, mut heard) = watched(args).await;
    assert!(session.subscribe("fixture://counter").await.unwrap());
    assert!(
        session.subscribe("fixture://counter").await.unwrap(),
        "twice is harmless"
    );
    server.server.bump().await;
    let got = tokio::time::timeout(Duration::from_secs(10), heard.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, "updated notes fixture://counter", "legacy: {legacy}");
    server.server.grow().await;
    let got = tokio::time::timeout(Duration::from_secs(10), heard.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, "list_changed notes", "legacy: {legacy}");
    session.close().await;
}

// The 2026-07-28 caching hints come through.
#[tokio::test]
async fn caching_hints_are_reported() {
    let session = connect(&stdio_spec("hints", &["--ttl-ms", "1500", "--private"])).await;
    let fetched = session.read("fixture://counter", MB).await.unwrap();
    assert_eq!(fetched.ttl, Some(Duration::from_millis(1500)));
    assert!(fetched.private);
    // A 2025-11-25 server gives none.
    let plain = connect(&stdio_spec("plain", &["--legacy"])).await;
    let fetched = plain.read("fixture://counter", MB).await.unwrap();
    assert_eq!((fetched.ttl, fetched.private), (None, false));
    session.close().await;
    plain.close().await;
}

/// The fixture's open listen streams, settled: how many URIs each carries, smallest first.
async fn settled_streams(server: &fixture::FixtureServer, want: &[usize]) -> Vec<usize> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut open = server.listening();
        open.sort_unstable();
        if open == want || tokio::time::Instant::now() > deadline {
            return open;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// A 2026-07-28 upstream hears of a session's URIs on a few shared streams (over HTTP each holds
// a connection), not one per URI: a burst of 300 first subscriptions ends on three streams of at
// most 128 URIs beside the list's own, the streams they replaced cancelled; later URIs join the
// newest; and a change to any of them is still announced.
#[tokio::test]
async fn subscriptions_share_a_few_listen_streams_and_each_is_heard() {
    let (server, session, mut heard) = watched(FixtureArgs::default()).await;
    let item = |n: u32| format!("fixture://item/{n}");
    let burst = futures::future::join_all((1..=300).map(|n| {
        let session = session.clone();
        async move { session.subscribe(&item(n)).await }
    }))
    .await;
    assert!(burst.iter().all(|r| r == &Ok(true)), "{burst:?}");
    // The list's stream carries no URI.
    assert_eq!(
        settled_streams(&server.server, &[0, 44, 128, 128]).await,
        [0, 44, 128, 128]
    );
    for n in 301..=310 {
        assert!(session.subscribe(&item(n)).await.unwrap());
    }
    assert_eq!(
        settled_streams(&server.server, &[0, 54, 128, 128]).await,
        [0, 54, 128, 128]
    );
    let changed = [1, 128, 129, 256, 300, 310];
    for n in changed {
        server.server.announce(&item(n)).await;
    }
    let mut got = Vec::new();
    while got.len() < changed.len() {
        let next = tokio::time::timeout(Duration::from_secs(10), heard.recv())
            .await
            .unwrap()
            .unwrap();
        if next.starts_with("updated") {
            got.push(next);
        }
    }
    got.sort();
    let mut want: Vec<_> = changed
        .iter()
        .map(|&n| format!("updated notes {}", item(n)))
        .collect();
    want.sort();
    assert_eq!(got, want);
    session.close().await;
    assert_eq!(
        settled_streams(&server.server, &[]).await,
        Vec::<usize>::new()
    );
}

/// The fixture's open listen streams that carry URIs, once they are `want` (how many URIs each
/// carries, smallest first), or as they are after 10 s; streams for list changes are left out.
async fn carrying(server: &fixture::FixtureServer, want: &[usize]) -> Vec<usize> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut open: Vec<usize> = server.listening().into_iter().filter(|&n| n > 0).collect();
        open.sort_unstable();
        if open == want || tokio::time::Instant::now() > deadline {
            return open;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits for `want` among what the observer heard, skipping the rest.
async fn until_heard(heard: &mut mpsc::UnboundedReceiver<String>, want: &str) {
    let waited = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(next) = heard.recv().await {
            if next == want {
                return;
            }
        }
    })
    .await;
    assert!(waited.is_ok(), "{want:?} was not heard within 10 s");
}

/// A fixture over HTTP as server "notes", and two sessions to it from one connector, telling one
/// observer.
struct Pair {
    server: fixture::HttpFixture,
    spec: ServerSpec,
    connector: RmcpConnector,
    one: Arc<dyn UpstreamSession>,
    two: Arc<dyn UpstreamSession>,
    heard: mpsc::UnboundedReceiver<String>,
}

async fn pair() -> Pair {
    let server = fixture::serve_http(FixtureArgs::default(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let spec = ServerSpec::new(
        ServerName::parse("notes").unwrap(),
        Endpoint::Http {
            url: server.url.clone(),
        },
    );
    let (obs, heard) = observer();
    let connector = RmcpConnector::new(MB).unwrap();
    let one = connector
        .connect(&spec, None, None, obs.clone())
        .await
        .unwrap();
    let two = connector.connect(&spec, None, None, obs).await.unwrap();
    Pair {
        server,
        spec,
        connector,
        one,
        two,
        heard,
    }
}

// Over HTTP a listen stream is not tied to a session, so the sessions of one server share their
// streams: a URI asked for on one session is not asked again on another, the URIs of both
// sessions end on one stream (beside each session's own stream for list changes), and a change
// is announced once. A stream the server ends leaves its URIs unheard: the observer is told,
// and the next subscription to any of them opens a stream again, on whichever session asks.
#[tokio::test]
async fn http_sessions_of_a_server_share_their_listen_streams() {
    let Pair {
        server,
        spec,
        connector,
        one,
        two,
        mut heard,
    } = pair().await;
    assert!(one.subscribe("fixture://item/1").await.unwrap());
    assert!(two.subscribe("fixture://item/2").await.unwrap());
    assert!(two.subscribe("fixture://item/1").await.unwrap());
    assert_eq!(settled_streams(&server.server, &[0, 0, 2]).await, [0, 0, 2]);
    server.server.announce("fixture://item/1").await;
    until_heard(&mut heard, "updated notes fixture://item/1").await;
    server.server.announce("fixture://item/2").await;
    until_heard(&mut heard, "updated notes fixture://item/2").await;
    let twice: Vec<String> = std::iter::from_fn(|| heard.try_recv().ok())
        .filter(|h| h.starts_with("updated"))
        .collect();
    assert!(twice.is_empty(), "announced more than once: {twice:?}");

    // Another observer (another registration of the server) gets streams of its own.
    let (other, _) = observer();
    let three = connector.connect(&spec, None, None, other).await.unwrap();
    assert!(three.subscribe("fixture://item/1").await.unwrap());
    assert_eq!(
        settled_streams(&server.server, &[0, 0, 0, 1, 2]).await,
        [0, 0, 0, 1, 2]
    );
    three.close().await;

    server.server.end_listens();
    until_heard(&mut heard, "unheard notes").await;
    assert_eq!(carrying(&server.server, &[]).await, Vec::<usize>::new());
    assert!(two.subscribe("fixture://item/1").await.unwrap());
    assert_eq!(carrying(&server.server, &[1]).await, [1]);
    server.server.announce("fixture://item/1").await;
    until_heard(&mut heard, "updated notes fixture://item/1").await;
    one.close().await;
    two.close().await;
    assert_eq!(
        settled_streams(&server.server, &[]).await,
        Vec::<usize>::new()
    );
}

// A shared stream opened on a session that is closed ends with it: the observer is told its URIs
// went unheard, and the server's other session asks for them again on the next subscription.
#[tokio::test]
async fn a_shared_stream_ends_with_its_session_and_is_asked_for_again() {
    let Pair {
        server,
        one,
        two,
        mut heard,
        ..
    } = pair().await;
    assert!(one.subscribe("fixture://item/1").await.unwrap());
    assert_eq!(settled_streams(&server.server, &[0, 0, 1]).await, [0, 0, 1]);
    one.close().await;
    until_heard(&mut heard, "unheard notes").await;
    assert_eq!(carrying(&server.server, &[]).await, Vec::<usize>::new());
    assert!(two.subscribe("fixture://item/1").await.unwrap());
    assert_eq!(carrying(&server.server, &[1]).await, [1]);
    server.server.announce("fixture://item/1").await;
    until_heard(&mut heard, "updated notes fixture://item/1").await;
    two.close().await;
}

// Over stdio each session is a process of its own: its streams are its own, and closing it ends
// them without telling the observer anything went unheard (its replacement starts afresh).
#[tokio::test]
async fn a_stdio_sessions_streams_are_its_own() {
    let spec = stdio_spec("alone", &[]);
    let (obs, mut heard) = observer();
    let connector = RmcpConnector::new(MB).unwrap();
    let one = connector
        .connect(&spec, None, None, obs.clone())
        .await
        .unwrap();
    let two = connector.connect(&spec, None, None, obs).await.unwrap();
    for session in [&one, &two] {
        assert!(session.subscribe("fixture://counter").await.unwrap());
    }
    one.close().await;
    two.close().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let unheard: Vec<String> = std::iter::from_fn(|| heard.try_recv().ok())
        .filter(|h| h.starts_with("unheard"))
        .collect();
    assert!(unheard.is_empty(), "{unheard:?}");
}

// traces: CA-2 — a 2025-11-25 session that Quarry closes (a failed health check, an eviction)
// takes its subscriptions with it: the observer hears that the server's announcements go unheard,
// once. A session that subscribed to nothing leaves nothing unheard.
#[tokio::test]
async fn closing_a_legacy_session_that_subscribed_leaves_its_server_unheard() {
    let args = FixtureArgs {
        legacy: true,
        ..FixtureArgs::default()
    };
    let (_server, idle, mut idle_heard) = watched(args.clone()).await;
    idle.close().await;
    let (_server, session, mut heard) = watched(args).await;
    assert!(session.subscribe("fixture://counter").await.unwrap());
    session.close().await;
    let got = tokio::time::timeout(Duration::from_secs(10), heard.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, "unheard notes");
    session.close().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(heard.try_recv().is_err(), "told once");
    assert!(idle_heard.try_recv().is_err(), "nothing was subscribed");
}
