//! Quarry's application: use cases, configuration, the CLI and the composition root.
//!
//! Architecture invariant: only this crate chooses implementations (see [`compose`]); the use
//! cases in [`service`] see ports, never adapters.

pub mod cli;
pub mod compose;
pub mod config;
mod demo;
mod invalidation;
mod listings;
mod render;
pub mod service;
mod upstreams;
