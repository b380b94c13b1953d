//! Changes announced to agents in both eras, through the real binary: a 2025-11-25 client's
//! `resources/subscribe` and a 2026-07-28 client's `subscriptions/listen` are fanned out to the
//! upstream, and its `resources/updated` reaches them as the URI they asked for; what policy
//! hides cannot be subscribed to.

// resources/subscribe is what a 2025-11-25 client sends; rmcp marks it legacy.
#![allow(deprecated)]

use std::time::Duration;

use rmcp::{
    ClientHandler,
    model::{ResourceUpdatedNotificationParam, SubscribeRequestParams},
    service::{NotificationContext, RoleClient},
};
use serde_json::json;
use tokio::sync::mpsc;

use crate::{
    eras::{MODERN, meta},
    http::served,
    policy::config,
    support::{gateway_for, http_fixture, stdio_fixture},
};

/// A 2025-11-25 client that passes on every `resources/updated` it hears.
#[derive(Clone)]
pub(crate) struct Hears(pub(crate) mpsc::UnboundedSender<String>);

impl ClientHandler for Hears {
    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.0.send(params.uri);
    }
}

async fn listening_gateway(
    dir: &std::path::Path,
    config: &str,
) -> (
    rmcp::service::RunningService<RoleClient, Hears>,
    mpsc::UnboundedReceiver<String>,
) {
    let (heard, hearing) = mpsc::unbounded_channel();
    (gateway_for(dir, config, Hears(heard)).await, hearing)
}

/// Waits for `uri` among what was heard.
pub(crate) async fn hear(hearing: &mut mpsc::UnboundedReceiver<String>, uri: &str) {
    let waited = tokio::time::timeout(Duration::from_secs(15), async {
        while let Some(heard) = hearing.recv().await {
            if heard == uri {
                return;
            }
        }
        panic!("the gateway closed");
    })
    .await;
    assert!(waited.is_ok(), "no resources/updated for {uri} within 15 s");
}

/// Two ticking upstreams: `new` speaks 2026-07-28 (Quarry listens with subscriptions/listen),
/// `old` only 2025-11-25 (Quarry subscribes with resources/subscribe).
fn both_eras() -> String {
    stdio_fixture("new", &["--tick-ms", "200"])
        + &stdio_fixture("old", &["--tick-ms", "200", "--legacy"])
}

const NEW_COUNTER: &str = "mcp://new/fixture_3A//counter";
const OLD_COUNTER: &str = "mcp://old/fixture_3A//counter";

// traces: REQ-071-017 — a 2025-11-25 client subscribed to a resource hears that it changed
// upstream, as its gateway URI, whatever era the upstream speaks; nothing is announced for a
// resource it did not subscribe to.
#[tokio::test(flavor = "multi_thread")]
async fn a_subscribed_2025_client_hears_of_a_change() {
    let dir = tempfile::tempdir().unwrap();
    let (client, mut hearing) = listening_gateway(dir.path(), &both_eras()).await;
    for counter in [NEW_COUNTER, OLD_COUNTER] {
        client
            .peer()
            .subscribe(SubscribeRequestParams::new(counter))
            .await
            .unwrap();
    }
    hear(&mut hearing, NEW_COUNTER).await;
    hear(&mut hearing, OLD_COUNTER).await;
    let others: Vec<String> = std::iter::from_fn(|| hearing.try_recv().ok())
        .filter(|u| u != NEW_COUNTER && u != OLD_COUNTER)
        .collect();
    assert!(
        others.is_empty(),
        "announced without a subscription: {others:?}"
    );
}

// traces: PO-1, SR-004.1 — a resource policy hides cannot be subscribed to (E004, as for a read).
#[tokio::test(flavor = "multi_thread")]
async fn what_policy_hides_cannot_be_subscribed_to() {
    let dir = tempfile::tempdir().unwrap();
    let notes = http_fixture("notes", 2).await;
    let wiki = http_fixture("wiki", 2).await;
    let (client, _) =
        listening_gateway(dir.path(), &config(&notes.url, &wiki.url, "alice", "")).await;
    let refused = client
        .peer()
        .subscribe(SubscribeRequestParams::new("mcp://wiki/fixture_3A//item/1"))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("E004"), "{refused}");
    client
        .peer()
        .subscribe(SubscribeRequestParams::new(
            "mcp://notes/fixture_3A//item/1",
        ))
        .await
        .unwrap();
}

/// A 2026-07-28 `subscriptions/listen` request with id `id` for `notifications`: the stream.
pub(crate) async fn listen(
    addr: std::net::SocketAddr,
    id: u64,
    notifications: serde_json::Value,
) -> reqwest::Response {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
        "params": {"_meta": meta(), "notifications": notifications}});
    let response = reqwest::Client::new()
        .post(format!("http://{addr}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", "subscriptions/listen")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response
}

/// The URIs of the `resources/updated` notifications in what a listen stream carried.
fn updated(seen: &str) -> Vec<String> {
    seen.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d.trim()).ok())
        .filter(|m| m["method"] == "notifications/resources/updated")
        .filter_map(|m| m["params"]["uri"].as_str().map(str::to_owned))
        .collect()
}

/// What a listen stream carried until a `resources/updated` for each of `uris` (failing after
/// `secs`).
pub(crate) async fn until_updated(
    mut response: reqwest::Response,
    secs: u64,
    uris: &[&str],
) -> String {
    let mut seen = String::new();
    let heard = tokio::time::timeout(Duration::from_secs(secs), async {
        while let Some(chunk) = response.chunk().await.unwrap() {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            let got = updated(&seen);
            if uris.iter().all(|u| got.iter().any(|g| g == u)) {
                return;
            }
        }
    })
    .await;
    assert!(
        heard.is_ok(),
        "not all of {uris:?} heard within {secs} s: {seen}"
    );
    seen
}

// traces: REQ-071-017 — a 2026-07-28 client's subscriptions/listen is acknowledged, the
// upstreams of the resources it names are subscribed (each in its own era), and their changes
// reach the client on that stream.
#[tokio::test(flavor = "multi_thread")]
async fn a_2026_listener_hears_of_a_change() {
    let dir = tempfile::tempdir().unwrap();
    let gw = served(dir.path(), &both_eras(), &[]).await;
    let response = listen(
        gw.addr,
        11,
        json!({"resourceSubscriptions": [NEW_COUNTER, OLD_COUNTER], "resourcesListChanged": true}),
    )
    .await;
    let seen = until_updated(response, 15, &[NEW_COUNTER, OLD_COUNTER]).await;
    assert!(
        seen.contains("notifications/subscriptions/acknowledged"),
        "no acknowledgment: {seen}"
    );
    let update = seen
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d.trim()).ok())
        .find(|m| m["method"] == "notifications/resources/updated")
        .unwrap();
    assert!(
        updated(&seen)
            .iter()
            .all(|u| u == NEW_COUNTER || u == OLD_COUNTER),
        "{seen}"
    );
    assert_eq!(
        update["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 11,
        "{update}"
    );
}
