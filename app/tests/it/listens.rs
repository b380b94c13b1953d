//! What Quarry hears from a 2026-07-28 upstream over HTTP, through the real binary: the pooled
//! sessions of a server share their `subscriptions/listen` streams, and a stream the upstream
//! ends leaves nothing cached that nobody hears about.

use std::time::Duration;

use quarry_testkit::fixture::{FixtureServer, HttpFixture};
use serde_json::{Value, json};

use crate::support::{Client, call, gateway, http_fixture, http_server};

/// The fixture's open listen streams (how many URIs each carries, sorted) once `done` holds of
/// them, or as they are after 10 s.
async fn streams_when(server: &FixtureServer, done: impl Fn(&[usize]) -> bool) -> Vec<usize> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut open = server.listening();
        open.sort_unstable();
        if done(&open) || tokio::time::Instant::now() > deadline {
            return open;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn read(client: &Client, uri: &str) -> Value {
    call(client, "read_mcp_resource", json!({"resource_uri": uri})).await
}

/// Reads `uri` until `done` holds of the result (within 10 s), returning the last read.
async fn read_until(client: &Client, uri: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let got = read(client, uri).await;
        if done(&got) || tokio::time::Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn pooled(dir: &std::path::Path, notes: &HttpFixture, pool: u32) -> Client {
    let config =
        http_server("notes", &notes.url).replace("\n\n", &format!("\npool_size = {pool}\n\n"));
    gateway(dir, &config).await
}

// traces: CA-2 — the first reads of forty resources at once, spread over a pool of four
// sessions, are heard of on one stream of forty URIs (beside each session's stream for list
// changes), not one stream per session; a change to any is still announced, and the next read
// has the new content.
#[tokio::test(flavor = "multi_thread")]
async fn ca_2_pooled_sessions_share_one_listen_stream() {
    let dir = tempfile::tempdir().unwrap();
    let notes = http_fixture("notes", 40).await;
    let client = std::sync::Arc::new(pooled(dir.path(), &notes, 4).await);
    let uri = |n: u32| format!("mcp://notes/fixture_3A//item/{n}");
    let reads: Vec<_> = (1..=40)
        .map(|n| {
            let (client, uri) = (client.clone(), uri(n));
            tokio::spawn(async move { read(&client, &uri).await })
        })
        .collect();
    for read in reads {
        assert_eq!(read.await.unwrap()["cached"], false);
    }
    // Once the streams replaced have closed.
    let open = streams_when(&notes.server, |open| {
        open.iter().filter(|&&n| n > 0).count() == 1 && open.contains(&40)
    })
    .await;
    let carrying: Vec<usize> = open.iter().copied().filter(|&n| n > 0).collect();
    let sessions = open.len() - carrying.len();
    assert!(sessions > 1, "the reads used one session only: {open:?}");
    assert_eq!(carrying, [40], "{open:?}");
    assert_eq!(read(&client, &uri(7)).await["cached"], true);
    notes.server.announce("fixture://item/7").await;
    let again = read_until(&client, &uri(7), |r| r["cached"] == false).await;
    assert_eq!(again["cached"], false, "the change was not heard: {again}");
}

// traces: CA-2 — an upstream that ends its listen streams leaves the resources they carried
// unheard: what Quarry cached of them is dropped, so a change made meanwhile (announced to
// nobody) is read at once; the next read asks for the resource again, and a later change is
// heard.
#[tokio::test(flavor = "multi_thread")]
async fn ca_2_a_lost_listen_stream_leaves_nothing_cached_unheard() {
    let dir = tempfile::tempdir().unwrap();
    let notes = http_fixture("notes", 2).await;
    let client = pooled(dir.path(), &notes, 2).await;
    let counter = "mcp://notes/fixture_3A//counter";
    assert_eq!(read(&client, counter).await["content"], "count=0\n");
    assert_eq!(read(&client, counter).await["cached"], true);
    notes.server.end_listens();
    let open = streams_when(&notes.server, |open| open.iter().all(|&n| n == 0)).await;
    assert!(open.iter().all(|&n| n == 0), "{open:?}");
    // Nobody listens: the change is announced to nobody.
    notes.server.bump().await;
    let read_once = read_until(&client, counter, |r| r["content"] == "count=1\n").await;
    assert_eq!(read_once["content"], "count=1\n", "{read_once}");
    // That read asked for the counter again: the next change is heard.
    let open = streams_when(&notes.server, |open| open.contains(&1)).await;
    assert!(open.contains(&1), "{open:?}");
    assert_eq!(read(&client, counter).await["content"], "count=1\n");
    notes.server.bump().await;
    let heard = read_until(&client, counter, |r| r["content"] == "count=2\n").await;
    assert_eq!(heard["content"], "count=2\n", "{heard}");
}
