//! The `quarry` binary: parse, run, map errors to exit codes.

use clap::Parser;
use quarry::config::LogFormat;
use quarry::{
    cli::{Cli, run},
    config::Settings,
    failure::Failure,
};
use tracing_subscriber::{
    EnvFilter, Layer, fmt::writer::BoxMakeWriter, layer::SubscriberExt, util::SubscriberInitExt,
};

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
    let filter_text = cli.log.clone().unwrap_or(default_filter);
    let filter = capped(
        EnvFilter::try_new(&filter_text).unwrap_or_else(|_| EnvFilter::new("warn")),
        &filter_text,
    );
    let (format, file) = match &settings {
        Ok(s) if serving => (s.log_format, s.log_file.clone()),
        _ => (LogFormat::Pretty, None),
    };
    // Logs go to stderr or a file, never stdout: on stdio, stdout belongs to MCP.
    let writer = match file {
        None => BoxMakeWriter::new(std::io::stderr),
        Some(path) => match open_log(&path) {
            Ok(f) => BoxMakeWriter::new(std::sync::Mutex::new(f)),
            Err(e) => {
                eprintln!(
                    "quarry: E001: logging.file: cannot open {} for appending: {e}",
                    path.display()
                );
                std::process::exit(quarry_domain::ErrorCode::E001.exit_code());
            }
        },
    };
    // Spans exported over OTLP when `[telemetry]` asks (only `quarry serve` exports).
    let export = match &settings {
        Ok(s) if serving => match quarry::compose::trace_export(s) {
            Ok(export) => export,
            Err(e) => {
                eprintln!("quarry: {e}");
                std::process::exit(e.code().exit_code());
            }
        },
        _ => None,
    };
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(quarry::logsafe::Escaped(writer))
        .with_ansi(false);
    let logs = match format {
        LogFormat::Json => logs.json().boxed(),
        LogFormat::Pretty => logs.boxed(),
    };
    tracing_subscriber::registry()
        .with(export.as_ref().map(|e| e.layer()))
        .with(logs)
        .with(filter)
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
    if let Some(export) = &export {
        export.shutdown();
    }
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

/// The log file, appended to; its folder is created if need be (as the store's is).
fn open_log(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

/// The libraries that log whole messages (requests with their arguments, answers with their
/// content, headers, peers' descriptions) are held at `warn`, or at `info` where the filter
/// (`text`) names them, whatever it asks: credentials and resource content never reach the log,
/// and their chatter does not drown Quarry's own.
fn capped(mut filter: EnvFilter, text: &str) -> EnvFilter {
    for target in ["rmcp", "hyper", "hyper_util", "reqwest", "h2", "sqlx"] {
        let asked = text
            .split(',')
            .filter_map(|d| d.trim().split_once('='))
            .find(|(t, _)| *t == target)
            .map(|(_, level)| level.trim().to_ascii_lowercase());
        let level = match asked.as_deref() {
            None => "warn",
            Some("debug" | "trace") => "info",
            Some(_) => continue,
        };
        if let Ok(directive) = format!("{target}={level}").parse() {
            filter = filter.add_directive(directive);
        }
    }
    filter
}
