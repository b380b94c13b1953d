//! The fixture MCP server as a program: `quarry-fixture [--http ADDR] [options]`.
//!
//! Over stdio it speaks MCP on stdin/stdout. Over HTTP it prints its endpoint URL as the first
//! line of stdout, then serves until killed.

use clap::Parser;
use quarry_testkit::fixture::{FixtureArgs, serve_http, serve_stdio};

#[derive(Debug, Parser)]
#[command(
    name = "quarry-fixture",
    about = "A configurable MCP server for tests and demos"
)]
struct Cli {
    /// Serve streamable HTTP on this address (for example 127.0.0.1:0) instead of stdio.
    #[arg(long)]
    http: Option<std::net::SocketAddr>,
    #[command(flatten)]
    fixture: FixtureArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.http {
        None => serve_stdio(cli.fixture).await,
        Some(addr) => {
            let server = serve_http(cli.fixture, addr).await?;
            println!("{}", server.url);
            tokio::signal::ctrl_c().await?;
            Ok(())
        }
    }
}
