//! Governance end to end: `quarry serve` with a `[policy]`, two fixture upstreams, and agents the
//! configuration describes. What an agent lists is what it may read; what it may not is E004
//! before anything reaches the upstream; a policy that cannot decide denies (E011) and the
//! stream stays pure JSON-RPC; a broken policy keeps the gateway from starting.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::{QUARRY, call, call_error, call_raw, gateway, http_fixture, http_server};

/// Two servers, `notes` (item 2 declared protected) and `wiki`, the agents of the story, and
/// `agent` as the stdio identity.
pub(crate) fn config(notes: &str, wiki: &str, agent: &str, extra: &str) -> String {
    format!(
        "{}protected_uris = [\"fixture://item/2\"]\n\n{}\
         [security]\nrequire_auth_for_protected = false\n\n\
         [registry]\nallow_tool_registration = true\n\n\
         [serve]\nagent = {agent:?}\n\n\
         [policy]\n{extra}\n\
         [policy.agents.alice]\npermissions = [\"mcp_access\"]\nservers = [\"notes\"]\n\n\
         [policy.agents.bob]\npermissions = [\"mcp_access\", \"mcp_restricted_access\"]\nservers = [\"notes\"]\ntenant_resources = [\"mcp://notes/fixture_3A//item/2\"]\n\n\
         [policy.agents.root]\npermissions = [\"mcp_access\", \"admin\", \"mcp_admin\"]\n",
        http_server("notes", notes),
        http_server("wiki", wiki),
    )
}

fn uris(listing: &Value) -> Vec<String> {
    listing["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uri"].as_str().unwrap().to_owned())
        .collect()
}

// traces: REQ-071-019, SR-004.1, PO-1, PO-4, CA-1, OA-7 — alice may use notes only (and no tool
// argument can make her someone else): her listing
// shows notes' resources and no protected one, each of them readable; wiki, the protected item
// and every change are E004, and the denied reads never reach the upstream (the fixture counts
// them). Bob, with restricted access in the item's tenant, reads it; root, an admin, configures
// a credential that alice may not.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_sees_and_reads_exactly_what_the_policy_allows() {
    let notes = http_fixture("notes", 3).await;
    let wiki = http_fixture("wiki", 3).await;
    let dir = tempfile::tempdir().unwrap();
    let alice = gateway(dir.path(), &config(&notes.url, &wiki.url, "alice", "")).await;

    let listing = call(&alice, "list_mcp_resources", json!({"limit": 1000})).await;
    let shown = uris(&listing);
    assert!(!shown.is_empty());
    assert!(
        shown.iter().all(|u| u.starts_with("mcp://notes/")),
        "{shown:?}"
    );
    assert!(
        !shown.contains(&"mcp://notes/fixture_3A//item/2".to_owned()),
        "{shown:?}"
    );
    assert_eq!(listing["total_count"], shown.len(), "{listing}");
    let servers: Vec<_> = listing["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["server_name"].clone())
        .collect();
    assert_eq!(servers, [json!("notes")]);
    // Every resource listed is one the policy lets alice read (some fixture resources fail or
    // stall by design: what matters is that none is denied).
    for uri in &shown {
        let (_, result) = call_raw(
            &alice,
            "read_mcp_resource",
            json!({"resource_uri": uri, "limit": 64}),
        )
        .await;
        assert_ne!(result["error_code"], "E004", "{uri}: {result}");
    }
    let reads_before = wiki.server.reads();
    for denied in [
        "mcp://wiki/fixture_3A//item/1",
        "mcp://notes/fixture_3A//item/2",
        "mcp://wiki/fixture_3A//no/such/thing",
    ] {
        let (code, message) =
            call_error(&alice, "read_mcp_resource", json!({"resource_uri": denied})).await;
        assert_eq!(code, "E004", "{denied}: {message}");
        assert!(message.starts_with("access denied by policy"), "{message}");
    }
    assert_eq!(
        wiki.server.reads(),
        reads_before,
        "a denied read reached the upstream"
    );
    // OA-7: the identity comes from the transport; a tool call cannot claim another.
    let (code, message) = call_error(
        &alice,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://wiki/fixture_3A//item/1", "agent": "root"}),
    )
    .await;
    assert_eq!(code, "E001", "{message}");
    let (code, _) = call_error(&alice, "list_mcp_resources", json!({"server": "wiki"})).await;
    assert_eq!(code, "E004");
    let configure = json!({"server": "notes", "auth_type": "bearer_token", "credentials": {"token": "t0ken"}, "test_connection": false});
    let (code, _) = call_error(&alice, "mcp_auth_configure", configure.clone()).await;
    assert_eq!(code, "E004");
    let (code, _) = call_error(&alice, "purge_mcp_cache", json!({})).await;
    assert_eq!(code, "E004");
    alice.cancel().await.unwrap();

    let bob = gateway(dir.path(), &config(&notes.url, &wiki.url, "bob", "")).await;
    let protected = call(
        &bob,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://notes/fixture_3A//item/2"}),
    )
    .await;
    assert!(
        protected["content"].as_str().unwrap().contains("item 2"),
        "{protected}"
    );
    let listed = uris(&call(&bob, "list_mcp_resources", json!({"limit": 1000})).await);
    assert!(
        listed.contains(&"mcp://notes/fixture_3A//item/2".to_owned()),
        "{listed:?}"
    );
    bob.cancel().await.unwrap();

    let root = gateway(dir.path(), &config(&notes.url, &wiki.url, "root", "")).await;
    let done = call(&root, "mcp_auth_configure", configure).await;
    assert_eq!(done["success"], true, "{done}");
    let everything = uris(&call(&root, "list_mcp_resources", json!({"limit": 1000})).await);
    assert!(
        everything.iter().any(|u| u.starts_with("mcp://wiki/")),
        "{everything:?}"
    );
    root.cancel().await.unwrap();
}

// traces: REQ-071-016, SR-004.1 — the [registry] flags are facts of the policy: with
// allow_tool_registration, an admin registers a server over HTTP but not a program to run
// (that needs allow_tool_commands too), and an agent that may not configure the gateway does
// neither; a facts file that adds registry_allows(tool_commands) lets the admin register one.
#[tokio::test(flavor = "multi_thread")]
async fn the_registry_flags_are_facts_of_the_policy() {
    let notes = http_fixture("notes", 1).await;
    let wiki = http_fixture("wiki", 1).await;
    let other = http_fixture("other", 1).await;
    let dir = tempfile::tempdir().unwrap();
    let command =
        json!({"name": "local", "command": QUARRY, "args": ["fixture", "--name", "local"]});

    let alice = gateway(dir.path(), &config(&notes.url, &wiki.url, "alice", "")).await;
    let (code, message) = call_error(
        &alice,
        "add_mcp_server",
        json!({"name": "other", "endpoint": other.url}),
    )
    .await;
    assert_eq!(code, "E004", "{message}");
    alice.cancel().await.unwrap();

    let root = gateway(dir.path(), &config(&notes.url, &wiki.url, "root", "")).await;
    let added = call(
        &root,
        "add_mcp_server",
        json!({"name": "other", "endpoint": other.url}),
    )
    .await;
    assert_eq!(added["server_name"], "other", "{added}");
    let (code, message) = call_error(&root, "add_mcp_server", command.clone()).await;
    assert_eq!(code, "E004", "{message}");
    assert!(message.contains("program"), "{message}");
    let removed = call(&root, "remove_mcp_server", json!({"name": "other"})).await;
    assert_eq!(removed["server_name"], "other", "{removed}");
    root.cancel().await.unwrap();

    let facts = dir.path().join("registry.pl");
    std::fs::write(&facts, "registry_allows(tool_commands).\n").unwrap();
    let extra = format!("facts = [{:?}]\n", facts.display().to_string());
    let root = gateway(dir.path(), &config(&notes.url, &wiki.url, "root", &extra)).await;
    let added = call(&root, "add_mcp_server", command).await;
    assert_eq!(added["server_name"], "local", "{added}");
    root.cancel().await.unwrap();
}

/// `quarry serve` with `config` in `dir`; its stderr.
fn serve_stderr(dir: &Path, config: &str) -> (Option<i32>, String) {
    std::fs::write(dir.join("quarry.toml"), config).unwrap();
    let out = std::process::Command::new(QUARRY)
        .args(["serve", "--config"])
        .arg(dir.join("quarry.toml"))
        .env("QUARRY_STORE_PATH", dir.join("quarry.db"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// traces: PO-2, PO-6, TR-7 — a rule that prints and loops denies with E011 within the budget;
// the agent's stream stays JSON-RPC and the next request is answered. A policy calling an
// undefined predicate keeps `quarry serve` from starting, naming it; `quarry policy lint` says
// the same. Without a [policy], `serve` says that the agent may do everything.
#[tokio::test(flavor = "multi_thread")]
async fn a_bad_policy_denies_or_refuses_to_start_and_the_stream_stays_pure() {
    let notes = http_fixture("notes", 1).await;
    let wiki = http_fixture("wiki", 1).await;
    let dir = tempfile::tempdir().unwrap();
    let hostile = dir.path().join("hostile.pl");
    std::fs::write(
        &hostile,
        "has_permission(alice, mcp_access) :- write('QUARRY'), nl, spin.\nspin :- spin.\n",
    )
    .unwrap();
    let extra = format!(
        "facts = [{:?}]\ndecision_budget_ms = 2000\n",
        hostile.display().to_string()
    );
    let alice = gateway(dir.path(), &config(&notes.url, &wiki.url, "alice", &extra)).await;
    let (is_error, result) = call_raw(
        &alice,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://notes/fixture_3A//item/1"}),
    )
    .await;
    assert!(is_error);
    assert_eq!(result["error_code"], "E011", "{result}");
    // The stream is intact: the client still gets answers.
    let tools = alice.list_all_tools().await.unwrap();
    assert!(!tools.is_empty());
    alice.cancel().await.unwrap();

    let undefined = dir.path().join("undefined.pl");
    std::fs::write(
        &undefined,
        "has_permission(alice, mcp_access) :- on_call(alice).\n",
    )
    .unwrap();
    let extra = format!("facts = [{:?}]\n", undefined.display().to_string());
    let (code, stderr) = serve_stderr(dir.path(), &config(&notes.url, &wiki.url, "alice", &extra));
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("on_call/1"), "{stderr}");
    let lint = std::process::Command::new(QUARRY)
        .args(["policy", "lint", "--config"])
        .arg(dir.path().join("quarry.toml"))
        .output()
        .unwrap();
    assert!(!lint.status.success());
    assert!(String::from_utf8_lossy(&lint.stderr).contains("on_call/1"));

    let (_, stderr) = serve_stderr(dir.path(), &http_server("notes", &notes.url));
    assert!(stderr.contains("no [policy] is configured"), "{stderr}");
}

// traces: SR-004 — `quarry policy check` says allow or deny and which rule and facts decided;
// `quarry policy test` runs the shipped golden cases.
#[test]
fn policy_check_explains_and_policy_test_runs_the_golden_cases() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("quarry.toml"),
        "[policy]\n[policy.agents.alice]\npermissions = [\"mcp_access\"]\nservers = [\"docs\"]\n",
    )
    .unwrap();
    let check = |args: &[&str]| {
        let out = std::process::Command::new(QUARRY)
            .args(["policy", "check", "--config"])
            .arg(dir.path().join("quarry.toml"))
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let yes = check(&[
        "--agent",
        "alice",
        "--server",
        "docs",
        "--resource",
        "mcp://docs/a",
    ]);
    assert!(
        yes.starts_with("allow\n") && yes.contains("has_permission(alice, mcp_access)"),
        "{yes}"
    );
    // The server comes from the gateway URI when not given, as the gateway does.
    let inferred = check(&["--agent", "alice", "--resource", "mcp://docs/a"]);
    assert!(
        inferred.starts_with("allow\nmay_access_mcp: allow"),
        "{inferred}"
    );
    let bad = std::process::Command::new(QUARRY)
        .args([
            "policy",
            "check",
            "--agent",
            "alice",
            "--resource",
            "docs/a",
        ])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(11));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("gateway URI"));
    let no = check(&["--agent", "alice", "--server", "wiki", "--json"]);
    let no: Value = serde_json::from_str(&no).unwrap();
    assert_eq!(no["decision"], "deny", "{no}");
    let cases = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policy/tests");
    let out = std::process::Command::new(QUARRY)
        .args(["policy", "test"])
        .arg(&cases)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("0 failed"), "{stdout}");
}

/// Reads `uri` until the result's error code (or `None` for success) is `want`, for up to 15 s.
async fn until(client: &crate::support::Client, uri: &str, want: Option<&str>) {
    let started = std::time::Instant::now();
    loop {
        let (is_error, result) = call_raw(
            client,
            "read_mcp_resource",
            json!({"resource_uri": uri, "use_cache": false}),
        )
        .await;
        let got = if is_error {
            result["error_code"].as_str().map(str::to_owned)
        } else {
            None
        };
        if got.as_deref() == want {
            return;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(15),
            "still {got:?}, want {want:?}: {result}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

// traces: PO-5 — the policy's files change while the gateway serves: a sound new policy takes
// over (alice loses access); a broken one is refused and the one before keeps deciding (alice
// keeps access until a sound policy says otherwise).
#[tokio::test(flavor = "multi_thread")]
async fn po_5_a_changed_policy_is_swapped_in_and_a_broken_one_is_refused() {
    let notes = http_fixture("notes", 1).await;
    let wiki = http_fixture("wiki", 1).await;
    let dir = tempfile::tempdir().unwrap();
    let facts = dir.path().join("facts.pl");
    std::fs::write(
        &facts,
        "has_permission(carol, mcp_access).\nmcp_server_assignment(carol, [notes]).\n",
    )
    .unwrap();
    let extra = format!("facts = [{:?}]\n", facts.display().to_string());
    let carol = gateway(dir.path(), &config(&notes.url, &wiki.url, "carol", &extra)).await;
    let item = "mcp://notes/fixture_3A//item/1";
    until(&carol, item, None).await;

    std::fs::write(
        &facts,
        "has_permission(carol, mcp_access) :- no_such_rule(carol).\n",
    )
    .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    until(&carol, item, None).await;

    std::fs::write(&facts, "has_permission(carol, mcp_access).\n").unwrap();
    until(&carol, item, Some("E004")).await;
    carol.cancel().await.unwrap();
}
