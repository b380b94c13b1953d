//! Starting the gateway and talking to it as an agent would.

use std::{path::Path, process::Stdio};

use quarry_testkit::fixture::{self, FixtureArgs, HttpFixture};
use rmcp::{
    RoleClient, ServiceExt,
    model::{CallToolRequestParams, ClientConfig},
    service::RunningService,
    transport::TokioChildProcess,
};
use serde_json::Value;

pub(crate) const QUARRY: &str = env!("CARGO_BIN_EXE_quarry");

pub(crate) type Client = RunningService<RoleClient, ClientConfig>;

/// A TOML `[servers.NAME]` section running the fixture server over stdio.
pub(crate) fn stdio_fixture(name: &str, args: &[&str]) -> String {
    let mut all = vec!["fixture".to_owned(), "--name".into(), name.into()];
    all.extend(args.iter().map(|s| (*s).to_owned()));
    format!(
        "[servers.{name}]\ncommand = {QUARRY:?}\nargs = {}\n\n",
        serde_json::to_string(&all).unwrap()
    )
}

/// A TOML `[servers.NAME]` section for a streamable HTTP endpoint.
pub(crate) fn http_server(name: &str, url: &str) -> String {
    format!("[servers.{name}]\nendpoint = {url:?}\n\n")
}

pub(crate) async fn http_fixture(name: &str, resources: u32) -> HttpFixture {
    fixture::serve_http(
        FixtureArgs {
            name: name.into(),
            resources,
            page_size: 4,
            ..FixtureArgs::default()
        },
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap()
}

/// The gateway over stdio with `config` as its configuration file, run in `dir`.
pub(crate) async fn gateway(dir: &Path, config: &str) -> Client {
    gateway_for(dir, config, ClientConfig::default()).await
}

/// The gateway over stdio with `config`, run in `dir`, its client `handler`.
pub(crate) async fn gateway_for<H: rmcp::ClientHandler>(
    dir: &Path,
    config: &str,
    handler: H,
) -> RunningService<RoleClient, H> {
    let path = dir.join("quarry.toml");
    std::fs::write(&path, config).unwrap();
    let mut cmd = tokio::process::Command::new(QUARRY);
    cmd.args(["serve", "--stdio", "--config"])
        .arg(&path)
        .current_dir(dir)
        .env_remove("QUARRY_CONFIG")
        .env("QUARRY_STORE_PATH", dir.join("quarry.db"));
    let (transport, _stderr) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    handler.serve(transport).await.unwrap()
}

/// Calls a tool and returns its structured result, failing the test on a tool error.
pub(crate) async fn call(client: &Client, tool: &str, args: Value) -> Value {
    let (is_error, value) = call_raw(client, tool, args).await;
    assert!(!is_error, "{tool} failed: {value}");
    assert_eq!(value["success"], true);
    value
}

/// Calls a tool that must fail and returns (error_code, error_message).
pub(crate) async fn call_error(client: &Client, tool: &str, args: Value) -> (String, String) {
    let (is_error, value) = call_raw(client, tool, args.clone()).await;
    assert!(is_error, "{tool} {args} should have failed: {value}");
    assert_eq!(value["success"], false);
    (
        value["error_code"].as_str().unwrap().to_owned(),
        value["error_message"].as_str().unwrap().to_owned(),
    )
}

pub(crate) async fn call_raw(client: &Client, tool: &str, args: Value) -> (bool, Value) {
    let Value::Object(map) = args else {
        panic!("arguments must be an object")
    };
    let result = client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(map))
        .await
        .unwrap();
    let value = result
        .structured_content
        .clone()
        .expect("structured content");
    // The text block carries the same result for hosts that show only text.
    let text = result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default();
    if result.is_error == Some(true) {
        assert!(
            text.starts_with(value["error_code"].as_str().unwrap()),
            "{text}"
        );
    } else {
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), value);
    }
    (result.is_error == Some(true), value)
}

/// `quarry serve ARGS` in a fresh folder with no configuration, expected to refuse to start:
/// its exit code and stderr.
pub(crate) fn serve_refused(args: &[&str]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(QUARRY)
        .arg("serve")
        .args(args)
        .current_dir(dir.path())
        .env_remove("QUARRY_CONFIG")
        .env("QUARRY_STORE_PATH", dir.path().join("quarry.db"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
