//! Metrics and health end to end: `quarry serve --metrics 127.0.0.1:0` beside the stdio
//! transport; `/metrics` scraped and parsed by Prometheus' own text-format parser after an
//! agent's work; `/readyz` unready while the policy worker is dead and ready once it is back;
//! the audit store's disk filled mid-run refuses requests with E011 and counts them, and service
//! resumes when space returns.

use std::{net::SocketAddr, path::Path, process::Stdio, time::Duration};

use quarry_testkit::scrape::{self, value};
use rmcp::{ServiceExt, model::ClientConfig, transport::TokioChildProcess};
use serde_json::json;

use crate::{
    policy::config,
    support::{Client, QUARRY, call, call_error, http_fixture, http_server},
};

/// A gateway serving stdio and the operator endpoints; its pid and where the endpoints are.
pub(crate) struct Observed {
    pub(crate) client: Client,
    pub(crate) pid: u32,
    pub(crate) addr: SocketAddr,
}

/// Waits for the line on stderr (kept in `dir/stderr.log`) that says where the endpoints are.
async fn endpoints(dir: &Path) -> SocketAddr {
    for _ in 0..500 {
        let log = std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default();
        if let Some(rest) = log.split("metrics and health on http://").nth(1) {
            let addr = rest.split_whitespace().next().unwrap();
            return addr.parse().unwrap();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "no endpoints announced: {}",
        std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default()
    );
}

/// `quarry serve --stdio --metrics 127.0.0.1:0` in `dir`, run by `wrapper` (a program and
/// arguments that end by running what follows them) when given.
pub(crate) async fn observed(dir: &Path, config: &str, store: &Path, wrapper: &[&str]) -> Observed {
    std::fs::write(dir.join("quarry.toml"), config).unwrap();
    let log = std::fs::File::create(dir.join("stderr.log")).unwrap();
    let mut cmd = match wrapper.split_first() {
        Some((program, args)) => {
            let mut c = tokio::process::Command::new(program);
            c.args(args).arg(QUARRY);
            c
        }
        None => tokio::process::Command::new(QUARRY),
    };
    cmd.args(["serve", "--stdio", "--metrics", "127.0.0.1:0", "--config"])
        .arg(dir.join("quarry.toml"))
        .current_dir(dir)
        .env_remove("QUARRY_CONFIG")
        .env("QUARRY_STORE_PATH", store);
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap();
    let pid = transport.id().unwrap();
    let client = ClientConfig::default().serve(transport).await.unwrap();
    let addr = endpoints(dir).await;
    Observed { client, pid, addr }
}

/// Alice's gateway, under the policy, over the fixtures `notes` and `wiki`, observed.
async fn governed_alice(
    notes: &quarry_testkit::fixture::HttpFixture,
    wiki: &quarry_testkit::fixture::HttpFixture,
    dir: &Path,
) -> Observed {
    let config = config(&notes.url, &wiki.url, "alice", "");
    observed(dir, &config, &dir.join("quarry.db"), &[]).await
}

async fn metrics(addr: SocketAddr) -> Vec<scrape::Sample> {
    let (status, text) = scrape::get(addr, "/metrics").await;
    assert_eq!(status, 200, "{text}");
    scrape::parse(&text)
}

// traces: SR-005.1 — an agent lists, reads twice (a miss, then a hit) and is denied once; the
// exposition, parsed by prometheus_client, counts each by tool, server and result, times them,
// counts the cache's hit and miss, times the policy's decisions, and shows the upstream's state.
#[tokio::test(flavor = "multi_thread")]
async fn metrics_are_scraped_and_parsed_by_prometheus() {
    let (notes, wiki) = (
        http_fixture("notes", 3).await,
        http_fixture("wiki", 3).await,
    );
    let dir = tempfile::tempdir().unwrap();
    let gw = governed_alice(&notes, &wiki, dir.path()).await;
    assert_eq!(scrape::get(gw.addr, "/healthz").await, (200, "ok\n".into()));
    call(&gw.client, "list_mcp_resources", json!({"server": "notes"})).await;
    let item = json!({"resource_uri": "mcp://notes/fixture_3A//item/1"});
    call(&gw.client, "read_mcp_resource", item.clone()).await;
    call(&gw.client, "read_mcp_resource", item).await;
    let (code, _) = call_error(
        &gw.client,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://wiki/fixture_3A//item/1"}),
    )
    .await;
    assert_eq!(code, "E004");

    let samples = metrics(gw.addr).await;
    let read_ok = [("tool", "read"), ("server", "notes"), ("result", "ok")];
    assert_eq!(
        value(&samples, "quarry_requests_total", &read_ok),
        Some(2.0)
    );
    let denied = [("tool", "read"), ("server", "wiki"), ("result", "E004")];
    assert_eq!(value(&samples, "quarry_requests_total", &denied), Some(1.0));
    assert_eq!(
        value(&samples, "quarry_request_errors_total", &[("code", "E004")]),
        Some(1.0)
    );
    let list = [("tool", "list"), ("result", "ok")];
    assert_eq!(value(&samples, "quarry_requests_total", &list), Some(1.0));
    for status in ["hit", "miss"] {
        let labels = [("tool", "read"), ("status", status)];
        assert_eq!(
            value(&samples, "quarry_cache_requests_total", &labels),
            Some(1.0),
            "{status}"
        );
    }
    let read = [("tool", "read")];
    assert_eq!(
        value(&samples, "quarry_request_duration_seconds_count", &read),
        Some(3.0)
    );
    for kind in ["decide", "batch"] {
        let decisions = value(
            &samples,
            "quarry_policy_decision_duration_seconds_count",
            &[("kind", kind)],
        );
        assert!(decisions >= Some(1.0), "{kind}: {decisions:?}");
    }
    let connected = [("server", "notes"), ("status", "connected")];
    assert_eq!(
        value(&samples, "quarry_upstream_status", &connected),
        Some(1.0)
    );
    assert!(value(&samples, "quarry_cache_entries", &[]) >= Some(1.0));
    assert_eq!(value(&samples, "quarry_policy_ready", &[]), Some(1.0));
    assert_eq!(
        value(&samples, "quarry_audit_write_failures_total", &[]),
        Some(0.0)
    );
    let kinds: std::collections::BTreeMap<_, _> = samples
        .iter()
        .map(|s| (s.family.as_str(), s.kind.as_str()))
        .collect();
    assert_eq!(
        kinds.get("quarry_request_duration_seconds"),
        Some(&"histogram")
    );
    assert_eq!(kinds.get("quarry_requests"), Some(&"counter"));
    gw.client.cancel().await.unwrap();
}

/// The policy worker the gateway `pid` runs now.
fn policy_worker(pid: u32) -> Option<u32> {
    quarry_testkit::procs::children_of(pid)
        .into_iter()
        .filter(|(child, zombie)| {
            !*zombie
                && std::fs::read(format!("/proc/{child}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains("policy-worker"))
        })
        .map(|(child, _)| child)
        .next()
}

// `/readyz` is 200 while the store, the policy worker and an upstream answer; the worker killed,
// it is 503 naming the policy; the next probe starts a new worker, and it is 200 again. The
// restart is counted.
#[tokio::test(flavor = "multi_thread")]
async fn readyz_is_unready_while_the_policy_worker_is_down() {
    let (notes, wiki) = (
        http_fixture("notes", 3).await,
        http_fixture("wiki", 3).await,
    );
    let dir = tempfile::tempdir().unwrap();
    let gw = governed_alice(&notes, &wiki, dir.path()).await;
    let (status, body) = scrape::get(gw.addr, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    let worker = policy_worker(gw.pid).expect("a policy worker");
    assert!(
        std::process::Command::new("kill")
            .args(["-KILL", &worker.to_string()])
            .status()
            .unwrap()
            .success()
    );
    while policy_worker(gw.pid) == Some(worker) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (status, body) = scrape::get(gw.addr, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    let report: serde_json::Value = serde_json::from_str(&body).unwrap();
    let policy = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "policy")
        .unwrap()
        .clone();
    assert_eq!(policy["ok"], false, "{report}");
    let mut back = false;
    for _ in 0..100 {
        if scrape::get(gw.addr, "/readyz").await.0 == 200 {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(back, "ready again once a worker answers");
    assert_ne!(policy_worker(gw.pid), Some(worker));
    let samples = metrics(gw.addr).await;
    assert!(value(&samples, "quarry_policy_worker_restarts_total", &[]) >= Some(1.0));
    // And decisions work again.
    call(
        &gw.client,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://notes/fixture_3A//item/1"}),
    )
    .await;
    gw.client.cancel().await.unwrap();
}

/// Fills the filesystem holding `path` (seen through `/proc/PID/root`) with `path`.
fn fill(path: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let block = vec![0u8; 64 * 1024];
    while f.write_all(&block).is_ok() {}
    let _ = f.write_all(&block[..4096]);
    let _ = f.sync_all();
}

// traces: SR-005.4, AU-2 — the store's disk is filled mid-run (a 4 MiB tmpfs of the gateway's
// own, in a mount namespace): the first request's answer is withheld (its record cannot be
// written), every one after it is refused with E011 before the upstream (the fixture counts no
// read), the metric counts them, and `/readyz` says the trail cannot be written. Space freed,
// service resumes without a restart.
#[tokio::test(flavor = "multi_thread")]
async fn au_2_a_full_disk_refuses_requests_and_service_resumes() {
    let notes = http_fixture("notes", 3).await;
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("store");
    std::fs::create_dir(&mnt).unwrap();
    // unshare(1) runs the gateway in a mount namespace of its own with a small tmpfs over `mnt`.
    let mount = format!(
        "mount -t tmpfs -o size=4m quarry-audit-test {} && exec \"$@\"",
        mnt.display()
    );
    let gw = observed(
        dir.path(),
        &http_server("notes", &notes.url),
        &mnt.join("quarry.db"),
        &[
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &mount,
            "sh",
        ],
    )
    .await;
    let read = |n: u32| json!({"resource_uri": format!("mcp://notes/fixture_3A//item/{n}"), "use_cache": false});
    call(&gw.client, "read_mcp_resource", read(1)).await;
    // The tmpfs as the gateway sees it.
    let filler = Path::new(&format!("/proc/{}/root", gw.pid))
        .join(mnt.strip_prefix("/").unwrap())
        .join("filler");
    fill(&filler);

    let (code, _) = call_error(&gw.client, "read_mcp_resource", read(2)).await;
    assert_eq!(code, "E011", "the first answer is withheld");
    let reads = notes.server.reads();
    for n in 1..=3 {
        let (code, message) = call_error(&gw.client, "read_mcp_resource", read(n)).await;
        assert_eq!(code, "E011", "{message}");
    }
    let (code, _) = call_error(&gw.client, "list_mcp_resources", json!({})).await;
    assert_eq!(code, "E011");
    assert_eq!(
        notes.server.reads(),
        reads,
        "a refused request reached the upstream"
    );
    let samples = metrics(gw.addr).await;
    assert_eq!(
        value(&samples, "quarry_audit_write_failures_total", &[]),
        Some(5.0)
    );
    let (status, body) = scrape::get(gw.addr, "/readyz").await;
    assert_eq!(status, 503);
    assert!(body.contains("audit trail cannot be written"), "{body}");

    std::fs::remove_file(&filler).unwrap();
    let (failed, result) = crate::support::call_raw(&gw.client, "read_mcp_resource", read(3)).await;
    assert!(
        !failed,
        "{result}\n{}",
        std::fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default()
    );
    assert_eq!(notes.server.reads(), reads + 1);
    assert_eq!(scrape::get(gw.addr, "/readyz").await.0, 200);
    // The trail, read in the gateway's mount namespace: whole, and only the answered reads in
    // it (the withheld and the refused ones have no record).
    let out = std::process::Command::new("nsenter")
        .args(["--target", &gw.pid.to_string(), "--mount", QUARRY])
        .args(["audit", "verify", "--json", "--config"])
        .arg(dir.path().join("quarry.toml"))
        .env("QUARRY_STORE_PATH", mnt.join("quarry.db"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["records"], 2, "{report}");
    gw.client.cancel().await.unwrap();
}

// The operator endpoints need no credential, so a non-loopback address is refused before the
// gateway starts (E001, exit 11).
#[test]
fn metrics_refuse_a_non_loopback_address() {
    let (code, stderr) = crate::support::serve_refused(&["--metrics", "0.0.0.0:0"]);
    assert_eq!(code, Some(11), "{stderr}");
    assert!(
        stderr.contains("E001") && stderr.contains("loopback address only"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("personal gateway"),
        "refused before the gateway started: {stderr}"
    );
}
