//! The architecture's rules, checked against `cargo metadata`, `cargo tree` and the sources
//! rather than hoped for. Each rule is a pure function over what those report, with a negative
//! test that feeds it a workspace breaking the rule.
//!
//! Dependency rules (normal and build dependencies; dev-dependencies are test tooling):
//! - `quarry-domain` depends on no workspace crate and on no technology crate.
//! - `quarry-ports` depends on `quarry-domain` only, among workspace crates, and on no technology.
//! - `quarry-usecases` depends on `quarry-domain` and `quarry-ports` only, among workspace crates.
//! - An adapter never depends on a sibling adapter, on the use cases or on the app.
//! - `quarry-testkit` depends on no adapter, not on the use cases and not on the app.
//! - Only the app depends on more than one adapter.
//! - Each technology crate lives where [`PLACES`] says, by manifest path.
//!
//! Tree rules: the domain does not reach tokio, even transitively; `quarry` built without
//! default features links no testkit.
//!
//! Source rules: every module opens with a `//!` doc; no test is `#[ignore]`d; no adapter crate
//! is named in `app/src` outside `compose.rs`; no source file of `app/src` or
//! `app/usecases/src` is over [`MAX_APP_LINES`] lines.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// Crates that carry a technology: they belong in adapters, never in the domain or the ports.
const TECHNOLOGY: &[&str] = &[
    "rmcp",
    "tokio",
    "sqlx",
    "redis",
    "lru",
    "reqwest",
    "axum",
    "hyper",
    "hyper-util",
    "scryer-prolog",
    "ring",
    "rustls",
    "prometheus",
    "opentelemetry",
    "opentelemetry_sdk",
    "opentelemetry-otlp",
    "opentelemetry-proto",
    "tracing-opentelemetry",
    "jsonwebtoken",
];

/// Where each technology crate may be a dependency: manifest directories (relative to the
/// workspace root) or prefixes of them ending in `*`.
const PLACES: &[(&str, &[&str])] = &[
    ("sqlx", &["adapters/store-*"]),
    ("rmcp", &["adapters/mcp-*", "testkit"]),
    // The vault's cipher, and the OAuth client's PKCE digest, randomness and client assertions.
    (
        "ring",
        &[
            "adapters/crypto-ring",
            "adapters/mcp-client",
            "adapters/oauth-resource",
        ],
    ),
    ("scryer-prolog", &["adapters/policy-prolog"]),
    ("redis", &["adapters/cache-redis"]),
    ("lru", &["adapters/cache-lru"]),
    ("prometheus", &["adapters/metrics"]),
    ("opentelemetry", &["adapters/telemetry-otlp"]),
    ("opentelemetry_sdk", &["adapters/telemetry-otlp"]),
    ("opentelemetry-otlp", &["adapters/telemetry-otlp"]),
    ("tracing-opentelemetry", &["adapters/telemetry-otlp"]),
    // The test collector decodes what the exporter sends with the protocol's own types.
    ("opentelemetry-proto", &["testkit"]),
    ("jsonwebtoken", &["adapters/oauth-resource", "testkit"]),
    (
        "axum",
        &["adapters/mcp-server", "adapters/operator-http", "testkit"],
    ),
    // The HTTP transport's own accept loop, which bounds the connections it serves.
    ("hyper", &["adapters/mcp-server"]),
    ("hyper-util", &["adapters/mcp-server"]),
];

/// The longest a source file of the app or the use cases may grow.
const MAX_APP_LINES: usize = 400;

/// One workspace member as `cargo metadata` describes it.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    /// The package name.
    pub(crate) name: String,
    /// The manifest's directory, relative to the workspace root (`adapters/cache-lru`).
    pub(crate) dir: String,
    /// Normal and build dependencies, by package name.
    pub(crate) deps: Vec<String>,
}

impl Member {
    fn is_adapter(&self) -> bool {
        self.dir.starts_with("adapters/")
    }
}

fn place_matches(pattern: &str, dir: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => dir.starts_with(prefix),
        None => dir == pattern,
    }
}

fn cargo(root: &Path) -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(root);
    cmd
}

fn output(mut cmd: Command, what: &str) -> Result<String> {
    let out = cmd.output().with_context(|| what.to_owned())?;
    if !out.status.success() {
        bail!("{what} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Every workspace member with its normal and build dependencies.
pub(crate) fn members(root: &Path) -> Result<Vec<Member>> {
    let mut cmd = cargo(root);
    cmd.args(["metadata", "--format-version", "1", "--no-deps"]);
    let meta: Value = serde_json::from_str(&output(cmd, "cargo metadata")?)?;
    let root_dir = meta["workspace_root"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut all = Vec::new();
    for pkg in meta["packages"].as_array().into_iter().flatten() {
        let manifest = pkg["manifest_path"].as_str().unwrap_or_default();
        let dir = Path::new(manifest)
            .parent()
            .and_then(|d| d.strip_prefix(&root_dir).ok())
            .map(|d| d.to_string_lossy().into_owned())
            .unwrap_or_default();
        let deps = pkg["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["kind"].is_null() || d["kind"] == "build")
            .filter_map(|d| d["name"].as_str().map(str::to_owned))
            .collect();
        all.push(Member {
            name: pkg["name"].as_str().unwrap_or_default().to_owned(),
            dir,
            deps,
        });
    }
    Ok(all)
}

/// Every dependency rule broken by `members`, as sentences.
pub(crate) fn dependency_violations(members: &[Member]) -> Vec<String> {
    let by_name: BTreeMap<&str, &Member> = members.iter().map(|m| (m.name.as_str(), m)).collect();
    let is_adapter = |name: &str| by_name.get(name).is_some_and(|m| m.is_adapter());
    let mut broken = Vec::new();
    for m in members {
        let name = m.name.as_str();
        let own: Vec<&str> = m
            .deps
            .iter()
            .map(String::as_str)
            .filter(|d| by_name.contains_key(d))
            .collect();
        let allowed: Option<&[&str]> = match name {
            "quarry-domain" => Some(&[]),
            "quarry-ports" => Some(&["quarry-domain"]),
            "quarry-usecases" => Some(&["quarry-domain", "quarry-ports"]),
            _ => None,
        };
        if let Some(allowed) = allowed {
            for d in own.iter().filter(|d| !allowed.contains(d)) {
                broken.push(format!("{name} must not depend on {d}"));
            }
        }
        if matches!(name, "quarry-domain" | "quarry-ports") {
            for d in m.deps.iter().filter(|d| TECHNOLOGY.contains(&d.as_str())) {
                broken.push(format!(
                    "{name} must not depend on the technology crate {d}"
                ));
            }
        }
        if m.is_adapter() {
            for d in &own {
                if is_adapter(d) || *d == "quarry" || *d == "quarry-usecases" {
                    broken.push(format!("adapter {name} must not depend on {d}"));
                }
            }
        }
        if name == "quarry-testkit" {
            for d in &own {
                if is_adapter(d) || *d == "quarry" || *d == "quarry-usecases" {
                    broken.push(format!("quarry-testkit must not depend on {d}"));
                }
            }
        }
        let adapters = own.iter().filter(|d| is_adapter(d)).count();
        if adapters > 1 && name != "quarry" {
            broken.push(format!(
                "{name} depends on {adapters} adapters; only the app chooses implementations"
            ));
        }
        for (tech, places) in PLACES {
            if m.deps.iter().any(|d| d == tech) && !places.iter().any(|p| place_matches(p, &m.dir))
            {
                broken.push(format!(
                    "{name} ({}) must not depend on {tech} (only {} may)",
                    m.dir,
                    places.join(", ")
                ));
            }
        }
    }
    broken
}

/// The package names in `cargo tree --prefix none` output.
fn tree_packages(tree: &str) -> Vec<&str> {
    tree.lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect()
}

/// The tree rules broken, given the normal-dependency trees of the domain and of `quarry`
/// without default features.
pub(crate) fn tree_violations(domain_tree: &str, lean_app_tree: &str) -> Vec<String> {
    let mut broken = Vec::new();
    if tree_packages(domain_tree).contains(&"tokio") {
        broken.push("quarry-domain reaches tokio (through its dependencies)".to_owned());
    }
    if tree_packages(lean_app_tree).contains(&"quarry-testkit") {
        broken.push(
            "quarry built with --no-default-features links quarry-testkit (keep it behind the demo feature)"
                .to_owned(),
        );
    }
    broken
}

/// A source file: its path relative to the workspace root, and its text.
pub(crate) type Source = (String, String);

/// The source rules broken by `files`.
pub(crate) fn source_violations(files: &[Source], adapters: &[String]) -> Vec<String> {
    let mut broken = Vec::new();
    for (path, text) in files {
        let first = text.lines().map(str::trim).find(|l| !l.is_empty());
        if !first.is_some_and(|l| l.starts_with("//!")) {
            broken.push(format!("{path} does not open with a //! module doc"));
        }
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("#[ignore") {
                broken.push(format!("{path}:{}: no test may be #[ignore]d", n + 1));
            }
        }
        let in_app = path.starts_with("app/src/");
        if in_app && path != "app/src/compose.rs" && !path.starts_with("app/src/compose/") {
            for adapter in adapters {
                let ident = adapter.replace('-', "_");
                if text.contains(&ident) {
                    broken.push(format!(
                        "{path} names the adapter {adapter}; only app/src/compose.rs (and compose/) may"
                    ));
                }
            }
        }
        let lines = text.lines().count();
        if (in_app || path.starts_with("app/usecases/src/")) && lines > MAX_APP_LINES {
            broken.push(format!(
                "{path} has {lines} lines; split it (at most {MAX_APP_LINES} in the app and the use cases)"
            ));
        }
    }
    broken
}

/// Every `.rs` file under the members' directories (not `target`), relative to `root`.
fn sources(root: &Path, members: &[Member]) -> Result<Vec<Source>> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if !matches!(name, "target" | "node_modules" | "snapshots") {
                    walk(&path, out)?;
                }
            } else if name.ends_with(".rs") {
                out.push(path);
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    for m in members {
        let mut found = Vec::new();
        for sub in ["src", "tests", "benches"] {
            let dir = root.join(&m.dir).join(sub);
            if dir.is_dir() {
                walk(&dir, &mut found).with_context(|| dir.display().to_string())?;
            }
        }
        for path in found {
            let text =
                std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
            let rel = path.strip_prefix(root).unwrap_or(&path);
            files.push((rel.to_string_lossy().into_owned(), text));
        }
    }
    files.sort();
    Ok(files)
}

fn tree(root: &Path, package: &str, extra: &[&str]) -> Result<String> {
    let mut cmd = cargo(root);
    cmd.args(["tree", "-p", package, "-e", "normal", "--prefix", "none"])
        .args(extra);
    output(cmd, &format!("cargo tree -p {package}"))
}

/// Every rule broken by the workspace at `root`.
pub(crate) fn all_violations(root: &Path) -> Result<Vec<String>> {
    let members = members(root)?;
    let adapters: Vec<String> = members
        .iter()
        .filter(|m| m.is_adapter())
        .map(|m| m.name.clone())
        .collect();
    let mut broken = dependency_violations(&members);
    broken.extend(tree_violations(
        &tree(root, "quarry-domain", &[])?,
        &tree(root, "quarry", &["--no-default-features"])?,
    ));
    broken.extend(source_violations(&sources(root, &members)?, &adapters));
    Ok(broken)
}

/// Fails when the workspace breaks a rule.
pub(crate) fn check(root: &Path) -> Result<()> {
    let broken = all_violations(root)?;
    if broken.is_empty() {
        Ok(())
    } else {
        bail!("architecture rules broken:\n  {}", broken.join("\n  "))
    }
}

#[cfg(test)]
mod tests;
