//! The audit trail end to end: `quarry serve` with a policy and two fixture upstreams; what
//! agents do is recorded, one record per request, and `quarry audit verify` finds any edit or
//! deletion made to the file afterwards, naming the record.

use std::path::Path;

use serde_json::{Value, json};
use sqlx::{Connection, SqliteConnection};

use crate::{
    policy::config,
    support::{QUARRY, call, call_error, gateway, http_fixture},
};

/// `quarry audit verify --json` on the gateway in `dir`: (exit code, stdout, stderr).
fn verify(dir: &Path) -> (Option<i32>, Value, String) {
    crate::retention::audit(dir, &["verify"])
}

/// `quarry audit export ARGS` on the gateway in `dir`: its stdout.
pub(crate) fn export(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new(QUARRY)
        .args(["audit", "export", "--config"])
        .arg(dir.join("quarry.toml"))
        .args(args)
        .env("QUARRY_STORE_PATH", dir.join("quarry.db"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The cells of one CSV row (quoted cells may hold commas and doubled quotes).
fn csv_cells(row: &str) -> Vec<String> {
    let (mut cells, mut cell, mut quoted) = (Vec::new(), String::new(), false);
    let mut chars = row.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cell.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => cells.push(std::mem::take(&mut cell)),
            (c, _) => cell.push(c),
        }
    }
    cells.push(cell);
    cells
}

pub(crate) async fn db(dir: &Path) -> SqliteConnection {
    SqliteConnection::connect(&format!("sqlite://{}", dir.join("quarry.db").display()))
        .await
        .unwrap()
}

// traces: SR-005.1, SR-005.2, SR-005.5, AU-1, AU-3, AU-4 — alice lists, reads and is denied;
// root configures a credential: four records, in order, with who, what, the decision and the
// rules' reason for the denial, and no trace of the credential's secret, in the trail or its
// exports (JSON lines, CSV). Editing a record, or deleting the last one, in the file breaks
// `quarry audit verify` (E006), which names the record.
#[tokio::test(flavor = "multi_thread")]
async fn au_3_every_request_is_recorded_and_any_edit_is_found() {
    let notes = http_fixture("notes", 3).await;
    let wiki = http_fixture("wiki", 3).await;
    let dir = tempfile::tempdir().unwrap();
    let alice = gateway(dir.path(), &config(&notes.url, &wiki.url, "alice", "")).await;
    call(&alice, "list_mcp_resources", json!({"server": "notes"})).await;
    call(
        &alice,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://notes/fixture_3A//item/1", "offset": 2, "limit": 4}),
    )
    .await;
    let (code, _) = call_error(
        &alice,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://wiki/fixture_3A//item/1"}),
    )
    .await;
    assert_eq!(code, "E004");
    alice.cancel().await.unwrap();
    let canary = "canary-5e1f0c3a9b7d";
    let root = gateway(dir.path(), &config(&notes.url, &wiki.url, "root", "")).await;
    call(
        &root,
        "mcp_auth_configure",
        json!({"server": "notes", "auth_type": "bearer_token", "credentials": {"token": canary}, "test_connection": false}),
    )
    .await;
    root.cancel().await.unwrap();

    let (status, report, stderr) = verify(dir.path());
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!(report["intact"], true);
    assert_eq!(report["records"], 4, "{report}");
    let mut conn = db(dir.path()).await;
    let rows: Vec<(i64, String)> =
        sqlx::query_as("SELECT seq, entry FROM audit_records ORDER BY seq")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    let entries: Vec<Value> = rows
        .iter()
        .map(|(_, e)| serde_json::from_str(e).unwrap())
        .collect();
    // The records as written, times, ids and latencies aside.
    insta::assert_json_snapshot!("audit_records", entries, {
        "[].time" => "[time]",
        "[].correlation_id" => "[correlation id]",
        "[].latency_us" => "[latency]",
    });
    let field = |k: &str| -> Vec<Value> { entries.iter().map(|e| e[k].clone()).collect() };
    assert_eq!(field("action"), ["list", "read", "read", "auth_configure"]);
    assert_eq!(field("agent"), ["alice", "alice", "alice", "root"]);
    assert_eq!(field("decision"), ["allow", "allow", "deny", "allow"]);
    assert_eq!(field("result"), ["ok", "ok", "error", "ok"]);
    assert_eq!(entries[1]["byte_range"], "2-5");
    assert_eq!(entries[1]["resource_uri"], "mcp://notes/fixture_3A//item/1");
    assert_eq!(entries[2]["error_code"], "E004");
    // The rules' reason, not the caller's E004 text (which is the same whatever the reason).
    let why = entries[2]["explanation"].as_str().unwrap();
    assert!(
        why.starts_with("access: ") && why.contains("authorized_server(alice, wiki)"),
        "{why}"
    );
    assert!(rows.iter().all(|(_, e)| !e.contains(canary)));

    // SR-005.5: exports of a selection, as JSON lines and as CSV.
    let denied = export(dir.path(), &["--decision", "deny"]);
    let lines: Vec<Value> = denied
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{denied}");
    assert_eq!(lines[0]["seq"], 3);
    assert_eq!(
        lines[0]["entry"]["resource_uri"],
        "mcp://wiki/fixture_3A//item/1"
    );
    assert_eq!(lines[0]["record_hash"].as_str().unwrap().len(), 64);
    let csv = export(dir.path(), &["--agent", "alice", "--format", "csv"]);
    // Pinned with the columns that vary per run (time, correlation id, latency, the hashes,
    // which cover the time) blanked.
    let pinned: Vec<String> = csv
        .lines()
        .map(|row| {
            let mut cells = csv_cells(row);
            if cells[0] != "seq" {
                for i in [1, 2, 14, 17, 18] {
                    cells[i] = "_".into();
                }
            }
            cells.join(" | ")
        })
        .collect();
    insta::assert_snapshot!("audit_export_csv", pinned.join("\n"));
    let csv_rows: Vec<&str> = csv.lines().collect();
    assert_eq!(
        csv_rows.len(),
        4,
        "a header and alice's three records: {csv}"
    );
    assert!(
        csv_rows[0].starts_with("seq,time,correlation_id,agent,"),
        "{csv}"
    );
    assert!(
        csv_rows[2].contains(",read,notes,mcp://notes/fixture_3A//item/1,2-5,allow,"),
        "{csv}"
    );
    assert!(
        export(
            dir.path(),
            &["--server", "wiki", "--since", "2000-01-01T00:00:00Z"]
        )
        .lines()
        .count()
            == 1
    );
    assert!(!csv.contains(canary) && !denied.contains(canary));

    // The last record is the chain's head: the file refuses to delete it.
    let refused = sqlx::query("DELETE FROM audit_records WHERE seq = 4")
        .execute(&mut conn)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("head"), "{refused}");
    // Deleted anyway, the file's trigger dropped first: the record left last is not the head.
    sqlx::raw_sql("DROP TRIGGER audit_head_stays; DELETE FROM audit_records WHERE seq = 4;")
        .execute(&mut conn)
        .await
        .unwrap();
    let (status, _, stderr) = verify(dir.path());
    assert_eq!(status, Some(16), "{stderr}");
    assert!(stderr.contains("record 4"), "{stderr}");
    // A record edited: who read.
    sqlx::query(
        "UPDATE audit_records SET entry = replace(entry, '\"alice\"', '\"mallory\"') WHERE seq = 2",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let (status, _, stderr) = verify(dir.path());
    assert_eq!(status, Some(16), "{stderr}");
    assert!(
        stderr.contains("record 2") && stderr.contains("edited"),
        "{stderr}"
    );
}

// traces: AV-6 — the gateway is killed (SIGKILL) in the middle of a burst of concurrent reads,
// each of which appends a record: the chain verifies afterwards, and every read answered before
// the kill has its record.
#[tokio::test(flavor = "multi_thread")]
async fn av_6_sigkill_during_a_burst_of_audited_reads_leaves_a_chain_that_verifies() {
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };

    use rmcp::{
        ServiceExt,
        model::{CallToolRequestParams, ClientConfig},
        transport::TokioChildProcess,
    };

    let notes = http_fixture("notes", 3).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("quarry.toml");
    std::fs::write(&path, crate::support::http_server("notes", &notes.url)).unwrap();
    let mut cmd = tokio::process::Command::new(QUARRY);
    cmd.args(["serve", "--stdio", "--config"])
        .arg(&path)
        .env("QUARRY_STORE_PATH", dir.path().join("quarry.db"));
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = transport.id().unwrap();
    let client = Arc::new(ClientConfig::default().serve(transport).await.unwrap());
    let answered = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..8)
        .map(|i| {
            let (client, answered) = (client.clone(), answered.clone());
            tokio::spawn(async move {
                let uri = format!("mcp://notes/fixture_3A//item/{}", i % 3 + 1);
                let Value::Object(args) = json!({"resource_uri": uri}) else {
                    unreachable!()
                };
                let call = CallToolRequestParams::new("read_mcp_resource").with_arguments(args);
                // Until the gateway is gone; only successful reads count as acknowledged.
                while let Ok(result) = client.call_tool(call.clone()).await {
                    if result.is_error != Some(true) {
                        answered.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    while answered.load(Ordering::SeqCst) < 40 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    for r in readers {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), r).await;
    }
    let acknowledged = answered.load(Ordering::SeqCst);
    let (status, report, stderr) = verify(dir.path());
    assert_eq!(status, Some(0), "{stderr}");
    let records = report["records"].as_u64().unwrap();
    assert!(
        records >= u64::try_from(acknowledged).unwrap(),
        "{acknowledged} reads answered, {records} records"
    );
}

// traces: SR-005.5 — `mcp_audit_export`: an administrator pages through the trail with a
// filter; an agent without may_configure_mcp is denied (and the denial is itself recorded);
// a gateway that keeps no trail says so (E011).
#[tokio::test(flavor = "multi_thread")]
async fn the_export_tool_pages_through_the_trail_for_an_administrator() {
    let notes = http_fixture("notes", 3).await;
    let wiki = http_fixture("wiki", 3).await;
    let dir = tempfile::tempdir().unwrap();
    let alice = gateway(dir.path(), &config(&notes.url, &wiki.url, "alice", "")).await;
    let (code, _) = call_error(
        &alice,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://wiki/fixture_3A//item/1"}),
    )
    .await;
    assert_eq!(code, "E004");
    let (code, message) = call_error(&alice, "mcp_audit_export", json!({})).await;
    assert_eq!(code, "E004", "{message}");
    alice.cancel().await.unwrap();

    let root = gateway(dir.path(), &config(&notes.url, &wiki.url, "root", "")).await;
    let page = |after: u64| json!({"decision": "deny", "limit": 1, "after": after});
    // The host tags this call with its own id, which the record keeps.
    let Value::Object(args) = page(0) else {
        unreachable!()
    };
    let mut meta = rmcp::model::RequestMetaObject::default();
    meta.0
        .0
        .insert("io.quarry/host_request_id".into(), json!("host-op-1"));
    let mut tagged =
        rmcp::model::CallToolRequestParams::new("mcp_audit_export").with_arguments(args);
    tagged.meta = Some(meta);
    let first = root
        .call_tool(tagged)
        .await
        .unwrap()
        .structured_content
        .unwrap();
    let records = first["records"].as_array().unwrap();
    assert_eq!(records.len(), 1, "{first}");
    assert_eq!(records[0]["entry"]["action"], "read");
    assert_eq!(records[0]["entry"]["agent"], "alice");
    assert_eq!(records[0]["record_hash"].as_str().unwrap().len(), 64);
    let next = first["next_after"].as_u64().unwrap();
    let second = call(&root, "mcp_audit_export", page(next)).await;
    assert_eq!(second["records"][0]["entry"]["action"], "audit_export");
    assert_eq!(second["records"][0]["entry"]["decision"], "deny");
    let third = call(
        &root,
        "mcp_audit_export",
        page(second["next_after"].as_u64().unwrap()),
    )
    .await;
    assert_eq!(third["records"], json!([]), "{third}");
    assert_eq!(third["next_after"], Value::Null, "the end of the trail");
    let (code, message) = call_error(
        &root,
        "mcp_audit_export",
        json!({"since": "yesterday", "decision": "maybe"}),
    )
    .await;
    assert_eq!(code, "E001", "{message}");
    root.cancel().await.unwrap();
    // Root's three exports are recorded as well (the call refused as invalid reached no
    // use case).
    let mine = export(dir.path(), &["--agent", "root"]);
    let actions: Vec<Value> = mine
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["entry"]["action"].clone())
        .collect();
    assert_eq!(actions, vec![json!("audit_export"); 3], "{mine}");
    let first_export: Value = serde_json::from_str(mine.lines().next().unwrap()).unwrap();
    assert_eq!(first_export["entry"]["host_request_id"], "host-op-1");
    assert!(first_export["entry"]["mcp_request_id"].is_string());

    let off = tempfile::tempdir().unwrap();
    let client = gateway(
        off.path(),
        &format!(
            "{}[logging]\naudit_enabled = false\n",
            crate::support::http_server("notes", &notes.url)
        ),
    )
    .await;
    let (code, message) = call_error(&client, "mcp_audit_export", json!({})).await;
    assert_eq!(code, "E011", "{message}");
    assert!(message.contains("audit_enabled = false"), "{message}");
    client.cancel().await.unwrap();
}

// traces: AU-1 — the trail `quarry serve` composes (SQLite file) commits concurrent requests'
// records together: while another process holds the file's write lock, twenty appends wait;
// once it lets go they land in a few commits (frames in the write-ahead log), not twenty, and
// each caller gets its own record in a chain that verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_composed_trail_commits_concurrent_records_together() {
    use quarry_testkit::contract::audit::entry;

    let dir = tempfile::tempdir().unwrap();
    let mut settings = quarry::config::Settings::defaults();
    settings.store_path = Some(dir.path().join("quarry.db"));
    let trail = quarry::compose::audit_log(&settings).await.unwrap();
    trail.append(&entry(0)).await.unwrap();
    let mut rival = db(dir.path()).await;
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&mut rival)
        .await
        .unwrap();
    let lock = rival.begin_with("BEGIN IMMEDIATE").await.unwrap();
    let appends: Vec<_> = (1..=20)
        .map(|i| {
            let trail = trail.clone();
            tokio::spawn(async move { trail.append(&entry(i)).await })
        })
        .collect();
    // Time for every append to start (the first waits on the lock, the others behind it).
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    lock.rollback().await.unwrap();
    for (i, append) in (1..).zip(appends) {
        assert_eq!(append.await.unwrap().unwrap().entry, entry(i));
    }
    let (_busy, frames, _done): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
        .fetch_one(&mut rival)
        .await
        .unwrap();
    assert!(
        frames < 20,
        "{frames} frames: the records were committed one by one"
    );
    std::fs::write(dir.path().join("quarry.toml"), "").unwrap();
    let (status, report, stderr) = verify(dir.path());
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!(report["records"], 21);
}
