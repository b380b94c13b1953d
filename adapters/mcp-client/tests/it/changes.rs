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
