//! The hostile MCP server (`testkit/hostile/hostile_server.py`): a stdio upstream that misbehaves
//! on request, one command-line switch per behaviour, for the tests that show a misbehaving
//! upstream never takes a server down.

use std::path::PathBuf;

/// The script's path (run it with `python3`).
pub fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("hostile/hostile_server.py")
}

/// A `[servers.NAME]` configuration section running the hostile server with `switches`.
pub fn server_section(name: &str, switches: &[&str], keys: &str) -> String {
    let mut args = vec![script().display().to_string()];
    args.extend(switches.iter().map(|s| (*s).to_owned()));
    let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "[servers.{name}]\ncommand = \"python3\"\nargs = [{}]\n{keys}\n",
        args.join(", ")
    )
}
