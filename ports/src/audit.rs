//! The audit port: the tamper-evident trail of every request, appended by the audit decorator
//! and read back by `quarry audit`.

use async_trait::async_trait;
use quarry_domain::{AuditCheckpoint, AuditEntry, AuditRecord};

use crate::StoreError;

/// Appends to and reads the hash-chained audit trail.
///
/// Contract: `append` gives the entry the next sequence number and chains it to the record
/// before it (`previous_hash`, `record_hash` per `quarry_domain::chain_material`), atomically
/// with the chain's head, so concurrent writers in any number of processes, and a process
/// killed mid-write, never fork or break the chain; once it returns, the record is durable.
/// `records` returns records in sequence order from `after + 1`, at most `limit`; `head` is
/// the last record's sequence number and hash as the store's head keeps it (`None` when
/// empty). `append_batch` appends several entries in order, as `append` would one after the
/// other, but in one atomic step: all of them or none, durable once it returns. Failures are
/// `StoreError::Unavailable` (cannot write: read-only, full disk, locked) or `Corrupt`.
///
/// Retention: `prune` removes every record up to `checkpoint.seq` and stores the checkpoint in
/// its place, atomically; it refuses (`Conflict`) unless the record at `checkpoint.seq` is there
/// with `checkpoint.record_hash` and lies past the stored checkpoint, so a prune never removes
/// what it did not see. `records` from 0 then starts after the checkpoint, and `head` is
/// unchanged.
#[async_trait]
pub trait AuditLog: Send + Sync + std::fmt::Debug {
    /// Whether a record could be written now, as far as the log can tell without slowing every
    /// request: an adapter may answer from its last append and test only after a failure (then
    /// the first request after the backend broke reaches its use case, and its answer is
    /// withheld because its record cannot be written).
    async fn writable(&self) -> Result<(), StoreError>;
    /// Appends `entry` as the next record.
    async fn append(&self, entry: &AuditEntry) -> Result<AuditRecord, StoreError>;
    /// Appends `entries`, in order, as the next records, all or none (the group commit's write:
    /// the appends that queued while another was being written).
    async fn append_batch(&self, entries: &[AuditEntry]) -> Result<Vec<AuditRecord>, StoreError>;
    /// Up to `limit` records after sequence number `after`, in order.
    async fn records(&self, after: u64, limit: usize) -> Result<Vec<AuditRecord>, StoreError>;
    /// The chain's head: the last record's sequence number and hash.
    async fn head(&self) -> Result<Option<(u64, String)>, StoreError>;
    /// Where the trail starts after retention, if it pruned anything.
    async fn checkpoint(&self) -> Result<Option<AuditCheckpoint>, StoreError>;
    /// Removes the records up to `checkpoint.seq` and keeps `checkpoint`; returns how many were
    /// removed.
    async fn prune(&self, checkpoint: &AuditCheckpoint) -> Result<u64, StoreError>;
}

/// Why a signature could not be made or checked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    /// The key cannot be read or created (the message says where).
    #[error("the audit signing key cannot be used: {0}")]
    Key(String),
    /// The signature is not the key's over the material, or was made by another key.
    #[error("the signature does not verify: {0}")]
    Invalid(String),
}

/// Signs and checks the audit trail's checkpoints.
pub trait AuditSigner: Send + Sync + std::fmt::Debug {
    /// The id of the signing key (a digest of its public half), creating the key if the
    /// adapter is configured to.
    ///
    /// # Errors
    /// [`SignError::Key`].
    fn key_id(&self) -> Result<String, SignError>;
    /// The signature (hex) of `material`.
    ///
    /// # Errors
    /// [`SignError::Key`].
    fn sign(&self, material: &[u8]) -> Result<String, SignError>;
    /// Checks that `signature` is this key's (`key_id`) over `material`.
    ///
    /// # Errors
    /// [`SignError::Invalid`] when it is not; [`SignError::Key`] when the key is missing.
    fn verify(&self, material: &[u8], key_id: &str, signature: &str) -> Result<(), SignError>;
}
