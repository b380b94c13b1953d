//! Policy decision latency against a real worker process (release build): one decision per
//! round trip, decisions in batches of 1,000 (how listings ask), and an explained decision (how
//! `quarry policy check` asks); then the worker's memory and speed over 1,000,000 decisions,
//! recycled as the gateway recycles it (every 10,000), and over 300,000 never recycled. Prints Markdown tables for
//! BENCHMARKS.md, then a JSON line. `QUARRY_POLICY_QUICK=1` makes both runs 100,000.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use quarry_domain::{AgentFacts, PolicyRequest, Principal, ServerName};
use quarry_policy_prolog::{PrologPolicy, RECYCLE_AFTER, WorkerCommand, program};
use quarry_ports::PolicyEngine;

fn request(n: usize) -> (PolicyRequest, Vec<(String, String)>) {
    (
        PolicyRequest::Access {
            agent: Principal::new("alice"),
            server: ServerName::parse("docs").unwrap(),
            resource: format!("mcp://docs/file_3A///{n}.txt"),
        },
        vec![
            ("transport".into(), "stdio".into()),
            ("protected".into(), "false".into()),
        ],
    )
}

/// Resident memory of process `pid`, in bytes (Linux).
fn rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/statm"))
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0)
        * 4096
}

/// What one memory run saw: resident MiB at the first sample, the largest and the last; and the
/// mean time per decision over the first and the last 100,000.
struct MemoryRun {
    mib: (f64, f64, f64),
    first: Duration,
    last: Duration,
}

/// Decides `total` requests in batches of 1,000 with workers recycled after `recycle_after`;
/// the workers' resident memory sampled every 20 batches.
async fn memory_over(
    command: &WorkerCommand,
    program: &str,
    total: usize,
    recycle_after: u32,
) -> MemoryRun {
    let policy = PrologPolicy::start(
        command.clone(),
        program.to_owned(),
        Duration::from_secs(30),
        recycle_after,
    )
    .await
    .unwrap();
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let mut samples = Vec::new();
    let mut blocks = Vec::new();
    let mut block = Instant::now();
    for round in 0..total / 1_000 {
        let batch: Vec<_> = (round * 1_000..(round + 1) * 1_000).map(request).collect();
        let got = policy.allowed(&batch).await.unwrap();
        assert!(got.iter().all(|d| *d == Some(true)));
        if round % 20 == 0
            && let Some(pid) = policy.worker_id().await
        {
            samples.push(mib(rss(pid)));
        }
        if (round + 1) % 100 == 0 {
            blocks.push(block.elapsed() / 100_000);
            block = Instant::now();
        }
    }
    let largest = samples.iter().copied().fold(0.0, f64::max);
    MemoryRun {
        mib: (samples[0], largest, *samples.last().unwrap()),
        first: blocks[0],
        last: *blocks.last().unwrap(),
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn human(d: Duration) -> String {
    let ns = d.as_nanos() as f64;
    if ns < 1_000.0 {
        format!("{ns:.0} ns")
    } else if ns < 1_000_000.0 {
        format!("{:.1} µs", ns / 1_000.0)
    } else {
        format!("{:.2} ms", ns / 1_000_000.0)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let agents = [AgentFacts {
        agent: "alice".into(),
        permissions: vec!["mcp_access".into()],
        servers: vec![ServerName::parse("docs").unwrap()],
        ..AgentFacts::default()
    }];
    let quick = std::env::var_os("QUARRY_POLICY_QUICK").is_some();
    let command = WorkerCommand {
        program: env!("CARGO_BIN_EXE_quarry-policy-worker").into(),
        args: Vec::new(),
        memory_limit: Some(512 * 1024 * 1024),
    };
    let started = Instant::now();
    let policy = PrologPolicy::start(
        command.clone(),
        program(None, &[], &agents, &[]),
        Duration::from_secs(30),
        u32::MAX,
    )
    .await
    .unwrap();
    let cold = started.elapsed();

    for n in 0..200 {
        policy.allowed(&[request(n)]).await.unwrap();
    }
    let mut single = Vec::new();
    for n in 0..2_000 {
        let t = Instant::now();
        let got = policy.allowed(&[request(n)]).await.unwrap();
        single.push(t.elapsed());
        assert_eq!(got, [Some(true)]);
    }
    let batch: Vec<_> = (0..1_000).map(request).collect();
    let mut batched = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        policy.allowed(&batch).await.unwrap();
        batched.push(t.elapsed() / 1_000);
    }
    let mut explained = Vec::new();
    for n in 0..500 {
        let (r, c) = request(n);
        let t = Instant::now();
        policy.decide(&r, &c).await.unwrap();
        explained.push(t.elapsed());
    }
    let (single, batched, explained) = (median(single), median(batched), median(explained));
    drop(policy);
    let total = if quick { 100_000 } else { 1_000_000 };
    // Never recycled, a worker slows down as it ages (every URI stays in its atom table, and
    // interning costs more the more it holds): 300,000 show it.
    let kept_total = if quick { 100_000 } else { 300_000 };
    let text = program(None, &[], &agents, &[]);
    let recycled = memory_over(&command, &text, total, RECYCLE_AFTER).await;
    let kept = memory_over(&command, &text, kept_total, u32::MAX).await;
    println!(
        "| worker start and policy load | one decision per round trip | per decision, batches of 1,000 | one explained decision |"
    );
    println!("|---|---|---|---|");
    println!(
        "| {} | {} | {} | {} |",
        human(cold),
        human(single),
        human(batched),
        human(explained)
    );
    println!(
        "\n| worker | decisions | resident MiB: first | largest | last | per decision: first 100,000 | last 100,000 |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (label, n, run) in [
        (
            "recycled every 10,000 (as the gateway does)",
            total,
            &recycled,
        ),
        ("never recycled", kept_total, &kept),
    ] {
        println!(
            "| {label} | {n} | {:.1} | {:.1} | {:.1} | {} | {} |",
            run.mib.0,
            run.mib.1,
            run.mib.2,
            human(run.first),
            human(run.last)
        );
    }
    println!(
        "{{\"cold_ns\":{},\"single_ns\":{},\"batched_ns\":{},\"explained_ns\":{},\"decisions\":{total},\"recycled_mib\":[{:.1},{:.1},{:.1}],\"kept_mib\":[{:.1},{:.1},{:.1}],\"recycled_last_ns\":{},\"kept_last_ns\":{}}}",
        cold.as_nanos(),
        single.as_nanos(),
        batched.as_nanos(),
        explained.as_nanos(),
        recycled.mib.0,
        recycled.mib.1,
        recycled.mib.2,
        kept.mib.0,
        kept.mib.1,
        kept.mib.2,
        recycled.last.as_nanos(),
        kept.last.as_nanos()
    );
}
