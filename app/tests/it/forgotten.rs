//! A 2025-11-25 upstream's subscriptions live in its session: a server that forgets the session
//! (it restarted) forgets them too. Through the real binary: what Quarry cached of such a server
//! is not served on after the server is seen to have forgotten the session, and what is read
//! again is subscribed to again. The same holds when one of a stdio server's processes exits while
//! the others live on, and when its only process is killed while no request is made.

use std::{net::SocketAddr, time::Duration};

use quarry_testkit::fixture::{self, FixtureArgs, HttpFixture};
use serde_json::{Value, json};

use crate::support::{Client, call, call_error, call_raw, gateway, http_server, stdio_fixture};

/// Requests a pooled upstream process takes before the pool opens another (the pool's own
/// bound).
const PER_PROCESS: usize = 8;

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

/// The count in a read of `fixture://counter` (`count=N`).
fn count(read: &Value) -> u64 {
    let content = read["content"].as_str().unwrap_or_else(|| panic!("{read}"));
    content
        .trim()
        .strip_prefix("count=")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{read}"))
}

/// How many reads of `uri` the fixture announced in `file`.
fn announced(file: &std::path::Path, uri: &str) -> usize {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter(|l| *l == uri)
        .count()
}

// traces: CA-2 — a 2025-11-25 upstream over stdio with two processes in its pool: the counter is
// read, and so subscribed to, through the second (the first is busy), and that process exits
// while the first lives on. Nobody is subscribed to the counter any more, so what was cached of
// it is dropped and the counter subscribed to again: its changes keep being read.
#[tokio::test(flavor = "multi_thread")]
async fn ca_2_a_pooled_process_that_exits_leaves_nothing_cached_unheard() {
    let dir = tempfile::tempdir().unwrap();
    let reads = dir.path().join("reads");
    let config = stdio_fixture(
        "ticks",
        &[
            "--legacy",
            "--tick-ms",
            "200",
            "--slow-ms",
            "6000",
            "--announce-reads",
            reads.to_str().unwrap(),
        ],
    )
    .replace("\n\n", "\npool_size = 2\n\n");
    let client = std::sync::Arc::new(gateway(dir.path(), &config).await);
    // Eight slow reads fill the first process (a process takes eight requests before the pool
    // opens another), so the next read goes to a second one.
    let slow: Vec<_> = (0..PER_PROCESS)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let slow =
                    json!({"resource_uri": "mcp://ticks/fixture_3A//slow", "use_cache": false});
                call_raw(&client, "read_mcp_resource", slow).await
            })
        })
        .collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while announced(&reads, "fixture://slow") < PER_PROCESS {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slow reads never arrived"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let counter = "mcp://ticks/fixture_3A//counter";
    let first = count(&read(&client, counter).await);
    assert_eq!(announced(&reads, "fixture://counter"), 1);

    // The least busy process is the second: it gets the crash.
    let (code, _) = call_error(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://ticks/fixture_3A//crash", "use_cache": false}),
    )
    .await;
    assert_eq!(code, "E003");
    let mut seen = vec![first];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while seen.len() < 3 && tokio::time::Instant::now() < deadline {
        let (failed, got) = call_raw(
            &client,
            "read_mcp_resource",
            json!({"resource_uri": counter}),
        )
        .await;
        if !failed && seen.last() != Some(&count(&got)) {
            seen.push(count(&got));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        seen.len() >= 3,
        "the counter's changes went unheard after its process exited: read {seen:?} in 10 s"
    );
    for read in slow {
        let (failed, got) = read.await.unwrap();
        assert!(!failed, "a read on the process that lived on failed: {got}");
    }
}

// traces: CA-2, AV-1 — a 2025-11-25 upstream over stdio with one process, a resource of which an
// agent subscribed to: the process is killed while no request is made. Nothing but the gateway's
// own supervision can start another, and it does at once (not at its next health check, a
// minute later): the agent hears the resource's changes again.
#[tokio::test(flavor = "multi_thread")]
async fn ca_2_the_only_process_killed_under_a_subscription_is_replaced_at_once() {
    use rmcp::model::SubscribeRequestParams;
    use tokio::sync::mpsc;

    use crate::subscriptions::{Hears, hear};

    let dir = tempfile::tempdir().unwrap();
    // What marks this test's upstream processes among every process of the machine.
    let marker = dir.path().join("reads");
    let config = stdio_fixture(
        "ticks",
        &[
            "--legacy",
            "--tick-ms",
            "200",
            "--announce-reads",
            marker.to_str().unwrap(),
        ],
    );
    let (heard, mut hearing) = mpsc::unbounded_channel();
    let client = crate::support::gateway_for(dir.path(), &config, Hears(heard)).await;
    let counter = "mcp://ticks/fixture_3A//counter";
    #[allow(deprecated)]
    client
        .peer()
        .subscribe(SubscribeRequestParams::new(counter))
        .await
        .unwrap();
    hear(&mut hearing, counter).await;
    let live = |marker: &std::path::Path| -> Vec<u32> {
        quarry_testkit::procs::with_cmdline(marker.to_str().unwrap())
            .into_iter()
            .filter(|(_, zombie)| !zombie)
            .map(|(pid, _)| pid)
            .collect()
    };
    let before = live(&marker);
    assert_eq!(before.len(), 1, "one upstream process: {before:?}");
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &before[0].to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // What the killed process announced before it died is not what this waits for.
    tokio::time::sleep(Duration::from_millis(500)).await;
    while hearing.try_recv().is_ok() {}
    hear(&mut hearing, counter).await;
    let after = live(&marker);
    assert!(
        after.len() == 1 && after != before,
        "the process was not replaced: {before:?}, then {after:?}"
    );
}
