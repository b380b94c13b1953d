//! The gateway's log: JSON lines in a file when configured, each request's lines carrying its
//! correlation id, the libraries' chatter held back, and no credential in it.

use serde_json::{Value, json};

use crate::support::{call, gateway, http_fixture, http_server};

// traces: AU-4, TR-7 — `logging.format = "json"` and `logging.file` (relative to the configuration
// file, its folder created): every line of the file is a
// JSON object, a request's lines carry its correlation id, rmcp's INFO chatter (peer
// descriptions) is not there, and the bearer token configured during the run is nowhere in it.
#[tokio::test(flavor = "multi_thread")]
async fn au_4_json_logs_carry_correlation_ids_and_no_secret() {
    let notes = http_fixture("notes", 2).await;
    let dir = tempfile::tempdir().unwrap();
    let config = http_server("notes", &notes.url)
        + "[registry]\nallow_tool_registration = true\n\n[logging]\nlevel = \"debug\"\nformat = \"json\"\nfile = \"logs/quarry.log\"\n";
    let client = gateway(dir.path(), &config).await;
    call(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://notes/fixture_3A//item/1"}),
    )
    .await;
    let canary = "canary-0d1e2f3a4b5c";
    call(
        &client,
        "mcp_auth_configure",
        json!({"server": "notes", "auth_type": "bearer_token", "credentials": {"token": canary}, "test_connection": true}),
    )
    .await;
    client.cancel().await.unwrap();

    let text = std::fs::read_to_string(dir.path().join("logs/quarry.log")).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(!lines.is_empty());
    let answered: Vec<&Value> = lines
        .iter()
        .filter(|l| l["fields"]["message"] == "answered")
        .collect();
    assert!(answered.len() >= 2, "{text}");
    assert!(
        answered.iter().all(|l| l["span"]["correlation_id"]
            .as_str()
            .is_some_and(|c| !c.is_empty())),
        "{text}"
    );
    assert!(
        lines.iter().all(|l| {
            let target = l["target"].as_str().unwrap_or_default();
            !(target.starts_with("rmcp") && matches!(l["level"].as_str(), Some("INFO" | "DEBUG")))
        }),
        "rmcp chatter in the log: {text}"
    );
    assert!(!text.contains(canary), "the token reached the log");
}
