//! Test support for Quarry: a configurable fixture MCP server (stdio and streamable HTTP), the
//! locations of the real peer servers the test command installs, fakes of every driven port, the
//! port contract suites every adapter and fake must pass, `/proc` readers, and a scraper for the
//! operator endpoints with Prometheus' own parser, an OTLP trace collector, and where the shared
//! services the tests use (PostgreSQL, Redis) are.
//!
//! Architecture invariant: nothing here is used by the gateway's request path, and this crate
//! depends on no adapter and not on the app. The `quarry` binary embeds the fixture server only
//! for `quarry demo`, behind its `demo` feature.

pub mod contract;
pub mod fakes;
pub mod fixture;
pub mod hostile;
pub mod issuer;
pub mod oauth;
pub mod otlp;
pub mod peers;
pub mod procs;
pub mod scrape;
pub mod services;
pub mod tls;
