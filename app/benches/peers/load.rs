//! The rows that are not one HTTP client reading in a loop: stdio reads (rmcp's client),
//! concurrent clients, an upstream killed under the gateway, and 10,000 clients at once.

use std::{
    path::Path,
    process::Stdio,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use rmcp::{
    ClientCacheConfig, RoleClient, ServiceExt,
    model::{CallToolRequestParams, ClientConfig, ReadResourceRequestParams},
    service::RunningService,
    transport::TokioChildProcess,
};
use serde_json::{Value, json};
use tokio::sync::Barrier;

use crate::{
    ROUNDS, SIZES, row,
    stats::{Samples, micros, quantile},
    targets::{self, QUARRY, QuarryOptions, Served, Upstream},
    wire::Session,
};

type Client = RunningService<RoleClient, ClientConfig>;

async fn stdio_client(command: &[String], args: &[&str]) -> Result<Client> {
    let mut cmd = tokio::process::Command::new(&command[0]);
    cmd.args(&command[1..])
        .args(args)
        .env("QUARRY_LOG", "error");
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()?;
    let client = ClientConfig::default().serve(transport).await?;
    // rmcp's client keeps answers for their ttlMs: every read must reach the server measured.
    client
        .peer()
        .set_response_cache_config(ClientCacheConfig::disabled())
        .await;
    Ok(client)
}

async fn stdio_read(client: &Client, uri: &str, tool: bool) -> Result<()> {
    if tool {
        let args = json!({"resource_uri": uri});
        let Value::Object(args) = args else {
            unreachable!()
        };
        let r = client
            .call_tool(CallToolRequestParams::new("read_mcp_resource").with_arguments(args))
            .await?;
        anyhow::ensure!(r.is_error != Some(true), "the tool failed");
    } else {
        client
            .read_resource(ReadResourceRequestParams::new(uri.to_owned()))
            .await?;
    }
    Ok(())
}

/// One MCP read at a time over stdio: the fixture directly, and `quarry serve` in front of it.
pub(crate) async fn reads_over_stdio(dir: &Path, out: &mut Vec<Value>) -> Result<()> {
    let fixture = Upstream::Fixture { resources: 0 };
    let config = |sub: &str, options| {
        targets::quarry_config(&dir.join(sub), &fixture, options).map(|p| p.display().to_string())
    };
    let off = QuarryOptions {
        cache: false,
        ..QuarryOptions::default()
    };
    let (cached, tool, off) = (
        config("stdio", QuarryOptions::default())?,
        config("stdio-tool", QuarryOptions::default())?,
        config("stdio-off", off)?,
    );
    let quarry = vec![QUARRY.to_owned(), "serve".into(), "--config".into()];
    let mut clients = vec![
        (
            "direct (the upstream's stdio)",
            "direct",
            false,
            false,
            stdio_client(&fixture.stdio(), &[]).await?,
        ),
        (
            "Quarry `resources/read`, cached",
            "quarry",
            true,
            false,
            stdio_client(&quarry, &[&cached]).await?,
        ),
        (
            "Quarry `read_mcp_resource`, cached",
            "quarry",
            true,
            true,
            stdio_client(&quarry, &[&tool]).await?,
        ),
        (
            "Quarry `resources/read`, cache off",
            "quarry",
            true,
            false,
            stdio_client(&quarry, &[&off]).await?,
        ),
    ];
    for (label, size, n) in SIZES {
        eprintln!("peers: sequential reads of {label} over stdio");
        let uri = format!("fixture://sized/{size}");
        let mut samples: Vec<Samples> = clients.iter().map(|_| Samples::default()).collect();
        for (_, _, gateway, tool, client) in &clients {
            let uri = if *gateway {
                fixture.through_quarry(&uri)
            } else {
                uri.clone()
            };
            stdio_read(client, &uri, *tool).await?;
        }
        for _ in 0..ROUNDS {
            for ((_, _, gateway, tool, client), s) in clients.iter().zip(&mut samples) {
                let uri = if *gateway {
                    fixture.through_quarry(&uri)
                } else {
                    uri.clone()
                };
                let round = s.round();
                for _ in 0..n {
                    let started = Instant::now();
                    stdio_read(client, &uri, *tool).await?;
                    round.push(started.elapsed());
                }
            }
        }
        let group = format!("read {label}, stdio");
        for ((name, kind, ..), s) in clients.iter().zip(&samples) {
            out.push(row(&group, name, kind, s.figures()));
        }
    }
    for (.., client) in clients.drain(..) {
        client.cancel().await?;
    }
    Ok(())
}

/// `n` sessions to `url` (or `n` stateless connections), opened at most 64 at a time.
async fn sessions(url: &str, n: usize, stateless: bool) -> Result<Vec<Session>> {
    let gate = Arc::new(tokio::sync::Semaphore::new(64));
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let (url, gate) = (url.to_owned(), gate.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire_owned().await?;
            if stateless {
                Session::stateless(&url).await
            } else {
                Session::open(&url).await
            }
        }));
    }
    let mut out = Vec::with_capacity(n);
    for t in tasks {
        out.push(t.await??);
    }
    Ok(out)
}

/// Every session reads `uri` `each` times, all starting together: (latencies, errors, wall time).
async fn together(
    sessions: Vec<Session>,
    uri: &str,
    each: usize,
) -> Result<(Vec<Session>, Vec<Duration>, u64, Duration)> {
    let barrier = Arc::new(Barrier::new(sessions.len() + 1));
    let mut tasks = Vec::with_capacity(sessions.len());
    for mut s in sessions {
        let (uri, barrier) = (uri.to_owned(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut lat = Vec::with_capacity(each);
            let mut errors = 0u64;
            for _ in 0..each {
                let started = Instant::now();
                match s.read(&uri).await {
                    Ok(a) if a.ok() => lat.push(started.elapsed()),
                    _ => errors += 1,
                }
            }
            (s, lat, errors)
        }));
    }
    barrier.wait().await;
    let started = Instant::now();
    let (mut back, mut lat, mut errors) = (Vec::new(), Vec::new(), 0);
    for t in tasks {
        let (s, l, e) = t.await?;
        back.push(s);
        lat.extend(l);
        errors += e;
    }
    Ok((back, lat, errors, started.elapsed()))
}

/// Rounds of each concurrent row (each round is about 1,000 reads a target).
pub(crate) const CONCURRENT_ROUNDS: usize = 3;

/// Throughput and p99 of 1, 16 and 256 clients reading a cached 1 KiB resource together.
pub(crate) async fn concurrent(dir: &Path, out: &mut Vec<Value>) -> Result<()> {
    let fixture = Upstream::Fixture { resources: 0 };
    let served: Vec<(&str, &str, bool, Served)> = vec![
        (
            "direct (the upstream's own HTTP)",
            "direct",
            false,
            targets::direct_http(&fixture).await?,
        ),
        (
            "mcp-proxy",
            "peer",
            false,
            targets::mcp_proxy(&fixture).await?,
        ),
        (
            "supergateway --stateful",
            "peer",
            false,
            targets::supergateway(&fixture).await?,
        ),
        (
            "Quarry `resources/read`, cached",
            "quarry",
            true,
            targets::quarry_http(dir, &fixture, QuarryOptions::default()).await?,
        ),
    ];
    let uri = "fixture://sized/1024";
    for clients in [1usize, 16, 256] {
        eprintln!("peers: {clients} concurrent clients over HTTP");
        let each = (1000 / clients).max(8);
        let group = format!("{clients} concurrent clients reading 1 KiB, HTTP");
        // Every target's sessions are opened first and its rounds interleaved with the others',
        // as in the sequential rows: a slow spell of the machine then falls on one round of
        // each target rather than on every round of one.
        let mut targets = Vec::with_capacity(served.len());
        for (_, _, gateway, s) in &served {
            let uri = if *gateway {
                fixture.through_quarry(uri)
            } else {
                uri.to_owned()
            };
            let mut open = sessions(&s.url, clients, false).await?;
            open[0].read(&uri).await?;
            targets.push((uri, Some(open), Samples::default(), Vec::new()));
        }
        for _ in 0..CONCURRENT_ROUNDS {
            for (uri, open, samples, throughput) in &mut targets {
                let sessions = open.take().context("the target's sessions")?;
                let (back, lat, errors, wall) = together(sessions, uri, each).await?;
                *open = Some(back);
                throughput.push(lat.len() as f64 / wall.as_secs_f64());
                samples.errors += errors;
                *samples.round() = lat;
            }
        }
        for ((name, kind, ..), (_, _, samples, mut throughput)) in served.iter().zip(targets) {
            throughput.sort_by(f64::total_cmp);
            let mut r = row(&group, name, kind, samples.figures());
            r["reads_per_s"] = json!(throughput[throughput.len() / 2].round());
            out.push(r);
        }
    }
    Ok(())
}

/// Every process under `pid` whose command line names the fixture.
fn fixture_descendants(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut stack = vec![pid];
    while let Some(p) = stack.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children
                .split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok())
            {
                let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
                if memchr::memmem::find(&cmdline, b"fixture").is_some() {
                    found.push(child);
                }
                stack.push(child);
            }
        }
    }
    found
}

/// The upstream killed under each gateway: time to the first successful read after, 10 s at most.
pub(crate) async fn restart(dir: &Path, out: &mut Vec<Value>) -> Result<()> {
    let fixture = Upstream::Fixture { resources: 0 };
    let group = "upstream killed: to the first successful read, HTTP";
    for (name, kind, gateway) in [
        ("mcp-proxy", "peer", false),
        ("supergateway --stateful", "peer", false),
        ("Quarry `resources/read`", "quarry", true),
    ] {
        eprintln!("peers: {name}, upstream killed");
        let served = match kind {
            "quarry" => targets::quarry_http(dir, &fixture, QuarryOptions::default()).await?,
            _ if name == "mcp-proxy" => targets::mcp_proxy(&fixture).await?,
            _ => targets::supergateway(&fixture).await?,
        };
        let mut samples = Samples::default();
        let mut fresh = 5000;
        for _ in 0..ROUNDS {
            let mut session = Session::open(&served.url).await?;
            session
                .read(&through(&fixture, gateway, "fixture://sized/1024"))
                .await?;
            let pids = fixture_descendants(served.child.id().context("a pid")?);
            anyhow::ensure!(!pids.is_empty(), "{name}: no upstream process found");
            for pid in pids {
                let _ = std::process::Command::new("kill")
                    .args(["-9", &pid.to_string()])
                    .status();
            }
            let killed = Instant::now();
            let recovered = loop {
                if killed.elapsed() > Duration::from_secs(10) {
                    break None;
                }
                fresh += 1;
                let uri = through(&fixture, gateway, &format!("fixture://sized/{fresh}"));
                match session.read(&uri).await {
                    Ok(a) if a.ok() => break Some(killed.elapsed()),
                    Ok(_) => {}
                    // A broken connection or session: a client would open a new one.
                    Err(_) => {
                        if let Ok(s) = Session::open(&served.url).await {
                            session = s;
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            };
            match recovered {
                Some(d) => samples.round().push(d),
                None => {
                    // It will not come back: the upstream is gone for good.
                    samples.errors += 1;
                    break;
                }
            }
        }
        out.push(row(group, name, kind, samples.figures()));
    }
    Ok(())
}

fn through(upstream: &Upstream, gateway: bool, uri: &str) -> String {
    if gateway {
        upstream.through_quarry(uri)
    } else {
        uri.to_owned()
    }
}

/// 10,000 clients reading a cached resource at once through Quarry, its cache filled to budget:
/// each with a 2025-11-25 session, or each sending stateless 2026-07-28 requests.
pub(crate) async fn burst(dir: &Path, stateless: bool) -> Result<Value> {
    const CLIENTS: usize = 10_000;
    const BUDGET_MB: u32 = 64;
    eprintln!("peers: {CLIENTS} clients at once through Quarry (stateless: {stateless})");
    let fixture = Upstream::Fixture { resources: 0 };
    let options = QuarryOptions {
        cache: true,
        cache_mb: BUDGET_MB,
    };
    let served = targets::quarry_http(dir, &fixture, options).await?;
    let mut filler = Session::open(&served.url).await?;
    // More than the budget, so the cache is at it (and evicting) when the clients come.
    for i in 0..(BUDGET_MB as usize + 16) {
        let uri = fixture.through_quarry(&format!("fixture://sized/{}", 1024 * 1024 - i));
        anyhow::ensure!(filler.read(&uri).await?.ok(), "filling the cache failed");
    }
    let uri = fixture.through_quarry("fixture://sized/1024");
    filler.read(&uri).await?;
    let filled = served.memory().context("quarry's memory")?;
    let open = sessions(&served.url, CLIENTS, stateless).await?;
    let (_, mut lat, errors, wall) = together(open, &uri, 1).await?;
    let after = served.memory().context("quarry's memory")?;
    lat.sort_unstable();
    Ok(json!({
        "clients": CLIENTS,
        "errors": errors,
        "wall_ms": micros(wall) / 1000.0,
        "p50_us": micros(quantile(&lat, 0.5)),
        "p99_us": micros(quantile(&lat, 0.99)),
        "cache_budget_mb": BUDGET_MB,
        "rss_cache_filled_mb": filled.now as f64 / 1048576.0,
        "rss_files_cache_filled_mb": filled.files as f64 / 1048576.0,
        "rss_after_mb": after.now as f64 / 1048576.0,
        "rss_peak_mb": after.peak as f64 / 1048576.0,
    }))
}
