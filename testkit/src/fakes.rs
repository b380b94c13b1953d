//! Stateful in-memory fakes of every driven port, for use-case tests: each passes the same
//! contract suite as the real adapters (see [`crate::contract`]), and each has a switch or a
//! counter that a real adapter has no reason to carry (a backend that goes down, calls counted).
//! Mocks (mockall, in `quarry-ports`' `mocks` feature) remain for one-off injected faults.

mod audit;
mod caches;
mod clock;
mod hasher;
mod metrics;
mod oauth;
mod signer;
mod stores;
mod upstream;
mod vault;

pub use audit::FakeAuditLog;
pub use caches::{FakeContentCache, FakeInvalidationBus, FakeListingCache};
pub use clock::ManualClock;
pub use hasher::FakeHasher;
pub use metrics::FakeMetrics;
pub use oauth::FakeOAuth;
pub use signer::FakeSigner;
pub use stores::{FakeIdempotencyStore, FakeRegistry, FakeVersionStore};
pub use upstream::{CountingConnector, FakeConnector, FakeSession};
pub use vault::{FakeCipher, FakeCredentialStore};
