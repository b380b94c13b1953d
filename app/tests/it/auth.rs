//! Upstream credentials end to end: stored (encrypted) with `quarry auth` or the McpAuthTool
//! tools, sent to an HTTP fixture that demands them, and never written anywhere in plaintext.

use std::{path::Path, process::Stdio};

use quarry_testkit::fixture::{self, FixtureArgs, HttpFixture};
use rmcp::{ServiceExt, model::ClientConfig, transport::TokioChildProcess};
use serde_json::json;

use crate::support::{Client, QUARRY, call, call_error, call_raw, http_server};

pub(crate) const KEY: &str = "sk-canary-api-key-5e1f0c9b";
const TOKEN: &str = "canary-bearer-token-77d2a4e8";
pub(crate) const NOTE: &str = "mcp://notes/fixture_3A//text/hello.txt";

pub(crate) async fn demanding(header: &str) -> HttpFixture {
    fixture::serve_http(
        FixtureArgs {
            name: "notes".into(),
            require_header: Some(header.into()),
            ..FixtureArgs::default()
        },
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap()
}

/// The gateway over stdio with debug logs kept in `dir/stderr.log`.
pub(crate) async fn gateway(dir: &Path, config: &str) -> Client {
    std::fs::write(dir.join("quarry.toml"), config).unwrap();
    let log = std::fs::File::create(dir.join("stderr.log")).unwrap();
    let mut cmd = tokio::process::Command::new(QUARRY);
    cmd.args(["serve", "--stdio", "--config"])
        .arg(dir.join("quarry.toml"))
        .current_dir(dir)
        .env_remove("QUARRY_CONFIG")
        .env_remove("QUARRY_VAULT_KEY")
        .env("QUARRY_LOGGING_LEVEL", "debug")
        .env("QUARRY_STORE_PATH", dir.join("quarry.db"));
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap();
    ClientConfig::default().serve(transport).await.unwrap()
}

/// `quarry ARGS` in `dir`, with the configuration and store of `dir` and the key file beside
/// the store (more arguments can follow).
pub(crate) fn quarry(dir: &Path, args: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new(QUARRY);
    cmd.args(args)
        .env("QUARRY_CONFIG", dir.join("quarry.toml"))
        .current_dir(dir)
        .env_remove("QUARRY_VAULT_KEY")
        .env("QUARRY_STORE_PATH", dir.join("quarry.db"));
    cmd
}

/// `quarry auth ARGS` in `dir`, the secret (if any) in the environment variable SECRET.
pub(crate) fn quarry_auth(
    dir: &Path,
    args: &[&str],
    secret: Option<&str>,
) -> (i32, String, String) {
    let mut cmd = quarry(dir, &["auth"]);
    cmd.args(args);
    if let Some(secret) = secret {
        cmd.env("SECRET", secret);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Stores `KEY` as the API key of `server` with `quarry auth configure`, without a test.
pub(crate) fn store_key(dir: &Path, server: &str) {
    let args = [
        "configure",
        server,
        "--type",
        "api_key",
        "--from-env",
        "SECRET",
        "--no-test",
    ];
    let (code, out, err) = quarry_auth(dir, &args, Some(KEY));
    assert_eq!(code, 0, "{out}{err}");
}

/// Every file Quarry wrote in `dir`, as bytes (the store, its WAL and journal, the logs).
fn written(dir: &Path) -> Vec<(String, Vec<u8>)> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
        .collect()
}

pub(crate) fn assert_nowhere(dir: &Path, secret: &str, results: &[String]) {
    for (file, bytes) in written(dir) {
        if let Some(at) = bytes
            .windows(secret.len())
            .position(|w| w == secret.as_bytes())
        {
            let before = String::from_utf8_lossy(&bytes[at.saturating_sub(300)..at]);
            panic!("the secret is in {file}, after: {before}");
        }
    }
    for result in results {
        assert!(
            !result.contains(secret),
            "the secret is in a result: {result}"
        );
    }
}

// traces: REQ-071-037, REQ-071-042, REQ-071-043, UC-9 — an API key given to `quarry auth
// configure` (from the environment) is tested at once, sent in its header by `quarry serve`, and
// found in no file Quarry wrote (store, WAL, key file, logs at debug) nor in any result.
#[tokio::test(flavor = "multi_thread")]
async fn uc_9_an_api_key_reaches_the_upstream_and_is_written_nowhere_in_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    let notes = demanding(&format!("X-API-Key={KEY}")).await;
    std::fs::write(
        dir.path().join("quarry.toml"),
        http_server("notes", &notes.url),
    )
    .unwrap();

    // Without a credential the server refuses: E005 at once, saying none is configured.
    let (code, _, stderr) = quarry_auth(dir.path(), &["test", "notes"], None);
    assert_eq!(code, 15, "{stderr}");
    assert!(stderr.contains("no credential is configured"), "{stderr}");

    let (code, stdout, stderr) = quarry_auth(
        dir.path(),
        &[
            "configure",
            "notes",
            "--type",
            "api_key",
            "--from-env",
            "SECRET",
        ],
        Some(KEY),
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("connection test: connected"), "{stdout}");
    assert!(stderr.contains("created the vault key file"), "{stderr}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("vault.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    let client = gateway(dir.path(), &http_server("notes", &notes.url)).await;
    let read = call(&client, "read_mcp_resource", json!({"resource_uri": NOTE})).await;
    assert_eq!(read["content"], "Hello from notes!\n");
    let listing = call(&client, "list_mcp_resources", json!({"server": "notes"})).await;
    assert_eq!(listing["servers"][0]["authenticated"], true, "{listing}");
    let (_, test) = call_raw(&client, "mcp_auth_test", json!({"server": "notes"})).await;
    assert_eq!(test["connection_status"], "connected", "{test}");
    client.cancel().await.unwrap();

    let (code, stdout, _) = quarry_auth(dir.path(), &["test", "notes", "--json"], None);
    assert_eq!(code, 0, "{stdout}");
    let servers = quarry(dir.path(), &["servers"]).output().unwrap();
    let table = String::from_utf8_lossy(&servers.stdout).into_owned();
    let header = table.lines().next().unwrap_or_default();
    let row = table.lines().nth(1).unwrap_or_default();
    let column = header
        .find("AUTHENTICATED")
        .expect("an AUTHENTICATED column");
    assert!(row[column..].starts_with("yes"), "{table}");
    let results = [
        read.to_string(),
        listing.to_string(),
        test.to_string(),
        stdout,
    ];
    assert_nowhere(dir.path(), KEY, &results);
}

// traces: REQ-071-040, REQ-071-044, REQ-071-046, REQ-071-045 — through the tools: a wrong bearer
// token is stored but its test fails with E005 and says so; the right one connects (and its
// idempotency key replays it); reads carry it; removing it makes reads E005 again, and removing
// twice is E001.
#[tokio::test(flavor = "multi_thread")]
async fn a_bearer_token_is_configured_tested_and_removed_through_the_tools() {
    let dir = tempfile::tempdir().unwrap();
    let notes = demanding(&format!("Authorization=Bearer {TOKEN}")).await;
    let config = http_server("notes", &notes.url) + "[registry]\nallow_tool_registration = true\n";
    let client = gateway(dir.path(), &config).await;

    let (code, message) =
        call_error(&client, "read_mcp_resource", json!({"resource_uri": NOTE})).await;
    assert_eq!(code, "E005", "{message}");

    let (is_error, wrong) = call_raw(
        &client,
        "mcp_auth_configure",
        json!({"server": "notes", "auth_type": "bearer_token", "credentials": {"token": "wrong-token"}}),
    )
    .await;
    assert!(is_error, "{wrong}");
    assert_eq!(wrong["error_code"], "E005", "{wrong}");
    assert_eq!(wrong["connection_status"], "error", "{wrong}");
    assert!(wrong["server_id"].is_string(), "{wrong}");

    let right = call(
        &client,
        "mcp_auth_configure",
        json!({"server": "notes", "auth_type": "bearer_token", "credentials": {"token": TOKEN},
               "idempotency_key": "configure-1"}),
    )
    .await;
    assert_eq!(right["connection_status"], "connected", "{right}");
    assert!(right["latency_ms"].is_u64(), "{right}");
    // The same key and arguments replay the first result; other arguments under it are E010.
    let replayed = call(
        &client,
        "mcp_auth_configure",
        json!({"server": "notes", "auth_type": "bearer_token", "credentials": {"token": TOKEN},
               "idempotency_key": "configure-1"}),
    )
    .await;
    assert_eq!(replayed, right, "replayed");
    let (code, message) = call_error(
        &client,
        "mcp_auth_configure",
        json!({"server": "notes", "auth_type": "api_key", "credentials": {"key": KEY},
               "idempotency_key": "configure-1"}),
    )
    .await;
    assert_eq!(code, "E010", "{message}");
    let read = call(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": NOTE, "use_cache": false}),
    )
    .await;
    assert_eq!(read["content"], "Hello from notes!\n");

    let removed = call(&client, "mcp_auth_remove", json!({"server": "notes"})).await;
    assert_eq!(removed["success"], true, "{removed}");
    let (code, message) = call_error(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": NOTE, "use_cache": false}),
    )
    .await;
    assert_eq!(code, "E005", "{message}");
    let (code, message) = call_error(&client, "mcp_auth_remove", json!({"server": "notes"})).await;
    assert_eq!(code, "E001", "{message}");
    client.cancel().await.unwrap();
    assert_nowhere(dir.path(), TOKEN, &[right.to_string(), read.to_string()]);
}

// traces: UC-11, REQ-071-041 — bad credentials never reach the store, and the error never
// repeats a secret, wherever in the arguments it was put; agents may not configure credentials
// unless the configuration allows it (E004); a stdio server takes none (E001).
#[tokio::test(flavor = "multi_thread")]
async fn uc_11_bad_credentials_are_refused_before_storage_without_echoing_them() {
    let dir = tempfile::tempdir().unwrap();
    let notes = demanding(&format!("X-API-Key={KEY}")).await;
    let config = http_server("notes", &notes.url)
        + &crate::support::stdio_fixture("files", &[])
        + "[registry]\nallow_tool_registration = true\n";
    let client = gateway(dir.path(), &config).await;
    let bad = [
        json!({"server": "notes", "auth_type": "api_key", "credentials": {}}),
        json!({"server": "notes", "auth_type": "api_key", "credentials": {"key": format!("{KEY}\r\nX: y")}}),
        json!({"server": "notes", "auth_type": "api_key", "credentials": {"key": KEY, "header": "Host"}}),
        json!({"server": "notes", "auth_type": KEY, "credentials": {"key": KEY}}),
        json!({"server": "notes", "auth_type": "api_key", "credentials": KEY}),
        json!({"server": "notes", "auth_type": "api_key", "credentials": {"key": KEY}, "test_connection": KEY}),
        json!({"server": "files", "auth_type": "api_key", "credentials": {"key": KEY}}),
    ];
    for args in bad {
        let (code, message) = call_error(&client, "mcp_auth_configure", args.clone()).await;
        assert_eq!(code, "E001", "{args}: {message}");
        assert!(!message.contains(KEY), "{message}");
    }
    client.cancel().await.unwrap();
    let closed = gateway(dir.path(), &http_server("notes", &notes.url)).await;
    let (code, _) = call_error(
        &closed,
        "mcp_auth_configure",
        json!({"server": "notes", "auth_type": "api_key", "credentials": {"key": KEY}}),
    )
    .await;
    assert_eq!(code, "E004");
    closed.cancel().await.unwrap();
    assert_nowhere(dir.path(), KEY, &[]);
}

// traces: REQ-071-048, SR-003 — protected resources: the listing marks them, reading one needs
// a credential for its server (checked before each access, the cache included: E005 naming the
// command that fixes it), unprotected ones read as before, and require_auth_for_protected =
// false lets them be read without one.
#[tokio::test(flavor = "multi_thread")]
async fn protected_resources_need_a_credential_before_each_read() {
    let dir = tempfile::tempdir().unwrap();
    let notes = fixture::serve_http(
        FixtureArgs {
            name: "notes".into(),
            ..FixtureArgs::default()
        },
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let config = http_server("notes", &notes.url)
        .replace("\n\n", "\nprotected_uris = [\"fixture://text/*\"]\n\n")
        + "[registry]\nallow_tool_registration = true\n";
    let client = gateway(dir.path(), &config).await;
    let listing = call(&client, "list_mcp_resources", json!({"server": "notes"})).await;
    let protected: Vec<_> = listing["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["is_protected"] == true)
        .map(|r| r["uri"].as_str().unwrap().to_owned())
        .collect();
    assert!(protected.contains(&NOTE.to_owned()), "{listing}");
    assert!(
        protected
            .iter()
            .all(|u| u.starts_with("mcp://notes/fixture_3A//text/")),
        "{protected:?}"
    );

    let (code, message) =
        call_error(&client, "read_mcp_resource", json!({"resource_uri": NOTE})).await;
    assert_eq!(code, "E005", "{message}");
    assert!(message.contains("quarry auth configure notes"), "{message}");
    let open = listing["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["is_protected"] == false)
        .expect("an unprotected resource")["uri"]
        .clone();
    call(&client, "read_mcp_resource", json!({"resource_uri": open})).await;

    call(
        &client,
        "mcp_auth_configure",
        json!({"server": "notes", "auth_type": "api_key", "credentials": {"key": KEY}}),
    )
    .await;
    let read = call(&client, "read_mcp_resource", json!({"resource_uri": NOTE})).await;
    assert_eq!(read["content"], "Hello from notes!\n");
    call(&client, "mcp_auth_remove", json!({"server": "notes"})).await;
    let (code, _) = call_error(&client, "read_mcp_resource", json!({"resource_uri": NOTE})).await;
    assert_eq!(
        code, "E005",
        "the cached copy is not served without the credential"
    );
    client.cancel().await.unwrap();

    let relaxed = config.replace(
        "[registry]",
        "[security]\nrequire_auth_for_protected = false\n\n[registry]",
    );
    let client = gateway(dir.path(), &relaxed).await;
    let read = call(&client, "read_mcp_resource", json!({"resource_uri": NOTE})).await;
    assert_eq!(read["content"], "Hello from notes!\n");
    client.cancel().await.unwrap();
}

// traces: UC-9, UC-4 — the environment of a stdio server registered at runtime is kept in the
// vault, not in the registry's rows: the child still gets it, and the store file and its WAL
// never hold it.
#[tokio::test(flavor = "multi_thread")]
async fn uc_9_a_registered_stdio_servers_environment_is_kept_in_the_vault() {
    const SECRET_VALUE: &str = "canary-env-secret-0b8e44f1";
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("quarry.toml"), "").unwrap();
    let marker = format!("env-vaulted-{}", std::process::id());
    let add = quarry(
        dir.path(),
        &["servers", "add", "tools", "--command", QUARRY],
    )
    .args(["--arg", "fixture", "--arg", "--name", "--arg", &marker])
    .arg("--env")
    .arg(format!("TOOLS_TOKEN={SECRET_VALUE}"))
    .output()
    .unwrap();
    assert!(
        add.status.success(),
        "{}",
        String::from_utf8_lossy(&add.stderr)
    );

    let client = gateway(dir.path(), "[registry]\nallow_tool_registration = true\n").await;
    let listing = call(&client, "list_mcp_resources", json!({"server": "tools"})).await;
    assert_eq!(listing["servers"][0]["status"], "connected", "{listing}");
    // Its environment is part of its registration, not a credential the auth tools remove.
    let (code, message) = call_error(&client, "mcp_auth_remove", json!({"server": "tools"})).await;
    assert_eq!(code, "E001", "{message}");
    let children = quarry_testkit::procs::with_cmdline(&marker);
    let (pid, _) = children
        .iter()
        .find(|(_, zombie)| !zombie)
        .expect("the child runs");
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    assert!(
        String::from_utf8_lossy(&environ)
            .split('\0')
            .any(|kv| kv == format!("TOOLS_TOKEN={SECRET_VALUE}")),
        "the child gets its environment"
    );
    client.cancel().await.unwrap();
    assert_nowhere(dir.path(), SECRET_VALUE, &[listing.to_string()]);
}
