//! What the benchmark measures: an upstream reached directly, through each peer gateway and
//! through Quarry, each a real process on loopback, started the way its documentation says.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use anyhow::{Context, Result, bail};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};

pub(crate) const QUARRY: &str = env!("CARGO_BIN_EXE_quarry");

/// The upstream programs put behind every gateway.
#[derive(Clone)]
pub(crate) enum Upstream {
    /// The testkit fixture (`quarry fixture`): sized content, and `resources` generated items.
    Fixture { resources: u32 },
    /// `@modelcontextprotocol/server-everything@2025.11.25`.
    Everything,
}

impl Upstream {
    /// The command line that serves it over stdio.
    pub(crate) fn stdio(&self) -> Vec<String> {
        match self {
            Self::Fixture { resources } => vec![
                QUARRY.into(),
                "fixture".into(),
                "--name".into(),
                "bench".into(),
                "--resources".into(),
                resources.to_string(),
                "--page-size".into(),
                "1000".into(),
            ],
            Self::Everything => vec![
                "node".into(),
                everything().display().to_string(),
                "stdio".into(),
            ],
        }
    }

    /// The URI of `upstream` as Quarry names it (server `bench`).
    pub(crate) fn through_quarry(&self, upstream: &str) -> String {
        let (scheme, rest) = upstream.split_once("://").unwrap_or(("", upstream));
        format!("mcp://bench/{scheme}_3A//{rest}")
    }
}

/// The peers' folder (`cargo xtask bench --peers` installs them).
pub(crate) fn peers_dir() -> PathBuf {
    quarry_testkit::peers::dir()
}

fn everything() -> PathBuf {
    quarry_testkit::peers::require(quarry_testkit::peers::SERVER_EVERYTHING).script
}

/// A running server and the URL it serves MCP on.
pub(crate) struct Served {
    pub(crate) url: String,
    pub(crate) child: Child,
}

impl Served {
    /// The child's resident memory now (`VmRSS`), the most it has held (`VmHWM`), and how much
    /// of what it holds now is mapped from files (`RssFile`: its own code and its libraries'), in
    /// bytes.
    pub(crate) fn memory(&self) -> Option<Memory> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()?)).ok()?;
        let kb = |key: &str| {
            status
                .lines()
                .find(|l| l.starts_with(key))?
                .split_whitespace()
                .nth(1)?
                .parse::<u64>()
                .ok()
                .map(|kb| kb * 1024)
        };
        Some(Memory {
            now: kb("VmRSS:")?,
            peak: kb("VmHWM:")?,
            files: kb("RssFile:")?,
        })
    }
}

/// A process's resident memory, in bytes.
pub(crate) struct Memory {
    pub(crate) now: u64,
    pub(crate) peak: u64,
    /// Of `now`, the pages mapped from files.
    pub(crate) files: u64,
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

async fn wait_listening(port: u16, child: &mut Child, what: &str) -> Result<()> {
    for _ in 0..600 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!("{what} exited before serving: {status}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("{what} did not listen on {port} within 30 s")
}

fn quiet(cmd: &mut Command) -> &mut Command {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
}

/// The upstream serving streamable HTTP itself (the HTTP floor).
pub(crate) async fn direct_http(upstream: &Upstream) -> Result<Served> {
    match upstream {
        Upstream::Fixture { .. } => {
            let mut args = upstream.stdio();
            let program = args.remove(0);
            let mut child = Command::new(program)
                .args(args)
                .args(["--http", "127.0.0.1:0"])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()?;
            let out = child.stdout.take().context("stdout")?;
            let mut line = String::new();
            BufReader::new(out).read_line(&mut line).await?;
            Ok(Served {
                url: line.trim().to_owned(),
                child,
            })
        }
        Upstream::Everything => {
            let port = free_port()?;
            let mut child = quiet(
                Command::new("node")
                    .arg(everything())
                    .arg("streamableHttp")
                    .env("PORT", port.to_string()),
            )
            .spawn()?;
            wait_listening(port, &mut child, "server-everything").await?;
            Ok(Served {
                url: format!("http://127.0.0.1:{port}/mcp"),
                child,
            })
        }
    }
}

/// mcp-proxy (PyPI) bridging the upstream's stdio to streamable HTTP.
pub(crate) async fn mcp_proxy(upstream: &Upstream) -> Result<Served> {
    let program = peers_dir().join("bench/venv/bin/mcp-proxy");
    require(&program)?;
    let port = free_port()?;
    let mut child = quiet(
        Command::new(program)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--log-level", "WARNING", "--"])
            .args(upstream.stdio()),
    )
    .spawn()?;
    wait_listening(port, &mut child, "mcp-proxy").await?;
    Ok(Served {
        url: format!("http://127.0.0.1:{port}/mcp"),
        child,
    })
}

/// supergateway (npm) in its stateful streamable HTTP mode.
pub(crate) async fn supergateway(upstream: &Upstream) -> Result<Served> {
    let script = peers_dir().join("bench/node_modules/supergateway/dist/index.js");
    require(&script)?;
    let port = free_port()?;
    let command = upstream
        .stdio()
        .iter()
        .map(|a| shell_quote(a))
        .collect::<Vec<_>>()
        .join(" ");
    let mut child = quiet(
        Command::new("node")
            .arg(script)
            .args(["--stdio", &command, "--outputTransport", "streamableHttp"])
            .args([
                "--stateful",
                "--port",
                &port.to_string(),
                "--logLevel",
                "none",
            ]),
    )
    .spawn()?;
    wait_listening(port, &mut child, "supergateway").await?;
    Ok(Served {
        url: format!("http://127.0.0.1:{port}/mcp"),
        child,
    })
}

/// How Quarry is set up for a row.
#[derive(Clone, Copy)]
pub(crate) struct QuarryOptions {
    pub(crate) cache: bool,
    pub(crate) cache_mb: u32,
}

impl Default for QuarryOptions {
    fn default() -> Self {
        Self {
            cache: true,
            cache_mb: 100,
        }
    }
}

/// `quarry.toml` for the upstream as server `bench`, in `dir`.
pub(crate) fn quarry_config(
    dir: &Path,
    upstream: &Upstream,
    options: QuarryOptions,
) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let mut args = upstream.stdio();
    let command = args.remove(0);
    let config = format!(
        "[servers.bench]\ncommand = {command:?}\nargs = {}\n\n[cache]\nenabled = {}\nmax_size_mb = {}\nttl_seconds = 3600\n\n[results]\ninline_limit_kb = 2048\n\n[store]\npath = {:?}\n\n[http]\nmax_sessions = 100000\nmax_requests_per_agent = 10000\n",
        serde_json::to_string(&args)?,
        options.cache,
        options.cache_mb,
        dir.join("quarry.db").display().to_string(),
    );
    let path = dir.join(format!(
        "quarry-{}-{}.toml",
        options.cache, options.cache_mb
    ));
    std::fs::write(&path, config)?;
    Ok(path)
}

/// `quarry serve --http` in front of the upstream.
pub(crate) async fn quarry_http(
    dir: &Path,
    upstream: &Upstream,
    options: QuarryOptions,
) -> Result<Served> {
    let config = quarry_config(dir, upstream, options)?;
    let mut child = Command::new(QUARRY)
        .args(["serve", "--http", "127.0.0.1:0", "--config"])
        .arg(config)
        .env("QUARRY_LOG", "warn")
        .env_remove("QUARRY_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let err = child.stderr.take().context("stderr")?;
    let mut lines = BufReader::new(err).lines();
    let url = loop {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .context("quarry did not start within 30 s")??
            .context("quarry exited before serving")?;
        if let Some(rest) = line.split("serving MCP on ").nth(1) {
            break rest.split(' ').next().unwrap_or_default().to_owned();
        }
    };
    // Keep draining its log so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(Served { url, child })
}

fn require(path: &Path) -> Result<()> {
    if !path.exists() {
        bail!(
            "{} is missing: run `cargo xtask bench --peers`, which installs the peer gateways",
            path.display()
        );
    }
    Ok(())
}

fn shell_quote(arg: &str) -> String {
    if arg
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-=:".contains(c))
    {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}
