//! `cargo xtask bench --peers`: runs `app/benches/peers.rs` (Quarry beside the direct upstream,
//! mcp-proxy and supergateway), prints its tables with the ratios, checks the spec's bars and the
//! peer targets against them and the rest of the run, and writes it all into BENCHMARKS.md
//! between its `peers:start` and `peers:end` markers.

use std::{fmt::Write as _, path::Path, process::Command};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::{human, json_line};
use crate::cargo;

const START: &str = "<!-- peers:start (written by `cargo xtask bench --peers`) -->";
const END: &str = "<!-- peers:end -->";

/// Figures of the same run that the bars need.
pub(crate) struct Seen {
    pub invalidation_ns: f64,
    pub policy: Value,
    pub stampede: Value,
    pub memory: Value,
}

pub(crate) fn bench(root: &Path, seen: &Seen) -> Result<()> {
    let mut bench = cargo();
    bench.args(["bench", "-p", "quarry", "--bench", "peers"]);
    bench.stderr(std::process::Stdio::inherit());
    eprintln!("==> bench: peers (a few minutes)");
    let out = bench.output().context("bench: peers")?;
    if !out.status.success() {
        bail!("bench: peers failed (its output is above)");
    }
    let figures: Value = serde_json::from_str(&json_line(&out.stdout, "peers")?)?;
    let page = render(&figures, seen)?;
    print!("{page}");
    let path = root.join("BENCHMARKS.md");
    let text = std::fs::read_to_string(&path)?;
    let (Some(a), Some(b)) = (text.find(START), text.find(END)) else {
        bail!("BENCHMARKS.md has lost its markers ({START} … {END})");
    };
    let updated = format!("{}{START}\n{page}{}", &text[..a], &text[b..]);
    std::fs::write(&path, updated)?;
    eprintln!("==> bench: the peer tables are in {}", path.display());
    Ok(())
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(f64::NAN)
}

fn us(micros: f64) -> String {
    human(micros * 1e3)
}

/// The rows of `group`, in the order the bench gave them.
fn group<'a>(rows: &'a [Value], name: &str) -> Vec<&'a Value> {
    rows.iter().filter(|r| r["group"] == name).collect()
}

fn p50(rows: &[Value], group_name: &str, target: &str) -> f64 {
    group(rows, group_name)
        .iter()
        .find(|r| r["target"].as_str().is_some_and(|t| t.starts_with(target)))
        .map_or(f64::NAN, |r| f(r, "p50_us"))
}

fn render(figures: &Value, seen: &Seen) -> Result<String> {
    let rows = figures["rows"].as_array().context("no rows")?;
    let mut out = String::new();
    let commit = Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_default();
    let v = &figures["versions"];
    writeln!(
        out,
        "\nMade by `cargo xtask bench --peers` on {} at commit {commit}: {} cores ({cpu}), Node {}, server-everything {}, mcp-proxy {}, supergateway {}. Each row is {} rounds ({} for the concurrent clients' rows), interleaved across the targets; p50 and p99 are over all of a row's samples, and the rounds' own medians show the spread. The bench took {} s.\n",
        chrono_date(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        v["node"].as_str().unwrap_or("?"),
        v["server-everything"].as_str().unwrap_or("?"),
        v["mcp-proxy"].as_str().unwrap_or("?"),
        v["supergateway"].as_str().unwrap_or("?"),
        figures["rounds"],
        figures["concurrent_rounds"],
        figures["seconds"],
    )?;
    bars(&mut out, rows, figures, seen)?;
    let mut order: Vec<&str> = Vec::new();
    for r in rows {
        let g = r["group"].as_str().unwrap_or("");
        if !order.contains(&g) {
            order.push(g);
        }
    }
    for name in order {
        table(&mut out, rows, name)?;
    }
    Ok(out)
}

fn table(out: &mut String, rows: &[Value], name: &str) -> Result<()> {
    let members = group(rows, name);
    let direct = members
        .iter()
        .find(|r| r["kind"] == "direct")
        .map(|r| f(r, "p50_us"));
    let best_peer = members
        .iter()
        .filter(|r| r["kind"] == "peer")
        .map(|r| f(r, "p50_us"))
        .fold(f64::INFINITY, f64::min);
    let throughput = members.iter().any(|r| r.get("reads_per_s").is_some());
    writeln!(out, "\n#### {name}\n")?;
    writeln!(
        out,
        "| target | p50 | p99 | p50 ÷ direct | p50 ÷ best peer |{} rounds' medians | errors |",
        if throughput { " reads/s |" } else { "" }
    )?;
    writeln!(
        out,
        "|---|---|---|---|---|{}---|---|",
        if throughput { "---|" } else { "" }
    )?;
    for r in members {
        let p = f(r, "p50_us");
        let ratio = |base: Option<f64>| match base {
            Some(b) if b.is_finite() && b > 0.0 && r["kind"] != "direct" => {
                format!("{:.2}×", p / b)
            }
            _ => "—".to_owned(),
        };
        let rounds: Vec<String> = r["round_p50_us"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).map(us).collect())
            .unwrap_or_default();
        let samples = r["samples"].as_u64().unwrap_or(0);
        let (p50_text, p99_text) = if samples == 0 {
            ("none".to_owned(), "none".to_owned())
        } else {
            (us(p), us(f(r, "p99_us")))
        };
        writeln!(
            out,
            "| {} | {p50_text} | {p99_text} | {} | {} |{} {} | {} |",
            r["target"].as_str().unwrap_or(""),
            ratio(direct),
            if r["kind"] == "peer" {
                "—".to_owned()
            } else {
                ratio(Some(best_peer))
            },
            if throughput {
                format!(" {} |", r["reads_per_s"])
            } else {
                String::new()
            },
            rounds.join(" · "),
            r["errors"],
        )?;
    }
    Ok(())
}

/// The spec's bars and the targets, each with its number and whether it holds.
fn bars(out: &mut String, rows: &[Value], figures: &Value, seen: &Seen) -> Result<()> {
    let mut lines: Vec<(String, String, bool)> = Vec::new();
    let mut add = |text: &str, measured: String, met: bool| {
        lines.push((text.to_owned(), measured, met));
    };
    let list = p50(
        rows,
        "list 100 resources (server-everything, every page), HTTP",
        "Quarry",
    );
    add("list of 100 resources < 500 ms", us(list), list < 500_000.0);
    let g1m = group(rows, "read 1 MiB, HTTP");
    let cached_p99 = g1m
        .iter()
        .find(|r| r["target"] == "Quarry `resources/read`, cached")
        .map_or(f64::NAN, |r| f(r, "p99_us"));
    add(
        "cached read < 200 ms (1 MiB, HTTP, p99)",
        us(cached_p99),
        cached_p99 < 200_000.0,
    );
    let sessions = &figures["burst"]["sessions"];
    let stateless = &figures["burst"]["stateless"];
    let errors = |b: &Value| b["errors"].as_u64().unwrap_or(u64::MAX);
    add(
        "100+ concurrent reads",
        format!(
            "{} clients at once, {} errors (sessions), {} errors (stateless)",
            sessions["clients"],
            errors(sessions),
            errors(stateless)
        ),
        errors(sessions) == 0
            && errors(stateless) == 0
            && sessions["clients"].as_u64().unwrap_or(0) >= 100,
    );
    let rss = f(&seen.memory, "rss_growth_bytes") / 1048576.0;
    add(
        "cache < 100 MB (a 100 MiB budget filled with 200 MiB)",
        format!("{rss:.1} MiB resident growth"),
        rss < 100.0 * 1.048_576,
    );
    let decision = f(&seen.policy, "single_ns");
    add(
        "policy decision < 50 ms (uncached, one round trip)",
        human(decision),
        decision < 50e6,
    );
    add(
        "invalidation < 100 ms",
        human(seen.invalidation_ns),
        seen.invalidation_ns < 100e6,
    );
    let hit = p50(rows, "read 1 KiB, HTTP", "Quarry `resources/read`, cached");
    let proxy = p50(rows, "read 1 KiB, HTTP", "mcp-proxy");
    let sg = p50(rows, "read 1 KiB, HTTP", "supergateway");
    let direct = p50(rows, "read 1 KiB, HTTP", "direct");
    add(
        "cached 1 KiB over HTTP ≥ 3× faster (p50) than mcp-proxy and supergateway",
        format!("{:.2}× and {:.2}× faster", proxy / hit, sg / hit),
        proxy / hit >= 3.0 && sg / hit >= 3.0,
    );
    add(
        "cached 1 KiB over HTTP faster than the direct read",
        format!("{} against {}", us(hit), us(direct)),
        hit < direct,
    );
    let g = "read 1 KiB, HTTP, 2026-07-28 (no session)";
    let (hit, direct) = (
        p50(rows, g, "Quarry `resources/read`, cached"),
        p50(rows, g, "direct"),
    );
    add(
        "the same, 2026-07-28 (no session; no peer speaks it)",
        format!("{} against {}", us(hit), us(direct)),
        hit < direct,
    );
    for transport in ["HTTP", "stdio"] {
        let g = format!("read 1 KiB, {transport}");
        let off = p50(rows, &g, "Quarry `resources/read`, cache off");
        let d = p50(rows, &g, "direct");
        add(
            &format!("uncached 1 KiB over {transport} within 10 % or 100 µs of the direct read"),
            format!(
                "{} against {} ({:+.0} %)",
                us(off),
                us(d),
                (off / d - 1.0) * 100.0
            ),
            off <= d * 1.1 || off - d <= 100.0,
        );
    }
    for (era, b) in [
        ("2025-11-25 sessions", sessions),
        ("2026-07-28 stateless", stateless),
    ] {
        let budget = f(b, "cache_budget_mb");
        let peak = f(b, "rss_peak_mb");
        add(
            &format!(
                "10,000 concurrent reads ({era}): no errors, resident memory ≤ cache budget + 50 MB"
            ),
            format!(
                "{} errors, peak {peak:.0} MiB with a {budget:.0} MiB budget ({:.0} MiB with the cache filled, before the clients, {:.0} MiB of it mapped from files: the program's code and its libraries'); p50 {}, p99 {}, all done in {:.1} s",
                errors(b),
                f(b, "rss_cache_filled_mb"),
                f(b, "rss_files_cache_filled_mb"),
                us(f(b, "p50_us")),
                us(f(b, "p99_us")),
                f(b, "wall_ms") / 1000.0
            ),
            errors(b) == 0 && peak <= budget + 50.0 * 0.953_674,
        );
    }
    let tool = p50(rows, "read 1 MiB, stdio", "Quarry `read_mcp_resource`");
    let floor = p50(rows, "read 1 MiB, stdio", "direct");
    add(
        "`read_mcp_resource` at 1 MiB within 2× the direct floor (stdio)",
        format!("{:.2}×", tool / floor),
        tool <= 2.0 * floor,
    );
    let (cold, warm) = (
        f(&seen.stampede, "cold_reads_per_s"),
        f(&seen.stampede, "warm_reads_per_s"),
    );
    add(
        "a cold burst within 2× of a warm one (10,000 reads of 100 resources not read before; medians of 5 rounds)",
        format!("{:.2}× ({cold:.0} against {warm:.0} reads/s)", warm / cold),
        warm / cold <= 2.0,
    );
    writeln!(out, "| bar or target | measured | holds |")?;
    writeln!(out, "|---|---|---|")?;
    for (text, measured, met) in &lines {
        writeln!(
            out,
            "| {text} | {measured} | {} |",
            if *met { "yes" } else { "**no**" }
        )?;
    }
    Ok(())
}

fn chrono_date() -> String {
    Command::new("date")
        .arg("+%Y-%m-%d")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
