//! Quarry's policy engine: scryer-prolog running the rules under `policy/`, in a worker
//! process the gateway supervises ([`PrologPolicy`]), never in the gateway itself — scryer can
//! abort its process, grow without bound and print to stdout (see the worker module).
//!
//! Architecture invariant: every value that enters a query is a quoted atom (`terms.rs`); a
//! query's text is never built from unquoted input.

mod engine;
mod reload;
mod terms;
mod worker;

pub use engine::{PrologPolicy, WorkerCommand};
pub use reload::ReloadablePolicy;
pub use worker::run_worker;

/// Decisions a worker makes before a fresh one replaces it. A machine keeps every atom it has
/// seen, and interning a new one costs more the more it holds (measured: about 2 µs more per
/// decision for every 1,000 new URIs), so a worker deciding fresh URIs slows down as it ages;
/// a replacement loads in about 75 ms in the background. 10,000 keeps a decision on fresh URIs
/// near 30 µs (BENCHMARKS.md, "Policy decisions").
pub const RECYCLE_AFTER: u32 = 10_000;

/// The spec's rules as shipped (`policy/rules.pl`): the program every policy starts from.
pub const SPEC_RULES: &str = include_str!("../../../policy/rules.pl");

/// The program the engine loads: `rules` (the spec's when None), then each facts text, then the
/// configured agents and the registry flags that are set (`registry_allows`) as facts, every
/// value a quoted atom.
pub fn program(
    rules: Option<&str>,
    facts: &[String],
    agents: &[quarry_domain::AgentFacts],
    registry_allows: &[String],
) -> String {
    use terms::atom;
    let mut program = rules.unwrap_or(SPEC_RULES).to_owned();
    for text in facts {
        program.push('\n');
        program.push_str(text);
    }
    program.push('\n');
    for allowed in registry_allows {
        program.push_str(&format!("registry_allows({}).\n", atom(allowed)));
    }
    for a in agents {
        let who = atom(&a.agent);
        for p in &a.permissions {
            program.push_str(&format!("has_permission({who}, {}).\n", atom(p)));
        }
        if !a.servers.is_empty() {
            let servers: Vec<String> = a.servers.iter().map(|s| atom(s.as_str())).collect();
            program.push_str(&format!(
                "mcp_server_assignment({who}, [{}]).\n",
                servers.join(", ")
            ));
        }
        if let Some(level) = &a.level {
            program.push_str(&format!("agent_access_level({who}, {}).\n", atom(level)));
        }
        for uri in &a.tenant_resources {
            program.push_str(&format!(
                "resource_belongs_to_tenant({who}, {}).\n",
                atom(uri)
            ));
        }
    }
    program
}
