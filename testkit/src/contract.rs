//! Contract suites: one per driven port, run against every adapter and every fake, so that each
//! implementation is held to what the port's documentation promises. An adapter's own tests call
//! `check` with a fresh instance; the fakes run theirs in this crate.

// These are tests: a broken promise panics where it is found, saying which.
#![allow(clippy::unwrap_used)]

pub mod audit;
pub mod caches;
pub mod idempotency;
pub mod registry;
pub mod sessions;
pub mod vault;
pub mod versions;

#[cfg(test)]
mod tests;
