//! Scale: 50 upstream servers (real stdio child processes) × 10,000 resources each behind one
//! gateway. Measures a first listing (connect and list everything), a listing from the cached
//! listings, a listing bypassing them, the same listing through the policy decorator (the spec's
//! rules in a real `quarry policy-worker`, for an agent allowed every server: first with no
//! decision cached, then cached), and 200 concurrent reads spread over the servers; reports the
//! gateway's memory and the number of upstream processes (pool limits). Prints one JSON line.
//! `cargo xtask bench` runs it; `QUARRY_SCALE_QUICK=1` makes it small (2 servers × 100).

#![allow(clippy::unwrap_used, missing_docs)]

use std::{collections::BTreeMap, time::Instant};

use quarry::{compose, config::Settings};
use quarry_domain::{
    AgentFacts, Endpoint, ListQuery, PageLimit, Principal, ResourceUri, ServerName, ServerSettings,
    ServerSpec,
};
use quarry_policy_prolog::{PrologPolicy, WorkerCommand, program};
use quarry_ports::{ReadRequest, ResourceGateway};
use quarry_usecases::Governed;

const QUARRY: &str = env!("CARGO_BIN_EXE_quarry");

fn rss_bytes(pid: u32) -> u64 {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap_or_default();
    statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse::<u64>().ok())
        .unwrap_or(0)
        * 4096
}

fn fixture_processes(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
        })
        .count()
}

fn main() {
    let quick = std::env::var_os("QUARRY_SCALE_QUICK").is_some();
    let (servers, per_server) = if quick { (2u32, 100u32) } else { (50, 10_000) };
    let marker = format!("scale-{}", std::process::id());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let settings: Vec<ServerSettings> = (0..servers)
            .map(|i| {
                let name = format!("s{i:02}");
                ServerSettings::new(ServerSpec::new(
                    ServerName::parse(&name).unwrap(),
                    Endpoint::Stdio {
                        command: QUARRY.into(),
                        args: ["fixture", "--name", &format!("{marker}-{name}"), "--resources", &per_server.to_string(), "--page-size", "1000"]
                            .map(String::from)
                            .to_vec(),
                        env: BTreeMap::new(),
                        cwd: None,
                    },
                ))
            })
            .collect();
        let mut config = Settings::defaults();
        config.servers = settings;
        config.store_path = None;
        config.cache_ttl = std::time::Duration::from_secs(3600);
        let service = compose::build(&config).await.unwrap();
        let rss_before = rss_bytes(std::process::id());
        let query = ListQuery { limit: PageLimit::new(100).unwrap(), ..ListQuery::default() };
        let expected = u64::from(servers) * u64::from(per_server + 6);

        let started = Instant::now();
        let first = service.list_resources(query.clone()).await.unwrap();
        let first_ms = started.elapsed().as_secs_f64() * 1000.0;
        assert_eq!(first.total_count, expected);
        assert!(!first.partial);
        assert_eq!(first.resources.len(), 100);

        let started = Instant::now();
        let cached = service.list_resources(query.clone()).await.unwrap();
        let cached_ms = started.elapsed().as_secs_f64() * 1000.0;
        assert_eq!(cached.cached_count, 100);

        let started = Instant::now();
        let fresh = service.list_resources(ListQuery { use_cache: false, ..query.clone() }).await.unwrap();
        let fresh_ms = started.elapsed().as_secs_f64() * 1000.0;
        assert_eq!(fresh.total_count, expected);

        // The policy on: every resource decided (by batches) before paging.
        let names: Vec<ServerName> = (0..servers).map(|i| ServerName::parse(&format!("s{i:02}")).unwrap()).collect();
        let agents = [AgentFacts {
            agent: "alice".into(),
            permissions: vec!["mcp_access".into()],
            servers: names,
            ..AgentFacts::default()
        }];
        let engine = PrologPolicy::start(
            WorkerCommand { program: QUARRY.into(), args: vec!["policy-worker".into()], memory_limit: Some(1 << 30) },
            program(None, &[], &agents, &[]),
            std::time::Duration::from_secs(30),
            quarry_policy_prolog::RECYCLE_AFTER,
        )
        .await
        .unwrap();
        let governed = Governed::new(service.clone(), std::sync::Arc::new(engine), Principal::new("alice"), "stdio");
        let started = Instant::now();
        let undecided = governed.list_resources(query.clone()).await.unwrap();
        let policy_first_ms = started.elapsed().as_secs_f64() * 1000.0;
        assert_eq!(undecided.total_count, expected);
        let started = Instant::now();
        let decided = governed.list_resources(query.clone()).await.unwrap();
        let policy_cached_ms = started.elapsed().as_secs_f64() * 1000.0;
        assert_eq!(decided.total_count, expected);
        assert_eq!(decided.resources.len(), 100);
        let rss_policy = rss_bytes(std::process::id());

        let started = Instant::now();
        let reads: Vec<_> = (0..200u32)
            .map(|i| {
                let service = service.clone();
                let uri = ResourceUri::parse(&format!("mcp://s{:02}/fixture_3A//item/{}", i % servers, i + 1)).unwrap();
                tokio::spawn(async move {
                    service.read_resource(ReadRequest { use_cache: false, ..ReadRequest::whole(uri) }).await
                })
            })
            .collect();
        let mut errors = 0;
        for r in reads {
            if r.await.unwrap().is_err() {
                errors += 1;
            }
        }
        let reads_ms = started.elapsed().as_secs_f64() * 1000.0;
        let processes = fixture_processes(&marker);
        let rss_after = rss_bytes(std::process::id());
        println!(
            "{{\"servers\":{servers},\"resources_per_server\":{per_server},\"total_resources\":{expected},\"first_listing_ms\":{first_ms:.1},\"cached_listing_ms\":{cached_ms:.1},\"uncached_listing_ms\":{fresh_ms:.1},\"policy_listing_undecided_ms\":{policy_first_ms:.1},\"policy_listing_decided_ms\":{policy_cached_ms:.1},\"rss_growth_after_policy_listings_mb\":{:.1},\"concurrent_reads\":200,\"concurrent_reads_ms\":{reads_ms:.1},\"read_errors\":{errors},\"upstream_processes\":{processes},\"gateway_rss_growth_mb\":{:.1}}}",
            rss_policy.saturating_sub(rss_before) as f64 / (1024.0 * 1024.0),
            rss_after.saturating_sub(rss_before) as f64 / (1024.0 * 1024.0)
        );
        assert_eq!(errors, 0);
        assert!(processes as u32 <= servers * 10, "{processes} processes for {servers} servers");
        service.shutdown().await;
    });
}
