//! Quarry beside the floor and the peer gateways, in one run, with one client.
//!
//! Every row reads the same upstream program: directly (the floor: its own streamable HTTP, or
//! its stdio), through mcp-proxy (PyPI), through supergateway `--stateful` (npm) and through
//! `quarry serve`. Over HTTP the client is `wire::Session` (keep-alive HTTP/1.1, answers checked
//! by searching, not parsed); over stdio it is rmcp's client. Rounds are interleaved across the
//! targets so that a noisy moment hurts them alike. Prints one JSON object; `cargo xtask bench
//! --peers` turns it into BENCHMARKS.md's tables with the ratios.
//!
//! The peers come from `cargo xtask bench --peers` (into `target/peers/bench`); without them the
//! bench fails naming that command.

#![allow(clippy::unwrap_used, missing_docs)]

// A bench's root is a crate root: its modules are named by path.
#[path = "peers/load.rs"]
mod load;
#[path = "peers/stats.rs"]
mod stats;
#[path = "peers/targets.rs"]
mod targets;
#[path = "peers/wire.rs"]
mod wire;

use std::time::Instant;

use anyhow::{Context, Result};
use serde_json::{Value, json};
use stats::Samples;
use targets::{QuarryOptions, Served, Upstream};
use wire::Session;

pub(crate) const ROUNDS: usize = 5;
/// The group of 1 KiB reads in the 2026-07-28 era (`cargo xtask bench` reads it by name).
const STATELESS_1K: &str = "read 1 KiB, HTTP, 2026-07-28 (no session)";

const SIZES: [(&str, usize, usize); 3] = [
    ("1 KiB", 1024, 200),
    ("64 KiB", 64 * 1024, 100),
    ("1 MiB", 1024 * 1024, 20),
];

/// One figure of the page: a target in a group of rows that share a floor.
pub(crate) fn row(group: &str, target: &str, kind: &str, figures: Value) -> Value {
    let mut row = json!({"group": group, "target": target, "kind": kind});
    if let (Value::Object(r), Value::Object(f)) = (&mut row, figures) {
        r.extend(f);
    }
    row
}

/// How a row reads: MCP's `resources/read`, or Quarry's `read_mcp_resource` tool.
#[derive(Clone, Copy)]
enum Via {
    Read,
    Tool,
}

struct HttpTarget {
    name: &'static str,
    kind: &'static str,
    via: Via,
    gateway_uris: bool,
    session: Session,
    samples: Samples,
}

async fn http_targets(
    dir: &std::path::Path,
    upstream: &Upstream,
    quarry_off: bool,
    tool: bool,
) -> Result<(Vec<Served>, Vec<HttpTarget>)> {
    let mut served = vec![
        targets::direct_http(upstream).await?,
        targets::mcp_proxy(upstream).await?,
        targets::supergateway(upstream).await?,
        targets::quarry_http(dir, upstream, QuarryOptions::default()).await?,
    ];
    if quarry_off {
        let off = QuarryOptions {
            cache: false,
            ..QuarryOptions::default()
        };
        served.push(targets::quarry_http(&dir.join("off"), upstream, off).await?);
    }
    let mut rows = Vec::new();
    let mut add = |name, kind, via, gateway_uris, session| {
        rows.push(HttpTarget {
            name,
            kind,
            via,
            gateway_uris,
            session,
            samples: Samples::default(),
        });
    };
    add(
        "direct (the upstream's own HTTP)",
        "direct",
        Via::Read,
        false,
        Session::open(&served[0].url).await?,
    );
    add(
        "mcp-proxy",
        "peer",
        Via::Read,
        false,
        Session::open(&served[1].url).await?,
    );
    add(
        "supergateway --stateful",
        "peer",
        Via::Read,
        false,
        Session::open(&served[2].url).await?,
    );
    add(
        "Quarry `resources/read`, cached",
        "quarry",
        Via::Read,
        true,
        Session::open(&served[3].url).await?,
    );
    if tool {
        add(
            "Quarry `read_mcp_resource`, cached",
            "quarry",
            Via::Tool,
            true,
            Session::open(&served[3].url).await?,
        );
    }
    if quarry_off {
        add(
            "Quarry `resources/read`, cache off",
            "quarry",
            Via::Read,
            true,
            Session::open(&served[4].url).await?,
        );
    }
    Ok((served, rows))
}

async fn read_once(t: &mut HttpTarget, upstream: &Upstream, uri: &str) -> Result<wire::Answer> {
    let uri = if t.gateway_uris {
        upstream.through_quarry(uri)
    } else {
        uri.to_owned()
    };
    match t.via {
        Via::Read => t.session.read(&uri).await,
        Via::Tool => {
            let args = json!({"resource_uri": uri}).to_string();
            t.session.tool("read_mcp_resource", &args).await
        }
    }
}

/// Sequential reads of `uri` by every target, `n` a round, the rounds interleaved.
async fn sequential(
    group: &str,
    upstream: &Upstream,
    rows: &mut [HttpTarget],
    uri: &str,
    n: usize,
    min_bytes: usize,
) -> Result<Vec<Value>> {
    for t in rows.iter_mut() {
        t.samples = Samples::default();
        let warm = read_once(t, upstream, uri)
            .await
            .with_context(|| format!("{}: the first read of {uri}", t.name))?;
        anyhow::ensure!(
            warm.ok() && warm.body.len() >= min_bytes,
            "{} did not read {uri}: {}",
            t.name,
            String::from_utf8_lossy(&warm.body[..warm.body.len().min(300)])
        );
    }
    for _ in 0..ROUNDS {
        for t in rows.iter_mut() {
            let mut round = Vec::with_capacity(n);
            for _ in 0..n {
                let started = Instant::now();
                let answer = read_once(t, upstream, uri)
                    .await
                    .with_context(|| format!("{}: reading {uri}", t.name))?;
                round.push(started.elapsed());
                if !answer.ok() {
                    t.samples.errors += 1;
                }
            }
            *t.samples.round() = round;
        }
    }
    Ok(rows
        .iter()
        .map(|t| row(group, t.name, t.kind, t.samples.figures()))
        .collect())
}

async fn reads_over_http(dir: &std::path::Path, out: &mut Vec<Value>) -> Result<()> {
    let fixture = Upstream::Fixture { resources: 0 };
    let (served, mut rows) = http_targets(dir, &fixture, true, true).await?;
    for (label, size, n) in SIZES {
        eprintln!("peers: sequential reads of {label} over HTTP");
        let uri = format!("fixture://sized/{size}");
        out.extend(
            sequential(
                &format!("read {label}, HTTP"),
                &fixture,
                &mut rows,
                &uri,
                n,
                size,
            )
            .await?,
        );
    }
    drop(rows);
    // The 2026-07-28 era, no session: the peers speak only 2025-11-25, so the floor alone is
    // beside Quarry (which answers such a read without rmcp's per-request machinery).
    eprintln!("peers: sequential reads of 1 KiB over HTTP, 2026-07-28");
    let stateless = |name, kind, gateway_uris, session| HttpTarget {
        name,
        kind,
        via: Via::Read,
        gateway_uris,
        session,
        samples: Samples::default(),
    };
    let mut rows = vec![
        stateless(
            "direct (the upstream's own HTTP)",
            "direct",
            false,
            Session::stateless(&served[0].url).await?,
        ),
        stateless(
            "Quarry `resources/read`, cached",
            "quarry",
            true,
            Session::stateless(&served[3].url).await?,
        ),
    ];
    let (_, size, n) = SIZES[0];
    out.extend(
        sequential(
            STATELESS_1K,
            &fixture,
            &mut rows,
            &format!("fixture://sized/{size}"),
            n,
            size,
        )
        .await?,
    );
    drop((rows, served));
    let everything = Upstream::Everything;
    let (_served, mut rows) =
        http_targets(&dir.join("everything"), &everything, false, false).await?;
    eprintln!("peers: sequential reads of server-everything over HTTP");
    let group = "read server-everything's `test://static/resource/1`, HTTP";
    out.extend(
        sequential(
            group,
            &everything,
            &mut rows,
            "test://static/resource/1",
            200,
            10,
        )
        .await?,
    );
    Ok(())
}

async fn lists_over_http(dir: &std::path::Path, out: &mut Vec<Value>) -> Result<()> {
    for (group, upstream, expect, n) in [
        (
            "list 100 resources (server-everything, every page), HTTP",
            Upstream::Everything,
            100,
            10,
        ),
        (
            "list 10,000 resources (fixture, every page), HTTP",
            Upstream::Fixture { resources: 10_000 },
            10_000,
            2,
        ),
    ] {
        eprintln!("peers: {group}");
        let (_served, mut rows) =
            http_targets(&dir.join(format!("list{expect}")), &upstream, false, false).await?;
        for t in &mut rows {
            let count = t.session.list_all().await?;
            anyhow::ensure!(count >= expect, "{} listed {count} of {expect}", t.name);
        }
        for _ in 0..ROUNDS {
            for t in &mut rows {
                let mut round = Vec::new();
                for _ in 0..n {
                    let started = Instant::now();
                    t.session.list_all().await?;
                    round.push(started.elapsed());
                }
                *t.samples.round() = round;
            }
        }
        // The targets are made for reads; here Quarry's row lists.
        out.extend(rows.iter().map(|t| {
            let name = if t.kind == "quarry" {
                "Quarry `resources/list`"
            } else {
                t.name
            };
            row(group, name, t.kind, t.samples.figures())
        }));
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    if std::env::args().any(|a| a == "--list") {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    // QUARRY_PEERS_ONLY=burst,restart runs only those parts (while working on one).
    let only = std::env::var("QUARRY_PEERS_ONLY").unwrap_or_default();
    let part = |name: &str| only.is_empty() || only.split(',').any(|p| p == name);
    let started = Instant::now();
    let mut rows = Vec::new();
    let d = dir.path();
    if part("http") {
        reads_over_http(d, &mut rows)
            .await
            .context("reads over HTTP")?;
    }
    if part("stdio") {
        load::reads_over_stdio(d, &mut rows)
            .await
            .context("reads over stdio")?;
    }
    if part("lists") {
        lists_over_http(d, &mut rows).await.context("lists")?;
    }
    if part("concurrent") {
        load::concurrent(&d.join("load"), &mut rows)
            .await
            .context("concurrency")?;
    }
    if part("restart") {
        load::restart(&d.join("restart"), &mut rows)
            .await
            .context("restart")?;
    }
    let burst = if part("burst") {
        json!({
            "sessions": load::burst(&d.join("burst"), false).await.context("10,000 sessions")?,
            "stateless": load::burst(&d.join("stateless"), true).await.context("10,000 stateless clients")?,
        })
    } else {
        Value::Null
    };
    let versions = json!({
        "server-everything": "2025.11.25",
        "mcp-proxy": "0.13.0",
        "supergateway": "4.0.0",
        "node": String::from_utf8_lossy(&std::process::Command::new("node").arg("--version").output()?.stdout).trim(),
    });
    println!(
        "{}",
        json!({"rows": rows, "burst": burst, "versions": versions, "rounds": ROUNDS, "concurrent_rounds": load::CONCURRENT_ROUNDS, "seconds": started.elapsed().as_secs()})
    );
    Ok(())
}
