//! Read latency, measured against the floor (a client reading the same upstream directly).
//!
//! - `in_process`: `ResourceService::read_resource` on a cache hit, with and without checksum
//!   validation (the re-hash of the cached bytes).
//! - `stdio`: one MCP `resources/read` over stdio: straight to the fixture upstream (the floor),
//!   through `quarry serve` (cache hit, and with the cache off: every read goes upstream and has
//!   its version checked), and the `read_mcp_resource` tool through `quarry serve`, audited (the
//!   default) and with `logging.audit_enabled = false`.
//!
//! - `invalidation`: from an upstream announcing a change (`notifications/resources/updated`, over
//!   streamable HTTP on loopback) to the cached entry being gone.
//!
//! Sizes: 1 KiB, 64 KiB, 1 MiB. `cargo xtask bench` runs this and prints the ratios.

#![allow(clippy::unwrap_used, missing_docs)]

use std::{collections::BTreeMap, process::Stdio, sync::Arc, time::Duration};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use quarry::{compose, config::Settings};
use quarry_cache_lru::LruContentCache;
use quarry_domain::{Endpoint, ResourceUri, ServerName, ServerSettings, ServerSpec};
use quarry_ports::{ContentCache, ReadRequest, ResourceGateway, ResourceKey};
use quarry_usecases::ResourceService;
use rmcp::{
    ClientCacheConfig, RoleClient, ServiceExt,
    model::{CallToolRequestParams, ClientConfig, ReadResourceRequestParams},
    service::RunningService,
    transport::TokioChildProcess,
};

const QUARRY: &str = env!("CARGO_BIN_EXE_quarry");
const SIZES: [(&str, usize); 3] = [("1KiB", 1024), ("64KiB", 64 * 1024), ("1MiB", 1024 * 1024)];

fn fixture_args() -> Vec<String> {
    ["fixture", "--name", "bench"].map(String::from).to_vec()
}

async fn direct_client() -> RunningService<RoleClient, ClientConfig> {
    let mut cmd = tokio::process::Command::new(QUARRY);
    cmd.args(fixture_args());
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    uncached(ClientConfig::default().serve(transport).await.unwrap()).await
}

/// rmcp's client keeps answers for their `ttlMs` (Quarry gives one): without this, a cached
/// read would be measured in the benchmark's own process.
async fn uncached(
    client: RunningService<RoleClient, ClientConfig>,
) -> RunningService<RoleClient, ClientConfig> {
    client
        .peer()
        .set_response_cache_config(ClientCacheConfig::disabled())
        .await;
    client
}

/// `quarry serve` over the fixture, its store in `dir`, auditing or not, caching or not.
async fn gateway_client(
    dir: &std::path::Path,
    audit: bool,
    cache: bool,
) -> RunningService<RoleClient, ClientConfig> {
    let config = format!(
        "[servers.bench]\ncommand = {QUARRY:?}\nargs = {}\n\n[cache]\nenabled = {cache}\n\n[results]\ninline_limit_kb = 2048\n\n[store]\npath = {:?}\n\n[logging]\naudit_enabled = {audit}\n",
        serde_json::to_string(&fixture_args()).unwrap(),
        dir.join(format!("bench-{cache}.db")).display().to_string()
    );
    let path = dir.join(format!("quarry-{audit}-{cache}.toml"));
    std::fs::write(&path, config).unwrap();
    let mut cmd = tokio::process::Command::new(QUARRY);
    cmd.args(["serve", "--config"])
        .arg(&path)
        .env("QUARRY_LOG", "error");
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    uncached(ClientConfig::default().serve(transport).await.unwrap()).await
}

/// The use cases over the fixture on stdio, caching or not, with their store in a file in `dir`
/// (the embedded default) or in memory.
async fn in_process_service(caching: bool, dir: Option<&std::path::Path>) -> Arc<ResourceService> {
    let endpoint = Endpoint::Stdio {
        command: QUARRY.into(),
        args: fixture_args(),
        env: BTreeMap::new(),
        cwd: None,
    };
    let mut settings = settings_over("bench", endpoint);
    settings.cache_enabled = caching;
    settings.store_path = dir.map(|d| d.join("in-process.db"));
    service_with(&settings, Arc::new(LruContentCache::new(100 * 1024 * 1024))).await
}

fn settings_over(name: &str, endpoint: Endpoint) -> Settings {
    let spec = ServerSpec::new(ServerName::parse(name).unwrap(), endpoint);
    let mut settings = Settings::defaults();
    settings.servers = vec![ServerSettings::new(spec)];
    settings.store_path = None;
    settings.cache_ttl = Duration::from_secs(3600);
    settings
}

async fn service_with(settings: &Settings, cache: Arc<LruContentCache>) -> Arc<ResourceService> {
    let mut ports = compose::ports(settings).await.unwrap();
    ports.cache = cache;
    compose::service(settings, ports).await.unwrap()
}

async fn service_over(
    name: &str,
    endpoint: Endpoint,
    cache: Arc<LruContentCache>,
) -> Arc<ResourceService> {
    service_with(&settings_over(name, endpoint), cache).await
}

fn gateway_uri(n: usize) -> String {
    format!("mcp://bench/fixture_3A//sized/{n}")
}

fn in_process(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let service = rt.block_on(in_process_service(true, None));
    let mut group = c.benchmark_group("cached_read/in_process");
    for (label, n) in SIZES {
        let uri = ResourceUri::parse(&gateway_uri(n)).unwrap();
        let warm = rt
            .block_on(service.read_resource(ReadRequest::whole(uri.clone())))
            .unwrap();
        assert_eq!(warm.size, n as u64);
        for (variant, validate) in [("checksum", true), ("no_checksum", false)] {
            let request = ReadRequest {
                validate_checksum: validate,
                ..ReadRequest::whole(uri.clone())
            };
            group.bench_with_input(BenchmarkId::new(variant, label), &request, |b, request| {
                b.to_async(&rt).iter(|| async {
                    let r = service.read_resource(request.clone()).await.unwrap();
                    assert!(r.cached);
                    r
                });
            });
        }
    }
    group.finish();
    rt.block_on(service.shutdown());
}

/// A read with the cache off, in process: the upstream exchange, the checksum and the version
/// look-up, against the same exchange made by a client of its own (the floor).
fn uncached_in_process(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let service = rt.block_on(in_process_service(false, Some(dir.path())));
    let direct = rt.block_on(direct_client());
    let mut group = c.benchmark_group("uncached_read/in_process");
    for (label, n) in SIZES {
        let request = ReadRequest::whole(ResourceUri::parse(&gateway_uri(n)).unwrap());
        let upstream = format!("fixture://sized/{n}");
        group.bench_function(BenchmarkId::new("direct_floor", label), |b| {
            b.to_async(&rt)
                .iter(|| direct.read_resource(ReadResourceRequestParams::new(upstream.clone())));
        });
        group.bench_with_input(BenchmarkId::new("quarry", label), &request, |b, request| {
            b.to_async(&rt).iter(|| async {
                let r = service.read_resource(request.clone()).await.unwrap();
                assert!(!r.cached && r.version.is_some());
                r
            });
        });
    }
    group.finish();
    rt.block_on(async {
        direct.cancel().await.unwrap();
        service.shutdown().await;
    });
}

fn over_stdio(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let direct = rt.block_on(direct_client());
    let gateway = rt.block_on(gateway_client(dir.path(), true, true));
    let unaudited = rt.block_on(gateway_client(dir.path(), false, true));
    let uncaching = rt.block_on(gateway_client(dir.path(), true, false));
    let mut group = c.benchmark_group("read/stdio");
    for (label, n) in SIZES {
        let upstream = format!("fixture://sized/{n}");
        let through = gateway_uri(n);
        // Warm the gateway's cache (and record the version the uncaching one sees again).
        for g in [&gateway, &unaudited, &uncaching] {
            rt.block_on(g.read_resource(ReadResourceRequestParams::new(through.clone())))
                .unwrap();
        }
        group.bench_function(BenchmarkId::new("direct_floor", label), |b| {
            b.to_async(&rt)
                .iter(|| direct.read_resource(ReadResourceRequestParams::new(upstream.clone())));
        });
        group.bench_function(BenchmarkId::new("quarry_resources_read", label), |b| {
            b.to_async(&rt)
                .iter(|| gateway.read_resource(ReadResourceRequestParams::new(through.clone())));
        });
        group.bench_function(
            BenchmarkId::new("quarry_resources_read_uncached", label),
            |b| {
                b.to_async(&rt).iter(|| {
                    uncaching.read_resource(ReadResourceRequestParams::new(through.clone()))
                });
            },
        );
        let args = serde_json::json!({"resource_uri": through});
        let serde_json::Value::Object(args) = args else {
            unreachable!()
        };
        group.bench_function(BenchmarkId::new("quarry_read_tool", label), |b| {
            b.to_async(&rt).iter(|| {
                gateway.call_tool(
                    CallToolRequestParams::new("read_mcp_resource").with_arguments(args.clone()),
                )
            });
        });
        group.bench_function(BenchmarkId::new("quarry_read_tool_unaudited", label), |b| {
            b.to_async(&rt).iter(|| {
                unaudited.call_tool(
                    CallToolRequestParams::new("read_mcp_resource").with_arguments(args.clone()),
                )
            });
        });
    }
    group.finish();
    rt.block_on(async {
        direct.cancel().await.unwrap();
        gateway.cancel().await.unwrap();
        unaudited.cancel().await.unwrap();
        uncaching.cancel().await.unwrap();
    });
}

fn invalidation(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let notes = rt
        .block_on(quarry_testkit::fixture::serve_http(
            quarry_testkit::fixture::FixtureArgs {
                name: "notes".into(),
                ..Default::default()
            },
            "127.0.0.1:0".parse().unwrap(),
        ))
        .unwrap();
    let cache = Arc::new(LruContentCache::new(1 << 20));
    let service = rt.block_on(service_over(
        "notes",
        Endpoint::Http {
            url: notes.url.clone(),
        },
        cache.clone(),
    ));
    let uri = ResourceUri::parse("mcp://notes/fixture_3A//counter").unwrap();
    let key = ResourceKey::new(ServerName::parse("notes").unwrap(), "fixture://counter");
    let mut group = c.benchmark_group("invalidation");
    group.bench_function("resources_updated_to_evicted/http", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let r = service
                        .read_resource(ReadRequest::whole(uri.clone()))
                        .await
                        .unwrap();
                    assert!(!r.stale);
                    let started = std::time::Instant::now();
                    notes.server.bump().await;
                    while cache.get(&key, chrono::Utc::now()).await.is_some() {
                        tokio::task::yield_now().await;
                    }
                    total += started.elapsed();
                }
                total
            })
        });
    });
    group.finish();
    rt.block_on(service.shutdown());
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = in_process, uncached_in_process, over_stdio, invalidation
}
criterion_main!(benches);
