//! `cargo xtask bench`: runs the benchmarks and prints their figures as the Markdown tables of
//! BENCHMARKS.md, with each Quarry figure as a ratio of the floor measured in the same run.

use std::{path::Path, process::Command};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::{cargo, run, workspace_root};

const SIZES: [&str; 3] = ["1KiB", "64KiB", "1MiB"];

/// Criterion's point estimate (the median when present, else the mean) in nanoseconds. `id` is
/// criterion's folder: `group/function/parameter`, a lone function's `/` turned into `_`.
pub(crate) fn estimate(root: &Path, id: &str) -> Result<f64> {
    let path = root
        .join("target/criterion")
        .join(id)
        .join("new/estimates.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("{} (did the bench run?)", path.display()))?;
    let v: Value = serde_json::from_str(&text)?;
    v["median"]["point_estimate"]
        .as_f64()
        .or_else(|| v["mean"]["point_estimate"].as_f64())
        .context("no point estimate")
}

pub(crate) fn human(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// The JSON line a plain bench printed.
fn json_line(stdout: &[u8], bench: &str) -> Result<String> {
    String::from_utf8_lossy(stdout)
        .lines()
        .find(|l| l.starts_with('{'))
        .map(str::to_owned)
        .with_context(|| format!("the {bench} bench printed no figures"))
}

mod peers;

pub(crate) fn bench(with_peers: bool) -> Result<()> {
    let root = workspace_root();
    if with_peers {
        crate::peers()?;
        crate::bench_peers()?;
    }
    // The shared-cache and PostgreSQL benches need the services the tests use.
    let services = crate::services::ensure()?;
    let service_env = || services.env.iter().map(|(k, v)| (*k, v.as_str()));
    let mut read = cargo();
    read.args(["bench", "-p", "quarry", "--bench", "read"]);
    // Criterion's running commentary goes to stderr; stdout is left for the tables.
    read.stdout(std::io::stderr());
    run("bench: reads", read)?;
    let mut memory = cargo();
    memory.args(["bench", "-p", "quarry-cache-lru", "--bench", "memory"]);
    let out = memory.output().context("bench: cache memory")?;
    if !out.status.success() {
        bail!(
            "bench: cache memory failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut scale = cargo();
    scale.args(["bench", "-p", "quarry", "--bench", "scale"]);
    let scale_out = scale.output().context("bench: scale")?;
    if !scale_out.status.success() {
        bail!(
            "bench: scale failed: {}",
            String::from_utf8_lossy(&scale_out.stderr)
        );
    }
    let scale_line = json_line(&scale_out.stdout, "scale")?;
    let memory_line = json_line(&out.stdout, "memory")?;
    let mut stampede = cargo();
    stampede.args(["bench", "-p", "quarry", "--bench", "stampede"]);
    let stampede_out = stampede.output().context("bench: stampede")?;
    if !stampede_out.status.success() {
        bail!(
            "bench: stampede failed: {}",
            String::from_utf8_lossy(&stampede_out.stderr)
        );
    }
    let stampede_line = json_line(&stampede_out.stdout, "stampede")?;
    let mut shared = cargo();
    shared.args(["bench", "-p", "quarry", "--bench", "shared"]);
    shared.envs(service_env());
    let shared_out = shared.output().context("bench: shared cache")?;
    if !shared_out.status.success() {
        bail!(
            "bench: shared cache failed: {}",
            String::from_utf8_lossy(&shared_out.stderr)
        );
    }
    let shared_line = json_line(&shared_out.stdout, "shared")?;
    let mut policy = cargo();
    policy.args([
        "bench",
        "-p",
        "quarry-policy-prolog",
        "--bench",
        "decisions",
    ]);
    let mut audit = cargo();
    audit.args(["bench", "-p", "quarry-store-sqlite", "--bench", "audit"]);
    audit.stdout(std::io::stderr());
    run("bench: audit append", audit)?;
    let mut audit_pg = cargo();
    audit_pg.args(["bench", "-p", "quarry-store-postgres", "--bench", "audit"]);
    audit_pg.stdout(std::io::stderr()).envs(service_env());
    run("bench: audit append on PostgreSQL", audit_pg)?;
    let mut hot = cargo();
    hot.args(["bench", "-p", "quarry", "--bench", "hot"]);
    hot.stdout(std::io::stderr());
    run("bench: decisions, encoding, version look-ups", hot)?;
    let mut tokens = cargo();
    tokens.args(["bench", "-p", "quarry-oauth-resource", "--bench", "verify"]);
    tokens.stdout(std::io::stderr());
    run("bench: bearer token checks", tokens)?;
    let policy_out = policy.output().context("bench: policy")?;
    if !policy_out.status.success() {
        bail!(
            "bench: policy failed: {}",
            String::from_utf8_lossy(&policy_out.stderr)
        );
    }

    println!("### Cached read, in process (median)\n");
    println!("| size | with checksum | without checksum |");
    println!("|---|---|---|");
    for size in SIZES {
        let with = estimate(&root, &format!("cached_read_in_process/checksum/{size}"))?;
        let without = estimate(&root, &format!("cached_read_in_process/no_checksum/{size}"))?;
        println!("| {size} | {} | {} |", human(with), human(without));
    }
    println!("\n### One read over stdio (median; ratio to the direct floor)\n");
    println!(
        "| size | direct to upstream (floor) | Quarry `resources/read`, cached | the same, cache off | Quarry `read_mcp_resource`, cached | the same, audit off | cost of auditing |"
    );
    println!("|---|---|---|---|---|---|---|");
    for size in SIZES {
        let floor = estimate(&root, &format!("read_stdio/direct_floor/{size}"))?;
        let native = estimate(&root, &format!("read_stdio/quarry_resources_read/{size}"))?;
        let uncached = estimate(
            &root,
            &format!("read_stdio/quarry_resources_read_uncached/{size}"),
        )?;
        let tool = estimate(&root, &format!("read_stdio/quarry_read_tool/{size}"))?;
        let unaudited = estimate(
            &root,
            &format!("read_stdio/quarry_read_tool_unaudited/{size}"),
        )?;
        println!(
            "| {size} | {} | {} ({:.2}×) | {} ({:.2}×) | {} ({:.2}×) | {} ({:.2}×) | {:+.0} % |",
            human(floor),
            human(native),
            native / floor,
            human(uncached),
            uncached / floor,
            human(tool),
            tool / floor,
            human(unaudited),
            unaudited / floor,
            (tool / unaudited - 1.0) * 100.0
        );
    }
    println!(
        "\n### An uncached read in process, and its version look-up (median; ratio to the direct floor)\n"
    );
    println!(
        "| size | direct to upstream (floor) | Quarry's use case, cache off | the version look-up alone (three versions) |"
    );
    println!("|---|---|---|---|");
    for size in SIZES {
        let floor = estimate(
            &root,
            &format!("uncached_read_in_process/direct_floor/{size}"),
        )?;
        let quarry = estimate(&root, &format!("uncached_read_in_process/quarry/{size}"))?;
        let lookup = estimate(&root, &format!("versions_unchanged_sighting/{size}"))?;
        println!(
            "| {size} | {} | {} ({:.2}×) | {} |",
            human(floor),
            human(quarry),
            quarry / floor,
            human(lookup),
        );
    }
    let mut summaries = Vec::new();
    for size in SIZES {
        let took = estimate(&root, &format!("versions_summaries/100x{size}"))?;
        summaries.push(format!("{size} {}", human(took)));
    }
    let (page, all) = (
        estimate(&root, "versions_summaries/page_of_100_of_10000x1KiB")?,
        estimate(&root, "versions_summaries/all_of_10000x1KiB")?,
    );
    println!(
        "\nWhat a listing asks of the version store for the resources of its page (`versions/summaries`): 100 resources with one version each, by content size: {}; a page of 100 of a server with 10,000 resources of 1 KiB {}, all 10,000 {}\n",
        summaries.join(", "),
        human(page),
        human(all)
    );
    let invalidation = estimate(&root, "invalidation/resources_updated_to_evicted_http")?;
    let (sqlite, postgres, together) = (
        estimate(&root, "audit_append")?,
        estimate(&root, "audit_append_postgres")?,
        estimate(&root, "audit_append_16_at_once")?,
    );
    println!(
        "\nOne audit record appended, the store alone: SQLite file (`audit/append`) {}, PostgreSQL (`audit/append_postgres`) {} ({:.1}×); sixteen appended at once on SQLite (`audit/append_16_at_once`, committed together) {} for all sixteen, {} a record\n",
        human(sqlite),
        human(postgres),
        postgres / sqlite,
        human(together),
        human(together / 16.0)
    );
    println!("\n### A decision's cost to a cached read, and encoding a read result (median)\n");
    let plain = estimate(&root, "decision/cached_read_without_policy")?;
    let cached = estimate(&root, "decision/cached_read_decision_cached")?;
    let asked = estimate(&root, "decision/cached_read_decision_asked")?;
    println!(
        "| cached read, no policy | with the decision cached | with the decision asked of the worker | encoding the tool's result: 1 KiB | 64 KiB | 1 MiB |"
    );
    println!("|---|---|---|---|---|---|");
    println!(
        "| {} | {} (+{}) | {} (+{}) | {} | {} | {} |",
        human(plain),
        human(cached),
        human(cached - plain),
        human(asked),
        human(asked - plain),
        human(estimate(&root, "encode_read_result/1KiB")?),
        human(estimate(&root, "encode_read_result/64KiB")?),
        human(estimate(&root, "encode_read_result/1MiB")?)
    );
    println!(
        "\nOne 1 MiB answer parsed by the stdio rows' client (`client_parse`): rmcp {} for `resources/read`'s, {} for `read_mcp_resource`'s; the same bytes as a plain `serde_json::Value` {} and {}\n",
        human(estimate(&root, "client_parse/rmcp/read_answer_1MiB")?),
        human(estimate(&root, "client_parse/rmcp/tool_answer_1MiB")?),
        human(estimate(&root, "client_parse/value/read_answer_1MiB")?),
        human(estimate(&root, "client_parse/value/tool_answer_1MiB")?)
    );
    println!("\n### Bearer token checks (median, key set in memory)\n");
    println!(
        "| ES256, first check | EdDSA, first check | ES256, remembered | EdDSA, remembered | expired, refused | other audience, refused |"
    );
    println!("|---|---|---|---|---|---|");
    println!(
        "| {} | {} | {} | {} | {} | {} |",
        human(estimate(&root, "token_es256_first_check")?),
        human(estimate(&root, "token_eddsa_first_check")?),
        human(estimate(&root, "token_es256_remembered")?),
        human(estimate(&root, "token_eddsa_remembered")?),
        human(estimate(&root, "token_expired_refused")?),
        human(estimate(&root, "token_other_audience_refused")?)
    );
    println!("\n### Invalidation (median)\n");
    println!(
        "| from `notifications/resources/updated` sent by the upstream (streamable HTTP, loopback) to the cached entry gone | {} |",
        human(invalidation)
    );
    println!("|---|---|");
    let m: Value = serde_json::from_str(&memory_line)?;
    println!("\n### Cache memory at its budget\n");
    println!("| budget | accounted | entries | inserted | process RSS growth | RSS / budget |");
    println!("|---|---|---|---|---|---|");
    let mib = |k: &str| m[k].as_f64().unwrap_or(0.0) / (1024.0 * 1024.0);
    println!(
        "| {:.0} MiB | {:.1} MiB | {} | {:.0} MiB | {:.1} MiB | {:.2} |",
        mib("budget_bytes"),
        mib("accounted_bytes"),
        m["entries"],
        mib("inserted_bytes"),
        mib("rss_growth_bytes"),
        m["rss_over_budget"].as_f64().unwrap_or(0.0)
    );
    let sc: Value = serde_json::from_str(&scale_line)?;
    println!(
        "\n### Scale: {} stdio servers × {} resources ({} in all)\n",
        sc["servers"], sc["resources_per_server"], sc["total_resources"]
    );
    println!(
        "| first listing (connect, list everything), limit 100 | from cached listings | bypassing them | 200 concurrent reads across the servers | read errors | upstream processes | gateway memory growth |"
    );
    println!("|---|---|---|---|---|---|---|");
    let ms = |k: &str| sc[k].as_f64().unwrap_or(0.0);
    println!(
        "| {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {} | {} | {:.0} MiB |",
        ms("first_listing_ms"),
        ms("cached_listing_ms"),
        ms("uncached_listing_ms"),
        ms("concurrent_reads_ms"),
        sc["read_errors"],
        sc["upstream_processes"],
        ms("gateway_rss_growth_mb")
    );
    println!(
        "\nThe same listing through the policy decorator (the spec's rules in a real worker; the agent may use every server, so every resource is decided):\n"
    );
    println!(
        "| no decision cached | decisions cached | per cached decision | cached, against the listing without policy |"
    );
    println!("|---|---|---|---|");
    let decided = ms("policy_listing_decided_ms");
    println!(
        "| {:.0} ms | {:.0} ms | {:.2} µs | {:.2}× |",
        ms("policy_listing_undecided_ms"),
        decided,
        decided * 1000.0 / sc["total_resources"].as_f64().unwrap_or(1.0).max(1.0),
        decided / ms("cached_listing_ms").max(0.001)
    );
    let st: Value = serde_json::from_str(&stampede_line)?;
    println!(
        "\n### Stampede: {} concurrent reads of {} resources (in process, upstream over HTTP; cold and warm: medians of {} rounds on fresh resources)\n",
        st["reads"], st["resources"], st["rounds"]
    );
    println!("| burst | reads/s | reads that reached the upstream |");
    println!("|---|---|---|");
    for (burst, label) in [
        ("first", "the process's first (cold cache, cold allocator)"),
        ("cold", "cold"),
        ("warm", "warm"),
    ] {
        println!(
            "| {label} | {} | {} |",
            st[format!("{burst}_reads_per_s")],
            st[format!("{burst}_upstream_reads")]
        );
    }
    let sh: Value = serde_json::from_str(&shared_line)?;
    let f = |k: &str| sh[k].as_f64().unwrap_or(0.0);
    println!("\n### Shared cache: Redis against memory (in process, upstream over HTTP)\n");
    println!(
        "| cache | cached read p50 | p99 | reads/s, 16 readers | listing of 100 from cached listings, p50 |"
    );
    println!("|---|---|---|---|---|");
    for (name, label) in [("memory", "in memory"), ("redis", "Redis (loopback)")] {
        println!(
            "| {label} | {:.1} µs | {:.1} µs | {:.0} | {:.0} µs |",
            f(&format!("{name}_p50_us")),
            f(&format!("{name}_p99_us")),
            f(&format!("{name}_reads_per_s")),
            f(&format!("{name}_listing_p50_us"))
        );
    }
    println!(
        "\nInvalidation across two replicas on one Redis (upstream change → the other replica serves the new content): p50 {:.2} ms, max {:.2} ms of 20.",
        f("invalidation_p50_us") / 1000.0,
        f("invalidation_max_us") / 1000.0
    );
    println!("\n### Policy decisions (median, real worker process)\n");
    for line in String::from_utf8_lossy(&policy_out.stdout)
        .lines()
        .filter(|l| l.starts_with('|') || l.is_empty())
    {
        println!("{line}");
    }
    let cpu = Command::new("sh")
        .args(["-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"])
        .output();
    if let Ok(cpu) = cpu {
        println!(
            "\nMachine: {} cores,{}",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            String::from_utf8_lossy(&cpu.stdout).trim_end()
        );
    }
    if with_peers {
        let seen = peers::Seen {
            invalidation_ns: invalidation,
            policy: serde_json::from_str(&json_line(&policy_out.stdout, "policy")?)?,
            stampede: st,
            memory: m,
        };
        peers::bench(&root, &seen)?;
    }
    Ok(())
}
