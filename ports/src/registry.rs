//! The server registry port (servers added at runtime, persisted) and the idempotency store.

use std::time::Duration;

use async_trait::async_trait;
use quarry_domain::{ServerName, ServerSpec, Timestamp};

use crate::StoreError;

/// A server registered at runtime, as the registry keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredServer {
    /// Name, id, endpoint, timeout, page bound.
    pub spec: ServerSpec,
    /// Retries of a read whose connection failed.
    pub retry_attempts: u32,
    /// Delay before the first retry (and the base of the reconnection backoff).
    pub retry_delay: Duration,
    /// Most sessions held open at once.
    pub pool_size: u32,
}

/// Keeps the servers registered at runtime.
///
/// Contract: names are unique; every change bumps [`ServerRegistry::generation`], so another
/// process can tell cheaply that it must reload.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait ServerRegistry: Send + Sync + std::fmt::Debug {
    /// Every registered server, by name.
    async fn servers(&self) -> Result<Vec<RegisteredServer>, StoreError>;

    /// Adds or replaces a server.
    async fn save(&self, server: &RegisteredServer, now: Timestamp) -> Result<(), StoreError>;

    /// Removes a server; false when there was none by that name.
    async fn delete(&self, name: &ServerName) -> Result<bool, StoreError>;

    /// A number that changes whenever the registry does.
    async fn generation(&self) -> Result<u64, StoreError>;
}

/// The first result of a mutation, kept under its idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remembered {
    /// Digest of the request payload the key was first used with.
    pub payload_digest: String,
    /// The result then, as JSON.
    pub result: String,
}

/// Keeps mutation results by idempotency key.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait IdempotencyStore: Send + Sync + std::fmt::Debug {
    /// The result first recorded for `key` in `scope`, if any.
    async fn recall(&self, scope: &str, key: &str) -> Result<Option<Remembered>, StoreError>;

    /// Records the first result for `key` in `scope`; a later record under the same key is
    /// ignored (the first one stands).
    async fn remember(
        &self,
        scope: &str,
        key: &str,
        entry: Remembered,
        now: Timestamp,
    ) -> Result<(), StoreError>;
}
