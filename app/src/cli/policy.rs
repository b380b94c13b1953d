//! `quarry policy check | test | lint`: the access policy for its authors, without Rust.
//! `check` decides one request and says why; `test` runs the golden cases (TOML files of facts,
//! requests and expected decisions; `--update` records the explanations); `lint` loads a policy
//! in a throw-away worker and says whether the gateway would accept it.

use std::{io::Write, path::PathBuf};

use clap::{Args, Subcommand};
use quarry_domain::{Error, PolicyRequest, Principal, ServerName};
use serde::Deserialize;

use crate::{compose, config::Settings, failure::Failure, render};

/// `quarry policy` options.
#[derive(Debug, Args)]
pub struct PolicyArgs {
    #[command(subcommand)]
    pub action: PolicyAction,
    /// Print JSON.
    #[arg(long, global = true)]
    pub json: bool,
}

/// `quarry policy check | test | lint`.
#[derive(Debug, Subcommand)]
pub enum PolicyAction {
    /// Decide one request with the configured policy and print the rule and facts behind it.
    ///
    /// With --resource: may the agent read it (may_access_mcp on the server its URI names, and
    /// may_read_protected_resource too with --protected, as the gateway asks)? With --server
    /// alone: may it list the server? With --register: may it add or remove servers
    /// (may_change_registry; `command`: register a program to run)? With none of them: may it
    /// configure credentials and the cache (may_configure_mcp)?
    Check {
        /// The agent (as the transport identifies it).
        #[arg(long)]
        agent: String,
        /// The server.
        #[arg(long)]
        server: Option<String>,
        /// The gateway URI of a resource of that server.
        #[arg(long)]
        resource: Option<String>,
        /// The resource is declared protected.
        #[arg(long)]
        protected: bool,
        /// Ask about the registry tools: `url` (a server over HTTP, or a removal) or `command`.
        #[arg(long, value_parser = ["url", "command"], conflicts_with_all = ["server", "resource"])]
        register: Option<String>,
    },
    /// Run the golden cases (every *.toml in DIR, default policy/tests) against the policy.
    Test {
        /// The folder of cases.
        #[arg(default_value = "policy/tests")]
        dir: PathBuf,
        /// Record each case's explanation as it is now (review the diff).
        #[arg(long)]
        update: bool,
    },
    /// Load the configured policy (or these files, rules first) in a throw-away worker and say
    /// whether the gateway would accept it.
    Lint {
        /// Policy files, the rules first; default: the configured policy.
        files: Vec<PathBuf>,
    },
}

/// One file of golden cases.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    /// Facts for every case of the file, after the policy's own.
    #[serde(default)]
    facts: String,
    #[serde(rename = "case", default)]
    cases: Vec<Case>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    agent: String,
    server: Option<String>,
    resource: Option<String>,
    #[serde(default)]
    protected: bool,
    /// `url` or `command`: a registry change (`register`).
    register: Option<String>,
    /// More of the request's context (client_address, transport...).
    #[serde(default)]
    context: std::collections::BTreeMap<String, String>,
    /// allow or deny.
    expect: String,
    /// The explanation, as `--update` recorded it.
    why: Option<String>,
}

/// What the gateway asks for these flags: reading a resource is `access` (and `protected` too
/// when it is declared protected), on the server its gateway URI names unless one is given;
/// a server alone is `list`; `register` is a registry change; none of them is `configure`.
fn requests(
    agent: &str,
    server: Option<&str>,
    resource: Option<&str>,
    protected: bool,
    register: Option<&str>,
) -> Result<Vec<PolicyRequest>, Error> {
    let agent = Principal::new(agent);
    if let Some(kind) = register {
        if server.is_some() || resource.is_some() || !matches!(kind, "url" | "command") {
            return Err(Error::invalid(
                "register is url or command, and takes no server or resource",
            ));
        }
        let command = kind == "command";
        return Ok(vec![PolicyRequest::Register { agent, command }]);
    }
    let server = match (server, resource) {
        (Some(s), _) => Some(ServerName::parse(s)?),
        (None, Some(uri)) => {
            let named = uri
                .strip_prefix("mcp://")
                .and_then(|rest| rest.split('/').next())
                .ok_or_else(|| {
                    Error::invalid(
                        "--resource must be a gateway URI, mcp://SERVER/..., as quarry list shows it",
                    )
                })?;
            Some(ServerName::parse(named)?)
        }
        (None, None) => None,
    };
    Ok(match (server, resource) {
        (Some(server), Some(resource)) => {
            let mut asked = vec![PolicyRequest::Access {
                agent: agent.clone(),
                server,
                resource: resource.to_owned(),
            }];
            if protected {
                asked.push(PolicyRequest::Protected {
                    agent,
                    resource: resource.to_owned(),
                });
            }
            asked
        }
        (Some(server), None) => vec![PolicyRequest::List { agent, server }],
        (None, _) => vec![PolicyRequest::Configure { agent }],
    })
}

/// The rule each request asks.
fn rule(request: &PolicyRequest) -> &'static str {
    match request {
        PolicyRequest::Access { .. } => "may_access_mcp",
        PolicyRequest::List { .. } => "may_list_resources",
        PolicyRequest::Protected { .. } => "may_read_protected_resource",
        PolicyRequest::Configure { .. } => "may_configure_mcp",
        PolicyRequest::Register { .. } => "may_change_registry",
    }
}

/// Decides `asked` as the gateway would (allowed only when every request is) and explains each.
async fn decide_all(
    engine: &std::sync::Arc<dyn quarry_ports::PolicyEngine>,
    asked: &[PolicyRequest],
    context: &[(String, String)],
) -> Result<(&'static str, String), Error> {
    let mut allowed = true;
    let mut why = Vec::with_capacity(asked.len());
    for request in asked {
        let d = engine
            .decide(request, context)
            .await
            .map_err(|e| Error::new(quarry_domain::ErrorCode::E011, e.to_string()))?;
        allowed &= d.allowed;
        let verdict = if d.allowed { "allow" } else { "deny" };
        why.push(format!("{}: {verdict}: {}", rule(request), d.why));
    }
    Ok((if allowed { "allow" } else { "deny" }, why.join("\n")))
}

fn policy_of(settings: &Settings) -> crate::config::PolicySettings {
    settings
        .policy
        .clone()
        .unwrap_or_else(crate::config::PolicySettings::spec_rules)
}

/// Runs one `quarry policy` command.
pub(super) async fn run(settings: &Settings, args: PolicyArgs) -> Result<(), Failure> {
    let policy = policy_of(settings);
    let mut out = std::io::stdout().lock();
    match args.action {
        PolicyAction::Check {
            agent,
            server,
            resource,
            protected,
            register,
        } => {
            let asked = requests(
                &agent,
                server.as_deref(),
                resource.as_deref(),
                protected,
                register.as_deref(),
            )?;
            let engine =
                compose::policy_engine(&policy, compose::policy_program(&policy, &[])?).await?;
            let context = [
                ("transport".to_owned(), "stdio".to_owned()),
                ("protected".to_owned(), protected.to_string()),
            ];
            let (verdict, why) = decide_all(&engine, &asked, &context).await?;
            if args.json {
                render::json(
                    &mut out,
                    &serde_json::json!({"decision": verdict, "why": why}),
                )?;
            } else {
                writeln!(out, "{verdict}\n{why}")?;
            }
        }
        PolicyAction::Test { dir, update } => {
            let (passed, failed) = golden(&policy, &dir, update).await?;
            if args.json {
                render::json(
                    &mut out,
                    &serde_json::json!({"passed": passed, "failed": failed}),
                )?;
            } else {
                for f in &failed {
                    writeln!(out, "FAIL {f}")?;
                }
                writeln!(out, "{} case(s) passed, {} failed", passed, failed.len())?;
            }
            if !failed.is_empty() {
                return Err(
                    Error::invalid(format!("{} golden case(s) failed", failed.len())).into(),
                );
            }
        }
        PolicyAction::Lint { files } => {
            let program = if files.is_empty() {
                compose::policy_program(&policy, &[])?
            } else {
                let mut text = String::new();
                for f in &files {
                    text.push_str(&std::fs::read_to_string(f).map_err(|e| {
                        Error::invalid(format!("cannot read {}: {e}", f.display()))
                    })?);
                    text.push('\n');
                }
                text
            };
            compose::lint_policy(&policy, &program).await?;
            if args.json {
                render::json(&mut out, &serde_json::json!({"valid": true}))?;
            } else {
                writeln!(out, "the policy loads and decides")?;
            }
        }
    }
    Ok(())
}

/// A case's decision and explanation.
async fn decide(
    engine: &std::sync::Arc<dyn quarry_ports::PolicyEngine>,
    case: &Case,
) -> Result<(&'static str, String), Error> {
    let asked = requests(
        &case.agent,
        case.server.as_deref(),
        case.resource.as_deref(),
        case.protected,
        case.register.as_deref(),
    )?;
    let mut context = vec![("protected".to_owned(), case.protected.to_string())];
    context.extend(case.context.iter().map(|(k, v)| (k.clone(), v.clone())));
    decide_all(engine, &asked, &context).await
}

/// Writes each case's explanation into its `why`, leaving the rest of the file (comments,
/// layout) as it was.
fn record(
    path: &std::path::Path,
    text: &str,
    explanations: &[Option<String>],
) -> Result<(), Error> {
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e| Error::invalid(format!("{}: {e}", path.display())))?;
    if let Some(cases) = doc
        .get_mut("case")
        .and_then(toml_edit::Item::as_array_of_tables_mut)
    {
        for (case, why) in cases.iter_mut().zip(explanations) {
            if let Some(why) = why {
                case["why"] = toml_edit::value(why.as_str());
            }
        }
    }
    std::fs::write(path, doc.to_string())
        .map_err(|e| Error::invalid(format!("cannot write {}: {e}", path.display())))
}

/// Runs every case file in `dir`; with `update`, rewrites the explanations. Returns how many
/// cases passed and a line for each that failed.
async fn golden(
    policy: &crate::config::PolicySettings,
    dir: &std::path::Path,
    update: bool,
) -> Result<(usize, Vec<String>), Error> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::invalid(format!("cannot read {}: {e}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    let (mut passed, mut failed) = (0, Vec::new());
    for path in files {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::invalid(format!("cannot read {}: {e}", path.display())))?;
        let file: CaseFile = toml::from_str(&text).map_err(|e| {
            Error::invalid(format!("{}: {}", path.display(), e.to_string().trim_end()))
        })?;
        let engine = compose::policy_engine(
            policy,
            compose::policy_program(policy, std::slice::from_ref(&file.facts))?,
        )
        .await
        .map_err(|e| Error::invalid(format!("{}: {}", path.display(), e.message())))?;
        let mut explanations = Vec::with_capacity(file.cases.len());
        for case in &file.cases {
            let label = format!("{} :: {}", path.display(), case.name);
            let outcome = decide(&engine, case).await;
            let why = match outcome {
                Err(e) => {
                    failed.push(format!("{label}: {}", e.message()));
                    None
                }
                Ok((verdict, why)) if verdict != case.expect => {
                    failed.push(format!(
                        "{label}: expected {}, got {verdict} ({why})",
                        case.expect
                    ));
                    Some(why)
                }
                Ok((_, why)) if !update && case.why.as_ref().is_some_and(|w| *w != why) => {
                    failed.push(format!(
                        "{label}: the explanation changed to {why} (run with --update to accept it)"
                    ));
                    Some(why)
                }
                Ok((_, why)) => {
                    passed += 1;
                    Some(why)
                }
            };
            explanations.push(why);
        }
        if update {
            record(&path, &text, &explanations)?;
        }
    }
    Ok((passed, failed))
}
