//! The vault's key through the binary: a wrong key refused clearly, rotation while a gateway
//! serves, and a rotation killed before it finishes.

use std::{process::Stdio, time::Duration};

use serde_json::json;

use crate::{
    auth::{KEY, NOTE, assert_nowhere, demanding, gateway, quarry, quarry_auth, store_key},
    support::{call, http_server},
};

// traces: UC-7 — a stored credential sealed under another vault key is refused clearly (E005,
// naming the key), never sent as garbage and never a crash.
#[tokio::test(flavor = "multi_thread")]
async fn uc_7_a_credential_under_another_vault_key_is_a_clear_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let notes = demanding(&format!("X-API-Key={KEY}")).await;
    std::fs::write(
        dir.path().join("quarry.toml"),
        http_server("notes", &notes.url),
    )
    .unwrap();
    store_key(dir.path(), "notes");
    std::fs::write(
        dir.path().join("vault.key"),
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n",
    )
    .unwrap();
    let started = std::time::Instant::now();
    let (code, _, stderr) = quarry_auth(dir.path(), &["test", "notes"], None);
    assert_eq!(code, 15, "{stderr}");
    assert!(stderr.contains("sealed with key"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(10));
    // A gateway refuses to start rather than serve with credentials it cannot open.
    let serve = quarry(dir.path(), &["serve"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&serve.stderr);
    assert_eq!(serve.status.code(), Some(15), "{stderr}");
    assert!(
        stderr.contains("does not open the stored credentials of 'notes'"),
        "{stderr}"
    );
    assert!(serve.stdout.is_empty(), "nothing on the MCP channel");
}

// traces: UC-8 — `quarry vault rotate` re-wraps every credential under a new key while a
// gateway keeps serving: the gateway opens the re-wrapped credential for a new session, the key
// file ends with the new key only, and everything still works after a restart.
#[tokio::test(flavor = "multi_thread")]
async fn uc_8_the_vault_key_rotates_while_a_gateway_serves() {
    let dir = tempfile::tempdir().unwrap();
    let notes = demanding(&format!("X-API-Key={KEY}")).await;
    let config = http_server("notes", &notes.url);
    std::fs::write(dir.path().join("quarry.toml"), &config).unwrap();
    store_key(dir.path(), "notes");
    let old_key = std::fs::read_to_string(dir.path().join("vault.key")).unwrap();
    let client = gateway(dir.path(), &config).await;
    call(&client, "read_mcp_resource", json!({"resource_uri": NOTE})).await;

    let rotate = quarry(dir.path(), &["vault", "rotate", "--json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&rotate.stdout);
    assert_eq!(
        rotate.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&rotate.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (report["total"].as_u64(), report["rewrapped"].as_u64()),
        (Some(1), Some(1)),
        "{report}"
    );
    let new_key = std::fs::read_to_string(dir.path().join("vault.key")).unwrap();
    assert_eq!(new_key.lines().count(), 1);
    assert_ne!(new_key, old_key);

    // A new session of the running gateway opens the re-wrapped credential.
    let test = call(&client, "mcp_auth_test", json!({"server": "notes"})).await;
    assert_eq!(test["connection_status"], "connected", "{test}");
    client.cancel().await.unwrap();
    let (code, out, err) = quarry_auth(dir.path(), &["test", "notes"], None);
    assert_eq!(code, 0, "after a restart: {out}{err}");
    assert_nowhere(dir.path(), KEY, &[]);
}

// traces: UC-8 — a rotation killed (SIGKILL) after its new key is written but before every
// credential is re-wrapped loses nothing: the credentials still open under the old key (a
// gateway starts, which it does only when all of them open, and reads), and running the rotation
// again finishes it under the new key alone. The store is held locked by another writer so the
// rotation is caught in exactly that state.
#[tokio::test(flavor = "multi_thread")]
async fn uc_8_a_rotation_killed_before_it_finishes_loses_no_credential() {
    use std::io::{BufRead, Write};
    let dir = tempfile::tempdir().unwrap();
    let notes = demanding(&format!("X-API-Key={KEY}")).await;
    let config = http_server("notes", &notes.url) + &http_server("wiki", &notes.url);
    std::fs::write(dir.path().join("quarry.toml"), &config).unwrap();
    for server in ["notes", "wiki"] {
        store_key(dir.path(), server);
    }
    let key_file = dir.path().join("vault.key");
    let old_key = std::fs::read_to_string(&key_file).unwrap();

    // Another writer holds the store: the rotation adds its key, then waits for the lock.
    let mut holder = std::process::Command::new("python3")
        .arg("-c")
        .arg("import sqlite3,sys\ncon=sqlite3.connect(sys.argv[1],isolation_level=None)\ncon.execute('BEGIN IMMEDIATE')\nprint('locked',flush=True)\nsys.stdin.read()")
        .arg(dir.path().join("quarry.db"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut locked = String::new();
    std::io::BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut locked)
        .unwrap();
    assert_eq!(locked.trim(), "locked");
    let mut rotation = quarry(dir.path(), &["vault", "rotate"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while std::fs::read_to_string(&key_file).unwrap().lines().count() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "the rotation never added its key"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    rotation.kill().unwrap();
    rotation.wait().unwrap();
    holder.stdin.take().unwrap().write_all(b"").unwrap();
    holder.wait().unwrap();
    let keys = std::fs::read_to_string(&key_file).unwrap();
    assert_eq!(
        keys.lines().count(),
        2,
        "killed with the new key first and the old one kept"
    );
    assert!(keys.ends_with(&old_key), "{keys}");

    let client = gateway(dir.path(), &config).await;
    let read = call(&client, "read_mcp_resource", json!({"resource_uri": NOTE})).await;
    assert_eq!(read["content"], "Hello from notes!\n");
    client.cancel().await.unwrap();

    let again = quarry(dir.path(), &["vault", "rotate", "--json"])
        .output()
        .unwrap();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(
        (report["total"].as_u64(), report["rewrapped"].as_u64()),
        (Some(2), Some(2)),
        "{report}"
    );
    assert_eq!(
        std::fs::read_to_string(&key_file).unwrap().lines().count(),
        1
    );
    for server in ["notes", "wiki"] {
        let (code, out, err) = quarry_auth(dir.path(), &["test", server], None);
        assert_eq!(code, 0, "{server}: {out}{err}");
    }
}
