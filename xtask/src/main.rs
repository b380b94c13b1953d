//! Repository tasks. `cargo xtask ci` runs exactly what CI runs.

mod bench;
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
  bench   run the benchmarks (release build) and print BENCHMARKS.md's tables
  peers   install the real MCP servers the tests use (npm ci into target/peers)
  tidy    check the architecture's dependency rules against cargo metadata";

fn main() {
    let task = std::env::args().nth(1);
    let outcome = match task.as_deref() {
        Some("ci") => ci(),
        Some("bench") => bench::bench(),
        Some("peers") => peers().map(|_| ()),
        Some("tidy") => {
            tidy::check(&workspace_root()).map(|()| println!("tidy: dependency rules hold"))
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

/// Installs the pinned peer servers with `npm ci` unless the installed lock file already matches.
fn peers() -> Result<PathBuf> {
    let root = workspace_root();
    let source = root.join("testkit/peers");
    let target = root.join("target/peers");
    let lock = std::fs::read(source.join("package-lock.json"))
        .context("testkit/peers/package-lock.json")?;
    let installed = std::fs::read(target.join("package-lock.json")).ok();
    if installed.as_deref() == Some(lock.as_slice()) && target.join("node_modules").is_dir() {
        eprintln!("==> peers: up to date in {}", target.display());
        return Ok(target);
    }
    if !have("npm", "--version") {
        bail!(
            "npm is needed to install the peer MCP servers: install Node.js 20+ with npm (Debian: apt-get install nodejs npm)"
        );
    }
    std::fs::create_dir_all(&target)?;
    for file in ["package.json", "package-lock.json"] {
        std::fs::copy(source.join(file), target.join(file))?;
    }
    let mut npm = Command::new("npm");
    npm.args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&target);
    run("peers: npm ci", npm)?;
    Ok(target)
}

fn ci() -> Result<()> {
    let started = Instant::now();
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--check"]);
    run("format check", fmt)?;
    run("dependency rules", {
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
        .env("QUARRY_FIXTURE_PREBUILT", "1");
    run("tests", test)?;
    eprintln!("==> ci passed in {:.0}s", started.elapsed().as_secs_f64());
    Ok(())
}
