//! The session store port: 2025-11-25 sessions of the HTTP transport as every replica must know
//! them, so that a session opened on one replica goes on through another when the first goes
//! away.

use std::collections::BTreeSet;

use async_trait::async_trait;
use quarry_domain::{Principal, Timestamp};

use crate::StoreError;

/// One session, as the replica that takes it over needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    /// The agent that opened it; it is no one else's.
    pub owner: Principal,
    /// The client's `initialize` parameters (JSON), replayed to take the session over.
    pub initialize: String,
    /// The resource URIs, as the session names them, it subscribed to.
    pub subscriptions: BTreeSet<String>,
    /// When it was last used, as far as any replica said.
    pub last_used: Timestamp,
}

/// Keeps the HTTP transport's sessions by key. A key is a digest of the session id the client
/// holds, never the id itself: what is stored cannot be presented as a session.
///
/// Contract: `open` replaces a record under the same key; `find` gives back what `open`,
/// `subscribe`, `unsubscribe` and `touch` made of it, across processes sharing the backend;
/// `subscribe`, `unsubscribe` and `touch` of a key with no record change nothing; `close` and
/// `expire` forget records with their subscriptions.
///
/// # Errors
/// Every method: [`StoreError::Unavailable`] when the backend cannot be reached; `find`:
/// [`StoreError::Corrupt`] when a stored record no longer reads back.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait SessionStore: Send + Sync + std::fmt::Debug {
    /// Records a session opened by `owner` with these `initialize` parameters, used `now`.
    async fn open(
        &self,
        key: &str,
        owner: &Principal,
        initialize: &str,
        now: Timestamp,
    ) -> Result<(), StoreError>;

    /// The session under `key`, if any.
    async fn find(&self, key: &str) -> Result<Option<SessionRecord>, StoreError>;

    /// The session was used `now`.
    async fn touch(&self, key: &str, now: Timestamp) -> Result<(), StoreError>;

    /// The session subscribed to `uri` (again: no change).
    async fn subscribe(&self, key: &str, uri: &str) -> Result<(), StoreError>;

    /// The session no longer subscribes to `uri`.
    async fn unsubscribe(&self, key: &str, uri: &str) -> Result<(), StoreError>;

    /// The session ended; forgets it.
    async fn close(&self, key: &str) -> Result<(), StoreError>;

    /// Forgets every session last used before `before`; how many there were.
    async fn expire(&self, before: Timestamp) -> Result<u64, StoreError>;
}
