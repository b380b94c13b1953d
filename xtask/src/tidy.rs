//! The architecture's dependency rules, checked against `cargo metadata` rather than hoped for.
//!
//! - `quarry-domain` depends on no other workspace crate and on no technology crate.
//! - `quarry-ports` depends on `quarry-domain` only, among workspace crates, and on no technology.
//! - An adapter never depends on a sibling adapter, nor on the app.
//! - Only `adapters/mcp-*` and `quarry-testkit` depend on rmcp.
//! - Only `quarry` (the app) depends on more than one adapter.

use std::{collections::BTreeMap, path::Path, process::Command};

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
    "scryer-prolog",
    "ring",
    "rustls",
];

/// Direct normal (non-dev) dependencies of each workspace member, by package name.
pub(crate) fn workspace_graph(root: &Path) -> Result<BTreeMap<String, (String, Vec<String>)>> {
    let output = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(root)
        .output()
        .context("cargo metadata")?;
    if !output.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let meta: Value = serde_json::from_slice(&output.stdout)?;
    let mut graph = BTreeMap::new();
    for pkg in meta["packages"].as_array().into_iter().flatten() {
        let name = pkg["name"].as_str().unwrap_or_default().to_owned();
        let manifest = pkg["manifest_path"].as_str().unwrap_or_default().to_owned();
        let deps = pkg["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["kind"].is_null())
            .filter_map(|d| d["name"].as_str().map(str::to_owned))
            .collect();
        graph.insert(name, (manifest, deps));
    }
    Ok(graph)
}

/// Every rule broken by `graph`, as sentences.
pub(crate) fn violations(graph: &BTreeMap<String, (String, Vec<String>)>) -> Vec<String> {
    let is_adapter = |manifest: &str| manifest.contains("/adapters/");
    let adapters: Vec<&String> = graph
        .iter()
        .filter(|(_, (m, _))| is_adapter(m))
        .map(|(n, _)| n)
        .collect();
    let mut broken = Vec::new();
    for (name, (manifest, deps)) in graph {
        let workspace_deps: Vec<&String> = deps.iter().filter(|d| graph.contains_key(*d)).collect();
        match name.as_str() {
            "quarry-domain" | "quarry-ports" => {
                let allowed: &[&str] = if name == "quarry-domain" {
                    &[]
                } else {
                    &["quarry-domain"]
                };
                for d in &workspace_deps {
                    if !allowed.contains(&d.as_str()) {
                        broken.push(format!("{name} must not depend on {d}"));
                    }
                }
                for d in deps {
                    if TECHNOLOGY.contains(&d.as_str()) {
                        broken.push(format!(
                            "{name} must not depend on the technology crate {d}"
                        ));
                    }
                }
            }
            _ if is_adapter(manifest) => {
                for d in &workspace_deps {
                    if adapters.contains(d) || d.as_str() == "quarry" {
                        broken.push(format!("adapter {name} must not depend on {d}"));
                    }
                }
            }
            _ => {}
        }
        let rmcp_allowed = name.starts_with("quarry-mcp-") || name == "quarry-testkit";
        if deps.iter().any(|d| d == "rmcp") && !rmcp_allowed {
            broken.push(format!(
                "{name} must not depend on rmcp (only adapters/mcp-* and testkit may)"
            ));
        }
        let adapter_deps = workspace_deps
            .iter()
            .filter(|d| adapters.contains(d))
            .count();
        if adapter_deps > 1 && name != "quarry" {
            broken.push(format!(
                "{name} depends on {adapter_deps} adapters; only the app chooses implementations"
            ));
        }
    }
    broken
}

/// Fails when the workspace breaks a rule.
pub(crate) fn check(root: &Path) -> Result<()> {
    let broken = violations(&workspace_graph(root)?);
    if broken.is_empty() {
        Ok(())
    } else {
        bail!("dependency rules broken:\n  {}", broken.join("\n  "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(entries: &[(&str, &str, &[&str])]) -> BTreeMap<String, (String, Vec<String>)> {
        entries
            .iter()
            .map(|(n, m, d)| {
                (
                    (*n).to_owned(),
                    ((*m).to_owned(), d.iter().map(|s| (*s).to_owned()).collect()),
                )
            })
            .collect()
    }

    #[test]
    fn the_workspace_keeps_its_dependency_rules() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let g = workspace_graph(root).unwrap();
        assert!(
            g.contains_key("quarry-domain") && g.contains_key("quarry-mcp-client"),
            "{g:?}"
        );
        assert_eq!(violations(&g), Vec::<String>::new());
    }

    #[test]
    fn each_forbidden_edge_is_reported() {
        let g = graph(&[
            (
                "quarry-domain",
                "/w/domain/Cargo.toml",
                &["tokio", "quarry-ports"],
            ),
            (
                "quarry-ports",
                "/w/ports/Cargo.toml",
                &["quarry-domain", "quarry-cache-lru"],
            ),
            (
                "quarry-cache-lru",
                "/w/adapters/cache-lru/Cargo.toml",
                &["quarry-mcp-client", "rmcp"],
            ),
            (
                "quarry-mcp-client",
                "/w/adapters/mcp-client/Cargo.toml",
                &["rmcp"],
            ),
            (
                "quarry",
                "/w/app/Cargo.toml",
                &["quarry-cache-lru", "quarry-mcp-client"],
            ),
        ]);
        let broken = violations(&g);
        for want in [
            "quarry-domain must not depend on quarry-ports",
            "quarry-domain must not depend on the technology crate tokio",
            "quarry-ports must not depend on quarry-cache-lru",
            "adapter quarry-cache-lru must not depend on quarry-mcp-client",
            "quarry-cache-lru must not depend on rmcp (only adapters/mcp-* and testkit may)",
        ] {
            assert!(
                broken.iter().any(|b| b == want),
                "missing {want:?} in {broken:?}"
            );
        }
        assert_eq!(broken.len(), 5, "{broken:?}");
    }
}
