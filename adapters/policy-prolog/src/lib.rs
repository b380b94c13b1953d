//! Quarry's policy engine: scryer-prolog running the rules under `policy/`, in a worker
//! process the gateway supervises ([`PrologPolicy`]), never in the gateway itself — scryer can
//! abort its process, grow without bound and print to stdout (see the worker module).
//!
//! Architecture invariant: every value that enters a query is a quoted atom (`terms.rs`); a
//! query's text is never built from unquoted input.

mod engine;
mod terms;
mod worker;

pub use engine::{PrologPolicy, WorkerCommand};
pub use worker::run_worker;

/// The spec's rules as shipped (`policy/rules.pl`): the program every policy starts from.
pub const SPEC_RULES: &str = include_str!("../../../policy/rules.pl");
