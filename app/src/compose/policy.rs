//! The composition root's policy side: the Prolog engine in worker processes (this program,
//! `quarry policy-worker`), the program it loads, and the governed gateway with its policy
//! reloaded when the files change.

use std::sync::Arc;

use quarry_domain::{Error, ErrorCode};
use quarry_ports::{Clock, Metrics, PolicyEngine};

use crate::config::{PolicySettings, Settings};

/// Decisions a policy worker makes before a fresh one replaces it.
const POLICY_RECYCLE_AFTER: u32 = quarry_policy_prolog::RECYCLE_AFTER;

/// The policy worker's loop (`quarry policy-worker`): JSON lines on stdin and stdout.
///
/// # Errors
/// When stdout cannot be written.
pub fn policy_worker() -> std::io::Result<()> {
    quarry_policy_prolog::run_worker()
}

/// How the gateway starts policy workers: this program, `policy-worker`.
fn worker_command(policy: &PolicySettings) -> Result<quarry_policy_prolog::WorkerCommand, Error> {
    let program = std::env::current_exe().map_err(|e| {
        Error::new(
            ErrorCode::E011,
            format!("cannot find the quarry program to run the policy worker: {e}"),
        )
    })?;
    Ok(quarry_policy_prolog::WorkerCommand {
        program,
        args: vec!["policy-worker".into()],
        memory_limit: Some(policy.worker_memory),
    })
}

/// The program a policy's engine loads: its rules (the spec's unless a file is named), its
/// facts files, the configured agents; `extra_facts` after them (a golden case's facts).
///
/// # Errors
/// E001 when a file cannot be read.
pub fn policy_program(policy: &PolicySettings, extra_facts: &[String]) -> Result<String, Error> {
    let (rules, mut facts) = policy.texts()?;
    facts.extend_from_slice(extra_facts);
    Ok(quarry_policy_prolog::program(
        rules.as_deref(),
        &facts,
        &policy.agents,
        &policy.registry_allows,
    ))
}

/// The policy engine for `program`, its first worker started and the policy checked.
///
/// # Errors
/// E001 saying why the policy cannot be used (it does not parse, calls an undefined predicate,
/// does not decide); E011 when no worker can start.
pub async fn policy_engine(
    policy: &PolicySettings,
    program: String,
) -> Result<Arc<dyn quarry_ports::PolicyEngine>, Error> {
    let engine = quarry_policy_prolog::PrologPolicy::start(
        worker_command(policy)?,
        program,
        policy.budget,
        POLICY_RECYCLE_AFTER,
    )
    .await
    .map_err(|why| Error::invalid(format!("the policy cannot be used: {why}")))?;
    Ok(Arc::new(engine))
}

/// Checks `program` in a throw-away worker.
///
/// # Errors
/// As [`policy_engine`].
pub async fn lint_policy(policy: &PolicySettings, program: &str) -> Result<(), Error> {
    quarry_policy_prolog::PrologPolicy::check(&worker_command(policy)?, program)
        .await
        .map_err(|why| Error::invalid(format!("the policy cannot be used: {why}")))
}

/// The engine deciding for the configured policy, timed into `metrics`, its files watched for
/// changes; none without a `[policy]` (said on stderr: a personal gateway's agents may do
/// everything).
pub(super) async fn engine(
    settings: &Settings,
    metrics: &Arc<dyn Metrics>,
    clock: Arc<dyn Clock>,
) -> Result<Option<Arc<dyn PolicyEngine>>, Error> {
    let Some(policy) = &settings.policy else {
        eprintln!(
            "quarry: no [policy] is configured: agents may list, read and change everything (a personal gateway)"
        );
        return Ok(None);
    };
    let reloadable = Arc::new(
        quarry_policy_prolog::ReloadablePolicy::start(
            worker_command(policy)?,
            policy_program(policy, &[])?,
            policy.budget,
            POLICY_RECYCLE_AFTER,
        )
        .await
        .map_err(|why| Error::invalid(format!("the policy cannot be used: {why}")))?,
    );
    watch_policy(policy.clone(), reloadable.clone());
    tracing::info!("access is decided by the configured policy");
    Ok(Some(Arc::new(quarry_usecases::MeteredPolicy::new(
        reloadable,
        metrics.clone(),
        clock,
    ))))
}

/// How often the policy's files are looked at for changes.
const POLICY_WATCH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Reloads the policy when one of its files changes: the new one is checked and started before
/// it replaces the old; one that does not load is refused and the old one keeps deciding.
fn watch_policy(policy: PolicySettings, engine: Arc<quarry_policy_prolog::ReloadablePolicy>) {
    let files: Vec<std::path::PathBuf> =
        policy.rules.iter().chain(&policy.facts).cloned().collect();
    if files.is_empty() {
        return;
    }
    let stamps = move || -> Vec<Option<std::time::SystemTime>> {
        files
            .iter()
            .map(|f| std::fs::metadata(f).and_then(|m| m.modified()).ok())
            .collect()
    };
    tokio::spawn(async move {
        let mut seen = stamps();
        loop {
            tokio::time::sleep(POLICY_WATCH_INTERVAL).await;
            let now = stamps();
            if now == seen {
                continue;
            }
            seen = now;
            let outcome = match policy_program(&policy, &[]) {
                Ok(program) => engine.reload(program).await.map_err(|why| why.to_string()),
                Err(e) => Err(e.message().to_owned()),
            };
            match outcome {
                Ok(version) => tracing::info!(version, "policy reloaded: its files changed"),
                Err(why) => tracing::error!(
                    "the changed policy is refused, the previous one keeps deciding: {why}"
                ),
            }
        }
    });
}
