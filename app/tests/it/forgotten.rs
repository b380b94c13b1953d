//! A 2025-11-25 upstream's subscriptions live in its session: a server that forgets the session
//! (it restarted) forgets them too. Through the real binary: what Quarry cached of such a server
//! is not served on after the server is seen to have forgotten the session, and what is read
//! again is subscribed to again.

use std::{net::SocketAddr, time::Duration};

use quarry_testkit::fixture::{self, FixtureArgs, HttpFixture};
use serde_json::{Value, json};

use crate::support::{Client, call, gateway, http_server};

fn legacy() -> FixtureArgs {
    FixtureArgs {
        name: "notes".into(),
        resources: 2,
        legacy: true,
        ..FixtureArgs::default()
    }
}

/// The fixture, anew (no sessions, no subscribers), at the address a stopped one served on.
async fn restarted(addr: SocketAddr) -> HttpFixture {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match fixture::serve_http(legacy(), addr).await {
            Ok(served) => return served,
            Err(e) if tokio::time::Instant::now() > deadline => panic!("{addr}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

async fn read(client: &Client, uri: &str) -> Value {
    call(client, "read_mcp_resource", json!({"resource_uri": uri})).await
}

/// Reads `uri` until its content is `content` (within 10 s), returning the last read.
async fn read_until(client: &Client, uri: &str, content: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let got = read(client, uri).await;
        if got["content"] == content || tokio::time::Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// traces: CA-2 — a 2025-11-25 upstream over HTTP restarts and forgets Quarry's session with the
// subscription it carried; its content changes, announced to nobody. The next request Quarry
// sends it (here a read of another resource) meets a 404 for the old session, and rmcp opens a
// new one: what was cached of the server is dropped, so the change is read, and the counter is
// subscribed to again, so a later change is heard.
#[tokio::test(flavor = "multi_thread")]
async fn ca_2_a_restarted_upstream_leaves_nothing_cached_unheard() {
    let dir = tempfile::tempdir().unwrap();
    let first = fixture::serve_http(legacy(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let client = gateway(dir.path(), &http_server("notes", &first.url)).await;
    let counter = "mcp://notes/fixture_3A//counter";
    assert_eq!(read(&client, counter).await["content"], "count=0\n");
    assert_eq!(read(&client, counter).await["cached"], true);

    let addr = first.addr;
    first.stop();
    drop(first);
    let second = restarted(addr).await;
    // Subscribed to by nobody: the change is announced to nobody.
    second.server.bump().await;
    let other = read(&client, "mcp://notes/fixture_3A//item/1").await;
    assert_eq!(other["cached"], false, "{other}");
    let fresh = read_until(&client, counter, "count=1\n").await;
    assert_eq!(
        fresh["content"], "count=1\n",
        "the old content was served on: {fresh}"
    );

    // That read subscribed to the counter on the new session: the next change is heard.
    assert_eq!(read(&client, counter).await["cached"], true);
    second.server.bump().await;
    let heard = read_until(&client, counter, "count=2\n").await;
    assert_eq!(heard["content"], "count=2\n", "{heard}");
}
