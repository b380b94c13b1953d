//! Policy decision latency against a real worker process (release build): one decision per
//! round trip, decisions in batches of 1,000 (how listings ask), and an explained decision (how
//! `quarry policy check` asks). Prints a Markdown table for BENCHMARKS.md, then a JSON line.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use quarry_domain::{AgentFacts, PolicyRequest, Principal, ServerName};
use quarry_policy_prolog::{PrologPolicy, WorkerCommand, program};
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
    let command = WorkerCommand {
        program: env!("CARGO_BIN_EXE_quarry-policy-worker").into(),
        args: Vec::new(),
    };
    let started = Instant::now();
    let policy = PrologPolicy::start(
        command,
        program(None, &[], &agents),
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
        "{{\"cold_ns\":{},\"single_ns\":{},\"batched_ns\":{},\"explained_ns\":{}}}",
        cold.as_nanos(),
        single.as_nanos(),
        batched.as_nanos(),
        explained.as_nanos()
    );
}
