//! Server mode: Quarry served over streamable HTTP in transparent mode (`expose = "native"`)
//! in front of the testkit fixture with the suite's resources (`quarry-fixture --conformance`),
//! judged by the suite for 2025-11-25 (its active scenarios) and for 2026-07-28 (exactly what
//! that revision requires). Failures not in `testkit/conformance/server-<revision>.yml` fail the
//! task, as does an expected failure that passes.

use std::{
    io::{Read as _, Write as _},
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::{cargo, run, workspace_root};

/// Each revision and the suite's arguments that select its scenarios.
const REVISIONS: &[(&str, &[&str])] = &[
    ("2025-11-25", &["--spec-version", "2025-11-25"]),
    ("2026-07-28", &["--requirements", "2026-07-28"]),
];

/// A Quarry serving on loopback; stopped when dropped.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

/// Waits until `/healthz` answers 200, or fails after a while (with Quarry's log to read).
fn wait_healthy(addr: SocketAddr, served: &mut Served, log: &Path) -> Result<()> {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        if let Some(status) = served.0.try_wait()? {
            bail!(
                "quarry exited ({status}) before serving; see {}",
                log.display()
            );
        }
        if let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            let request =
                format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
            let mut answer = String::new();
            if stream.write_all(request.as_bytes()).is_ok()
                && stream.read_to_string(&mut answer).is_ok()
                && answer.starts_with("HTTP/1.1 200")
            {
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!(
        "quarry did not answer /healthz within 30 s; see {}",
        log.display()
    )
}

/// Starts `quarry serve --http` on a free loopback port in front of the conformance fixture.
fn serve(work: &Path) -> Result<(Served, SocketAddr)> {
    let root = workspace_root();
    let fixture = root.join("target/debug/quarry-fixture");
    let config = work.join("quarry.toml");
    std::fs::write(
        &config,
        format!(
            "# Written by cargo xtask conformance: the suite's fixture, published with its own URIs.\n\
             [servers.suite]\ncommand = {:?}\nargs = [\"--conformance\"]\nexpose = \"native\"\n",
            fixture.display().to_string()
        ),
    )?;
    let store = work.join("store.db");
    for stale in ["store.db", "store.db-wal", "store.db-shm"] {
        let _ = std::fs::remove_file(work.join(stale));
    }
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
    let log = work.join("quarry.log");
    let mut served = Served(
        Command::new(root.join("target/debug/quarry"))
            .arg("--config")
            .arg(&config)
            .args(["serve", "--http", &addr.to_string()])
            .env("QUARRY_STORE_PATH", &store)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("cannot start target/debug/quarry")?,
    );
    wait_healthy(addr, &mut served, &log)?;
    Ok((served, addr))
}

/// Runs the server suite for each revision against one Quarry; returns each revision's last
/// line (`Total: N passed, M failed`).
pub(super) fn run_server(node: &Path, suite: &Path, target: &Path) -> Result<Vec<String>> {
    let root = workspace_root();
    let mut build = cargo();
    build.args([
        "build",
        "--locked",
        "-p",
        "quarry",
        "--bin",
        "quarry",
        "-p",
        "quarry-testkit",
        "--bin",
        "quarry-fixture",
    ]);
    run("conformance: build quarry and the fixture", build)?;
    let work = target.join("server");
    std::fs::create_dir_all(&work)?;
    let (_served, addr) = serve(&work)?;
    let url = format!("http://{addr}/mcp");
    let mut totals = Vec::new();
    for (revision, selection) in REVISIONS {
        let expected = root.join(format!("testkit/conformance/server-{revision}.yml"));
        let results = target.join(format!("results/server-{revision}"));
        let _ = std::fs::remove_dir_all(&results);
        let out = Command::new(node)
            .arg(suite)
            .args(["server", "--url", &url])
            .args(*selection)
            .arg("--expected-failures")
            .arg(&expected)
            .arg("-o")
            .arg(&results)
            .current_dir(target)
            .output()
            .with_context(|| format!("cannot run the conformance suite for {revision}"))?;
        let printed = String::from_utf8_lossy(&out.stdout);
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        let summary: Vec<&str> = printed
            .lines()
            .skip_while(|l| !l.contains("=== SUMMARY ==="))
            .collect();
        eprintln!("==> conformance: server {revision}\n{}", summary.join("\n"));
        let total = printed
            .lines()
            .rev()
            .find(|l| l.starts_with("Total:"))
            .unwrap_or("Total: (none printed)")
            .to_owned();
        if !out.status.success() {
            bail!(
                "conformance server {revision}: failures not in {} ({total}); results in {}",
                expected.display(),
                results.display()
            );
        }
        totals.push(format!("{revision}: {total}"));
    }
    Ok(totals)
}
