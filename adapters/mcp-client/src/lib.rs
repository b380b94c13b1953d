//! Quarry's upstream transport: MCP client sessions (rmcp) with stdio child processes and
//! streamable HTTP servers.
//!
//! Architecture invariant: rmcp types stop here. Every rmcp error becomes an
//! [`quarry_ports::UpstreamError`] at this seam, and every request carries the server's timeout.
//!
//! Child processes are spawned directly (never through a shell) with a minimal environment, their
//! stderr forwarded to the log, and killed when their session ends.

mod answers;
mod connector;
mod correlated;
mod coverage;
mod eras;
mod errors;
mod handler;
mod http;
mod listen;
mod oauth;
mod probe;
mod session;
mod stdio;

pub use connector::RmcpConnector;
pub use oauth::{OAuthHttp, Visitor};
pub use probe::Probe;
