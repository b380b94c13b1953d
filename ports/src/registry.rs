//! The server registry port (servers added at runtime, persisted) and the idempotency store.

use async_trait::async_trait;
use quarry_domain::{IdempotencyKey, ServerName, ServerSettings, Timestamp};

use crate::StoreError;

/// Keeps the servers registered at runtime.
///
/// Contract: names are unique; every change bumps [`ServerRegistry::generation`] by at least
/// one, and `save`/`delete` return the generation their change produced, so a process can tell
/// its own change from another's and another process can tell cheaply that it must reload.
///
/// # Errors
/// Every method: [`StoreError::Unavailable`] when the backend cannot be reached;
/// [`StoreError::Corrupt`] when a stored server no longer parses. `save` returns
/// [`StoreError::Conflict`] when another server already has the id.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait ServerRegistry: Send + Sync + std::fmt::Debug {
    /// Every registered server, by name.
    async fn servers(&self) -> Result<Vec<ServerSettings>, StoreError>;

    /// Adds or replaces a server (by name); returns the generation after the change.
    async fn save(&self, server: &ServerSettings, now: Timestamp) -> Result<u64, StoreError>;

    /// Removes a server; returns the generation after the change, `None` when there was no
    /// server by that name (nothing changed).
    async fn delete(&self, name: &ServerName) -> Result<Option<u64>, StoreError>;

    /// A number that grows whenever the registry changes.
    async fn generation(&self) -> Result<u64, StoreError>;
}

/// The first result of a mutation, kept under its idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remembered {
    /// Digest of the request payload the key was first used with (lowercase hex).
    pub payload_digest: String,
    /// The result then, as JSON.
    pub result: String,
}

/// What reserving an idempotency key found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reservation {
    /// The key was free and is now the caller's: run the mutation, then
    /// [`IdempotencyStore::complete`] (or [`IdempotencyStore::release`] when it failed).
    Granted,
    /// The mutation already ran with this payload: replay its result.
    Done(Remembered),
    /// Another caller holds the key for this payload and has not finished: wait and ask again.
    Pending,
    /// The key was first used with another payload (whose digest this is).
    Conflict {
        /// The digest the key is bound to.
        payload_digest: String,
    },
}

/// Keeps mutation results by idempotency key, and reserves keys so that one mutation runs once
/// across every process sharing the store.
///
/// Contract: for one (scope, key), of any number of concurrent `reserve` calls at most one is
/// [`Reservation::Granted`] (first writer wins) until that holder completes or releases it, or
/// its reservation is older than `stale_after` (a holder that died); the others see `Pending` for
/// the same payload digest and `Conflict` for another. After `complete`, every `reserve` with the
/// same digest is `Done` with that result, forever. `release` frees a granted key for the next
/// caller (a failed mutation is not remembered).
///
/// # Errors
/// Every method: [`StoreError::Unavailable`] when the backend cannot be reached;
/// [`StoreError::Corrupt`] when a stored record cannot be read back.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait IdempotencyStore: Send + Sync + std::fmt::Debug {
    /// Reserves `key` in `scope` for a payload with `payload_digest`, or says who has it.
    async fn reserve(
        &self,
        scope: &str,
        key: &IdempotencyKey,
        payload_digest: &str,
        now: Timestamp,
        stale_after: std::time::Duration,
    ) -> Result<Reservation, StoreError>;

    /// Records the result of a granted mutation; the key replays it from now on.
    async fn complete(
        &self,
        scope: &str,
        key: &IdempotencyKey,
        result: &str,
        now: Timestamp,
    ) -> Result<(), StoreError>;

    /// Frees a granted key whose mutation failed.
    async fn release(&self, scope: &str, key: &IdempotencyKey) -> Result<(), StoreError>;
}
