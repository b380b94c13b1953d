//! The audit port: the tamper-evident trail of every request, appended by the audit decorator
//! and read back by `quarry audit`.

use async_trait::async_trait;
use quarry_domain::{AuditEntry, AuditRecord};

use crate::StoreError;

/// Appends to and reads the hash-chained audit trail.
///
/// Contract: `append` gives the entry the next sequence number and chains it to the record
/// before it (`previous_hash`, `record_hash` per `quarry_domain::chain_material`), atomically
/// with the chain's head, so concurrent writers in any number of processes, and a process
/// killed mid-write, never fork or break the chain; once it returns, the record is durable.
/// `records` returns records in sequence order from `after + 1`, at most `limit`; `head` is
/// the last record's sequence number and hash as the store's head keeps it (`None` when
/// empty). Failures are `StoreError::Unavailable` (cannot write: read-only, full disk, locked)
/// or `Corrupt`.
#[async_trait]
pub trait AuditLog: Send + Sync + std::fmt::Debug {
    /// Whether a record could be written now, as far as the log can tell without slowing every
    /// request: an adapter may answer from its last append and test only after a failure (then
    /// the first request after the backend broke reaches its use case, and its answer is
    /// withheld because its record cannot be written).
    async fn writable(&self) -> Result<(), StoreError>;
    /// Appends `entry` as the next record.
    async fn append(&self, entry: &AuditEntry) -> Result<AuditRecord, StoreError>;
    /// Up to `limit` records after sequence number `after`, in order.
    async fn records(&self, after: u64, limit: usize) -> Result<Vec<AuditRecord>, StoreError>;
    /// The chain's head: the last record's sequence number and hash.
    async fn head(&self) -> Result<Option<(u64, String)>, StoreError>;
}
