//! Audit retention end to end: `quarry audit prune` removes the records older than the
//! retention behind a checkpoint signed with a key it creates (0600) beside the store; the
//! trail still verifies, and goes on from it when the gateway serves again. A checkpoint edited
//! or removed, a key swapped, or a record edited before it is pruned, is found (E006) and
//! nothing is removed on a broken trail.

use std::{path::Path, process::Command};

use serde_json::{Value, json};

use crate::{
    audit::db,
    support::{QUARRY, call, gateway, http_fixture, http_server},
};

/// `quarry audit ARGS --json` on the gateway in `dir`: exit code, JSON out, stderr.
pub(crate) fn audit(dir: &Path, args: &[&str]) -> (Option<i32>, Value, String) {
    let out = Command::new(QUARRY)
        .arg("audit")
        .args(args)
        .args(["--json", "--config"])
        .arg(dir.join("quarry.toml"))
        .env("QUARRY_STORE_PATH", dir.join("quarry.db"))
        .output()
        .unwrap();
    (
        out.status.code(),
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn reads(dir: &Path, config: &str, n: u32) {
    let client = gateway(dir, config).await;
    for i in 0..n {
        let uri = format!("mcp://notes/fixture_3A//item/{}", i % 3 + 1);
        call(&client, "read_mcp_resource", json!({"resource_uri": uri})).await;
    }
    client.cancel().await.unwrap();
}

// traces: SR-005.3 — retention with a signed checkpoint; what remains verifies.
#[tokio::test(flavor = "multi_thread")]
async fn pruned_records_leave_a_signed_checkpoint_and_the_rest_verifies() {
    let notes = http_fixture("notes", 3).await;
    let dir = tempfile::tempdir().unwrap();
    let config = http_server("notes", &notes.url);
    reads(dir.path(), &config, 3).await;
    let (status, nothing, stderr) = audit(dir.path(), &["prune"]);
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!(nothing["removed"], 0, "nothing is 90 days old: {nothing}");

    let (status, pruned, stderr) = audit(dir.path(), &["prune", "--keep-days", "0"]);
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!(pruned["removed"], 3, "{pruned}");
    assert_eq!(pruned["checkpoint"]["seq"], 3);
    assert!(stderr.contains("created the audit signing key"), "{stderr}");
    let key = dir.path().join("audit.key");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    reads(dir.path(), &config, 2).await;
    let (status, verified, stderr) = audit(dir.path(), &["verify"]);
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!(verified["records"], 2, "{verified}");
    assert_eq!(verified["last_record"], 5);
    assert_eq!(verified["checkpoint"]["seq"], 3);
    let mut conn = db(dir.path()).await;
    let left: Vec<i64> = sqlx::query_scalar("SELECT seq FROM audit_records ORDER BY seq")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    // Record 3 was the chain's head when it was pruned: it stays in the file, out of the trail,
    // until the next prune.
    assert_eq!(left, [3, 4, 5]);

    // The checkpoint edited (moved to record 4, its hash taken along): its signature fails.
    let saved: String = sqlx::query_scalar("SELECT checkpoint FROM audit_checkpoint")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    let hash_4: String = sqlx::query_scalar("SELECT record_hash FROM audit_records WHERE seq = 4")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    let mut moved: Value = serde_json::from_str(&saved).unwrap();
    moved["seq"] = json!(4);
    moved["record_hash"] = json!(hash_4);
    sqlx::query("UPDATE audit_checkpoint SET seq = 4, checkpoint = ?")
        .bind(moved.to_string())
        .execute(&mut conn)
        .await
        .unwrap();
    let (status, _, stderr) = audit(dir.path(), &["verify"]);
    assert_eq!(status, Some(16), "{stderr}");
    assert!(
        stderr.contains("checkpoint (record 4) cannot be trusted"),
        "{stderr}"
    );
    // Removed: the remaining records do not start the chain.
    sqlx::query("DELETE FROM audit_checkpoint")
        .execute(&mut conn)
        .await
        .unwrap();
    let (status, _, stderr) = audit(dir.path(), &["verify"]);
    assert_eq!(status, Some(16), "{stderr}");
    assert!(
        stderr.contains("records 1 to 2 are missing before it"),
        "{stderr}"
    );
    // Put back, but the key swapped for another: named as another key's signature.
    sqlx::query("INSERT INTO audit_checkpoint (id, seq, checkpoint) VALUES (1, 3, ?)")
        .bind(&saved)
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(audit(dir.path(), &["verify"]).0, Some(0));
    let original = std::fs::read(&key).unwrap();
    std::fs::remove_file(&key).unwrap();
    audit(dir.path(), &["prune", "--keep-days", "36500"]); // creates a new key
    let (status, _, stderr) = audit(dir.path(), &["verify"]);
    assert_eq!(status, Some(16), "{stderr}");
    assert!(stderr.contains("made by key"), "{stderr}");
    std::fs::write(&key, original).unwrap();
    assert_eq!(audit(dir.path(), &["verify"]).0, Some(0));
}

// A record edited before retention reaches it: the prune refuses (E006) and removes nothing,
// so a checkpoint never vouches for a tampered trail.
#[tokio::test(flavor = "multi_thread")]
async fn a_prune_refuses_to_remove_a_tampered_record() {
    let notes = http_fixture("notes", 3).await;
    let dir = tempfile::tempdir().unwrap();
    reads(dir.path(), &http_server("notes", &notes.url), 3).await;
    let mut conn = db(dir.path()).await;
    sqlx::query(
        "UPDATE audit_records SET entry = replace(entry, '\"read\"', '\"list\"') WHERE seq = 2",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let (status, _, stderr) = audit(dir.path(), &["prune", "--keep-days", "0"]);
    assert_eq!(status, Some(16), "{stderr}");
    assert!(
        stderr.contains("record 2") && stderr.contains("edited"),
        "{stderr}"
    );
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_records")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(left, 3);
}
