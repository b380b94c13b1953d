//! The hostile MCP server (`testkit/hostile/hostile_server.py`): an upstream over stdio or
//! streamable HTTP that misbehaves on request, one command-line switch per behaviour, for the
//! tests that show a misbehaving upstream never takes a server down.

use std::{path::PathBuf, process::Stdio};

use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};

/// The script's path (run it with `python3`).
pub fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("hostile/hostile_server.py")
}

/// A `[servers.NAME]` configuration section running the hostile server over stdio with
/// `switches`.
pub fn server_section(name: &str, switches: &[&str], keys: &str) -> String {
    let mut args = vec![script().display().to_string()];
    args.extend(switches.iter().map(|s| (*s).to_owned()));
    let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "[servers.{name}]\ncommand = \"python3\"\nargs = [{}]\n{keys}\n",
        args.join(", ")
    )
}

/// The hostile server over streamable HTTP, killed when dropped.
#[derive(Debug)]
pub struct HttpHostile {
    /// Its MCP endpoint, `http://127.0.0.1:PORT/mcp`.
    pub url: String,
    _child: Child,
}

impl HttpHostile {
    /// Starts the server with `switches` and waits until it listens.
    ///
    /// # Panics
    /// When `python3` cannot start the script or it prints no endpoint.
    pub async fn start(switches: &[&str]) -> Self {
        let mut child = Command::new("python3")
            .arg(script())
            .arg("--http")
            .args(switches)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            // A client that hangs up mid-answer makes the server print a traceback.
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 runs the hostile server");
        let stdout = child.stdout.take().expect("piped stdout");
        let url = BufReader::new(stdout)
            .lines()
            .next_line()
            .await
            .expect("the hostile server's stdout")
            .expect("the hostile server prints its endpoint");
        Self { url, _child: child }
    }

    /// A `[servers.NAME]` configuration section for this endpoint.
    pub fn server_section(&self, name: &str, keys: &str) -> String {
        format!("[servers.{name}]\nendpoint = {:?}\n{keys}\n", self.url)
    }
}
