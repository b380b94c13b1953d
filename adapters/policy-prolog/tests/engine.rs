//! The engine against real worker processes: the spec's rules decide and explain; hostile rules
//! (errors, loops, output, syntax errors, undefined predicates, a crash) deny or are refused,
//! and the engine comes back.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use quarry_domain::{PolicyRequest, Principal, ServerName};
use quarry_policy_prolog::{PrologPolicy, SPEC_RULES, WorkerCommand};
use quarry_ports::PolicyEngine;

fn command() -> WorkerCommand {
    WorkerCommand {
        program: env!("CARGO_BIN_EXE_quarry-policy-worker").into(),
        args: Vec::new(),
        memory_limit: Some(512 * 1024 * 1024),
    }
}

const FACTS: &str = "
has_permission(alice, mcp_access).
mcp_server_assignment(alice, [docs]).
has_permission(root, admin).
has_permission(root, mcp_admin).
has_permission(root, mcp_access).
";

async fn engine(extra: &str) -> PrologPolicy {
    PrologPolicy::start(
        command(),
        format!("{SPEC_RULES}\n{FACTS}\n{extra}"),
        Duration::from_secs(2),
        1000,
    )
    .await
    .unwrap()
}

fn access(agent: &str, server: &str, uri: &str) -> PolicyRequest {
    PolicyRequest::Access {
        agent: Principal::new(agent),
        server: ServerName::parse(server).unwrap(),
        resource: uri.into(),
    }
}

// traces: REQ-071-019, PO-1 — the spec's rules: an agent assigned a server reads it, not another;
// an agent with no facts can do nothing; the explanation names the rule and the facts.
#[tokio::test]
async fn the_spec_rules_decide_and_explain() {
    let policy = engine("").await;
    let yes = policy
        .decide(&access("alice", "docs", "mcp://docs/a"), &[])
        .await
        .unwrap();
    assert!(yes.allowed, "{}", yes.why);
    assert!(
        yes.why.contains("may_access_mcp/3")
            && yes.why.contains("has_permission(alice, mcp_access)"),
        "{}",
        yes.why
    );
    let no = policy
        .decide(&access("alice", "wiki", "mcp://wiki/a"), &[])
        .await
        .unwrap();
    assert!(!no.allowed);
    assert!(no.why.contains("authorized_server"), "{}", no.why);
    let nobody = policy
        .decide(&access("mallory", "docs", "mcp://docs/a"), &[])
        .await
        .unwrap();
    assert!(!nobody.allowed, "{}", nobody.why);
    let admin = policy
        .decide(&access("root", "wiki", "mcp://wiki/a"), &[])
        .await
        .unwrap();
    assert!(admin.allowed, "{}", admin.why);
    let protected = [("protected".to_owned(), "true".to_owned())];
    let locked = policy
        .decide(&access("alice", "docs", "mcp://docs/a"), &protected)
        .await
        .unwrap();
    assert!(!locked.allowed, "{}", locked.why);
}

// traces: PO-3 — quotes, parentheses, dots, `:-` and newlines in an agent id or URI are data:
// the decision is the one for an agent of that name, which has no facts.
#[tokio::test]
async fn po_3_hostile_inputs_cannot_change_a_decision() {
    let policy = engine("").await;
    for agent in [
        "alice') ; true ; ('",
        "alice'), has_permission(x, y",
        "a.\nhas_permission(_, _) :- true.",
        "alice\\",
        "'",
    ] {
        let d = policy
            .decide(&access(agent, "docs", "mcp://docs/a"), &[])
            .await
            .unwrap();
        assert!(!d.allowed, "{agent:?}: {}", d.why);
    }
    let d = policy
        .decide(&access("alice", "docs", "mcp://docs/') :- true. x('"), &[])
        .await
        .unwrap();
    assert!(d.allowed, "the URI is only a resource: {}", d.why);
}

// traces: PO-2 — rules that throw, loop, recurse without end or print to stdout deny within the
// budget (unavailable: E011), and the engine keeps deciding other requests.
#[tokio::test]
async fn po_2_hostile_rules_deny_within_the_budget_and_the_engine_goes_on() {
    let hostile = "
has_permission(thrower, mcp_access) :- throw(boom).
has_permission(looper, mcp_access) :- looping.
looping :- looping.
has_permission(deep, mcp_access) :- deep(0).
deep(N) :- M is N + 1, deep(M), true.
has_permission(printer, mcp_access) :- write(hello), nl, fail.
";
    let policy = engine(hostile).await;
    for agent in ["thrower", "looper", "deep"] {
        let started = std::time::Instant::now();
        let outcome = policy
            .decide(&access(agent, "docs", "mcp://docs/a"), &[])
            .await;
        assert!(outcome.is_err(), "{agent}: {outcome:?}");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{agent} took {:?}",
            started.elapsed()
        );
        let fine = policy
            .decide(&access("alice", "docs", "mcp://docs/a"), &[])
            .await
            .unwrap();
        assert!(fine.allowed, "after {agent}: {}", fine.why);
    }
    let printed = policy
        .decide(&access("printer", "docs", "mcp://docs/a"), &[])
        .await
        .unwrap();
    assert!(!printed.allowed);
}

// traces: PO-6 — a policy that does not parse, or calls a predicate nothing defines, is refused
// when loaded, naming the predicate.
#[tokio::test]
async fn po_6_broken_policies_are_refused_at_load() {
    let undefined = PrologPolicy::check(
        &command(),
        &format!("{SPEC_RULES}\nhas_permission(bob, mcp_access) :- in_office_hours(bob).\n"),
    )
    .await
    .unwrap_err();
    assert!(undefined.contains("in_office_hours/1"), "{undefined}");
    let broken = PrologPolicy::check(&command(), "this is not prolog ((")
        .await
        .unwrap_err();
    assert!(
        broken.contains("does not load") || broken.contains("decide/4"),
        "{broken}"
    );
    // A predicate of arity 0 too (the machine reports every atom a rule calls as defined).
    let undefined = PrologPolicy::check(
        &command(),
        &format!("{SPEC_RULES}\nhas_permission(bob, mcp_access) :- office_open.\n"),
    )
    .await
    .unwrap_err();
    assert!(undefined.contains("office_open/0"), "{undefined}");
    PrologPolicy::check(&command(), &format!("{SPEC_RULES}\n{FACTS}"))
        .await
        .unwrap();
    let defined = engine("office_open.\nhas_permission(carol, mcp_access) :- office_open.\nmcp_server_assignment(carol, [docs]).\n").await;
    let carol = defined
        .decide(&access("carol", "docs", "mcp://docs/a"), &[])
        .await
        .unwrap();
    assert!(carol.allowed, "{}", carol.why);
}

/// The most memory the worker (`pid`) has held, from the kernel's high-water mark.
fn peak_memory(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}

// traces: PO-2 — a rule that allocates without end (a list of 500 million cells, about 8 GB, in
// one built-in call) hits the worker's memory cap: the decision is denied (E011), the worker
// never held more than the cap, and the next decision is answered.
#[tokio::test]
async fn po_2_a_runaway_allocation_hits_the_memory_cap() {
    let cap = 256 * 1024 * 1024;
    let policy = PrologPolicy::start(
        WorkerCommand {
            memory_limit: Some(cap),
            ..command()
        },
        format!(
            "{SPEC_RULES}\n{FACTS}\nhas_permission(hog, mcp_access) :- length(L, 500000000), L = [_|_].\nmcp_server_assignment(hog, [docs]).\n"
        ),
        Duration::from_secs(5),
        1000,
    )
    .await
    .unwrap();
    let worker = policy.worker_id().await.unwrap();
    let hog = policy
        .decide(&access("hog", "docs", "mcp://docs/a"), &[])
        .await;
    assert!(hog.is_err(), "{hog:?}");
    // The cap stopped the allocation, not the budget: the same worker goes on answering.
    let fine = policy
        .decide(&access("alice", "docs", "mcp://docs/a"), &[])
        .await
        .unwrap();
    assert!(fine.allowed, "{}", fine.why);
    assert_eq!(policy.worker_id().await, Some(worker));
    let peak = peak_memory(worker);
    assert!(
        peak <= cap,
        "the worker held {peak} bytes, over its cap of {cap}"
    );
}

// Workers are recycled every few decisions; the replacement loads while the old one answers,
// so every decision across the recycling is answered.
#[tokio::test]
async fn workers_are_recycled_without_a_missed_decision() {
    let policy = PrologPolicy::start(
        command(),
        format!("{SPEC_RULES}\n{FACTS}"),
        Duration::from_secs(2),
        5,
    )
    .await
    .unwrap();
    let mut workers = std::collections::BTreeSet::new();
    for _ in 0..200 {
        let d = policy
            .decide(&access("alice", "docs", "mcp://docs/a"), &[])
            .await
            .unwrap();
        assert!(d.allowed);
        workers.extend(policy.worker_id().await);
        if workers.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(workers.len() >= 3, "workers seen: {workers:?}");
}

// A worker that does not answer within the budget is killed and replaced: that decision is
// unavailable, the next one is answered by a new worker.
#[tokio::test]
async fn a_worker_past_its_budget_is_replaced() {
    let policy = PrologPolicy::start(
        command(),
        format!("{SPEC_RULES}\n{FACTS}\nhas_permission(slow, mcp_access) :- deep(0).\ndeep(N) :- M is N + 1, deep(M), true.\n"),
        Duration::from_millis(20),
        1000,
    )
    .await
    .unwrap();
    let slow = policy
        .decide(&access("slow", "docs", "mcp://docs/a"), &[])
        .await;
    assert!(slow.unwrap_err().0.contains("no answer within"));
    let mut answered = None;
    for _ in 0..50 {
        match policy
            .decide(&access("alice", "docs", "mcp://docs/a"), &[])
            .await
        {
            Ok(d) => {
                answered = Some(d);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    assert!(answered.expect("a new worker answers").allowed);
}

mod hostile_inputs {
    //! PO-3 as a property: agent ids and URIs drawn from an alphabet of Prolog syntax (quotes,
    //! parentheses, dots, `:-`, operators, newlines, backslashes) are data. Each decision equals
    //! a reference evaluation of the spec's rules over the same facts, made here without Prolog.

    use std::collections::BTreeSet;

    use proptest::prelude::*;
    use quarry_domain::AgentFacts;

    use super::*;

    fn hostile_name() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![
                Just("a"),
                Just("'"),
                Just("\""),
                Just("("),
                Just(")"),
                Just("."),
                Just(":-"),
                Just(","),
                Just(";"),
                Just("\\"),
                Just("\n"),
                Just(" "),
                Just("|"),
                Just("[]"),
                Just("_X"),
                Just("halt"),
                Just("%"),
                Just("é"),
            ],
            1..8,
        )
        .prop_map(|parts| parts.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(12))]

        #[test]
        fn po_3_decisions_match_a_reference_whatever_the_characters(
            agents in proptest::collection::btree_set(hostile_name(), 1..5),
            granted in proptest::collection::vec(any::<bool>(), 5),
            assigned in proptest::collection::vec(any::<bool>(), 5),
            uri_tail in hostile_name(),
        ) {
            let agents: Vec<String> = agents.into_iter().collect();
            let facts: Vec<AgentFacts> = agents
                .iter()
                .enumerate()
                .map(|(i, a)| AgentFacts {
                    agent: a.clone(),
                    permissions: if granted[i] { vec!["mcp_access".into()] } else { vec![] },
                    servers: if assigned[i] { vec![ServerName::parse("docs").unwrap()] } else { vec![] },
                    ..AgentFacts::default()
                })
                .collect();
            let expected: BTreeSet<String> = agents
                .iter()
                .enumerate()
                .filter(|(i, _)| granted[*i] && assigned[*i])
                .map(|(_, a)| a.clone())
                .collect();
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let policy = PrologPolicy::start(
                    command(),
                    quarry_policy_prolog::program(None, &[], &facts, &[]),
                    Duration::from_secs(5),
                    1000,
                )
                .await
                .unwrap();
                let uri = format!("mcp://docs/{uri_tail}");
                let mut asked = Vec::new();
                for a in &agents {
                    asked.push((access(a, "docs", &uri), vec![]));
                    // The same agent with a hostile suffix is another agent, with no facts.
                    asked.push((access(&format!("{a}').has_permission(_, _"), "docs", &uri), vec![]));
                }
                let got = policy.allowed(&asked).await.unwrap();
                for (i, a) in agents.iter().enumerate() {
                    assert_eq!(got[2 * i], Some(expected.contains(a)), "{a:?} reading {uri:?}");
                    assert_eq!(got[2 * i + 1], Some(false), "{a:?} with a suffix");
                }
            });
        }
    }
}
