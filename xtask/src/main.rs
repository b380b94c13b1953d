//! Repository tasks. `cargo xtask ci` runs exactly what CI runs.

mod bench;
mod conformance;
mod services;
mod tidy;

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{Context, Result, bail};

const USAGE: &str = "usage: cargo xtask <task>

tasks:
  ci      everything CI runs: format check, clippy (warnings are errors), the dependency
          rules, the peer servers, then every test
  bench [--peers]
          run the benchmarks (release build) and print BENCHMARKS.md's tables; with
          --peers also install mcp-proxy and supergateway (into target/peers/bench),
          measure Quarry beside them and the direct upstream in the same run, and write
          those tables into BENCHMARKS.md
  conformance
          run the official MCP conformance suite with Node 22: client mode (Quarry's
          upstream OAuth client) and server mode (Quarry over HTTP, 2025-11-25 and
          2026-07-28), failing on anything not in testkit/conformance/*.yml
  peers [--bench]
          install the real MCP servers and the Python SDK the tests use (into target/peers);
          with --bench, also the peer gateways `bench --peers` measures (target/peers/bench)
  services [-- COMMAND...]
          the PostgreSQL and Redis the tests use (QUARRY_TEST_POSTGRES_URL,
          QUARRY_TEST_REDIS_URL; the local ones by default), starting servers of its own
          where none answers; prints their URLs, or runs COMMAND with them set
  tidy    check the architecture's rules: dependencies (cargo metadata, cargo tree) and sources
          (module docs, no #[ignore], adapters named only in compose.rs, file sizes)";

fn main() {
    let task = std::env::args().nth(1);
    let outcome = match task.as_deref() {
        Some("ci") => ci(),
        Some("bench") => match std::env::args().nth(2).as_deref() {
            None => bench::bench(false),
            Some("--peers") => bench::bench(true),
            Some(other) => {
                eprintln!("xtask bench: unknown option {other}\n\n{USAGE}");
                std::process::exit(2);
            }
        },
        Some("conformance") => conformance::conformance(),
        Some("peers") => match std::env::args().nth(2).as_deref() {
            None => peers().map(|_| ()),
            Some("--bench") => peers().and_then(|_| bench_peers()).map(|_| ()),
            Some(other) => {
                eprintln!("xtask peers: unknown option {other}\n\n{USAGE}");
                std::process::exit(2);
            }
        },
        Some("services") => {
            let rest: Vec<String> = std::env::args().skip(2).skip_while(|a| a == "--").collect();
            services::with_services(&rest)
        }
        Some("tidy") => {
            tidy::check(&workspace_root()).map(|()| println!("tidy: architecture rules hold"))
        }
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            Ok(())
        }
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(e) = outcome {
        eprintln!("xtask: {e:#}");
        std::process::exit(1);
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(workspace_root());
    cmd
}

fn run(step: &str, mut cmd: Command) -> Result<()> {
    eprintln!("==> {step}");
    let started = Instant::now();
    let status = cmd
        .status()
        .with_context(|| format!("{step}: cannot start {cmd:?}"))?;
    eprintln!("    {step}: {:.1}s", started.elapsed().as_secs_f64());
    if !status.success() {
        bail!("{step} failed ({status})");
    }
    Ok(())
}

fn have(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Installs the pinned peer servers with `npm ci` unless the installed lock file already matches,
/// and the pinned Python MCP SDK into a venv beside them.
fn peers() -> Result<PathBuf> {
    let root = workspace_root();
    let target = root.join("target/peers");
    npm_install(&root.join("testkit/peers"), &target)?;
    venv_install(
        &root.join("testkit/peers/requirements.txt"),
        &target.join("venv"),
    )?;
    Ok(target)
}

/// The peer gateways `cargo xtask bench --peers` measures (supergateway from npm, mcp-proxy
/// from PyPI), pinned in `testkit/peers/bench`, into `target/peers/bench`.
fn bench_peers() -> Result<PathBuf> {
    let root = workspace_root();
    let target = root.join("target/peers/bench");
    npm_install(&root.join("testkit/peers/bench"), &target)?;
    venv_install(
        &root.join("testkit/peers/bench/requirements.txt"),
        &target.join("venv"),
    )?;
    Ok(target)
}

/// `npm ci` of `source`'s lock file into `target`, unless the installed one already matches.
fn npm_install(source: &Path, target: &Path) -> Result<()> {
    let lock = std::fs::read(source.join("package-lock.json"))
        .with_context(|| format!("{}/package-lock.json", source.display()))?;
    let installed = std::fs::read(target.join("package-lock.json")).ok();
    if installed.as_deref() == Some(lock.as_slice()) && target.join("node_modules").is_dir() {
        eprintln!("==> peers: npm packages up to date in {}", target.display());
        return Ok(());
    }
    if !have("npm", "--version") {
        bail!(
            "npm is needed to install the peer MCP servers: install Node.js 20+ with npm (Debian: apt-get install nodejs npm)"
        );
    }
    std::fs::create_dir_all(target)?;
    for file in ["package.json", "package-lock.json"] {
        std::fs::copy(source.join(file), target.join(file))?;
    }
    let mut npm = Command::new("npm");
    // npm reports what it added on stdout, which `cargo xtask bench` keeps for its tables.
    npm.args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(target)
        .stdout(std::io::stderr());
    run("peers: npm ci", npm)
}

/// A venv at `venv` holding `requirements`, unless it holds them already.
fn venv_install(requirements: &Path, venv: &Path) -> Result<()> {
    let wanted = std::fs::read(requirements).with_context(|| requirements.display().to_string())?;
    let stamp = venv.join("quarry-requirements.txt");
    if std::fs::read(&stamp).ok().as_deref() == Some(wanted.as_slice()) {
        eprintln!(
            "==> peers: Python packages up to date in {}",
            venv.display()
        );
        return Ok(());
    }
    if !have("python3", "--version") {
        bail!(
            "python3 (3.10+) with venv is needed for the Python peers (Debian: apt-get install python3 python3-venv)"
        );
    }
    let mut create = Command::new("python3");
    create.args(["-m", "venv", "--clear"]).arg(venv);
    run("peers: python venv", create)?;
    let mut pip = Command::new(venv.join("bin/pip"));
    pip.args(["install", "--quiet", "--disable-pip-version-check", "-r"])
        .arg(requirements)
        .stdout(std::io::stderr());
    run("peers: pip install", pip)?;
    std::fs::write(stamp, wanted)?;
    Ok(())
}

fn ci() -> Result<()> {
    let started = Instant::now();
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--check"]);
    run("format check", fmt)?;
    run("architecture rules", {
        let mut c = cargo();
        c.args(["run", "--quiet", "-p", "xtask", "--", "tidy"]);
        c
    })?;
    let mut clippy = cargo();
    clippy.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--locked",
        "--",
        "-D",
        "warnings",
    ]);
    run("clippy", clippy)?;
    let peers = peers()?;
    let services = services::ensure()?;
    let mut build = cargo();
    build.args(["build", "--workspace", "--bins", "--locked"]);
    run("build programs", build)?;
    let mut test = cargo();
    if have("cargo-nextest", "--version") {
        test.args([
            "nextest",
            "run",
            "--workspace",
            "--locked",
            "--no-fail-fast",
        ]);
    } else {
        test.args(["test", "--workspace", "--locked", "--no-fail-fast"]);
    }
    test.env("QUARRY_PEERS_DIR", &peers)
        .env("QUARRY_FIXTURE_PREBUILT", "1")
        .envs(services.env.iter().map(|(k, v)| (*k, v.as_str())));
    run("tests", test)?;
    drop(services);
    let mut golden = std::process::Command::new(workspace_root().join("target/debug/quarry"));
    golden
        .args(["policy", "test"])
        .arg(workspace_root().join("policy/tests"));
    run("policy golden cases", golden)?;
    conformance::conformance()?;
    eprintln!("==> ci passed in {:.0}s", started.elapsed().as_secs_f64());
    Ok(())
}
