//! Where the real peer MCP servers live once the test command (`cargo xtask ci`, or
//! `cargo xtask peers`) has installed them from npm.
//!
//! A test that needs a peer calls [`require`]: it fails, naming the command to run, when the peer
//! is missing. Peers are never silently skipped.

use std::path::{Path, PathBuf};

/// The folder peers are installed under: `$QUARRY_PEERS_DIR`, or `target/peers` of the workspace.
pub fn dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("QUARRY_PEERS_DIR") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(|root| root.join("target").join("peers"))
        .unwrap_or_else(|| PathBuf::from("target/peers"))
}

/// An installed npm peer: the Node program and the script to run.
#[derive(Debug, Clone)]
pub struct NodePeer {
    /// The package, `name@version`.
    pub package: &'static str,
    /// The script's path.
    pub script: PathBuf,
}

/// `@modelcontextprotocol/server-everything@2025.11.25`: 100 resources, 10 per page, odd text,
/// even blob.
pub const SERVER_EVERYTHING: (&str, &str) = (
    "@modelcontextprotocol/server-everything@2025.11.25",
    "node_modules/@modelcontextprotocol/server-everything/dist/index.js",
);

/// `@modelcontextprotocol/server-everything@2026.8.31`: markdown documents and two templates whose
/// content changes every second.
pub const SERVER_EVERYTHING_2026: (&str, &str) = (
    "@modelcontextprotocol/server-everything@2026.8.31",
    "node_modules/server-everything-2026/dist/index.js",
);

/// `@modelcontextprotocol/server-filesystem`: tools only; `resources/list` is -32601.
pub const SERVER_FILESYSTEM: (&str, &str) = (
    "@modelcontextprotocol/server-filesystem@2026.1.14",
    "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js",
);

/// The installed peer, or a failure naming the command that installs it.
///
/// # Panics
/// When the peer is not installed: a test that needs it must not pass without it.
pub fn require(peer: (&'static str, &'static str)) -> NodePeer {
    let script = dir().join(peer.1);
    assert!(
        script.is_file(),
        "peer {} is not installed at {}; run `cargo xtask peers` (the test command does)",
        peer.0,
        script.display()
    );
    NodePeer {
        package: peer.0,
        script,
    }
}

/// The Python interpreter of the venv holding the pinned Python MCP SDK, and the smoke script.
///
/// # Panics
/// When the venv is not installed: run `cargo xtask peers`.
pub fn python_sdk() -> (PathBuf, PathBuf) {
    let python = dir().join("venv/bin/python");
    assert!(
        python.is_file(),
        "the Python MCP SDK is not installed at {}; run `cargo xtask peers` (the test command does)",
        python.display()
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/smoke.py");
    (python, script)
}

/// The MCP Inspector's command line (`@modelcontextprotocol/inspector@2.12.0`) and the Node 22
/// it needs (the npm `node` package): (node, launcher script).
///
/// # Panics
/// When they are not installed: run `cargo xtask peers`.
pub fn inspector() -> (PathBuf, PathBuf) {
    let node = dir().join("node_modules/node/bin/node");
    let script =
        dir().join("node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js");
    assert!(
        node.is_file() && script.is_file(),
        "the MCP Inspector (and Node 22) are not installed under {}; run `cargo xtask peers` (the test command does)",
        dir().display()
    );
    (node, script)
}
