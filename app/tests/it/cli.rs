//! The command line as an operator uses it.

use std::process::Command;

use serde_json::Value;

use crate::support::{QUARRY, stdio_fixture};

fn quarry(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(QUARRY)
        .args(args)
        .current_dir(dir)
        .env_remove("QUARRY_CONFIG")
        .env("QUARRY_STORE_PATH", dir.join("quarry.db"))
        .env_remove("QUARRY_LOG")
        .output()
        .unwrap()
}

#[test]
fn help_answers_the_obvious_questions() {
    let dir = tempfile::tempdir().unwrap();
    let top = quarry(dir.path(), &["--help"]);
    assert!(top.status.success());
    let text = String::from_utf8(top.stdout).unwrap();
    for needle in [
        "serve",
        "list",
        "read",
        "servers",
        "demo",
        "--config",
        "quarry.toml",
    ] {
        assert!(
            text.contains(needle),
            "top-level help lacks {needle}:\n{text}"
        );
    }
    assert!(
        !text.lines().any(|l| l.trim_start().starts_with("fixture")),
        "the fixture command is hidden"
    );
    for (cmd, needle) in [
        ("serve", "stdout carries only MCP"),
        ("list", "--type"),
        ("read", "mcp://"),
        ("servers", "status"),
        ("demo", "cache"),
    ] {
        let out = quarry(dir.path(), &[cmd, "--help"]);
        assert!(out.status.success(), "{cmd} --help");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            text.contains(needle),
            "{cmd} --help lacks {needle:?}:\n{text}"
        );
    }
}

#[test]
fn list_read_and_servers_work_from_the_command_line_with_json() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("quarry.toml"),
        stdio_fixture("files", &["--resources", "2"]),
    )
    .unwrap();

    let list = quarry(dir.path(), &["list", "--json", "--limit", "3"]);
    assert!(
        list.status.success(),
        "{}",
        String::from_utf8_lossy(&list.stderr)
    );
    let listing: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(listing["total_count"], 8);
    assert_eq!(listing["resources"].as_array().unwrap().len(), 3);

    let table = quarry(dir.path(), &["list"]);
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(text.starts_with("URI"), "{text}");
    assert!(text.contains("mcp://files/fixture_3A//text/hello.txt"));
    assert!(
        text.contains("1-8 of 8 resources from 1 server(s)"),
        "{text}"
    );

    let read = quarry(
        dir.path(),
        &["read", "mcp://files/fixture_3A//blob/bytes.bin"],
    );
    assert!(read.status.success());
    assert_eq!(
        read.stdout,
        quarry_testkit::fixture::blob_bytes(),
        "raw bytes on stdout"
    );
    assert!(String::from_utf8_lossy(&read.stderr).contains("bytes 0-255/256"));

    let json = quarry(
        dir.path(),
        &[
            "read",
            "--json",
            "--offset",
            "6",
            "--limit",
            "4",
            "mcp://files/fixture_3A//text/hello.txt",
        ],
    );
    let result: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(result["content"], "from");
    assert_eq!(result["content_range"], "bytes 6-9/18");

    let servers = quarry(dir.path(), &["servers", "--json"]);
    let statuses: Value = serde_json::from_slice(&servers.stdout).unwrap();
    assert_eq!(statuses[0]["server_name"], "files");
    assert_eq!(statuses[0]["status"], "connected");
    assert_eq!(statuses[0]["resource_count"], 8);
    assert_eq!(statuses[0]["endpoint"], format!("stdio:{QUARRY}"));
}

#[test]
fn failures_exit_with_their_code_and_say_why_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("quarry.toml"), stdio_fixture("files", &[])).unwrap();
    for (args, exit, needle) in [
        (
            vec!["read", "mcp://nosuch/x"],
            13,
            "E003: server 'nosuch' is not registered",
        ),
        (vec!["read", "not-a-uri"], 11, "E001: resource_uri"),
        (vec!["read", "mcp://files/fixture_3A//missing"], 12, "E002"),
        (
            vec!["list", "--limit", "0"],
            11,
            "E001: limit must be between 1 and 1000",
        ),
        (vec!["list", "--type", "table"], 11, "E001"),
        (
            vec!["list", "--offset", "-1"],
            11,
            "offset must be 0 or more",
        ),
    ] {
        let out = quarry(dir.path(), &args);
        assert_eq!(
            out.status.code(),
            Some(exit),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
    }
}

#[test]
fn a_bad_configuration_file_is_refused_with_its_location() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("quarry.toml"),
        "[servers.a]\nendpoint = \"ftp://x\"\n",
    )
    .unwrap();
    let out = quarry(dir.path(), &["serve"]);
    assert_eq!(out.status.code(), Some(11));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("quarry.toml") && err.contains("servers.a.endpoint"),
        "{err}"
    );
}

#[test]
fn the_demo_runs_with_nothing_set_up_and_shows_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let out = quarry(dir.path(), &["demo", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let demo: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(demo["listing"]["servers"].as_array().unwrap().len(), 2);
    assert_eq!(demo["listing"]["partial"], false);
    assert_eq!(demo["reads"][0]["result"]["cached"], false);
    assert_eq!(demo["reads"][1]["result"]["cached"], true);
    assert_eq!(demo["reads"][1]["result"]["content"], "Hello from files!\n");
    let human = quarry(dir.path(), &["demo"]);
    let text = String::from_utf8(human.stdout).unwrap();
    assert!(text.contains("served from cache"), "{text}");
}

// traces: RC-7 — `quarry list` says on stderr how many entries a server's listing left out as
// malformed, and lists the rest.
#[test]
fn list_warns_about_malformed_entries_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let config = quarry_testkit::hostile::server_section("hostile", &["--malformed-entries"], "");
    std::fs::write(dir.path().join("quarry.toml"), config).unwrap();
    let out = quarry(dir.path(), &["list"]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("mcp://hostile/hostile_3A//one"), "{stdout}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("warning: server 'hostile' listed 2 malformed entries (left out)"),
        "{stderr}"
    );
}
