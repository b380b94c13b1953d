//! The `quarry` command line.

use std::{io::Write, path::PathBuf, sync::Arc};

use clap::{Args, Parser, Subcommand};
use quarry_domain::{
    ByteRange, Error, ListQuery, PageLimit, ResourceType, ResourceUri, ServerSelector,
};
use quarry_ports::{ReadRequest, ResourceGateway};
use quarry_testkit::fixture::FixtureArgs;

use crate::{compose, config::Settings, demo, render, service::ResourceService};

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
    /// Serve Quarry's MCP tools and resources to an agent over stdio.
    ///
    /// stdout carries only MCP messages; logs go to stderr. Upstreams connect on first use, so
    /// a server that is down does not delay start-up.
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
    /// Run a self-contained demo: two fixture upstreams (stdio and HTTP), a listing across both,
    /// and one resource read twice, the second time from cache. Needs nothing but this binary.
    Demo(JsonFlag),
    /// Run the fixture MCP server used by tests and the demo (stdio, or --http ADDR).
    #[command(hide = true)]
    Fixture(FixtureCommand),
}

/// `quarry serve` options.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Speak MCP over stdin/stdout (the default, and for now the only transport).
    #[arg(long, default_value_t = true)]
    pub stdio: bool,
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
    /// Sessions (stdio: processes) held open at once, 1 to 100.
    #[arg(long, default_value_t = 10)]
    pub pool_size: u32,
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
#[derive(Debug, Args)]
pub struct FixtureCommand {
    /// Serve streamable HTTP on this address and print the endpoint URL, instead of stdio.
    #[arg(long)]
    pub http: Option<std::net::SocketAddr>,
    #[command(flatten)]
    pub fixture: FixtureArgs,
}

/// A command's failure: a catalogue error (exit 10 + its number), or I/O on our own output.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// An error from the catalogue.
    #[error("{0}")]
    Quarry(#[from] Error),
    /// Writing our output failed (a closed pipe, say).
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl Failure {
    /// The process exit code.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Quarry(e) => e.code().exit_code(),
            Self::Io(_) => 1,
        }
    }
}

/// Runs one command to completion.
///
/// # Errors
/// The command's failure.
pub async fn run(cli: Cli, settings: Settings) -> Result<(), Failure> {
    match cli.command {
        Command::Fixture(f) => run_fixture(f).await,
        Command::Demo(flag) => demo::run(flag.json).await,
        Command::Serve(_) => {
            let service = compose::build(&settings).await?;
            service.start_supervision();
            tracing::info!(
                servers = settings.servers.len(),
                config = %settings.source.as_ref().map_or("(defaults)".into(), |p| p.display().to_string()),
                "serving MCP on stdio"
            );
            let gateway: Arc<dyn ResourceGateway> = service.clone();
            let options = quarry_mcp_server::ServerOptions {
                inline_limit: settings.inline_limit_bytes,
                principal: quarry_domain::Principal::local(),
            };
            // On a signal, input ends: what is in flight is answered, then the server stops.
            let shutdown = async move {
                shutdown_signal().await;
                tracing::info!("shutting down: answering requests in flight");
            };
            let result = quarry_mcp_server::serve_stdio(gateway, options, shutdown).await;
            service.shutdown().await;
            result.map_err(|e| {
                tracing::error!("{e}");
                Error::internal().into()
            })
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
    }
}

async fn with_service<F, Fut>(settings: &Settings, f: F) -> Result<(), Failure>
where
    F: FnOnce(Arc<ResourceService>) -> Fut,
    Fut: std::future::Future<Output = Result<(), Failure>>,
{
    let service = compose::build(settings).await?;
    let result = f(service.clone()).await;
    service.shutdown().await;
    result
}

/// Builds the list query the CLI flags describe.
fn list_query(args: &ListArgs) -> Result<ListQuery, Error> {
    Ok(ListQuery {
        server: args
            .server
            .as_deref()
            .map(ServerSelector::new)
            .transpose()?,
        filter_type: args
            .filter_type
            .as_deref()
            .map(str::parse::<ResourceType>)
            .transpose()?,
        limit: PageLimit::new(args.limit)?,
        offset: ListQuery::parse_offset(args.offset)?,
        use_cache: true,
    })
}

async fn list(service: Arc<ResourceService>, args: ListArgs) -> Result<(), Failure> {
    let query = list_query(&args)?;
    let result = service.list_resources(query.clone()).await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        render::json(&mut out, &result)?;
    } else {
        render::resources(&mut out, &result, query.offset)?;
        render::server_warnings(&mut std::io::stderr().lock(), &result.servers)?;
    }
    Ok(())
}

async fn read(service: Arc<ResourceService>, args: ReadArgs) -> Result<(), Failure> {
    let request = ReadRequest {
        uri: ResourceUri::parse(&args.uri)?,
        range: ByteRange::new(args.offset, args.limit)?,
        use_cache: !args.no_cache,
        version: args.version,
        validate_checksum: true,
        inline_limit: None,
        principal: quarry_domain::Principal::local(),
    };
    let result = service.read_resource(request).await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        render::json(&mut out, &result)?;
    } else {
        render::content(&mut out, &result)?;
        render::read_summary(&mut std::io::stderr().lock(), &result)?;
    }
    out.flush()?;
    Ok(())
}

async fn add_server(
    service: Arc<ResourceService>,
    args: AddServerArgs,
    json: bool,
) -> Result<(), Failure> {
    let mut env = std::collections::BTreeMap::new();
    for pair in &args.env {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| Error::invalid(format!("--env takes KEY=VALUE, got {pair:?}")))?;
        env.insert(k.to_owned(), v.to_owned());
    }
    if !(1..=100).contains(&args.pool_size) {
        return Err(Error::invalid("--pool-size must be between 1 and 100").into());
    }
    let spec = quarry_domain::ServerDraft {
        name: args.name,
        id: None,
        endpoint: args.endpoint,
        command: args.command,
        args: args.args,
        env,
        cwd: args.cwd,
        timeout_secs: args.timeout,
        max_pages: None,
    }
    .into_spec("--")?;
    let server = quarry_ports::RegisteredServer {
        spec,
        retry_attempts: 3,
        retry_delay: std::time::Duration::from_secs(1),
        pool_size: args.pool_size,
    };
    let status = service
        .add_server(server, quarry_ports::Requester::Operator, None)
        .await?;
    let mut out = std::io::stdout().lock();
    if json {
        render::json(&mut out, &status)?;
    } else {
        writeln!(
            out,
            "registered '{}' ({})",
            status.server_name, status.endpoint
        )?;
        render::servers(&mut out, std::slice::from_ref(&status))?;
    }
    Ok(())
}

async fn remove_server(
    service: Arc<ResourceService>,
    name: String,
    json: bool,
) -> Result<(), Failure> {
    let name = quarry_domain::ServerName::parse(&name)?;
    let removed = service
        .remove_server(name, quarry_ports::Requester::Operator, None)
        .await?;
    let mut out = std::io::stdout().lock();
    if json {
        render::json(&mut out, &removed)?;
    } else {
        writeln!(out, "removed '{}'", removed.server_name)?;
    }
    Ok(())
}

async fn servers(service: Arc<ResourceService>, json: bool) -> Result<(), Failure> {
    let statuses = service.servers().await;
    let mut out = std::io::stdout().lock();
    if json {
        render::json(&mut out, &statuses)?;
    } else {
        render::servers(&mut out, &statuses)?;
    }
    Ok(())
}

async fn versions(service: Arc<ResourceService>, args: VersionsArgs) -> Result<(), Failure> {
    let uri = ResourceUri::parse(&args.uri)?;
    let versions = service.versions(&uri).await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        render::json(&mut out, &versions)?;
    } else {
        render::versions(&mut out, &versions)?;
    }
    Ok(())
}

async fn run_fixture(f: FixtureCommand) -> Result<(), Failure> {
    let outcome = match f.http {
        None => quarry_testkit::fixture::serve_stdio(f.fixture).await,
        Some(addr) => match quarry_testkit::fixture::serve_http(f.fixture, addr).await {
            Ok(server) => {
                println!("{}", server.url);
                shutdown_signal().await;
                Ok(())
            }
            Err(e) => Err(e),
        },
    };
    outcome.map_err(|e| {
        tracing::error!("fixture: {e:#}");
        Error::internal().into()
    })
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
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
