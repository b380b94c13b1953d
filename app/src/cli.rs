//! The `quarry` command line.

mod audit;
mod auth;
mod commands;
mod oauth;
mod policy;
mod signal;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use quarry_domain::PageLimit;

pub use self::signal::shutdown_signal;
use crate::{compose, config::Settings, failure::Failure};

/// Quarry: one governed gateway to the resources of many MCP servers.
///
/// Quarry connects to the upstream MCP servers in its configuration file and lets agents list
/// and read their resources through one MCP server of its own. Configuration comes from --config,
/// else $QUARRY_CONFIG, else ./quarry.toml if present; with none, Quarry runs with no upstreams.
#[derive(Debug, Parser)]
#[command(
    name = "quarry",
    version,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    /// Configuration file (TOML). See README.md for every key.
    #[arg(long, short, global = true, env = "QUARRY_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Log filter for stderr, e.g. `debug` or `quarry=trace` (default: the config's
    /// logging.level when serving, `warn` otherwise).
    #[arg(long, global = true, env = "QUARRY_LOG", value_name = "FILTER")]
    pub log: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve Quarry's MCP tools and resources to agents over stdio, or streamable HTTP (--http).
    ///
    /// On stdio, stdout carries only MCP messages; logs go to stderr. Upstreams connect on first
    /// use, so a server that is down does not delay start-up.
    Serve(ServeArgs),
    /// List resources across the configured servers, newest first.
    List(ListArgs),
    /// Read one resource by its gateway URI (mcp://SERVER/PATH, as `quarry list` shows it).
    ///
    /// Text or bytes go to stdout as they are, so `quarry read URI > file` keeps them exact; a
    /// summary (MIME type, size, range, cache status) goes to stderr.
    #[command(disable_version_flag = true)]
    Read(ReadArgs),
    /// Show every server and its status (connects to each to find out), or add and remove
    /// servers registered at runtime (kept in the store, beside the configuration file's).
    Servers(ServersArgs),
    /// List the versions Quarry has recorded for a resource (each distinct content it has read).
    Versions(VersionsArgs),
    /// Give Quarry the credential for an upstream HTTP server (encrypted at rest), test it, or
    /// remove it.
    Auth(auth::AuthArgs),
    /// Manage the vault that keeps upstream credentials encrypted: rotate its key.
    Vault(auth::VaultArgs),
    /// Work on the access policy: decide a request and see why, run the golden cases, check a
    /// policy before deploying it.
    Policy(policy::PolicyArgs),
    /// Work on the audit trail: verify that no record was edited, inserted, moved or deleted.
    Audit(audit::AuditArgs),
    /// Work on the API keys agents use over HTTP: `quarry api-key hash` reads a key on stdin and
    /// prints what `[http.api_keys]` takes (its SHA-256; the key itself is never stored).
    #[command(name = "api-key")]
    ApiKey(ApiKeyArgs),
    /// Run a policy worker (JSON lines on stdin and stdout); the gateway starts these itself.
    #[command(hide = true)]
    PolicyWorker,
    /// Run a self-contained demo: two fixture upstreams (stdio and HTTP), a listing across both,
    /// and one resource read twice, the second time from cache. Needs nothing but this binary.
    #[cfg(feature = "demo")]
    Demo(JsonFlag),
    /// Run the fixture MCP server used by tests and the demo (stdio, or --http ADDR).
    #[cfg(feature = "demo")]
    #[command(hide = true)]
    Fixture(FixtureCommand),
}

/// `quarry serve` options.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Speak MCP over stdin/stdout: the default without --http; with it, both at once.
    #[arg(long)]
    pub stdio: bool,
    /// Serve MCP over streamable HTTP at http://ADDR/mcp (a loopback address, e.g.
    /// 127.0.0.1:8080), with /metrics, /healthz and /readyz beside it; default: http.listen.
    #[arg(long, value_name = "ADDR", env = "QUARRY_HTTP")]
    pub http: Option<std::net::SocketAddr>,
    /// Also serve Prometheus metrics (/metrics), liveness (/healthz) and readiness (/readyz) on
    /// this loopback address, e.g. 127.0.0.1:9464 (port 0 picks one and says which on stderr).
    #[arg(long, value_name = "ADDR", env = "QUARRY_METRICS")]
    pub metrics: Option<std::net::SocketAddr>,
}

/// `quarry api-key` options.
#[derive(Debug, Args)]
pub struct ApiKeyArgs {
    #[command(subcommand)]
    pub action: ApiKeyAction,
}

/// `quarry api-key hash`.
#[derive(Debug, clap::Subcommand)]
pub enum ApiKeyAction {
    /// Read a key (one line, at least 32 characters) on stdin; print `sha256:<hex>` for
    /// `[http.api_keys] AGENT = "..."`. Make a key with, for example, `openssl rand -hex 32`.
    Hash,
}

/// `--json`.
#[derive(Debug, Args)]
pub struct JsonFlag {
    /// Print JSON (the same shapes as the MCP tools) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `quarry list` options.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only this server (name or id).
    #[arg(long, short)]
    pub server: Option<String>,
    /// Only this type: file, db, api, secret or custom.
    #[arg(long = "type", short = 't', value_name = "TYPE")]
    pub filter_type: Option<String>,
    /// Page size, 1 to 1000.
    #[arg(long, short, default_value_t = i64::from(PageLimit::DEFAULT.get()), allow_negative_numbers = true)]
    pub limit: i64,
    /// Resources to skip.
    #[arg(long, short, default_value_t = 0, allow_negative_numbers = true)]
    pub offset: i64,
    /// Print JSON (ListResourcesResult) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `quarry read` options.
#[derive(Debug, Args)]
pub struct ReadArgs {
    /// The gateway URI, e.g. mcp://docs/file_3A///README.md.
    pub uri: String,
    /// Byte offset to start at.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub offset: i64,
    /// Most bytes to return (1 to 10485760).
    #[arg(long, allow_negative_numbers = true)]
    pub limit: Option<i64>,
    /// A specific version (v1, v2 ...).
    #[arg(long = "version", id = "resource_version", value_name = "VERSION")]
    pub version: Option<String>,
    /// Bypass the cache (and refresh it).
    #[arg(long)]
    pub no_cache: bool,
    /// Print JSON (ReadResourceResult, binary content base64) instead of the raw content.
    #[arg(long)]
    pub json: bool,
}

/// `quarry servers` options.
#[derive(Debug, Args)]
pub struct ServersArgs {
    #[command(subcommand)]
    pub action: Option<ServersAction>,
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

/// `quarry servers add | remove`.
#[derive(Debug, Subcommand)]
pub enum ServersAction {
    /// Register a server: an HTTP endpoint, or a program to run over stdio (no shell is used;
    /// give each argument with --arg).
    Add(AddServerArgs),
    /// Unregister a server added with `quarry servers add` (or the add_mcp_server tool).
    Remove {
        /// The server's name.
        name: String,
    },
}

/// `quarry servers add` options.
#[derive(Debug, Args)]
pub struct AddServerArgs {
    /// The server's name: letters, digits, '_' and '-'.
    pub name: String,
    /// A streamable HTTP endpoint (http:// or https://).
    #[arg(long, conflicts_with = "command")]
    pub endpoint: Option<String>,
    /// A program to run over stdio.
    #[arg(long)]
    pub command: Option<String>,
    /// An argument for the program (repeat for each).
    #[arg(long = "arg", value_name = "ARG", allow_hyphen_values = true)]
    pub args: Vec<String>,
    /// An environment variable for the program, KEY=VALUE (repeat for each).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// The program's working directory.
    #[arg(long)]
    pub cwd: Option<String>,
    /// Seconds allowed for each request.
    #[arg(long)]
    pub timeout: Option<f64>,
    /// Sessions (stdio: processes) held open at once, 1 to 100 (default 10).
    #[arg(long)]
    pub pool_size: Option<u32>,
    /// Times a read retries when the connection fails, 0 to 10 (default 3).
    #[arg(long)]
    pub retry_attempts: Option<u32>,
    /// Seconds before the first retry and reconnection, doubling up to 30 (default 1).
    #[arg(long)]
    pub retry_delay: Option<f64>,
}

/// `quarry versions` options.
#[derive(Debug, Args)]
pub struct VersionsArgs {
    /// The gateway URI (mcp://SERVER/PATH).
    pub uri: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `quarry fixture` options.
#[cfg(feature = "demo")]
#[derive(Debug, Args)]
pub struct FixtureCommand {
    /// Serve streamable HTTP on this address and print the endpoint URL, instead of stdio.
    #[arg(long)]
    pub http: Option<std::net::SocketAddr>,
    #[command(flatten)]
    pub fixture: quarry_testkit::fixture::FixtureArgs,
}

impl Command {
    /// True for the commands that bring their own upstreams and read no configuration.
    pub fn is_self_contained(&self) -> bool {
        if matches!(self, Self::PolicyWorker) {
            return true;
        }
        #[cfg(feature = "demo")]
        if matches!(self, Self::Fixture(_) | Self::Demo(_)) {
            return true;
        }
        false
    }

    /// True for the commands that run until stopped (they log at the configured level).
    pub fn is_serving(&self) -> bool {
        #[cfg(feature = "demo")]
        if matches!(self, Self::Fixture(_)) {
            return true;
        }
        matches!(self, Self::Serve(_))
    }
}

/// Runs one command to completion.
///
/// # Errors
/// The command's failure.
pub async fn run(cli: Cli, settings: Settings) -> Result<(), Failure> {
    use commands::{add_server, list, read, remove_server, servers, versions, with_service};
    match cli.command {
        #[cfg(feature = "demo")]
        Command::Fixture(f) => commands::fixture(f).await,
        #[cfg(feature = "demo")]
        Command::Demo(flag) => crate::demo::run(flag.json).await,
        Command::Serve(args) => {
            // On a signal, input ends: what is in flight is answered, then the server stops.
            let shutdown = async move {
                shutdown_signal().await;
                tracing::info!("shutting down: answering requests in flight");
            };
            let http = args.http.or(settings.http.listen);
            let how = compose::Serving {
                stdio: args.stdio || http.is_none(),
                http,
                metrics: args.metrics,
            };
            Ok(compose::serve(&settings, how, shutdown).await?)
        }
        Command::List(args) => with_service(&settings, |s| list(s, args)).await,
        Command::Read(args) => with_service(&settings, |s| read(s, args)).await,
        Command::Servers(args) => match args.action {
            None => with_service(&settings, |s| servers(s, args.json)).await,
            Some(ServersAction::Add(add)) => {
                with_service(&settings, |s| add_server(s, add, args.json)).await
            }
            Some(ServersAction::Remove { name }) => {
                with_service(&settings, |s| remove_server(s, name, args.json)).await
            }
        },
        Command::Versions(args) => with_service(&settings, |s| versions(s, args)).await,
        Command::Auth(auth::AuthArgs {
            action: auth::AuthAction::Probe(probe),
            json,
        }) => oauth::probe(&settings, probe, json).await,
        Command::Auth(args) => with_service(&settings, |s| auth::run(s, args)).await,
        Command::Vault(args) => with_service(&settings, |s| auth::vault(s, args)).await,
        Command::Policy(args) => policy::run(&settings, args).await,
        Command::Audit(args) => audit::run(&settings, args).await,
        Command::ApiKey(ApiKeyArgs {
            action: ApiKeyAction::Hash,
        }) => {
            let mut key = String::new();
            std::io::stdin().read_line(&mut key)?;
            let key = key.trim();
            if key.chars().count() < 32 {
                return Err(quarry_domain::Error::invalid(
                    "an API key must be at least 32 characters (`openssl rand -hex 32` makes one)",
                )
                .into());
            }
            println!("{}", compose::api_key_digest(key));
            Ok(())
        }
        Command::PolicyWorker => Ok(compose::policy_worker()?),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
