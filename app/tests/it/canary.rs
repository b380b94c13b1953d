//! Secrets and hostile text end to end. AU-4: a canary configured as an upstream credential,
//! and used, appears in no log line, audit record, export, metric, readiness report, tool
//! result, error or file Quarry wrote. AU-5: newlines, ANSI escapes, control and bidi
//! characters in URIs, server names and arguments cannot forge a log line or a record.

use std::path::Path;

use quarry_testkit::scrape;
use serde_json::{Value, json};

use crate::{
    auth::demanding,
    observe::observed,
    support::{QUARRY, call, call_raw, http_server},
};

const CANARY: &str = "canary-au4-6b1d9e0f3a27";

/// Everything Quarry wrote under `dir`, as text (lossy), by path.
fn files(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for entry in walk(dir) {
        let bytes = std::fs::read(&entry).unwrap();
        out.push((
            entry.display().to_string(),
            String::from_utf8_lossy(&bytes).into_owned(),
        ));
    }
    out
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}

fn quarry(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new(QUARRY)
        .args(args)
        .arg("--config")
        .arg(dir.join("quarry.toml"))
        .env("QUARRY_STORE_PATH", dir.join("quarry.db"))
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

// traces: AU-4, SR-005.2 — the canary is the bearer token an HTTP upstream demands: configured
// through the tool, tested, used for reads, and named in refused calls; then every output is
// scanned for it.
#[tokio::test(flavor = "multi_thread")]
async fn au_4_a_canary_credential_appears_in_no_output() {
    let notes = demanding(&format!("Authorization=Bearer {CANARY}")).await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}[registry]\nallow_tool_registration = true\n\n[logging]\nlevel = \"debug\"\n",
        http_server("notes", &notes.url)
    );
    let gw = observed(dir.path(), &config, &dir.path().join("quarry.db"), &[]).await;
    let mut seen: Vec<(String, String)> = Vec::new();
    let configure = |server: &str, auth_type: &str| json!({"server": server, "auth_type": auth_type, "credentials": {"token": CANARY}, "test_connection": true});
    let configured = call(
        &gw.client,
        "mcp_auth_configure",
        configure("notes", "bearer_token"),
    )
    .await;
    assert_eq!(configured["connection_status"], "connected", "{configured}");
    seen.push(("configure".into(), configured.to_string()));
    for (server, kind) in [
        ("nobody", "bearer_token"),
        ("notes", "api_key"),
        ("notes", "nonsense"),
    ] {
        let (failed, result) =
            call_raw(&gw.client, "mcp_auth_configure", configure(server, kind)).await;
        assert!(failed, "{result}");
        seen.push((format!("refused {server} {kind}"), result.to_string()));
    }
    let read = call(
        &gw.client,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://notes/fixture_3A//text/hello.txt"}),
    )
    .await;
    assert_eq!(
        read["content"], "Hello from notes!\n",
        "the credential is used"
    );
    seen.push(("read".into(), read.to_string()));
    for (tool, args) in [
        ("mcp_auth_test", json!({"server": "notes"})),
        ("list_mcp_resources", json!({})),
        ("mcp_audit_export", json!({"limit": 1000})),
    ] {
        seen.push((tool.into(), call(&gw.client, tool, args).await.to_string()));
    }
    for path in ["/metrics", "/readyz", "/healthz"] {
        seen.push((path.into(), scrape::get(gw.addr, path).await.1));
    }
    gw.client.cancel().await.unwrap();
    for args in [
        &["audit", "export"][..],
        &["audit", "export", "--format", "csv"],
        &["audit", "verify"],
        &["servers", "--json"],
        &["auth", "status", "--json"],
    ] {
        seen.push((args.join(" "), quarry(dir.path(), args)));
    }
    seen.extend(files(dir.path()));
    assert!(seen.len() > 15, "scanned too little: {}", seen.len());
    for (what, text) in &seen {
        assert!(!text.contains(CANARY), "the canary is in {what}:\n{text}");
    }
    // The scan would have seen it: the log is there and has the request lines.
    let log = std::fs::read_to_string(dir.path().join("stderr.log")).unwrap();
    assert!(log.contains("request{"), "{log}");
}

/// Text that would forge a log line or break a record if written as it is.
const HOSTILE: &str = "x\n2026-12-01T00:00:00.000000Z  INFO quarry: FORGED line\r\u{1b}[2J\u{1b}]8;;http://evil\u{7}\u{202e}\u{0}";

// traces: AU-5, SR-005.4 — hostile text in a URI, a server name, a registered name and an
// agent-supplied argument: every line of the log is one event (it starts with a timestamp or
// says it is Quarry's), no escape, control or bidi character reaches it, and every audit record
// still parses and chains.
#[tokio::test(flavor = "multi_thread")]
async fn au_5_hostile_text_cannot_forge_a_log_line_or_a_record() {
    let notes = crate::support::http_fixture("notes", 2).await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}[registry]\nallow_tool_registration = true\n\n[logging]\nlevel = \"debug\"\n",
        http_server("notes", &notes.url)
    );
    let gw = observed(dir.path(), &config, &dir.path().join("quarry.db"), &[]).await;
    let calls = [
        (
            "read_mcp_resource",
            json!({"resource_uri": format!("mcp://notes/fixture_3A//item/1{HOSTILE}")}),
        ),
        (
            "read_mcp_resource",
            json!({"resource_uri": format!("mcp://no{HOSTILE}tes/x")}),
        ),
        ("read_mcp_resource", json!({"resource_uri": HOSTILE})),
        ("list_mcp_resources", json!({"server": HOSTILE})),
        (
            "list_mcp_resource_versions",
            json!({"resource_uri": format!("mcp://notes/{HOSTILE}")}),
        ),
        (
            "add_mcp_server",
            json!({"name": HOSTILE, "endpoint": "http://127.0.0.1:1/mcp"}),
        ),
        (
            "add_mcp_server",
            json!({"name": "evil", "endpoint": format!("http://127.0.0.1:1/{HOSTILE}")}),
        ),
        (
            "mcp_audit_export",
            json!({"agent": HOSTILE, "server": HOSTILE}),
        ),
        ("purge_mcp_cache", json!({"server": HOSTILE})),
    ];
    for (tool, args) in calls {
        let _ = call_raw(&gw.client, tool, args).await;
    }
    // A tool that does not exist, named with the hostile text.
    let _ = gw
        .client
        .call_tool(rmcp::model::CallToolRequestParams::new(HOSTILE.to_owned()))
        .await;
    gw.client.cancel().await.unwrap();

    let log = std::fs::read_to_string(dir.path().join("stderr.log")).unwrap();
    assert!(
        log.contains("request{"),
        "debug request lines are there: {log}"
    );
    for line in log.lines() {
        let event = line.len() > 27
            && line.as_bytes()[..4].iter().all(u8::is_ascii_digit)
            && line[..27].ends_with('Z');
        assert!(
            event || line.starts_with("quarry: "),
            "a line that is no event of its own: {line:?}"
        );
        assert!(
            !line.contains("FORGED line")
                || !line.trim_start().starts_with("2026-12-01T00:00:00.000000Z"),
            "{line:?}"
        );
        assert!(
            !line.chars().any(|c| c.is_control()
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')),
            "a control or bidi character reached the log: {line:?}"
        );
    }
    let records = quarry(dir.path(), &["audit", "export"]);
    let mut count = 0;
    for line in records.lines().filter(|l| l.starts_with('{')) {
        let record: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(record["entry"].is_object());
        count += 1;
    }
    // The calls whose arguments did not parse reached no use case and have no record; the
    // listing of the hostile server, the registration and the export do.
    assert!(count >= 3, "the hostile requests are recorded: {records}");
    assert!(
        !records.contains('\u{202e}'),
        "the export shows bidi controls as escapes: {records}"
    );
    assert!(quarry(dir.path(), &["audit", "verify"]).contains("audit trail intact"));
}
