//! Servers registered at runtime: through the tool (by an agent) and the CLI (by an operator),
//! persisted in the store, picked up by a running gateway, removed with their processes.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{QUARRY, call, call_error, gateway, http_fixture, stdio_fixture};

// Registered servers survive a restart; idempotency keys replay or refuse; agents may not
// register programs to run unless the configuration allows it.
#[tokio::test(flavor = "multi_thread")]
async fn agents_add_http_servers_that_persist_and_remove_them() {
    let dir = tempfile::tempdir().unwrap();
    let notes = http_fixture("notes", 2).await;
    let config = stdio_fixture("files", &[]) + "[registry]\nallow_tool_registration = true\n";
    let client = gateway(dir.path(), &config).await;

    let add = json!({"name": "notes", "endpoint": notes.url, "idempotency_key": "add-notes-1"});
    let added = call(&client, "add_mcp_server", add.clone()).await;
    assert_eq!(added["server_name"], "notes");
    assert_eq!(added["status"], "connected", "{added}");
    assert_eq!(added["resource_count"], 8);
    let replay = call(&client, "add_mcp_server", add).await;
    assert_eq!(
        replay, added,
        "the same key and arguments replay the first result"
    );
    let (code, _) = call_error(
        &client,
        "add_mcp_server",
        json!({"name": "notes2", "endpoint": notes.url, "idempotency_key": "add-notes-1"}),
    )
    .await;
    assert_eq!(code, "E010");
    let (code, message) = call_error(
        &client,
        "add_mcp_server",
        json!({"name": "Notes", "endpoint": notes.url}),
    )
    .await;
    assert_eq!(code, "E001", "{message}");
    let (code, message) = call_error(
        &client,
        "add_mcp_server",
        json!({"name": "evil", "command": "sh", "args": ["-c", "id"]}),
    )
    .await;
    assert_eq!(code, "E004", "{message}");
    let (code, _) = call_error(
        &client,
        "add_mcp_server",
        json!({"name": "bad", "endpoint": "file:///etc/passwd"}),
    )
    .await;
    assert_eq!(code, "E001");

    let listing = call(&client, "list_mcp_resources", json!({"server": "notes"})).await;
    assert_eq!(listing["total_count"], 8);
    client.cancel().await.unwrap();

    // A new gateway process on the same store has it.
    let client = gateway(dir.path(), &config).await;
    let listing = call(&client, "list_mcp_resources", json!({"limit": 1000})).await;
    assert_eq!(listing["total_count"], 6 + 8, "{listing}");
    let (code, _) = call_error(&client, "remove_mcp_server", json!({"name": "files"})).await;
    assert_eq!(
        code, "E001",
        "configured servers are removed in the configuration file"
    );
    let removed = call(
        &client,
        "remove_mcp_server",
        json!({"name": "notes", "idempotency_key": "rm-1"}),
    )
    .await;
    assert_eq!(removed["server_name"], "notes");
    let again = call(
        &client,
        "remove_mcp_server",
        json!({"name": "notes", "idempotency_key": "rm-1"}),
    )
    .await;
    assert_eq!(again, removed, "replayed");
    let (code, _) = call_error(&client, "remove_mcp_server", json!({"name": "notes"})).await;
    assert_eq!(code, "E003");
    let (code, _) = call_error(&client, "list_mcp_resources", json!({"server": "notes"})).await;
    assert_eq!(code, "E003");
    client.cancel().await.unwrap();
}

fn quarry_cli(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(QUARRY)
        .args(args)
        .arg("--config")
        .arg(dir.join("quarry.toml"))
        .env("QUARRY_STORE_PATH", dir.join("quarry.db"))
        .env_remove("QUARRY_CONFIG")
        .output()
        .unwrap()
}

async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !check().await {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// An operator adds a stdio server with the CLI; the running gateway picks it up, serves it, and
// drops it (stopping its process) when the CLI removes it.
#[tokio::test(flavor = "multi_thread")]
async fn the_cli_registers_servers_a_running_gateway_picks_up() {
    let dir = tempfile::tempdir().unwrap();
    let client = gateway(dir.path(), "").await;
    let marker = format!("cli-added-{}", std::process::id());
    let out = quarry_cli(
        dir.path(),
        &[
            "servers",
            "add",
            "tools",
            "--command",
            QUARRY,
            "--arg",
            "fixture",
            "--arg",
            "--name",
            "--arg",
            &marker,
            "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["status"], "connected", "{status}");
    assert_eq!(status["resource_count"], 6);

    eventually("the gateway to see the new server", async || {
        let listing = call(&client, "list_mcp_resources", json!({})).await;
        listing["total_count"] == 6
    })
    .await;
    let read = call(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://tools/fixture_3A//text/hello.txt"}),
    )
    .await;
    assert_eq!(read["content"], format!("Hello from {marker}!\n"));

    let listed: Value =
        serde_json::from_slice(&quarry_cli(dir.path(), &["servers", "--json"]).stdout).unwrap();
    assert_eq!(listed[0]["server_name"], "tools");
    let dup = quarry_cli(
        dir.path(),
        &[
            "servers",
            "add",
            "tools",
            "--endpoint",
            "http://127.0.0.1:1/mcp",
        ],
    );
    assert_eq!(
        dup.status.code(),
        Some(11),
        "{}",
        String::from_utf8_lossy(&dup.stderr)
    );

    let out = quarry_cli(dir.path(), &["servers", "remove", "tools"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually("the gateway to drop the server", async || {
        let (is_error, value) =
            crate::support::call_raw(&client, "list_mcp_resources", json!({"server": "tools"}))
                .await;
        is_error && value["error_code"] == "E003"
    })
    .await;
    eventually("the server's process to stop", async || {
        !std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&marker))
        })
    })
    .await;
    client.cancel().await.unwrap();
}

// Until a policy decides who may configure the gateway, agents change the registry only where the
// configuration says so.
#[tokio::test]
async fn agents_may_not_change_the_registry_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let client = gateway(dir.path(), &stdio_fixture("files", &[])).await;
    let (code, message) = call_error(
        &client,
        "add_mcp_server",
        json!({"name": "notes", "endpoint": "http://127.0.0.1:9/mcp"}),
    )
    .await;
    assert_eq!(code, "E004", "{message}");
    assert!(
        message.contains("registry.allow_tool_registration"),
        "{message}"
    );
    let (code, _) = call_error(&client, "remove_mcp_server", json!({"name": "files"})).await;
    assert_eq!(code, "E004");
    client.cancel().await.unwrap();
}

// Concurrent calls with one idempotency key run once: every caller gets the first result.
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_calls_with_one_key_run_once() {
    let dir = tempfile::tempdir().unwrap();
    let notes = http_fixture("notes", 0).await;
    let config = "[registry]\nallow_tool_registration = true\n";
    let client = std::sync::Arc::new(gateway(dir.path(), config).await);
    let add = json!({"name": "notes", "endpoint": notes.url, "idempotency_key": "same"});
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let client = client.clone();
            let add = add.clone();
            tokio::spawn(
                async move { crate::support::call_raw(&client, "add_mcp_server", add).await },
            )
        })
        .collect();
    let mut results = Vec::new();
    for c in calls {
        let (is_error, value) = c.await.unwrap();
        assert!(!is_error, "{value}");
        results.push(value);
    }
    assert!(results.windows(2).all(|w| w[0] == w[1]), "{results:?}");
}

// Two gateway processes on one SQLite file, the same key sent to both at once: the mutation runs
// once (the upstream is listed by one registration only) and both answer with its result; the
// key with other arguments is refused (E010) by either process.
#[tokio::test(flavor = "multi_thread")]
async fn two_processes_sharing_a_store_run_one_keyed_mutation_once() {
    let dir = tempfile::tempdir().unwrap();
    let notes = http_fixture("notes", 0).await;
    let config = "[registry]\nallow_tool_registration = true\n";
    let one = gateway(dir.path(), config).await;
    let two = gateway(dir.path(), config).await;
    let add = json!({"name": "notes", "endpoint": notes.url, "idempotency_key": "shared-key"});
    let (first, second) = tokio::join!(
        crate::support::call_raw(&one, "add_mcp_server", add.clone()),
        crate::support::call_raw(&two, "add_mcp_server", add.clone()),
    );
    assert!(!first.0 && !second.0, "{first:?} {second:?}");
    assert_eq!(first.1, second.1, "one ran, the other replayed its result");
    assert_eq!(
        notes.server.lists(),
        1,
        "the registration (which lists the new server once) ran in one process only"
    );
    let other = json!({"name": "notes-b", "endpoint": notes.url, "idempotency_key": "shared-key"});
    for client in [&one, &two] {
        let (code, message) = call_error(client, "add_mcp_server", other.clone()).await;
        assert_eq!(code, "E010", "{message}");
    }
    one.cancel().await.unwrap();
    two.cancel().await.unwrap();
}
