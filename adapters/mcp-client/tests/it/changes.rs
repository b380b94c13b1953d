//! What upstreams of either era announce, and the caching hints they give.

use std::time::Duration;

use quarry_domain::{Endpoint, ServerName, ServerSpec};
use quarry_mcp_client::RmcpConnector;
use quarry_ports::UpstreamConnector;
use quarry_testkit::fixture::{self, FixtureArgs};

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

async fn announced(legacy: bool) {
    let args = FixtureArgs {
        legacy,
        ..FixtureArgs::default()
    };
    let server = fixture::serve_http(args, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let spec = ServerSpec::new(
        ServerName::parse("notes").unwrap(),
        Endpoint::Http {
            url: server.url.clone(),
        },
    );
    let (obs, mut heard) = observer();
    let session = RmcpConnector::new(MB)
        .unwrap()
        .connect(&spec, None, None, obs)
        .await
        .unwrap();
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
