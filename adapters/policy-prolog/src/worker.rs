//! The worker process (`quarry policy-worker`): one scryer-prolog machine, fed JSON lines on
//! stdin, answering JSON lines on stdout, each prefixed with a marker the gateway chose
//! (`QUARRY_POLICY_MARKER`), so that anything else the machine prints is told apart and ignored.
//!
//! Whatever happens in here — a panic, an abort, an allocation that never ends, output — ends
//! or pollutes only this process; the gateway restarts it.

use std::io::{BufRead, Write};

use scryer_prolog::{LeafAnswer, Machine, MachineBuilder, Term};
use serde::{Deserialize, Serialize};

use crate::terms::{atom, show};

/// The environment variable that carries the marker of protocol lines.
pub(crate) const MARKER_ENV: &str = "QUARRY_POLICY_MARKER";
/// The environment variable that carries the cap on the worker's data segment, in bytes.
pub(crate) const MEMORY_ENV: &str = "QUARRY_POLICY_MEMORY";

/// Caps this process's data segment (heap and anonymous mappings) at what the gateway asked:
/// past it an allocation fails and the process ends, before the machine runs out of memory.
fn limit_memory() -> Result<(), String> {
    let Some(asked) = std::env::var_os(MEMORY_ENV) else {
        return Ok(());
    };
    let bytes: u64 = asked
        .to_str()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("{MEMORY_ENV} is not a number of bytes"))?;
    #[cfg(unix)]
    {
        use rustix::process::{Resource, Rlimit, setrlimit};
        let limit = Rlimit {
            current: Some(bytes),
            maximum: Some(bytes),
        };
        setrlimit(Resource::Data, limit)
            .map_err(|e| format!("cannot cap the worker's memory at {bytes} bytes: {e}"))
    }
    #[cfg(not(unix))]
    {
        Err(format!(
            "cannot cap the worker's memory at {bytes} bytes on this platform"
        ))
    }
}

/// A request as its terms, with its context's key-value pairs.
pub(crate) type Asked = (Vec<String>, Vec<(String, String)>);

/// What the gateway asks.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Ask {
    /// Consult the rules and facts (once, first).
    Load { program: String },
    /// Decide a request, with its explanation.
    Decide {
        request: Vec<String>,
        context: Vec<(String, String)>,
    },
    /// Decide many requests, without explanations.
    DecideMany { requests: Vec<Asked> },
}

/// What the worker answers.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub(crate) enum Answer {
    /// The program is loaded and sound.
    Loaded,
    /// The program cannot be used.
    Refused { why: String },
    /// A decision: `allow`, `deny` or `error`, and why.
    Decided { decision: String, why: String },
    /// Decisions, in the order asked.
    DecidedMany { decisions: Vec<String> },
}

/// A request as a term: `Kind(Args...)`, every argument a quoted atom.
fn request_term(request: &[String]) -> Option<String> {
    let (kind, args) = request.split_first()?;
    if !matches!(
        kind.as_str(),
        "access" | "list" | "protected" | "configure" | "register"
    ) {
        return None;
    }
    let args: Vec<String> = args.iter().map(|a| atom(a)).collect();
    Some(format!("{kind}({})", args.join(", ")))
}

/// A context as a list term: `['Key'-'Value', ...]`.
fn context_term(context: &[(String, String)]) -> String {
    let pairs: Vec<String> = context
        .iter()
        .map(|(k, v)| format!("{}-{}", atom(k), atom(v)))
        .collect();
    format!("[{}]", pairs.join(", "))
}

/// The query for a request: `decide(Context, Kind(Args...), D, W).`, every value a quoted atom.
pub(crate) fn query(request: &[String], context: &[(String, String)]) -> Option<String> {
    Some(format!(
        "decide({}, {}, D, W).",
        context_term(context),
        request_term(request)?
    ))
}

/// The query for many requests: `allowed([Context-Request, ...], Ds).`.
fn many_query(requests: &[Asked]) -> Option<String> {
    let pairs: Option<Vec<String>> = requests
        .iter()
        .map(|(r, c)| Some(format!("{}-{}", context_term(c), request_term(r)?)))
        .collect();
    Some(format!("allowed([{}], Ds).", pairs?.join(", ")))
}

/// The first answer of `query` on `machine`: its bindings, or why there are none.
fn first(
    machine: &mut Machine,
    query: &str,
) -> Result<Option<std::collections::BTreeMap<String, Term>>, String> {
    match machine.run_query(query.to_owned()).next() {
        Some(Ok(LeafAnswer::LeafAnswer { bindings, .. })) => Ok(Some(bindings)),
        Some(Ok(LeafAnswer::True)) => Ok(Some(Default::default())),
        Some(Ok(LeafAnswer::False)) | None => Ok(None),
        Some(Ok(LeafAnswer::Exception(e))) | Some(Err(e)) => Err(show(&e)),
    }
}

/// Loads `program` into a fresh machine and checks it: `decide/4` answers, and no rule calls a
/// predicate that nothing defines.
fn load(program: &str) -> Result<Machine, String> {
    let mut machine = MachineBuilder::default().build();
    machine.consult_module_string("user", program.to_owned());
    let defined = first(&mut machine, "current_predicate(decide/4).")
        .map_err(|e| format!("the policy does not load ({e}): check its syntax"))?;
    if defined.is_none() {
        return Err(
            "the policy defines no decide/4 (does it include policy/rules.pl, and does it parse?)"
                .into(),
        );
    }
    if let Some(undefined) = first(&mut machine, "undefined_call(P).")? {
        let name = undefined.get("P").map(show).unwrap_or_default();
        return Err(format!(
            "a rule calls {name}, which no rule or fact defines"
        ));
    }
    if let Some(name) = undefined_atom(&mut machine, program)? {
        return Err(format!(
            "a rule calls {name}/0, which no rule or fact defines"
        ));
    }
    // A decision must come back whatever the facts: a policy that throws or loops here is broken.
    match first(
        &mut machine,
        &query(&["configure".into(), "nobody".into()], &[]).unwrap_or_default(),
    )? {
        Some(b) if matches!(b.get("D"), Some(Term::Atom(d)) if d == "allow" || d == "deny") => {
            Ok(machine)
        }
        Some(b) => Err(format!(
            "decide/4 does not decide: {}",
            b.get("W").map(show).unwrap_or_default()
        )),
        None => Err("decide/4 fails instead of deciding".into()),
    }
}

/// The first predicate of arity 0 that a rule calls and nothing defines. The machine cannot
/// say which atoms are defined, so each one called is called once, in a throw-away machine
/// (whatever it does there is lost with it).
fn undefined_atom(machine: &mut Machine, program: &str) -> Result<Option<String>, String> {
    let names = match first(machine, "findall(N, unsure_call(N), Ns), sort(Ns, S).")? {
        Some(b) => match b.get("S") {
            Some(Term::List(names)) => names.clone(),
            _ => Vec::new(),
        },
        None => Vec::new(),
    };
    if names.is_empty() {
        return Ok(None);
    }
    let mut scratch = MachineBuilder::default().build();
    scratch.consult_module_string("user", program.to_owned());
    for name in names {
        let Term::Atom(name) = name else { continue };
        if first(&mut scratch, &format!("undefined_atom({}).", atom(&name)))?.is_some() {
            return Ok(Some(name));
        }
    }
    Ok(None)
}

/// Runs the worker over stdin and stdout until stdin ends.
///
/// # Errors
/// When stdout cannot be written (the gateway is gone).
pub fn run_worker() -> std::io::Result<()> {
    let marker = std::env::var(MARKER_ENV).unwrap_or_default();
    // A worker that cannot be capped refuses to load a policy (the gateway denies).
    let capped = limit_memory();
    let stdin = std::io::stdin();
    let mut machine: Option<Machine> = None;
    for line in stdin.lock().lines() {
        let line = line?;
        let answer = match serde_json::from_str::<Ask>(&line) {
            Err(e) => Answer::Refused {
                why: format!("not a request: {e}"),
            },
            Ok(Ask::Load { .. }) if capped.is_err() => Answer::Refused {
                why: capped.clone().err().unwrap_or_default(),
            },
            Ok(Ask::Load { program }) => match load(&program) {
                Ok(m) => {
                    machine = Some(m);
                    Answer::Loaded
                }
                Err(why) => Answer::Refused { why },
            },
            Ok(Ask::Decide { request, context }) => decide(machine.as_mut(), &request, &context),
            Ok(Ask::DecideMany { requests }) => decide_many(machine.as_mut(), &requests),
        };
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "{marker} {}",
            serde_json::to_string(&answer).unwrap_or_default()
        )?;
        out.flush()?;
    }
    Ok(())
}

fn decide(
    machine: Option<&mut Machine>,
    request: &[String],
    context: &[(String, String)],
) -> Answer {
    let error = |why: String| Answer::Decided {
        decision: "error".into(),
        why,
    };
    let Some(machine) = machine else {
        return error("no policy is loaded".into());
    };
    let Some(query) = query(request, context) else {
        return error("not a request the policy answers".into());
    };
    match first(machine, &query) {
        Ok(Some(b)) => match (b.get("D"), b.get("W")) {
            (Some(Term::Atom(d)), why) if matches!(d.as_str(), "allow" | "deny" | "error") => {
                Answer::Decided {
                    decision: d.clone(),
                    why: why.map(show).unwrap_or_default(),
                }
            }
            _ => error("decide/4 answered no decision".into()),
        },
        Ok(None) => error("decide/4 failed".into()),
        Err(e) => error(e),
    }
}

fn decide_many(machine: Option<&mut Machine>, requests: &[Asked]) -> Answer {
    let all_error = |n: usize| Answer::DecidedMany {
        decisions: vec!["error".into(); n],
    };
    let (Some(machine), Some(query)) = (machine, many_query(requests)) else {
        return all_error(requests.len());
    };
    match first(machine, &query) {
        Ok(Some(b)) => match b.get("Ds") {
            Some(Term::List(ds)) if ds.len() == requests.len() => Answer::DecidedMany {
                decisions: ds
                    .iter()
                    .map(|d| match d {
                        Term::Atom(a) if a == "allow" || a == "deny" => a.clone(),
                        _ => "error".into(),
                    })
                    .collect(),
            },
            _ => all_error(requests.len()),
        },
        _ => all_error(requests.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_is_built_from_quoted_atoms_only() {
        let q = query(
            &[
                "access".into(),
                "a').\nhalt.".into(),
                "docs".into(),
                "mcp://docs/x".into(),
            ],
            &[("transport".into(), "stdio".into())],
        )
        .unwrap();
        assert_eq!(
            q,
            "decide(['transport'-'stdio'], access('a\\').\\xa\\halt.', 'docs', 'mcp://docs/x'), D, W)."
        );
        assert!(query(&["halt".into()], &[]).is_none());
    }
}
