//! The rules hold for this workspace, and each one reports a workspace that breaks it.

use super::*;

fn member(name: &str, dir: &str, deps: &[&str]) -> Member {
    Member {
        name: name.to_owned(),
        dir: dir.to_owned(),
        deps: deps.iter().map(|s| (*s).to_owned()).collect(),
    }
}

/// A workspace that keeps every dependency rule.
fn clean() -> Vec<Member> {
    vec![
        member("quarry-domain", "domain", &["serde", "chrono"]),
        member("quarry-ports", "ports", &["quarry-domain", "async-trait"]),
        member(
            "quarry-usecases",
            "app/usecases",
            &["quarry-domain", "quarry-ports", "tokio"],
        ),
        member(
            "quarry-cache-lru",
            "adapters/cache-lru",
            &["quarry-ports", "lru"],
        ),
        member(
            "quarry-store-sqlite",
            "adapters/store-sqlite",
            &["quarry-ports", "sqlx"],
        ),
        member(
            "quarry-mcp-client",
            "adapters/mcp-client",
            &["quarry-ports", "rmcp"],
        ),
        member(
            "quarry-crypto-ring",
            "adapters/crypto-ring",
            &["quarry-ports", "ring"],
        ),
        member(
            "quarry-testkit",
            "testkit",
            &["quarry-ports", "rmcp", "axum"],
        ),
        member(
            "quarry",
            "app",
            &[
                "quarry-usecases",
                "quarry-cache-lru",
                "quarry-store-sqlite",
                "quarry-mcp-client",
                "quarry-crypto-ring",
            ],
        ),
    ]
}

/// `clean()` with one member's dependencies extended.
fn with(name: &str, extra: &[&str]) -> Vec<Member> {
    let mut all = clean();
    for m in all.iter_mut().filter(|m| m.name == name) {
        m.deps.extend(extra.iter().map(|s| (*s).to_owned()));
    }
    all
}

fn assert_breaks(members: &[Member], want: &str) {
    let broken = dependency_violations(members);
    assert!(
        broken.iter().any(|b| b == want),
        "missing {want:?} in {broken:?}"
    );
}

#[test]
fn the_workspace_keeps_every_rule() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let found = members(root).unwrap();
    for want in [
        "quarry-domain",
        "quarry-usecases",
        "quarry-crypto-ring",
        "quarry-testkit",
    ] {
        assert!(found.iter().any(|m| m.name == want), "{want} in {found:?}");
    }
    assert_eq!(all_violations(root).unwrap(), Vec::<String>::new());
}

#[test]
fn a_clean_workspace_breaks_no_dependency_rule() {
    assert_eq!(dependency_violations(&clean()), Vec::<String>::new());
}

#[test]
fn the_domain_depends_on_no_workspace_crate_and_no_technology() {
    let bad = with("quarry-domain", &["quarry-ports", "tokio"]);
    assert_breaks(&bad, "quarry-domain must not depend on quarry-ports");
    assert_breaks(
        &bad,
        "quarry-domain must not depend on the technology crate tokio",
    );
}

#[test]
fn the_ports_depend_on_the_domain_only() {
    let bad = with("quarry-ports", &["quarry-cache-lru", "sqlx"]);
    assert_breaks(&bad, "quarry-ports must not depend on quarry-cache-lru");
    assert_breaks(
        &bad,
        "quarry-ports must not depend on the technology crate sqlx",
    );
}

#[test]
fn the_use_cases_depend_on_domain_and_ports_only() {
    assert_breaks(
        &with("quarry-usecases", &["quarry-store-sqlite"]),
        "quarry-usecases must not depend on quarry-store-sqlite",
    );
    assert_breaks(
        &with("quarry-usecases", &["quarry-testkit"]),
        "quarry-usecases must not depend on quarry-testkit",
    );
}

#[test]
fn adapters_depend_on_no_sibling_nor_on_use_cases_or_app() {
    for (dep, want) in [
        (
            "quarry-mcp-client",
            "adapter quarry-cache-lru must not depend on quarry-mcp-client",
        ),
        (
            "quarry-usecases",
            "adapter quarry-cache-lru must not depend on quarry-usecases",
        ),
        (
            "quarry",
            "adapter quarry-cache-lru must not depend on quarry",
        ),
    ] {
        assert_breaks(&with("quarry-cache-lru", &[dep]), want);
    }
}

#[test]
fn testkit_depends_on_no_adapter_nor_on_the_app() {
    assert_breaks(
        &with("quarry-testkit", &["quarry-store-sqlite"]),
        "quarry-testkit must not depend on quarry-store-sqlite",
    );
    assert_breaks(
        &with("quarry-testkit", &["quarry"]),
        "quarry-testkit must not depend on quarry",
    );
}

#[test]
fn only_the_app_chooses_between_adapters() {
    let mut bad = clean();
    bad.push(member(
        "quarry-other",
        "other",
        &["quarry-cache-lru", "quarry-mcp-client"],
    ));
    assert_breaks(
        &bad,
        "quarry-other depends on 2 adapters; only the app chooses implementations",
    );
}

#[test]
fn each_technology_lives_in_its_own_place_by_manifest_path() {
    for (who, tech, want) in [
        (
            "quarry-usecases",
            "sqlx",
            "quarry-usecases (app/usecases) must not depend on sqlx (only adapters/store-* may)",
        ),
        (
            "quarry-cache-lru",
            "rmcp",
            "quarry-cache-lru (adapters/cache-lru) must not depend on rmcp (only adapters/mcp-*, testkit may)",
        ),
        (
            "quarry-usecases",
            "ring",
            "quarry-usecases (app/usecases) must not depend on ring (only adapters/crypto-ring, adapters/mcp-client, adapters/oauth-resource may)",
        ),
        (
            "quarry-store-sqlite",
            "ring",
            "quarry-store-sqlite (adapters/store-sqlite) must not depend on ring (only adapters/crypto-ring, adapters/mcp-client, adapters/oauth-resource may)",
        ),
        (
            "quarry",
            "scryer-prolog",
            "quarry (app) must not depend on scryer-prolog (only adapters/policy-prolog may)",
        ),
        (
            "quarry-mcp-client",
            "redis",
            "quarry-mcp-client (adapters/mcp-client) must not depend on redis (only adapters/cache-redis may)",
        ),
        (
            "quarry-mcp-client",
            "axum",
            "quarry-mcp-client (adapters/mcp-client) must not depend on axum (only adapters/mcp-server, adapters/operator-http, testkit may)",
        ),
        (
            "quarry-mcp-client",
            "jsonwebtoken",
            "quarry-mcp-client (adapters/mcp-client) must not depend on jsonwebtoken (only adapters/oauth-resource, testkit may)",
        ),
    ] {
        assert_breaks(&with(who, &[tech]), want);
    }
    // By path, not by name: a crate named like an MCP adapter elsewhere is refused.
    let mut bad = clean();
    bad.push(member("quarry-mcp-lookalike", "tools/lookalike", &["rmcp"]));
    assert_breaks(
        &bad,
        "quarry-mcp-lookalike (tools/lookalike) must not depend on rmcp (only adapters/mcp-*, testkit may)",
    );
}

#[test]
fn tree_rules_catch_tokio_in_the_domain_and_testkit_in_a_lean_build() {
    let domain = "quarry-domain v0.1.0\nserde v1.0.0\nchrono v0.4.0\n";
    let lean = "quarry v0.1.0\nquarry-usecases v0.1.0\ntokio v1.0.0\n";
    assert_eq!(tree_violations(domain, lean), Vec::<String>::new());
    let broken = tree_violations(
        &format!("{domain}some-helper v1.0.0\ntokio v1.0.0\n"),
        &format!("{lean}quarry-testkit v0.1.0\n"),
    );
    assert_eq!(broken.len(), 2, "{broken:?}");
    assert!(broken[0].contains("reaches tokio"));
    assert!(broken[1].contains("links quarry-testkit"));
}

fn src(path: &str, text: &str) -> Source {
    (path.to_owned(), text.to_owned())
}

#[test]
fn source_rules_catch_each_breach() {
    let adapters = vec!["quarry-store-sqlite".to_owned()];
    let fine = [
        src("domain/src/lib.rs", "//! The domain.\n\nmod x;\n"),
        src(
            "app/src/compose.rs",
            "//! Composition.\nuse quarry_store_sqlite::SqliteStore;\n",
        ),
        src(
            "app/src/compose/store.rs",
            "//! Composition, the store side.\nuse quarry_store_sqlite::SqliteStore;\n",
        ),
    ];
    assert_eq!(source_violations(&fine, &adapters), Vec::<String>::new());
    let bad = [
        src("domain/src/x.rs", "use std::fmt;\n"),
        src(
            "ports/src/y.rs",
            "//! Y.\n#[test]\n#[ignore]\nfn later() {}\n",
        ),
        src(
            "app/src/cli.rs",
            "//! CLI.\nuse quarry_store_sqlite::SqliteStore;\n",
        ),
        src(
            "app/usecases/src/big.rs",
            &format!("//! Big.\n{}", "let x = 1;\n".repeat(MAX_APP_LINES)),
        ),
    ];
    let broken = source_violations(&bad, &adapters);
    for want in [
        "domain/src/x.rs does not open with a //! module doc",
        "ports/src/y.rs:3: no test may be #[ignore]d",
        "app/src/cli.rs names the adapter quarry-store-sqlite; only app/src/compose.rs (and compose/) may",
        "app/usecases/src/big.rs has 401 lines; split it (at most 400 in the app and the use cases)",
    ] {
        assert!(
            broken.iter().any(|b| b == want),
            "missing {want:?} in {broken:?}"
        );
    }
    assert_eq!(broken.len(), 4, "{broken:?}");
}
