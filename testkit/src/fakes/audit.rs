//! A fake audit log: the chain in memory, with a switch that makes it unwritable, a hold that
//! keeps writes waiting, a fault that makes the next batch write panic, and the size of every write (1 for `append`, n for `append_batch`).

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
    /// The next `append_batch` panics (a bug in a store adapter, as the caller sees it).
    panic_batch: AtomicBool,
    hasher: Arc<dyn ContentHasher>,
    /// Writes wait while a test holds it (`hold`).
    held: tokio::sync::RwLock<()>,
    /// The number of records each write appended, in order.
    writes: Mutex<Vec<usize>>,
}

impl Default for FakeAuditLog {
    fn default() -> Self {
        Self {
            trail: Mutex::default(),
            down: AtomicBool::new(false),
            panic_batch: AtomicBool::new(false),
            hasher: Arc::new(FakeHasher),
            held: tokio::sync::RwLock::new(()),
            writes: Mutex::default(),
        }
    }
}

impl FakeAuditLog {
    /// Makes the log unwritable (as a read-only file or a full disk would), or writable again.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Makes the next batch write panic instead of writing.
    pub fn panic_next_batch(&self) {
        self.panic_batch.store(true, Ordering::SeqCst);
    }

    /// Keeps every write waiting (as a slow disk would) until the guard is dropped.
    pub async fn hold(&self) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        self.held.write().await
    }

    /// How many records each write appended, in order (failed writes included).
    pub fn writes(&self) -> Vec<usize> {
        self.writes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Chains `entries` after the head, all or none.
    async fn write(&self, entries: &[AuditEntry]) -> Result<Vec<AuditRecord>, StoreError> {
        let _unheld = self.held.read().await;
        self.writes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(entries.len());
        self.check()?;
        let mut trail = self.lock();
        let mut records = Vec::with_capacity(entries.len());
        for entry in entries {
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
            records.push(record);
        }
        Ok(records)
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
        let mut written = self.write(std::slice::from_ref(entry)).await?;
        written
            .pop()
            .ok_or_else(|| StoreError::Corrupt("nothing appended".into()))
    }

    async fn append_batch(&self, entries: &[AuditEntry]) -> Result<Vec<AuditRecord>, StoreError> {
        assert!(
            !self.panic_batch.swap(false, Ordering::SeqCst),
            "the fake audit log was told to panic on this batch"
        );
        self.write(entries).await
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
