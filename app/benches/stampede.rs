//! Stampede: 10,000 concurrent reads of 100 distinct resources against a fresh gateway (cold:
//! every resource a miss at once), then the same burst again (warm: every read a cache hit).
//! The upstream is the fixture over streamable HTTP on loopback, which counts the reads that
//! reach it. Prints one JSON line; `cargo xtask bench` runs it.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Instant;

use quarry::{compose, config::Settings};
use quarry_domain::{Endpoint, ResourceUri, ServerName, ServerSettings, ServerSpec};
use quarry_ports::{ReadRequest, ResourceGateway};
use quarry_testkit::fixture::{FixtureArgs, serve_http};

const READS: u32 = 10_000;
const RESOURCES: u32 = 100;

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
        let mut config = Settings::defaults();
        config.store_path = None;
        config.servers = vec![ServerSettings::new(ServerSpec::new(
            ServerName::parse("notes").unwrap(),
            Endpoint::Http {
                url: upstream.url.clone(),
            },
        ))];
        let service = compose::build(&config).await.unwrap();
        let mut figures = Vec::new();
        for burst in ["cold", "warm"] {
            let before = upstream.server.reads();
            let started = Instant::now();
            let reads: Vec<_> = (0..READS)
                .map(|i| {
                    let service = service.clone();
                    let uri = ResourceUri::parse(&format!(
                        "mcp://notes/fixture_3A//item/{}",
                        i % RESOURCES + 1
                    ))
                    .unwrap();
                    tokio::spawn(
                        async move { service.read_resource(ReadRequest::whole(uri)).await },
                    )
                })
                .collect();
            for r in reads {
                r.await.unwrap().unwrap();
            }
            let seconds = started.elapsed().as_secs_f64();
            let upstream_reads = upstream.server.reads() - before;
            figures.push(format!(
                "\"{burst}_reads_per_s\":{:.0},\"{burst}_upstream_reads\":{upstream_reads}",
                f64::from(READS) / seconds
            ));
        }
        println!(
            "{{\"reads\":{READS},\"resources\":{RESOURCES},{}}}",
            figures.join(",")
        );
        service.shutdown().await;
    });
}
