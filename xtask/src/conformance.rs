//! `cargo xtask conformance`: the official MCP conformance suite (`@modelcontextprotocol/
//! conformance`, pinned in `testkit/conformance/package-lock.json` with the Node 22 it needs).
//! Client mode judges Quarry's upstream client, through `quarry auth probe`: every auth scenario
//! runs (the 2025-11-25 suite, the 2025-03-26 back-compat and draft ones, and the extensions).
//! Server mode (`server.rs`) judges what Quarry serves, for 2025-11-25 and 2026-07-28. Failures
//! other than the committed expected ones fail the task, and so does an expected failure that
//! passes.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::{cargo, have, run, workspace_root};

mod server;

/// The suites run, in order.
const SUITES: &[&str] = &["auth", "backcompat", "draft", "extensions"];

/// Installs the pinned suite and Node 22 into `target/conformance` unless already there.
fn install() -> Result<PathBuf> {
    let root = workspace_root();
    let source = root.join("testkit/conformance");
    let target = root.join("target/conformance");
    let lock = std::fs::read(source.join("package-lock.json"))
        .context("testkit/conformance/package-lock.json")?;
    let installed = std::fs::read(target.join("package-lock.json")).ok();
    if installed.as_deref() == Some(lock.as_slice()) && node(&target).is_file() {
        eprintln!("==> conformance: suite up to date in {}", target.display());
        return Ok(target);
    }
    if !have("npm", "--version") {
        bail!(
            "npm is needed to install the conformance suite: install Node.js 20+ with npm (Debian: apt-get install nodejs npm)"
        );
    }
    std::fs::create_dir_all(&target)?;
    for file in ["package.json", "package-lock.json"] {
        std::fs::copy(source.join(file), target.join(file))?;
    }
    let mut npm = std::process::Command::new("npm");
    npm.args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&target);
    run("conformance: npm ci", npm)?;
    Ok(target)
}

/// Node 22, from the `node` package.
fn node(target: &Path) -> PathBuf {
    target.join("node_modules/node/bin/node")
}

pub(crate) fn conformance() -> Result<()> {
    let root = workspace_root();
    let target = install()?;
    let mut build = cargo();
    build.args(["build", "--locked", "-p", "quarry", "--bin", "quarry"]);
    run("conformance: build quarry", build)?;
    let quarry = root.join("target/debug/quarry");
    let client = root.join("testkit/conformance/client.py");
    let expected = root.join("testkit/conformance/client.yml");
    let suite = target.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    // The suite spawns `node` for nothing of its own, but what it runs must find Node 22 first.
    let path = format!(
        "{}:{}",
        node(&target)
            .parent()
            .map(Path::display)
            .map(|d| d.to_string())
            .unwrap_or_default(),
        std::env::var("PATH").unwrap_or_default()
    );
    let results = root.join("target/conformance/results");
    for name in SUITES {
        let mut cmd = std::process::Command::new(node(&target));
        cmd.arg(&suite)
            .args(["client", "--suite", name, "--command"])
            .arg(format!("python3 {} {}", client.display(), quarry.display()))
            .arg("--expected-failures")
            .arg(&expected)
            .arg("-o")
            .arg(&results)
            .env("PATH", &path)
            .current_dir(&target);
        run(&format!("conformance: client suite {name}"), cmd)?;
    }
    // Server mode needs the 0.2.0-alpha line (the 2026-07-28 requirement set), installed beside
    // the stable line under an alias.
    let next = target.join("node_modules/conformance-next/dist/index.js");
    for total in server::run_server(&node(&target), &next, &target)? {
        eprintln!("    conformance server {total}");
    }
    Ok(())
}
