//! Stampede: 10,000 concurrent reads of 100 distinct resources that are not cached (cold: every
//! resource a miss at once), then the same burst again (warm: every read a cache hit), over
//! five rounds, each on 100 resources never read before; medians are reported. The process's
//! very first burst is reported apart (`first_*`): it also pays for the runtime's and the
//! allocator's first growth (page faults for 10,000 tasks), which is not a cache's doing.
//! The upstream is the fixture over streamable HTTP on loopback, which counts the reads that
//! reach it; the store is a SQLite file, as by default. Prints one JSON line; `cargo xtask
//! bench` runs it.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Instant;

use quarry::{compose, config::Settings};
use quarry_domain::{Endpoint, ResourceUri, ServerName, ServerSettings, ServerSpec};
use quarry_ports::{ReadRequest, ResourceGateway};
use quarry_testkit::fixture::{FixtureArgs, serve_http};

const READS: u32 = 10_000;
const RESOURCES: u32 = 100;
const ROUNDS: u32 = 5;

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let upstream = serve_http(
            FixtureArgs {
                name: "notes".into(),
                resources: RESOURCES * (ROUNDS + 1),
                ..FixtureArgs::default()
            },
            "127.0.0.1:0".parse().unwrap(),
        )
        .await
        .unwrap();
        // The embedded default: versions in a SQLite file.
        let dir = tempfile::tempdir().unwrap();
        let mut config = Settings::defaults();
        config.store_path = Some(dir.path().join("quarry.db"));
        config.servers = vec![ServerSettings::new(ServerSpec::new(
            ServerName::parse("notes").unwrap(),
            Endpoint::Http {
                url: upstream.url.clone(),
            },
        ))];
        let service = compose::build(&config).await.unwrap();
        // One burst of READS reads over `set`'s resources: (reads/s, reads that reached the
        // upstream).
        let burst = |set: u32| {
            let service = service.clone();
            let upstream = &upstream;
            async move {
                let before = upstream.server.reads();
                let started = Instant::now();
                let reads: Vec<_> = (0..READS)
                    .map(|i| {
                        let service = service.clone();
                        let uri = ResourceUri::parse(&format!(
                            "mcp://notes/fixture_3A//item/{}",
                            set * RESOURCES + i % RESOURCES + 1
                        ))
                        .unwrap();
                        tokio::spawn(async move {
                            service.read_resource(ReadRequest::whole(uri)).await
                        })
                    })
                    .collect();
                for r in reads {
                    r.await.unwrap().unwrap();
                }
                let per_s = f64::from(READS) / started.elapsed().as_secs_f64();
                (per_s, upstream.server.reads() - before)
            }
        };
        let first = burst(ROUNDS).await;
        let (mut cold, mut warm) = (Vec::new(), Vec::new());
        for set in 0..ROUNDS {
            cold.push(burst(set).await);
            warm.push(burst(set).await);
        }
        let median = |v: &mut Vec<(f64, u64)>| {
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            v[v.len() / 2]
        };
        let (cold, warm) = (median(&mut cold), median(&mut warm));
        println!(
            "{{\"reads\":{READS},\"resources\":{RESOURCES},\"rounds\":{ROUNDS},\"first_reads_per_s\":{:.0},\"first_upstream_reads\":{},\"cold_reads_per_s\":{:.0},\"cold_upstream_reads\":{},\"warm_reads_per_s\":{:.0},\"warm_upstream_reads\":{}}}",
            first.0, first.1, cold.0, cold.1, warm.0, warm.1
        );
        service.shutdown().await;
    });
}
