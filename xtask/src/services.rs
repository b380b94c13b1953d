//! The services the tests need: PostgreSQL and Redis. The ones named by
//! `QUARRY_TEST_POSTGRES_URL` and `QUARRY_TEST_REDIS_URL` (default: the local servers on their
//! standard loopback ports) when they answer; otherwise servers of this run's own, started from
//! the installed binaries on free loopback ports (data under `target/services/`) and stopped
//! when the run ends. When neither answers nor can be started, the run fails naming the package
//! to install: a test that needs a service never skips.

use std::{
    net::{TcpListener, TcpStream, ToSocketAddrs},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::workspace_root;

const POSTGRES: &str = "QUARRY_TEST_POSTGRES_URL";
const REDIS: &str = "QUARRY_TEST_REDIS_URL";

/// The services the tests use: their URLs, and the servers started for this run (stopped on
/// drop).
pub(crate) struct Services {
    pub(crate) env: Vec<(&'static str, String)>,
    started: Vec<Child>,
    /// Our PostgreSQL's data directory: its postmaster (which may run under `runuser`, whose
    /// death would not end it) is stopped by the pid it wrote there.
    postgres_data: Option<PathBuf>,
}

impl Drop for Services {
    fn drop(&mut self) {
        if let Some(data) = &self.postgres_data {
            let pid = std::fs::read_to_string(data.join("postmaster.pid")).unwrap_or_default();
            if let Some(pid) = pid.lines().next().filter(|p| p.parse::<u32>().is_ok()) {
                // SIGINT: PostgreSQL's fast shutdown.
                let _ = Command::new("kill").args(["-INT", pid]).status();
            }
        }
        for child in &mut self.started {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `host:port` of a `scheme://[user@]host[:port]/...` URL.
fn authority(url: &str, default_port: u16) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let host = rest.split(['/', '?']).next().unwrap_or("127.0.0.1");
    if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:{default_port}")
    }
}

fn answers(authority: &str) -> bool {
    authority
        .to_socket_addrs()
        .ok()
        .into_iter()
        .flatten()
        .any(|a| TcpStream::connect_timeout(&a, Duration::from_millis(500)).is_ok())
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn wait_for(port: u16, what: &str, child: &mut Child) -> Result<()> {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!("{what} exited ({status}) before it answered");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("{what} did not answer on port {port} within 30 s")
}

/// A PostgreSQL program: on the PATH, or in Debian's versioned directory.
fn postgres_program(name: &str) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file());
    on_path.or_else(|| {
        let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| Some(e.ok()?.path().join("bin").join(name)))
            .filter(|p| p.is_file())
            .collect();
        found.sort();
        found.pop()
    })
}

/// `program` as the `postgres` system user when this is root (PostgreSQL refuses to run as
/// root), else as ourselves.
fn as_postgres_user(program: &Path) -> Command {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0"));
    if root {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--"]).arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

fn own_postgres(dir: &Path) -> Result<(String, Child)> {
    let missing = || {
        anyhow::anyhow!(
            "no PostgreSQL answers at {POSTGRES} and none can be started: install PostgreSQL (Debian: apt-get install postgresql) or set {POSTGRES}"
        )
    };
    let initdb = postgres_program("initdb").ok_or_else(missing)?;
    let server = postgres_program("postgres").ok_or_else(missing)?;
    let data = dir.join("postgres");
    let _ = std::fs::remove_dir_all(&data);
    std::fs::create_dir_all(&data)?;
    let _ = Command::new("chown").arg("postgres").arg(&data).status();
    let mut init = as_postgres_user(&initdb);
    init.args(["--auth=trust", "-U", "postgres", "-D"])
        .arg(&data)
        .stdout(Stdio::null());
    let status = init.status().context("initdb")?;
    if !status.success() {
        bail!("initdb {} failed ({status})", data.display());
    }
    let port = free_port()?;
    let mut start = as_postgres_user(&server);
    start
        .arg("-D")
        .arg(&data)
        .args([
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "max_connections=200",
            "-k",
        ])
        .arg(&data)
        .args(["-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = start.spawn().context("starting postgres")?;
    wait_for(port, "postgres", &mut child)?;
    Ok((
        format!("postgres://postgres@127.0.0.1:{port}/postgres"),
        child,
    ))
}

fn own_redis() -> Result<(String, Child)> {
    let port = free_port()?;
    let mut child = Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--port"])
        .arg(port.to_string())
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| {
            format!("no Redis answers at {REDIS} and none can be started: install Redis (Debian: apt-get install redis-server) or set {REDIS}")
        })?;
    wait_for(port, "redis-server", &mut child)?;
    Ok((format!("redis://127.0.0.1:{port}"), child))
}

/// The services for this run: the configured ones where they answer, our own otherwise.
pub(crate) fn ensure() -> Result<Services> {
    let mut services = Services {
        env: Vec::new(),
        started: Vec::new(),
        postgres_data: None,
    };
    let dir = workspace_root().join("target/services");
    let postgres = std::env::var(POSTGRES)
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    if answers(&authority(&postgres, 5432)) {
        services.env.push((POSTGRES, postgres));
    } else {
        eprintln!(
            "==> services: no PostgreSQL at {}; starting one",
            authority(&postgres, 5432)
        );
        let (url, child) = own_postgres(&dir)?;
        eprintln!("    services: PostgreSQL at {url}");
        services.started.push(child);
        services.postgres_data = Some(dir.join("postgres"));
        services.env.push((POSTGRES, url));
    }
    let redis = std::env::var(REDIS).unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    if answers(&authority(&redis, 6379)) {
        services.env.push((REDIS, redis));
    } else {
        eprintln!(
            "==> services: no Redis at {}; starting one",
            authority(&redis, 6379)
        );
        let (url, child) = own_redis()?;
        eprintln!("    services: Redis at {url}");
        services.started.push(child);
        services.env.push((REDIS, url));
    }
    Ok(services)
}

/// `cargo xtask services -- COMMAND...`: runs a command with the services' variables set
/// (starting servers of its own where none answer).
pub(crate) fn with_services(args: &[String]) -> Result<()> {
    let services = ensure()?;
    let Some((program, rest)) = args.split_first() else {
        for (var, url) in &services.env {
            println!("{var}={url}");
        }
        return Ok(());
    };
    let status = Command::new(program)
        .args(rest)
        .envs(services.env.iter().map(|(k, v)| (*k, v.as_str())))
        .status()
        .with_context(|| format!("cannot run {program}"))?;
    drop(services);
    if !status.success() {
        bail!("{program} failed ({status})");
    }
    Ok(())
}
