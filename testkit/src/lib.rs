//! Test support for Quarry: a configurable fixture MCP server (stdio and streamable HTTP) and the
//! locations of the real peer servers the test command installs.
//!
//! Architecture invariant: nothing here is used by the gateway's request path. The `quarry`
//! binary embeds the fixture server only for `quarry demo`.

pub mod fixture;
pub mod peers;
pub mod procs;
