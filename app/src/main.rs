//! The `quarry` binary: parse, run, map errors to exit codes.

use clap::Parser;
use quarry::{
    cli::{Cli, run},
    config::Settings,
    failure::Failure,
};
use tracing_subscriber::EnvFilter;

fn main() {
    let cli = Cli::parse();
    // A policy worker speaks JSON lines on stdio and logs nothing: its own loop, no runtime.
    if matches!(cli.command, quarry::cli::Command::PolicyWorker) {
        if let Err(e) = quarry::compose::policy_worker() {
            eprintln!("quarry policy-worker: {e}");
            std::process::exit(1);
        }
        return;
    }
    let env = |k: &str| std::env::var(k).ok();
    // The fixture and the demo bring their own upstreams; they read no configuration.
    let settings = if cli.command.is_self_contained() {
        Ok(Settings::defaults())
    } else {
        Settings::load(cli.config.as_deref(), &env)
    };
    let serving = cli.command.is_serving();
    let default_filter = match (&settings, serving) {
        (Ok(s), true) => s.log_level.clone(),
        _ => "warn".to_owned(),
    };
    // Logs go to stderr only: on stdio, stdout belongs to MCP.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(capped(
            EnvFilter::try_new(cli.log.as_deref().unwrap_or(&default_filter))
                .unwrap_or_else(|_| EnvFilter::new("warn")),
        ))
        .init();
    let settings = match settings {
        Ok(s) => s,
        Err(e) => {
            eprintln!("quarry: {e}");
            std::process::exit(e.code().exit_code());
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("quarry: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    let outcome: Result<(), Failure> = runtime.block_on(run(cli, settings));
    // Children are stopped by now; do not wait on stray blocking tasks (stdin readers).
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    if let Err(failure) = outcome {
        // `quarry list | head` closing the pipe early is not a failure.
        if let Failure::Io(e) = &failure
            && e.kind() == std::io::ErrorKind::BrokenPipe
        {
            std::process::exit(0);
        }
        eprintln!("quarry: {failure}");
        std::process::exit(failure.exit_code());
    }
}

/// The libraries that log whole messages (requests with their arguments, answers with their
/// content, headers) below `info` are held at `info` whatever the filter asks: credentials and
/// resource content never reach the log.
fn capped(mut filter: EnvFilter) -> EnvFilter {
    for target in ["rmcp", "hyper", "hyper_util", "reqwest", "h2", "sqlx"] {
        if let Ok(directive) = format!("{target}=info").parse() {
            filter = filter.add_directive(directive);
        }
    }
    filter
}
