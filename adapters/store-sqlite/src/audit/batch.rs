//! Group commit: an append made while another is being written waits in the queue, and the
//! appends waiting when that write ends are chained and committed in one transaction. Each
//! caller is answered only once its own record is durable, with that record, or with the error
//! that kept the whole batch out (all of a batch or none of it is written).
//!
//! With no write in progress an append is written by its caller, as it would be alone. The
//! queue is drained by a task of its own, so a caller that gives up waiting (its request
//! cancelled) neither loses the others' records nor leaves them waiting.

use std::sync::atomic::Ordering;

use quarry_domain::{AuditEntry, AuditRecord};
use quarry_ports::StoreError;
use tokio::sync::oneshot;

use super::SqliteAudit;

/// The most records one transaction commits: the statement binds four values a record, well
/// under SQLite's limit of 32,766.
const MOST: usize = 256;

type Answer = oneshot::Sender<Result<AuditRecord, StoreError>>;

/// Appends waiting for the write in progress.
#[derive(Debug, Default)]
pub(super) struct Queue {
    waiting: Vec<(AuditEntry, Answer)>,
    /// Whether a write is in progress (by a caller, or by the draining task).
    writing: bool,
}

/// The write turn of a caller writing its own record: when it ends, however it ends, the turn
/// passes to a task that drains what queued meanwhile.
struct Turn<'a>(&'a SqliteAudit);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.hand_over();
    }
}

impl SqliteAudit {
    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends `entry`: at once when nothing is being written, else with the next batch.
    pub(super) async fn append_combined(
        &self,
        entry: &AuditEntry,
    ) -> Result<AuditRecord, StoreError> {
        let waiting = {
            let mut queue = self.queue();
            if queue.writing {
                let (tx, rx) = oneshot::channel();
                queue.waiting.push((entry.clone(), tx));
                Some(rx)
            } else {
                queue.writing = true;
                None
            }
        };
        match waiting {
            Some(rx) => rx.await.unwrap_or_else(|_| {
                Err(StoreError::Unavailable(
                    "the audit writer stopped before writing the record".into(),
                ))
            }),
            None => {
                let _turn = Turn(self);
                let appended = self.chain(entry).await;
                self.healthy.store(appended.is_ok(), Ordering::Release);
                appended
            }
        }
    }

    /// Ends a write turn: the queue is drained by a task of its own, or the turn is free.
    fn hand_over(&self) {
        let mut queue = self.queue();
        if queue.waiting.is_empty() {
            queue.writing = false;
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(self.clone().drain());
            }
            // No runtime left to write with: the waiting callers are told so.
            Err(_) => {
                queue.waiting.clear();
                queue.writing = false;
            }
        }
    }

    /// Writes what is queued, a batch at a time, until nothing is.
    async fn drain(self) {
        loop {
            let batch: Vec<(AuditEntry, Answer)> = {
                let mut queue = self.queue();
                if queue.waiting.is_empty() {
                    queue.writing = false;
                    return;
                }
                let n = queue.waiting.len().min(MOST);
                queue.waiting.drain(..n).collect()
            };
            let (entries, answers): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
            let written = self.chain_many(&entries).await;
            self.healthy.store(written.is_ok(), Ordering::Release);
            match written {
                Ok(records) => {
                    for (answer, record) in answers.into_iter().zip(records) {
                        let _ = answer.send(Ok(record));
                    }
                }
                Err(e) => {
                    for answer in answers {
                        let _ = answer.send(Err(e.clone()));
                    }
                }
            }
        }
    }

    /// Chains and commits `entries` in one transaction, in order.
    async fn chain_many(&self, entries: &[AuditEntry]) -> Result<Vec<AuditRecord>, StoreError> {
        if let [entry] = entries {
            return Ok(vec![self.chain(entry).await?]);
        }
        let records = {
            let _turn = self.store.write_turn().await;
            self.append_reading_head(entries).await?
        };
        if let Some(newest) = records.last() {
            *self.head.lock().unwrap_or_else(|e| e.into_inner()) =
                Some((newest.seq, newest.record_hash.clone()));
        }
        Ok(records)
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use quarry_domain::{AuditRecord, Retention};
    use quarry_ports::{AuditLog, ContentHasher, StoreError};
    use quarry_testkit::{
        contract::audit::{entry, verified},
        fakes::FakeHasher,
    };

    use crate::{SqliteAudit, SqliteStore};

    /// A trail on a file with one record, and another store on the same file (another process,
    /// as far as SQLite knows) that can hold the write lock.
    async fn trail_and_rival(dir: &std::path::Path) -> (SqliteAudit, SqliteStore) {
        let path = dir.join("audit.db");
        let hasher: Arc<dyn ContentHasher> = Arc::new(FakeHasher);
        let store = SqliteStore::open(&path, Retention::default())
            .await
            .unwrap();
        let trail = SqliteAudit::new(store, hasher);
        trail.append(&entry(0)).await.unwrap();
        let rival = SqliteStore::open(&path, Retention::default())
            .await
            .unwrap();
        (trail, rival)
    }

    /// Starts `n` appends while the rival holds the write lock, and waits until the first is
    /// being written (blocked on the lock) and the others queue behind it.
    async fn queued(
        trail: &SqliteAudit,
        n: u64,
    ) -> Vec<tokio::task::JoinHandle<Result<AuditRecord, StoreError>>> {
        let appends: Vec<_> = (1..=n)
            .map(|i| {
                let trail = trail.clone();
                tokio::spawn(async move { trail.append(&entry(i)).await })
            })
            .collect();
        let waiting = usize::try_from(n - 1).unwrap();
        for _ in 0..1000 {
            if trail.queue().waiting.len() == waiting {
                return appends;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the appends did not queue behind the one being written");
    }

    /// Frames in the write-ahead log: every commit writes at least one.
    async fn wal_frames(store: &SqliteStore) -> i64 {
        let (_busy, frames, _done): (i64, i64, i64) =
            sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
                .fetch_one(&store.pool)
                .await
                .unwrap();
        frames
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn appends_made_while_one_is_written_are_committed_together() {
        let dir = tempfile::tempdir().unwrap();
        let (trail, rival) = trail_and_rival(dir.path()).await;
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&rival.pool)
            .await
            .unwrap();
        assert_eq!(wal_frames(&rival).await, 0);
        let lock = rival.pool.begin_with("BEGIN IMMEDIATE").await.unwrap();
        let appends = queued(&trail, 50).await;
        lock.rollback().await.unwrap();
        for (i, append) in (1..).zip(appends) {
            let record = append.await.unwrap().unwrap();
            assert_eq!(record.entry, entry(i), "each caller gets its own record");
        }
        // Fifty commits would have written fifty frames at least; the first append's commit
        // and one for the 49 queued behind it write a handful.
        let frames = wal_frames(&rival).await;
        assert!(
            frames < 20,
            "{frames} frames: the queued appends were not committed together"
        );
        assert_eq!(verified(&trail, &FakeHasher).await, 51);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_that_cannot_be_written_answers_every_caller_with_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let (trail, rival) = trail_and_rival(dir.path()).await;
        let mut lock = rival.pool.begin_with("BEGIN IMMEDIATE").await.unwrap();
        sqlx::query("ALTER TABLE audit_records RENAME TO audit_records_away")
            .execute(&mut *lock)
            .await
            .unwrap();
        let appends = queued(&trail, 20).await;
        lock.commit().await.unwrap();
        for append in appends {
            assert!(
                append.await.unwrap().is_err(),
                "an append answered although its record could not be written"
            );
        }
        sqlx::query("ALTER TABLE audit_records_away RENAME TO audit_records")
            .execute(&rival.pool)
            .await
            .unwrap();
        trail.writable().await.unwrap();
        trail.append(&entry(99)).await.unwrap();
        // Nothing of the failed batch was written: the chain goes from the first record to
        // the last.
        assert_eq!(verified(&trail, &FakeHasher).await, 2);
    }
}
