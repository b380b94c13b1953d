//! A fake audit log: the chain in memory, with a switch that makes it unwritable and a count of
//! records appended.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicBool, Ordering},
};

use async_trait::async_trait;
use quarry_domain::{AuditEntry, AuditRecord, GENESIS_HASH, chain_material};
use quarry_ports::{AuditLog, ContentHasher, StoreError};

use super::FakeHasher;

/// The audit chain in memory.
#[derive(Debug)]
pub struct FakeAuditLog {
    records: Mutex<Vec<AuditRecord>>,
    down: AtomicBool,
    hasher: Arc<dyn ContentHasher>,
}

impl Default for FakeAuditLog {
    fn default() -> Self {
        Self {
            records: Mutex::default(),
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
        self.lock().iter().map(|r| r.entry.clone()).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<AuditRecord>> {
        self.records.lock().unwrap_or_else(|e| e.into_inner())
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
        let mut records = self.lock();
        let (seq, previous_hash) = records.last().map_or_else(
            || (1, GENESIS_HASH.to_owned()),
            |r| (r.seq + 1, r.record_hash.clone()),
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
        records.push(record.clone());
        Ok(record)
    }

    async fn records(&self, after: u64, limit: usize) -> Result<Vec<AuditRecord>, StoreError> {
        Ok(self
            .lock()
            .iter()
            .filter(|r| r.seq > after)
            .take(limit)
            .cloned()
            .collect())
    }

    async fn head(&self) -> Result<Option<(u64, String)>, StoreError> {
        Ok(self.lock().last().map(|r| (r.seq, r.record_hash.clone())))
    }
}
