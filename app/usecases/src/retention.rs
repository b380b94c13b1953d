//! The audit trail as a whole: verifying it from its checkpoint to its head, and retention,
//! which removes records older than the configured days and leaves a signed checkpoint in their
//! place so that what remains still verifies.
//!
//! A prune verifies the records it removes first and refuses (E006) if they do not chain: a
//! checkpoint never vouches for a tampered trail.

use std::sync::Arc;

use quarry_domain::{
    AuditCheckpoint, AuditRecord, ChainBreak, Error, ErrorCode, GENESIS_HASH, verify_chain,
};
use quarry_ports::{AuditLog, AuditSigner, Clock, ContentHasher, StoreError};

/// Records read per page.
const PAGE: usize = 1_000;

/// The trail, with what checks and signs it.
#[derive(Debug, Clone)]
pub struct AuditTrail {
    log: Arc<dyn AuditLog>,
    signer: Arc<dyn AuditSigner>,
    hasher: Arc<dyn ContentHasher>,
    clock: Arc<dyn Clock>,
}

/// What a verification found: an intact trail.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Verified {
    /// Records checked (those retention left).
    pub records: u64,
    /// The last record's number and hash.
    pub head: (u64, String),
    /// Where the trail starts, if retention pruned it.
    pub checkpoint: Option<AuditCheckpoint>,
}

/// What a prune did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Pruned {
    /// Records removed.
    pub removed: u64,
    /// The checkpoint left in their place.
    pub checkpoint: AuditCheckpoint,
}

fn broken(b: &ChainBreak) -> Error {
    Error::new(
        ErrorCode::E006,
        format!("the audit trail is broken at record {}: {}", b.seq, b.what),
    )
}

fn unreadable(e: StoreError) -> Error {
    match e {
        StoreError::Corrupt(why) => {
            Error::new(ErrorCode::E006, format!("the audit trail is broken: {why}"))
        }
        other => Error::new(ErrorCode::E012, other.to_string()),
    }
}

impl AuditTrail {
    /// The trail in `log`, checkpoints signed by `signer`.
    pub fn new(
        log: Arc<dyn AuditLog>,
        signer: Arc<dyn AuditSigner>,
        hasher: Arc<dyn ContentHasher>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            log,
            signer,
            hasher,
            clock,
        }
    }

    /// Where verification starts: the checkpoint's record, its signature checked, or the
    /// genesis.
    async fn start(&self) -> Result<((u64, String), Option<AuditCheckpoint>), Error> {
        let Some(checkpoint) = self.log.checkpoint().await.map_err(unreadable)? else {
            return Ok(((0, GENESIS_HASH.to_owned()), None));
        };
        self.signer
            .verify(
                &checkpoint.material(),
                &checkpoint.key_id,
                &checkpoint.signature,
            )
            .map_err(|e| {
                Error::new(
                    ErrorCode::E006,
                    format!(
                        "the audit trail's checkpoint (record {}) cannot be trusted: {e}",
                        checkpoint.seq
                    ),
                )
            })?;
        Ok((
            (checkpoint.seq, checkpoint.record_hash.clone()),
            Some(checkpoint),
        ))
    }

    /// Checks every record from the checkpoint (or the first) to the head, telling `progress`
    /// the last record checked after each page.
    ///
    /// # Errors
    /// E006 naming the first record that breaks the chain (or the checkpoint that does not
    /// verify); E012 when the store cannot be read.
    pub async fn verify(&self, mut progress: impl FnMut(u64)) -> Result<Verified, Error> {
        let (mut at, checkpoint) = self.start().await?;
        let first = at.0;
        loop {
            let page = self.log.records(at.0, PAGE).await.map_err(unreadable)?;
            if page.is_empty() {
                break;
            }
            at = verify_chain(&page, at, |b| self.hasher.sha256(b)).map_err(|b| broken(&b))?;
            progress(at.0);
        }
        let missing = |from: u64, to: u64| {
            let what = if from == to {
                format!("record {to} is missing at the end")
            } else {
                format!("records {from} to {to} are missing at the end")
            };
            broken(&ChainBreak { seq: from, what })
        };
        match self.log.head().await.map_err(unreadable)? {
            Some(head) if head == at => {}
            None if at.0 == 0 => {}
            Some((seq, _)) if seq > at.0 => return Err(missing(at.0 + 1, seq)),
            _ => {
                return Err(broken(&ChainBreak {
                    seq: at.0,
                    what: "the chain's head does not match its last record".into(),
                }));
            }
        }
        Ok(Verified {
            records: at.0 - first,
            head: at,
            checkpoint,
        })
    }

    /// Removes the records older than `keep` (after checking that they chain), leaving a
    /// signed checkpoint at the last one removed. `None` when no record is that old.
    ///
    /// # Errors
    /// E006 when the records to remove do not chain or the checkpoint does not verify; E012
    /// when the store cannot be read or written, or the signing key cannot be used.
    pub async fn prune(&self, keep: chrono::Duration) -> Result<Option<Pruned>, Error> {
        let now = self.clock.now();
        let cutoff = now - keep;
        let (mut at, _) = self.start().await?;
        let mut last: Option<AuditRecord> = None;
        'pages: loop {
            let page = self.log.records(at.0, PAGE).await.map_err(unreadable)?;
            if page.is_empty() {
                break;
            }
            let old = page.iter().take_while(|r| r.entry.time < cutoff).count();
            if old > 0 {
                at = verify_chain(&page[..old], at, |b| self.hasher.sha256(b))
                    .map_err(|b| broken(&b))?;
                last = page.get(old - 1).cloned();
            }
            if old < page.len() {
                break 'pages;
            }
        }
        let Some(last) = last else {
            return Ok(None);
        };
        let sign_failed = |e: quarry_ports::SignError| Error::new(ErrorCode::E012, e.to_string());
        let mut checkpoint = AuditCheckpoint {
            seq: last.seq,
            record_hash: last.record_hash,
            pruned_at: now,
            key_id: self.signer.key_id().map_err(sign_failed)?,
            signature: String::new(),
        };
        checkpoint.signature = self
            .signer
            .sign(&checkpoint.material())
            .map_err(sign_failed)?;
        let removed = self.log.prune(&checkpoint).await.map_err(unreadable)?;
        Ok(Some(Pruned {
            removed,
            checkpoint,
        }))
    }
}
