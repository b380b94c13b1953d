//! The shared services going away under load, through the real binary: Redis killed during
//! reads costs no request (they go to the upstream, and are cached again once it is back);
//! PostgreSQL cut away fails what needs it closed, with E011 where the audit record cannot be
//! written, and service resumes without a restart once it is back.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use quarry_testkit::{
    scrape,
    services::{self, OwnRedis, Relay},
};
use serde_json::json;

use crate::{
    http::{agent, served, served_env},
    replicas::Shared,
    support::{call_raw, http_fixture, http_server},
};

/// Readers reading `uris` in a loop until stopped: (reads, errors, hits).
fn load(
    agent: Arc<crate::support::Client>,
    uris: Vec<String>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(u64, Vec<String>, u64)> {
    tokio::spawn(async move {
        let (mut reads, mut errors, mut hits) = (0, Vec::new(), 0);
        while !stop.load(Ordering::Relaxed) {
            let uri = &uris[(reads as usize) % uris.len()];
            let (is_error, value) =
                call_raw(&agent, "read_mcp_resource", json!({"resource_uri": uri})).await;
            reads += 1;
            if is_error {
                errors.push(value.to_string());
            } else if value["cached"] == true {
                hits += 1;
            }
        }
        (reads, errors, hits)
    })
}

// traces: CA-4 — Redis killed during a read load: zero client-visible errors, reads continue
// (from the upstream), the outage is reported in /readyz and the metrics, and once Redis is
// back reads are cached again.
#[tokio::test(flavor = "multi_thread")]
async fn killing_redis_during_reads_fails_no_request() {
    let mut redis = OwnRedis::start();
    let docs = http_fixture("docs", 6).await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[cache]\nbackend = \"redis\"\nredis_url = {:?}\nredis_prefix = \"outage:\"\n\n{}",
        redis.url(),
        http_server("docs", &docs.url)
    );
    let gateway = served(dir.path(), &config, &[]).await;
    let uris: Vec<String> = (1..=6)
        .map(|i| format!("mcp://docs/fixture_3A//item/{i}"))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..4 {
        let client = Arc::new(agent(gateway.addr, None).await);
        readers.push(load(client, uris.clone(), stop.clone()));
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    let upstream_before = docs.server.reads();

    redis.kill();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (status, ready) = scrape::get(gateway.addr, "/readyz").await;
    assert_eq!(
        status, 200,
        "a cache outage leaves the gateway ready: {ready}"
    );
    assert!(ready.contains("shared cache cannot be reached"), "{ready}");
    let (_, metrics) = scrape::get(gateway.addr, "/metrics").await;
    let degraded = scrape::value(&scrape::parse(&metrics), "quarry_cache_degraded", &[]);
    assert_eq!(degraded, Some(1.0), "{metrics}");
    let during = docs.server.reads() - upstream_before;
    assert!(during > 0, "reads went on, to the upstream");

    redis.restart();
    let probe = Arc::new(agent(gateway.addr, None).await);
    let started = std::time::Instant::now();
    loop {
        let (is_error, value) = call_raw(
            &probe,
            "read_mcp_resource",
            json!({"resource_uri": uris[0]}),
        )
        .await;
        assert!(!is_error, "{value}");
        if value["cached"] == true {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "not cached again 10 s after Redis returned"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("cached again {:?} after Redis returned", started.elapsed());
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for reader in readers {
        let (reads, errors, _) = reader.await.unwrap();
        assert!(errors.is_empty(), "client-visible errors: {errors:?}");
        total += reads;
    }
    eprintln!(
        "{total} reads, none failed, {during} of them from the upstream while Redis was down"
    );
    let (_, metrics) = scrape::get(gateway.addr, "/metrics").await;
    let degraded = scrape::value(&scrape::parse(&metrics), "quarry_cache_degraded", &[]);
    assert_eq!(degraded, Some(0.0), "recovered");
}

/// A relay in front of the test PostgreSQL, and the database URL through it.
async fn relayed_postgres() -> (Relay, String) {
    let url = services::postgres_url();
    let target: std::net::SocketAddr = {
        let host = url
            .rsplit('@')
            .next()
            .and_then(|h| h.split('/').next())
            .unwrap_or("127.0.0.1:5432");
        let host = if host.contains(':') {
            host.to_owned()
        } else {
            format!("{host}:5432")
        };
        tokio::net::lookup_host(host).await.unwrap().next().unwrap()
    };
    let relay = Relay::start(target).await;
    let (scheme_user, rest) = url.split_once('@').unwrap_or(("postgres://postgres", &url));
    let database = rest.split_once('/').map_or("postgres", |(_, d)| d);
    let relayed = format!("{scheme_user}@127.0.0.1:{}/{database}", relay.port());
    (relay, relayed)
}

/// A configuration on the PostgreSQL at `url`, in `shared`'s schema, serving the docs fixture.
fn on_postgres(url: &str, shared: &Shared, docs: &str) -> String {
    format!(
        "[store]\nbackend = \"postgres\"\nurl = {url:?}\nschema = {:?}\n\n{}",
        shared.schema,
        http_server("docs", docs)
    )
}

// traces: AU-2 — PostgreSQL cut away: a read, whose audit record cannot be written, is refused
// with E011 (and the upstream is not asked); once the database is back the next request is
// served, without a restart.
#[tokio::test(flavor = "multi_thread")]
async fn losing_postgres_fails_closed_and_service_resumes() {
    let shared = Shared::new();
    let (mut relay, relayed) = relayed_postgres().await;
    let docs = http_fixture("docs", 2).await;
    let dir = tempfile::tempdir().unwrap();
    let config = on_postgres(&relayed, &shared, &docs.url);
    let gateway = served_env(
        dir.path(),
        &config,
        "127.0.0.1:0",
        &[],
        &[(
            "QUARRY_VAULT_KEY",
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
        )],
    )
    .await;
    let client = agent(gateway.addr, None).await;
    let read = json!({"resource_uri": "mcp://docs/fixture_3A//item/1", "use_cache": false});
    let (is_error, value) = call_raw(&client, "read_mcp_resource", read.clone()).await;
    assert!(!is_error, "{value}");

    relay.cut();
    let upstream_before = docs.server.reads();
    let (is_error, value) = call_raw(&client, "read_mcp_resource", read.clone()).await;
    assert!(is_error, "served with no audit record: {value}");
    assert_eq!(value["error_code"], "E011", "{value}");
    let (status, ready) = scrape::get(gateway.addr, "/readyz").await;
    assert_eq!(status, 503, "{ready}");

    relay.restore().await;
    let started = std::time::Instant::now();
    loop {
        let (is_error, value) = call_raw(&client, "read_mcp_resource", read.clone()).await;
        if !is_error {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "still failing 20 s after the database returned: {value}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "served again {:?} after the database returned",
        started.elapsed()
    );
    assert!(
        docs.server.reads() > upstream_before,
        "the resumed read reached the upstream"
    );
}

// traces: REQ-071-036 — PostgreSQL cut away while a session lives: the replica holding it goes
// on serving it; the other, which would take it over, answers 503 with Retry-After (never 404,
// which would make the client drop its session), and takes it over once the database is back.
#[tokio::test(flavor = "multi_thread")]
async fn losing_postgres_loses_no_session() {
    let shared = Shared::new();
    let (mut relay, relayed) = relayed_postgres().await;
    let docs = http_fixture("docs", 2).await;
    let dir = tempfile::tempdir().unwrap();
    let config = on_postgres(&relayed, &shared, &docs.url);
    let (a, b) = (
        crate::replicas::replica(&dir.path().join("a"), &config).await,
        crate::replicas::replica(&dir.path().join("b"), &config).await,
    );
    let host = |addr: std::net::SocketAddr| format!("127.0.0.1:{}", addr.port());
    let (status, head, _) =
        crate::http::post(a.addr, &host(a.addr), &[], crate::http::INITIALIZE).await;
    assert_eq!(status, 200, "{head}");
    let session = format!(
        "Mcp-Session-Id: {}",
        crate::http::session_of(&head).unwrap()
    );
    let ping = r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;

    relay.cut();
    let (status, head, _) = crate::http::post(a.addr, &host(a.addr), &[&session], ping).await;
    assert_eq!(status, 200, "the replica holding the session: {head}");
    let (status, head, _) = crate::http::post(b.addr, &host(b.addr), &[&session], ping).await;
    assert_eq!(status, 503, "{head}");
    assert!(head.to_ascii_lowercase().contains("retry-after"), "{head}");

    relay.restore().await;
    let started = std::time::Instant::now();
    loop {
        let (status, head, _) = crate::http::post(b.addr, &host(b.addr), &[&session], ping).await;
        if status == 200 {
            break;
        }
        assert_eq!(
            status, 503,
            "only 'try again' while the database returns: {head}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "still refused 20 s after the database returned: {head}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
