//! The gateway's side: [`PrologPolicy`] starts worker processes, loads the policy into them,
//! and asks them for decisions, each within a wall-clock budget. A worker that dies, hangs or
//! answers nonsense is killed and replaced (with backoff); until one answers, every decision is
//! refused as unavailable (the gateway denies). Workers are recycled after a number of
//! decisions, since a machine's memory grows with every query: the replacement loads in the
//! background while the old one keeps answering, so no decision waits for a load. Each worker's
//! data segment is capped (`setrlimit`), so a rule that allocates without end kills only its
//! worker.

use std::{
    ffi::OsString,
    path::PathBuf,
    process::Stdio,
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use async_trait::async_trait;
use quarry_domain::{Decision, PolicyRequest, sanitize_label};
use quarry_ports::{EngineHealth, PolicyEngine, PolicyUnavailable};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines},
    process::{Child, ChildStdin, ChildStdout, Command},
};

use crate::worker::{Answer, Ask, MARKER_ENV, MEMORY_ENV};

/// Requests asked of a worker in one exchange.
const BATCH: usize = 500;

/// How long loading a policy may take.
const LOAD_BUDGET: Duration = Duration::from_secs(10);
/// The longest wait before trying a new worker after failures.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How to run a worker: the program and its arguments (`quarry policy-worker`), and the most
/// memory it may allocate.
#[derive(Debug, Clone)]
pub struct WorkerCommand {
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// The cap on the worker's data segment (heap and anonymous mappings), in bytes; an
    /// allocation past it ends the worker (the decision is unavailable: denied).
    pub memory_limit: Option<u64>,
}

#[derive(Debug)]
struct Worker {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    marker: String,
    decisions: u32,
}

#[derive(Debug, Default)]
struct State {
    worker: Option<Worker>,
    /// The worker that replaces `worker` once loaded (started when `worker` is due for recycling).
    spare: Option<tokio::task::JoinHandle<Result<Worker, String>>>,
    failures: u32,
    retry_at: Option<Instant>,
}

/// The policy engine: the loaded policy, in supervised worker processes.
#[derive(Debug)]
pub struct PrologPolicy {
    command: WorkerCommand,
    program: String,
    budget: Duration,
    recycle_after: u32,
    state: tokio::sync::Mutex<State>,
    /// Workers killed after failing.
    restarts: AtomicU64,
    /// Workers replaced after their share of decisions.
    recycled: AtomicU64,
}

fn marker() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    format!("QUARRY-POLICY-{:016x}", h.finish())
}

impl Worker {
    async fn spawn(command: &WorkerCommand) -> Result<Self, String> {
        let marker = marker();
        let mut run = Command::new(&command.program);
        run.args(&command.args).env_clear().env(MARKER_ENV, &marker);
        if let Some(bytes) = command.memory_limit {
            run.env(MEMORY_ENV, bytes.to_string());
        }
        let mut child = run
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start the policy worker: {e}"))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("the policy worker has no pipes".into());
        };
        Ok(Self {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            marker,
            decisions: 0,
        })
    }

    /// Sends `ask` and reads its answer, skipping anything else the worker printed.
    async fn ask(&mut self, ask: &Ask, budget: Duration) -> Result<Answer, String> {
        let mut line = serde_json::to_string(ask).map_err(|e| e.to_string())?;
        line.push('\n');
        let exchange = async {
            self.stdin
                .write_all(line.as_bytes())
                .await
                .map_err(|e| format!("the policy worker is gone: {e}"))?;
            self.stdin.flush().await.map_err(|e| e.to_string())?;
            loop {
                let Some(out) = self.lines.next_line().await.map_err(|e| e.to_string())? else {
                    return Err("the policy worker exited".to_owned());
                };
                match out.strip_prefix(&self.marker) {
                    Some(json) => {
                        return serde_json::from_str(json.trim_start())
                            .map_err(|e| format!("the policy worker answered nonsense: {e}"));
                    }
                    None => tracing::debug!(
                        "policy worker printed: {}",
                        sanitize_label(&out.chars().take(200).collect::<String>())
                    ),
                }
            }
        };
        tokio::time::timeout(budget, exchange)
            .await
            .map_err(|_| format!("no answer within {} ms", budget.as_millis()))?
    }

    async fn load(command: &WorkerCommand, program: &str) -> Result<Self, String> {
        let mut worker = Self::spawn(command).await?;
        let ask = Ask::Load {
            program: program.to_owned(),
        };
        match worker.ask(&ask, LOAD_BUDGET).await {
            Ok(Answer::Loaded) => Ok(worker),
            Ok(Answer::Refused { why }) => Err(why),
            Ok(other) => Err(format!("unexpected answer to loading: {other:?}")),
            Err(why) => {
                let _ = worker.child.start_kill();
                Err(format!("the policy could not be loaded: {why}"))
            }
        }
    }
}

impl PrologPolicy {
    /// Starts a worker with `program` (the rules and the facts) loaded and checked.
    ///
    /// # Errors
    /// Why the policy cannot be used: it does not parse, a rule calls a predicate nothing
    /// defines, `decide/4` does not decide, or the worker cannot start.
    pub async fn start(
        command: WorkerCommand,
        program: String,
        budget: Duration,
        recycle_after: u32,
    ) -> Result<Self, String> {
        let worker = Worker::load(&command, &program).await?;
        Ok(Self {
            command,
            program,
            budget,
            recycle_after: recycle_after.max(1),
            state: tokio::sync::Mutex::new(State {
                worker: Some(worker),
                ..State::default()
            }),
            restarts: AtomicU64::new(0),
            recycled: AtomicU64::new(0),
        })
    }

    /// Checks `program` in a throw-away worker.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub async fn check(command: &WorkerCommand, program: &str) -> Result<(), String> {
        Worker::load(command, program).await.map(drop)
    }

    /// A worker ready to decide, started if need be.
    async fn ready<'a>(&self, state: &'a mut State) -> Result<&'a mut Worker, String> {
        self.recycle(state).await;
        if state.worker.is_none() {
            if let Some(at) = state.retry_at
                && Instant::now() < at
            {
                return Err("the policy worker failed; the next one starts shortly".into());
            }
            match Worker::load(&self.command, &self.program).await {
                Ok(w) => {
                    state.worker = Some(w);
                    state.failures = 0;
                    state.retry_at = None;
                }
                Err(why) => {
                    state.failures += 1;
                    let backoff = Duration::from_millis(100)
                        .saturating_mul(1 << state.failures.min(6))
                        .min(MAX_BACKOFF);
                    state.retry_at = Some(Instant::now() + backoff);
                    return Err(why);
                }
            }
        }
        state
            .worker
            .as_mut()
            .ok_or_else(|| "no policy worker".to_owned())
    }
}

impl PrologPolicy {
    /// Replaces a worker past `recycle_after` decisions: a spare loads in the background and
    /// takes over once ready; at twice the count the old one waits no longer for it.
    async fn recycle(&self, state: &mut State) {
        let Some(decisions) = state.worker.as_ref().map(|w| w.decisions) else {
            return;
        };
        if decisions < self.recycle_after {
            return;
        }
        if state.spare.is_none() {
            let (command, program) = (self.command.clone(), self.program.clone());
            state.spare = Some(tokio::spawn(async move {
                Worker::load(&command, &program).await
            }));
        }
        let overdue = decisions >= self.recycle_after.saturating_mul(2);
        if !overdue && !state.spare.as_ref().is_some_and(|h| h.is_finished()) {
            return;
        }
        let Some(spare) = state.spare.take() else {
            return;
        };
        match spare.await {
            Ok(Ok(fresh)) => {
                if let Some(mut old) = state.worker.replace(fresh) {
                    let _ = old.child.start_kill();
                }
                self.recycled.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Err(why)) => {
                tracing::warn!("the policy worker's replacement did not load: {why}");
                if overdue {
                    state.worker = None;
                }
            }
            Err(e) => {
                tracing::warn!("the policy worker's replacement failed: {e}");
                if overdue {
                    state.worker = None;
                }
            }
        }
    }

    /// The process id of the worker answering now, if one is running (to watch its memory).
    pub async fn worker_id(&self) -> Option<u32> {
        self.state
            .lock()
            .await
            .worker
            .as_ref()
            .and_then(|w| w.child.id())
    }
}

impl PrologPolicy {
    /// One exchange with the worker, which is replaced if it fails.
    async fn exchange(
        &self,
        ask: &Ask,
        decisions: u32,
        budget: Duration,
    ) -> Result<Answer, PolicyUnavailable> {
        let mut state = self.state.lock().await;
        let worker = self.ready(&mut state).await.map_err(PolicyUnavailable)?;
        worker.decisions = worker.decisions.saturating_add(decisions);
        match worker.ask(ask, budget).await {
            Ok(answer) => Ok(answer),
            Err(why) => {
                // Hung, dead or confused: this worker is done.
                if let Some(mut w) = state.worker.take() {
                    let _ = w.child.start_kill();
                    self.restarts.fetch_add(1, Ordering::Relaxed);
                }
                tracing::warn!("policy worker replaced: {why}");
                Err(PolicyUnavailable(why))
            }
        }
    }
}

impl PrologPolicy {
    /// Workers killed after failing, and workers recycled, since start.
    pub(crate) fn replacements(&self) -> (u64, u64) {
        (
            self.restarts.load(Ordering::Relaxed),
            self.recycled.load(Ordering::Relaxed),
        )
    }
}

#[async_trait]
impl PolicyEngine for PrologPolicy {
    async fn health(&self) -> EngineHealth {
        // An empty batch: one exchange with the worker (started if none runs), no rule run.
        let ask = Ask::DecideMany {
            requests: Vec::new(),
        };
        let answer = self.exchange(&ask, 0, self.budget).await;
        let (restarts, recycled) = self.replacements();
        let detail = match answer {
            Ok(Answer::DecidedMany { .. }) => None,
            Ok(other) => Some(format!("unexpected answer: {other:?}")),
            Err(PolicyUnavailable(why)) => Some(why),
        };
        EngineHealth {
            ready: detail.is_none(),
            detail,
            restarts,
            recycled,
        }
    }

    async fn allowed(
        &self,
        requests: &[(PolicyRequest, Vec<(String, String)>)],
    ) -> Result<Vec<Option<bool>>, PolicyUnavailable> {
        let mut all = Vec::with_capacity(requests.len());
        for chunk in requests.chunks(BATCH) {
            let ask = Ask::DecideMany {
                requests: chunk.iter().map(|(r, c)| (r.terms(), c.clone())).collect(),
            };
            let budget = self
                .budget
                .saturating_mul(u32::try_from(1 + chunk.len() / 50).unwrap_or(u32::MAX));
            match self
                .exchange(&ask, u32::try_from(chunk.len()).unwrap_or(u32::MAX), budget)
                .await?
            {
                Answer::DecidedMany { decisions } if decisions.len() == chunk.len() => {
                    all.extend(decisions.iter().map(|d| match d.as_str() {
                        "allow" => Some(true),
                        "deny" => Some(false),
                        _ => None,
                    }));
                }
                other => {
                    return Err(PolicyUnavailable(format!("unexpected answer: {other:?}")));
                }
            }
        }
        Ok(all)
    }

    async fn decide(
        &self,
        request: &PolicyRequest,
        context: &[(String, String)],
    ) -> Result<Decision, PolicyUnavailable> {
        let ask = Ask::Decide {
            request: request.terms(),
            context: context.to_vec(),
        };
        match self.exchange(&ask, 1, self.budget).await {
            Ok(Answer::Decided { decision, why }) if decision == "allow" || decision == "deny" => {
                Ok(Decision {
                    allowed: decision == "allow",
                    why,
                })
            }
            Ok(Answer::Decided { why, .. }) => Err(PolicyUnavailable(format!(
                "the rules raised an error: {}",
                sanitize_label(&why)
            ))),
            Ok(other) => Err(PolicyUnavailable(format!("unexpected answer: {other:?}"))),
            Err(e) => Err(e),
        }
    }
}
