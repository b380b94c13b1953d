//! A fake audit log: the chain in memory, with a switch that makes it unwritable and a count of
//! records appended.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicBool, Ordering},
};

use async_trait::async_trait;
use quarry_domain::{AuditCheckpoint, AuditEntry, AuditRecord, GENESIS_HASH, chain_material};
use quarry_ports::{AuditLog, ContentHasher, StoreError};

use super::FakeHasher;

/// The records kept, the head, and the checkpoint retention left.
#[derive(Debug, Default)]
struct Trail {
    records: Vec<AuditRecord>,
    head: Option<(u64, String)>,
    checkpoint: Option<AuditCheckpoint>,
}

/// The audit chain in memory.
#[derive(Debug)]
pub struct FakeAuditLog {
    trail: Mutex<Trail>,
    down: AtomicBool,
    hasher: Arc<dyn ContentHasher>,
}

impl Default for FakeAuditLog {
    fn default() -> Self {
        Self {
            trail: Mutex::default(),
            down: AtomicBool::new(false),
            hasher: Arc::new(FakeHasher),
        }
    }
}

impl FakeAuditLog {
    /// Makes the log unwritable (as a read-only file or a full disk would), or writable again.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// The entries appended so far.
    pub fn entries(&self) -> Vec<AuditEntry> {
        self.lock()
            .records
            .iter()
            .map(|r| r.entry.clone())
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Trail> {
        self.trail.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn check(&self) -> Result<(), StoreError> {
        if self.down.load(Ordering::SeqCst) {
            Err(StoreError::Unavailable("the fake audit log is down".into()))
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl AuditLog for FakeAuditLog {
    async fn writable(&self) -> Result<(), StoreError> {
        self.check()
    }

    async fn append(&self, entry: &AuditEntry) -> Result<AuditRecord, StoreError> {
        self.check()?;
        let mut trail = self.lock();
        let (seq, previous_hash) = trail.head.clone().map_or_else(
            || (1, GENESIS_HASH.to_owned()),
            |(seq, hash)| (seq + 1, hash),
        );
        let record_hash = self
            .hasher
            .sha256(&chain_material(seq, entry, &previous_hash))
            .hex();
        let record = AuditRecord {
            seq,
            entry: entry.clone(),
            previous_hash,
            record_hash,
        };
        trail.head = Some((seq, record.record_hash.clone()));
        trail.records.push(record.clone());
        Ok(record)
    }

    async fn records(&self, after: u64, limit: usize) -> Result<Vec<AuditRecord>, StoreError> {
        Ok(self
            .lock()
            .records
            .iter()
            .filter(|r| r.seq > after)
            .take(limit)
            .cloned()
            .collect())
    }

    async fn head(&self) -> Result<Option<(u64, String)>, StoreError> {
        Ok(self.lock().head.clone())
    }

    async fn checkpoint(&self) -> Result<Option<AuditCheckpoint>, StoreError> {
        Ok(self.lock().checkpoint.clone())
    }

    async fn prune(&self, checkpoint: &AuditCheckpoint) -> Result<u64, StoreError> {
        self.check()?;
        let mut trail = self.lock();
        let at = trail
            .records
            .iter()
            .position(|r| r.seq == checkpoint.seq && r.record_hash == checkpoint.record_hash)
            .ok_or_else(|| {
                StoreError::Conflict(format!(
                    "record {} is not there with that hash",
                    checkpoint.seq
                ))
            })?;
        trail.records.drain(..=at);
        trail.checkpoint = Some(checkpoint.clone());
        Ok(at as u64 + 1)
    }
}
