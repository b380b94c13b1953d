//! Quarry's application: configuration, the command line and the composition root. The use
//! cases live in `quarry-usecases`.
//!
//! Architecture invariant: only [`compose`] names adapters and chooses implementations; the CLI
//! parses, asks `compose` for what it needs, and renders.

pub mod cli;
mod clock;
pub mod compose;
pub mod config;
#[cfg(feature = "demo")]
mod demo;
pub mod failure;
pub mod logsafe;
mod render;
