//! Quarry's inbound MCP server (rmcp): the published tool catalogue and the aggregated resources.
//!
//! Architecture invariant: this adapter translates and nothing else. It parses tool arguments
//! into domain requests (enforcing the schemas' bounds itself: rmcp deserialises, it does not
//! validate), calls the [`quarry_ports::ResourceGateway`], and renders results and errors in the
//! spec's shapes. No rmcp type crosses into the application. On stdio, stdout carries only MCP.

mod args;
mod catalogue;
mod handler;

pub use catalogue::{
    ADD_SERVER_TOOL, LIST_TOOL, PURGE_TOOL, READ_TOOL, REMOVE_SERVER_TOOL, VERSIONS_TOOL, catalogue,
};
pub use handler::{GatewayServer, ServerOptions};

use std::sync::Arc;

use quarry_ports::ResourceGateway;
use rmcp::ServiceExt;

/// Serves `gateway` over this process's stdin and stdout until the client disconnects or
/// `shutdown` resolves. On shutdown, input ends as if the client had closed it: requests already
/// received are still answered (rmcp drains them), then the server stops.
///
/// # Errors
/// When the MCP handshake fails or the transport breaks.
pub async fn serve_stdio(
    gateway: Arc<dyn ResourceGateway>,
    options: ServerOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    let (input, mut pipe) = tokio::io::duplex(256 * 1024);
    tokio::spawn(async move {
        let mut stdin = tokio::io::stdin();
        tokio::select! {
            _ = tokio::io::copy(&mut stdin, &mut pipe) => {}
            () = shutdown => {}
        }
        // Dropping the pipe's writing end is the end of input.
    });
    let service = GatewayServer::new(gateway, options)
        .serve((input, tokio::io::stdout()))
        .await
        .map_err(|e| format!("MCP handshake on stdio failed: {e}"))?;
    service
        .waiting()
        .await
        .map_err(|e| format!("the stdio server stopped: {e}"))?;
    Ok(())
}
