//! The shared cache against the in-memory one, in process, the upstream being the fixture over
//! streamable HTTP on loopback: cached reads (p50, p99, and throughput with 16 readers), a
//! listing from cached listings, and the invalidation delay across two replicas sharing one
//! Redis (from the upstream's change to the other replica serving the new content). Redis is the
//! one `QUARRY_TEST_REDIS_URL` names (default 127.0.0.1:6379); its keys go under a prefix of
//! this run's own, removed at the end. Prints one JSON line; `cargo xtask bench` runs it.

#![allow(clippy::unwrap_used, missing_docs)]

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use quarry::{
    compose,
    config::{CacheBackend, Settings},
};
use quarry_cache_redis::RedisLink;
use quarry_domain::{
    Endpoint, ListQuery, PageLimit, ResourceUri, ServerName, ServerSettings, ServerSpec,
};
use quarry_ports::{ReadRequest, ResourceGateway};
use quarry_testkit::{
    fixture::{FixtureArgs, serve_http},
    services,
};
use quarry_usecases::ResourceService;

const RESOURCES: u32 = 100;
const SEQUENTIAL: usize = 2_000;
const READERS: usize = 16;
const PER_READER: usize = 1_000;

async fn service(url: &str, cache: CacheBackend) -> Arc<ResourceService> {
    let mut config = Settings::defaults();
    config.store_path = None;
    config.backends.cache = cache;
    config.servers = vec![ServerSettings::new(ServerSpec::new(
        ServerName::parse("notes").unwrap(),
        Endpoint::Http { url: url.into() },
    ))];
    compose::build(&config).await.unwrap()
}

fn uri(i: u32) -> ResourceUri {
    ResourceUri::parse(&format!(
        "mcp://notes/fixture_3A//item/{}",
        i % RESOURCES + 1
    ))
    .unwrap()
}

fn at(sorted: &[Duration], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

/// `"{name}_p50_us", "_p99_us", "_reads_per_s", "_listing_p50_us"` for cached reads.
async fn cached_reads(name: &str, service: &Arc<ResourceService>) -> String {
    for i in 0..RESOURCES {
        service
            .read_resource(ReadRequest::whole(uri(i)))
            .await
            .unwrap();
    }
    let mut took = Vec::with_capacity(SEQUENTIAL);
    for i in 0..SEQUENTIAL {
        let started = Instant::now();
        let read = service
            .read_resource(ReadRequest::whole(uri(i as u32)))
            .await
            .unwrap();
        took.push(started.elapsed());
        assert!(read.cached, "a cached read");
    }
    took.sort();
    let started = Instant::now();
    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let service = service.clone();
            tokio::spawn(async move {
                for i in 0..PER_READER {
                    let n = (r * PER_READER + i) as u32;
                    service
                        .read_resource(ReadRequest::whole(uri(n)))
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for r in readers {
        r.await.unwrap();
    }
    let per_s = (READERS * PER_READER) as f64 / started.elapsed().as_secs_f64();
    let query = ListQuery {
        limit: PageLimit::new(100).unwrap(),
        ..ListQuery::default()
    };
    service.list_resources(query.clone()).await.unwrap();
    let mut listings = Vec::new();
    for _ in 0..200 {
        let started = Instant::now();
        service.list_resources(query.clone()).await.unwrap();
        listings.push(started.elapsed());
    }
    listings.sort();
    format!(
        "\"{name}_p50_us\":{:.1},\"{name}_p99_us\":{:.1},\"{name}_reads_per_s\":{per_s:.0},\"{name}_listing_p50_us\":{:.1}",
        at(&took, 0.5),
        at(&took, 0.99),
        at(&listings, 0.5)
    )
}

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let upstream = serve_http(
            FixtureArgs {
                name: "notes".into(),
                resources: RESOURCES,
                ..FixtureArgs::default()
            },
            "127.0.0.1:0".parse().unwrap(),
        )
        .await
        .unwrap();
        let prefix = format!("{}:", services::unique_name("quarry_bench"));
        let redis = CacheBackend::Redis {
            url: services::redis_url(),
            prefix: prefix.clone(),
        };
        let memory = service(&upstream.url, CacheBackend::Memory).await;
        let mut figures = vec![cached_reads("memory", &memory).await];
        memory.shutdown().await;
        let (a, b) = (
            service(&upstream.url, redis.clone()).await,
            service(&upstream.url, redis).await,
        );
        figures.push(cached_reads("redis", &a).await);

        // A watches the counter (so the upstream tells A of changes); B serves it from Redis.
        let counter = ResourceUri::parse("mcp://notes/fixture_3A//counter").unwrap();
        a.watch(&counter).await.unwrap();
        let mut delays = Vec::new();
        for _ in 0..20 {
            let before = b
                .read_resource(ReadRequest::whole(counter.clone()))
                .await
                .unwrap();
            let again = b
                .read_resource(ReadRequest::whole(counter.clone()))
                .await
                .unwrap();
            assert!(again.cached);
            let started = Instant::now();
            upstream.server.bump().await;
            loop {
                let now = b
                    .read_resource(ReadRequest::whole(counter.clone()))
                    .await
                    .unwrap();
                if now.content != before.content {
                    break;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "not invalidated in 5 s"
                );
            }
            delays.push(started.elapsed());
        }
        delays.sort();
        figures.push(format!(
            "\"invalidation_p50_us\":{:.1},\"invalidation_max_us\":{:.1}",
            at(&delays, 0.5),
            at(&delays, 1.0)
        ));
        a.shutdown().await;
        b.shutdown().await;
        let _ = RedisLink::open(&services::redis_url(), &prefix)
            .unwrap()
            .clear()
            .await;
        println!("{{{}}}", figures.join(","));
    });
}
