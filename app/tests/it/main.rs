//! The `quarry` binary end to end: a real MCP client drives `quarry serve --stdio`, which talks to
//! real upstream servers (fixture servers over stdio and streamable HTTP, and the npm
//! server-everything) over real transports.

// A test that cannot set up its world should fail on the spot, saying where.
#![allow(clippy::unwrap_used)]

mod audit;
mod auth;
mod canary;
mod cli;
mod contract;
mod direct_reads;
mod eras;
mod eras_upstream;
mod forgotten;
mod hostile;
mod hostile_http;
mod http;
mod http_admission;
mod http_agents;
mod http_bounds;
mod http_connections;
mod inputs;
mod listens;
mod logs;
mod oauth;
mod observe;
mod outages;
mod peers;
mod policy;
mod readpath;
mod registry;
mod replicas;
mod resource_server;
mod retention;
mod scopes;
mod serve;
mod session_owners;
mod subscriptions;
mod supervision;
mod support;
mod takeover;
mod tls;
mod token_sources;
mod traces;
mod vault;
mod wire;
