//! Quarry's inbound MCP server (rmcp): the published tool catalogue and the aggregated resources.
//!
//! Architecture invariant: this adapter translates and nothing else. It parses tool arguments
//! into domain requests (enforcing the schemas' bounds itself: rmcp deserialises, it does not
//! validate), calls the [`quarry_ports::ResourceGateway`], and renders results and errors in the
//! spec's shapes. No rmcp type crosses into the application. On stdio, stdout carries only MCP;
//! over HTTP (`http.rs`), guards run before rmcp sees a request.

mod args;
mod catalogue;
mod handler;
mod http;
mod stdio;

pub use catalogue::{
    ADD_SERVER_TOOL, LIST_TOOL, PURGE_TOOL, READ_TOOL, REMOVE_SERVER_TOOL, RESOURCES_SCOPE,
    VERSIONS_TOOL, catalogue, required_scope, tool_scopes,
};
pub use handler::{GatewayServer, ServerOptions};

pub use http::{HttpOptions, HttpServer, ResourceServerOptions, serve_http};
pub use stdio::serve_stdio;
