//! Upstream faults with real processes: killed mid-request, crashing in a loop, down at start-up,
//! speaking garbage. The gateway must fail only the requests that depended on the fault, fast,
//! and leave nothing behind.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use crate::support::{QUARRY, call, call_error, call_raw, gateway, stdio_fixture};

use quarry_testkit::procs::{children_of, open_non_file_fds, with_cmdline as processes_with};

pub(crate) fn gateway_pid(dir: &Path) -> u32 {
    let config = dir.join("quarry.toml").display().to_string();
    let found = processes_with(&format!("serve --stdio --config {config}"));
    assert_eq!(found.len(), 1, "{found:?}");
    found[0].0
}

async fn wait_for<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A `[servers.SERVER]` section running the fixture under the unique name `marker`, so its process
/// can be found by its command line.
fn marked_fixture(server: &str, marker: &str, extra: &[&str], keys: &str) -> String {
    let mut args = vec!["fixture".to_owned(), "--name".into(), marker.to_owned()];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    format!(
        "[servers.{server}]\ncommand = {QUARRY:?}\nargs = {}\n{keys}\n",
        serde_json::to_string(&args).unwrap()
    )
}

/// `Some` once the fixture announced (with `--announce-reads`) that `fixture://slow` reached it.
fn read_announced(file: &Path) -> Option<()> {
    std::fs::read_to_string(file)
        .ok()
        .filter(|t| t.lines().any(|l| l == "fixture://slow"))
        .map(|_| ())
}

fn unique(name: &str) -> String {
    format!(
        "{name}-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos() ^ rand_ish()
    )
}

fn rand_ish() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

// traces: AV-2, SC-006 — an upstream killed mid-request fails that request fast with E003, other
// servers keep serving, and the server is connected again afterwards.
#[tokio::test(flavor = "multi_thread")]
async fn av_2_an_upstream_killed_mid_request_fails_that_request_fast() {
    let dir = tempfile::tempdir().unwrap();
    let marker = unique("victim");
    let announced = dir.path().join("victim-reads");
    let config = marked_fixture(
        "victim",
        &marker,
        &[
            "--slow-ms",
            "20000",
            "--announce-reads",
            announced.to_str().unwrap(),
        ],
        "retry_attempts = 0\n",
    ) + &stdio_fixture("other", &[]);
    let client = std::sync::Arc::new(gateway(dir.path(), &config).await);
    let victim = wait_for("the victim process", || {
        processes_with(&marker).first().map(|p| p.0)
    })
    .await;

    let reader = client.clone();
    let slow = tokio::spawn(async move {
        let started = Instant::now();
        let outcome = call_raw(
            &reader,
            "read_mcp_resource",
            json!({"resource_uri": "mcp://victim/fixture_3A//slow"}),
        )
        .await;
        (outcome, started.elapsed())
    });
    wait_for("the slow read to reach the victim", || {
        read_announced(&announced)
    })
    .await;
    let killed = Instant::now();
    std::process::Command::new("kill")
        .args(["-9", &victim.to_string()])
        .status()
        .unwrap();
    let ((is_error, value), _) = slow.await.unwrap();
    assert!(is_error, "{value}");
    assert_eq!(value["error_code"], "E003", "{value}");
    assert!(
        killed.elapsed() < Duration::from_secs(5),
        "failed fast: {:?}",
        killed.elapsed()
    );

    let other = call(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://other/fixture_3A//text/hello.txt"}),
    )
    .await;
    assert_eq!(other["content"], "Hello from other!\n");

    // Reconnected: a new process serves the next read.
    let again = call(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://victim/fixture_3A//counter"}),
    )
    .await;
    assert_eq!(again["success"], true);
    let now = processes_with(&marker);
    assert!(now.iter().all(|(pid, _)| *pid != victim), "{now:?}");
}

// traces: AV-2, AV-7, RC-6 — fifty crash-and-restart cycles leave no process and no descriptor
// behind.
#[tokio::test(flavor = "multi_thread")]
async fn av_2_fifty_crash_cycles_leave_no_processes_or_descriptors_behind() {
    let dir = tempfile::tempdir().unwrap();
    let marker = unique("crashy");
    let config = marked_fixture("crashy", &marker, &[], "retry_attempts = 0\n");
    let client = gateway(dir.path(), &config).await;
    let hello = json!({"resource_uri": "mcp://crashy/fixture_3A//counter"});
    call(&client, "read_mcp_resource", hello.clone()).await;
    let quarry = gateway_pid(dir.path());
    // Pipes, sockets and pidfds: what a crashed child could leave behind (the SQLite pool may
    // open another file connection under load, which is no leak).
    let baseline = open_non_file_fds(quarry);
    for cycle in 0..50 {
        let (code, message) = call_error(
            &client,
            "read_mcp_resource",
            json!({"resource_uri": "mcp://crashy/fixture_3A//crash", "use_cache": false}),
        )
        .await;
        assert_eq!(code, "E003", "cycle {cycle}: {message}");
        let ok = call(
            &client,
            "read_mcp_resource",
            json!({"resource_uri": "mcp://crashy/fixture_3A//counter", "use_cache": false}),
        )
        .await;
        assert_eq!(ok["success"], true, "cycle {cycle}");
    }
    let settled = wait_for("exited children to be reaped", || {
        let children = children_of(quarry);
        (children.iter().all(|(_, zombie)| !zombie) && children.len() <= 1).then_some(children)
    })
    .await;
    assert_eq!(settled.len(), 1, "one live fixture process: {settled:?}");
    // A dead child's pipes close once their readers have seen the end, which a loaded machine
    // may take a moment to schedule; a leak stays whatever the wait.
    let started = Instant::now();
    let mut fds = open_non_file_fds(quarry);
    while fds.len() > baseline.len() && started.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        fds = open_non_file_fds(quarry);
    }
    assert!(
        fds.len() <= baseline.len(),
        "descriptors other than files: {baseline:?} before, {fds:?} after 15 s"
    );
    client.cancel().await.unwrap();
}

// traces: AV-1, AV-7 — a server that is down at start-up blocks nothing and shows the error; the
// gateway stops its children when it stops.
#[tokio::test(flavor = "multi_thread")]
async fn av_1_a_server_down_at_start_up_blocks_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let marker = unique("healthy");
    let config = "[servers.ghost]\ncommand = \"/nonexistent/mcp-server\"\n\n".to_owned()
        + &marked_fixture("files", &marker, &[], "");
    let started = Instant::now();
    let client = gateway(dir.path(), &config).await;
    let listing = call(&client, "list_mcp_resources", json!({})).await;
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(listing["partial"], true);
    assert_eq!(listing["total_count"], 6);
    let ghost = listing["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["server_name"] == "ghost")
        .unwrap();
    assert_eq!(ghost["status"], "error");
    assert!(
        ghost["last_error"]
            .as_str()
            .unwrap()
            .contains("cannot start"),
        "{ghost}"
    );
    let quarry = gateway_pid(dir.path());
    assert!(!processes_with(&marker).is_empty());
    client.cancel().await.unwrap();
    wait_for("the gateway and its children to exit", || {
        (processes_with(&marker).is_empty()
            && !Path::new(&format!("/proc/{quarry}/cmdline")).exists())
        .then_some(())
    })
    .await;
}

/// A stdio MCP server that answers the handshake and listings properly but answers reads with a
/// garbage line and a response for the wrong request id.
const BROKEN_SERVER: &str = r#"
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    method, rid = msg.get("method"), msg.get("id")
    if rid is None:
        continue
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"resources": {}}, "serverInfo": {"name": "broken", "version": "0"}}
    elif method == "resources/list":
        result = {"resources": [{"uri": "broken://one", "name": "one"}]}
    elif method == "resources/read":
        sys.stdout.write("this is not json at all\n")
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": 424242, "result": {"contents": []}}) + "\n")
        sys.stdout.flush()
        continue
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}) + "\n")
    sys.stdout.flush()
"#;

// traces: RC-6 — an upstream that writes garbage and answers with wrong ids affects only its own
// requests: they time out (E009); its listing and every other server work.
#[tokio::test(flavor = "multi_thread")]
async fn rc_6_a_protocol_violating_upstream_affects_only_its_own_requests() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("broken.py");
    std::fs::write(&script, BROKEN_SERVER).unwrap();
    let config = format!(
        "[servers.broken]\ncommand = \"python3\"\nargs = [{:?}]\ntimeout = 2\nretry_attempts = 0\n\n",
        script.display().to_string()
    ) + &stdio_fixture("files", &[]);
    let client = gateway(dir.path(), &config).await;
    let started = Instant::now();
    let (code, _) = call_error(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://broken/broken_3A//one"}),
    )
    .await;
    assert_eq!(code, "E009");
    assert!(started.elapsed() < Duration::from_secs(8));
    let listing = call(&client, "list_mcp_resources", json!({"use_cache": false})).await;
    assert_eq!(listing["total_count"], 7, "{listing}");
    let files = call(
        &client,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://files/fixture_3A//text/hello.txt"}),
    )
    .await;
    assert_eq!(files["content"], "Hello from files!\n");
    let servers: Vec<Value> = listing["servers"].as_array().unwrap().clone();
    assert!(
        servers.iter().all(|s| s["status"] == "connected"),
        "{servers:?}"
    );
    client.cancel().await.unwrap();
}

// traces: AV-7 — on SIGTERM, a request in flight is answered before the gateway exits, and its
// upstream processes stop with it.
#[tokio::test(flavor = "multi_thread")]
async fn av_7_sigterm_drains_requests_in_flight_then_stops_children() {
    let dir = tempfile::tempdir().unwrap();
    let marker = unique("draining");
    let announced = dir.path().join("slowpoke-reads");
    let config = marked_fixture(
        "slowpoke",
        &marker,
        &[
            "--slow-ms",
            "1500",
            "--announce-reads",
            announced.to_str().unwrap(),
        ],
        "",
    );
    let client = std::sync::Arc::new(gateway(dir.path(), &config).await);
    wait_for("the upstream process", || {
        processes_with(&marker).first().map(|p| p.0)
    })
    .await;
    let quarry = gateway_pid(dir.path());
    let reader = client.clone();
    let slow = tokio::spawn(async move {
        call_raw(
            &reader,
            "read_mcp_resource",
            json!({"resource_uri": "mcp://slowpoke/fixture_3A//slow"}),
        )
        .await
    });
    wait_for("the slow read to be in flight", || {
        read_announced(&announced)
    })
    .await;
    std::process::Command::new("kill")
        .args(["-TERM", &quarry.to_string()])
        .status()
        .unwrap();
    let (is_error, value) = slow.await.unwrap();
    assert!(!is_error, "the request in flight was answered: {value}");
    assert_eq!(value["content"], "finally\n");
    wait_for("the gateway and its upstream to exit", || {
        (processes_with(&marker).is_empty()
            && !Path::new(&format!("/proc/{quarry}/cmdline")).exists())
        .then_some(())
    })
    .await;
}
