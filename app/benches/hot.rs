//! Hot paths not covered elsewhere, in process (criterion):
//!
//! - `decision`: a cached read through the policy decorator (`Governed`, the spec's rules in a
//!   real `quarry policy-worker`), with the decision cached and with a decision asked of the
//!   worker each time (a URI it has not decided, of a resource already cached), beside the same
//!   read without policy. The differences are what a decision costs a read.
//! - `encode_read_result`: a read result turned into the JSON the `read_mcp_resource` tool
//!   answers with (`serde_json::to_value`, then that value as text), at 1 KiB, 64 KiB, 1 MiB.
//! - `client_parse`: what the stdio rows' client (rmcp's) spends taking one 1 MiB answer off
//!   the wire: a `resources/read` answer and a `read_mcp_resource` answer (the same content as
//!   structured content and again as text), each parsed as rmcp's client parses a message and,
//!   beside it, as a plain `serde_json::Value`.
//! - `audit/append_16_at_once`: sixteen requests' records appended at once to the audit trail
//!   as `quarry serve` makes it (a SQLite file, concurrent appends committed together), until
//!   the last is in.
//! - `versions/unchanged_sighting`: what every uncached read of an unchanged resource asks of
//!   the version store (a SQLite file, as `quarry serve` makes it): is this content the latest
//!   version, still kept? Of a resource with three versions, at 1 KiB, 64 KiB and 1 MiB.
//! - `versions/summaries`: what every listing asks of the version store for each server on its
//!   page (each resource's latest version and first sighting): of a server with 100 resources
//!   of one version each, at 1 KiB, 64 KiB and 1 MiB; and a page of 100, then all, of a server
//!   with 10,000 resources of 1 KiB.

#![allow(clippy::unwrap_used, missing_docs)]

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use quarry::{compose, config::Settings};
use quarry_domain::{
    AgentFacts, Endpoint, Principal, ResourceUri, ServerName, ServerSettings, ServerSpec,
};
use quarry_policy_prolog::{PrologPolicy, WorkerCommand, program};
use quarry_ports::{AuditLog, ReadRequest, ResourceGateway};
use quarry_usecases::{Governed, ResourceService};

const QUARRY: &str = env!("CARGO_BIN_EXE_quarry");

async fn service() -> Arc<ResourceService> {
    let endpoint = Endpoint::Stdio {
        command: QUARRY.into(),
        args: ["fixture", "--name", "bench"].map(String::from).to_vec(),
        env: BTreeMap::new(),
        cwd: None,
    };
    let spec = ServerSpec::new(ServerName::parse("bench").unwrap(), endpoint);
    let mut settings = Settings::defaults();
    settings.servers = vec![ServerSettings::new(spec)];
    settings.store_path = None;
    settings.cache_ttl = Duration::from_secs(3600);
    let ports = compose::ports(&settings).await.unwrap();
    compose::service(&settings, ports).await.unwrap()
}

async fn governed(service: Arc<ResourceService>) -> Governed {
    let agents = [AgentFacts {
        agent: "alice".into(),
        permissions: vec!["mcp_access".into()],
        servers: vec![ServerName::parse("bench").unwrap()],
        ..AgentFacts::default()
    }];
    let engine = PrologPolicy::start(
        WorkerCommand {
            program: QUARRY.into(),
            args: vec!["policy-worker".into()],
            memory_limit: Some(1 << 30),
        },
        program(None, &[], &agents, &[]),
        Duration::from_secs(30),
        quarry_policy_prolog::RECYCLE_AFTER,
    )
    .await
    .unwrap();
    Governed::new(service, Arc::new(engine), Principal::new("alice"), "stdio")
}

fn decision(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let service = rt.block_on(service());
    let governed = rt.block_on(governed(service.clone()));
    let uri = ResourceUri::parse("mcp://bench/fixture_3A//sized/1024").unwrap();
    let hit = ReadRequest::whole(uri.clone());
    rt.block_on(service.read_resource(hit.clone())).unwrap();
    rt.block_on(governed.read_resource(hit.clone())).unwrap();
    let mut group = c.benchmark_group("decision");
    group.bench_function("cached_read_without_policy", |b| {
        b.to_async(&rt).iter(|| async {
            assert!(service.read_resource(hit.clone()).await.unwrap().cached);
        });
    });
    group.bench_function("cached_read_decision_cached", |b| {
        b.to_async(&rt).iter(|| async {
            assert!(governed.read_resource(hit.clone()).await.unwrap().cached);
        });
    });
    // A resource the decorator has not decided yet (each iteration another size), its content
    // put in the cache outside the timing: the read pays the worker's decision and a hit.
    let fresh = AtomicU64::new(0);
    group.bench_function("cached_read_decision_asked", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let requests: Vec<ReadRequest> = (0..iters)
                    .map(|_| {
                        let n = fresh.fetch_add(1, Ordering::Relaxed);
                        let uri = format!("mcp://bench/fixture_3A//sized/{}", 2048 + n);
                        ReadRequest::whole(ResourceUri::parse(&uri).unwrap())
                    })
                    .collect();
                for r in &requests {
                    service.read_resource(r.clone()).await.unwrap();
                }
                let started = std::time::Instant::now();
                for r in requests {
                    assert!(governed.read_resource(r).await.unwrap().cached);
                }
                started.elapsed()
            })
        });
    });
    group.finish();
    rt.block_on(service.shutdown());
}

fn encode(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let service = rt.block_on(service());
    let mut group = c.benchmark_group("encode_read_result");
    for (label, n) in [("1KiB", 1024), ("64KiB", 64 * 1024), ("1MiB", 1024 * 1024)] {
        let uri = ResourceUri::parse(&format!("mcp://bench/fixture_3A//sized/{n}")).unwrap();
        let result = rt
            .block_on(service.read_resource(ReadRequest::whole(uri)))
            .unwrap();
        group.bench_with_input(BenchmarkId::from_parameter(label), &result, |b, result| {
            b.iter(|| serde_json::to_string(&serde_json::to_value(result).unwrap()).unwrap());
        });
    }
    group.finish();
    rt.block_on(service.shutdown());
}

fn client_parse(c: &mut Criterion) {
    let text = quarry_testkit::fixture::sized_text(1 << 20);
    let uri = "mcp://bench/fixture_3A//sized/1048576";
    let read = serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {
        "contents": [{"uri": uri, "mimeType": "text/plain", "text": text}]}});
    let structured = serde_json::json!({"success": true, "uri": uri, "content": text,
        "mime_type": "text/plain", "size": 1 << 20, "cached": true});
    let tool = serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {
        "content": [{"type": "text", "text": serde_json::to_string(&structured).unwrap()}],
        "structuredContent": structured, "isError": false}});
    let mut group = c.benchmark_group("client_parse");
    for (label, answer) in [("read_answer_1MiB", read), ("tool_answer_1MiB", tool)] {
        let bytes = serde_json::to_vec(&answer).unwrap();
        // What is timed is rmcp taking each answer for what it is, not for another result type.
        let rmcp::model::JsonRpcMessage::Response(parsed) =
            serde_json::from_slice::<rmcp::model::ServerJsonRpcMessage>(&bytes).unwrap()
        else {
            panic!("{label} is not a response");
        };
        let expected = match parsed.result {
            rmcp::model::ServerResult::ReadResourceResult(_) => "read_answer_1MiB",
            rmcp::model::ServerResult::CallToolResult(_) => "tool_answer_1MiB",
            _ => "another result",
        };
        assert_eq!(expected, label);
        group.bench_with_input(BenchmarkId::new("rmcp", label), &bytes, |b, bytes| {
            b.iter(|| serde_json::from_slice::<rmcp::model::ServerJsonRpcMessage>(bytes).unwrap());
        });
        group.bench_with_input(BenchmarkId::new("value", label), &bytes, |b, bytes| {
            b.iter(|| serde_json::from_slice::<serde_json::Value>(bytes).unwrap());
        });
    }
    group.finish();
}

fn audit(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut settings = Settings::defaults();
    settings.store_path = Some(dir.path().join("quarry.db"));
    let trail: Arc<dyn AuditLog> = rt.block_on(compose::audit_log(&settings)).unwrap();
    let record = quarry_testkit::contract::audit::entry(1);
    rt.block_on(trail.append(&record)).unwrap();
    c.bench_function("audit/append_16_at_once", |b| {
        b.to_async(&rt).iter(|| async {
            let mut appends = tokio::task::JoinSet::new();
            for _ in 0..16 {
                let (trail, record) = (trail.clone(), record.clone());
                appends.spawn(async move { trail.append(&record).await.map(|_| ()) });
            }
            while let Some(done) = appends.join_next().await {
                done.unwrap().unwrap();
            }
        });
    });
}

fn versions(c: &mut Criterion) {
    use quarry_testkit::contract::versions::{at, key, text};
    // Each content's digest: distinct, which is all the store looks at.
    let digest_of = |i: usize| quarry_domain::Digest::new([i as u8 + 1; 32]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut settings = Settings::defaults();
    settings.store_path = Some(dir.path().join("quarry.db"));
    let store = rt.block_on(compose::ports(&settings)).unwrap().versions;
    let mut group = c.benchmark_group("versions/unchanged_sighting");
    for (label, n) in [("1KiB", 1024), ("64KiB", 64 << 10), ("1MiB", 1 << 20)] {
        let k = key(&format!("file:///{label}"));
        let bodies: Vec<String> = ["a", "b", "c"].iter().map(|c| c.repeat(n)).collect();
        for (i, body) in bodies.iter().enumerate() {
            let recorded = rt
                .block_on(store.record(&k, digest_of(i), &text(body), at(i as i64)))
                .unwrap();
            assert!(recorded.is_new);
        }
        let (latest, digest) = (text(&bodies[2]), digest_of(2));
        group.bench_function(label, |b| {
            b.to_async(&rt).iter(|| async {
                let seen = store.record(&k, digest, &latest, at(9)).await.unwrap();
                assert!(!seen.is_new && seen.version.version == "v3");
                seen
            });
        });
    }
    group.finish();
}

fn summaries(c: &mut Criterion) {
    use quarry_testkit::contract::versions::{at, text};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut settings = Settings::defaults();
    settings.store_path = Some(dir.path().join("quarry.db"));
    let store = rt.block_on(compose::ports(&settings)).unwrap().versions;
    let mut group = c.benchmark_group("versions/summaries");
    for (label, n) in [
        ("100x1KiB", 1024),
        ("100x64KiB", 64 << 10),
        ("100x1MiB", 1 << 20),
    ] {
        let server = ServerName::parse(&format!("s{}", label.to_lowercase())).unwrap();
        let uris: Vec<String> = (0..100).map(|i| format!("file:///{i}")).collect();
        for (i, uri) in (0..100u8).zip(&uris) {
            let key = quarry_ports::ResourceKey::new(server.clone(), uri.clone());
            // Distinct contents and digests: one version each.
            let body = char::from(b'a' + i % 26).to_string().repeat(n);
            let digest = quarry_domain::Digest::new([i; 32]);
            let recorded = rt
                .block_on(store.record(&key, digest, &text(&body), at(i64::from(i))))
                .unwrap();
            assert!(recorded.is_new);
        }
        group.bench_function(label, |b| {
            b.to_async(&rt).iter(|| async {
                let known = store.summaries(&server, &uris).await.unwrap();
                assert_eq!(known.len(), 100);
                known
            });
        });
    }
    // A page of 100 of a server with 10,000 resources that have versions, and all 10,000.
    let server = ServerName::parse("s10000").unwrap();
    let uris: Vec<String> = (0..10_000).map(|i| format!("file:///{i}")).collect();
    for (i, uri) in uris.iter().enumerate() {
        let key = quarry_ports::ResourceKey::new(server.clone(), uri.clone());
        let mut digest = [0u8; 32];
        digest[..8].copy_from_slice(&(i as u64).to_le_bytes());
        let body = format!("{i:>1024}");
        rt.block_on(store.record(
            &key,
            quarry_domain::Digest::new(digest),
            &text(&body),
            at(i as i64),
        ))
        .unwrap();
    }
    for (label, asked) in [
        ("page_of_100_of_10000x1KiB", &uris[..100]),
        ("all_of_10000x1KiB", &uris[..]),
    ] {
        group.bench_function(label, |b| {
            b.to_async(&rt).iter(|| async {
                let known = store.summaries(&server, asked).await.unwrap();
                assert_eq!(known.len(), asked.len());
                known
            });
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = decision, encode, client_parse, audit, versions, summaries
}
criterion_main!(benches);
