//! Group commit for the audit trail: [`GroupCommit`] wraps the trail's adapter, and an append
//! made while another is being written waits; the appends waiting when that write ends are
//! handed to the adapter together (`AuditLog::append_batch`: one atomic write). Each caller is
//! answered only once its own record is written, with that record, or with the error that kept
//! the whole batch out. Requests answered at the same moment then share one commit instead of
//! queueing on the store one by one.
//!
//! With no write in progress an append is written by its caller, as it would be alone. The
//! queue is drained by a task of its own, so a caller that gives up waiting (its request
//! cancelled) neither loses the others' records nor leaves them waiting.

use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use quarry_domain::{AuditCheckpoint, AuditEntry, AuditRecord};
use quarry_ports::{AuditLog, StoreError};
use tokio::sync::oneshot;

/// The most records one write commits.
const MOST: usize = 256;

type Answer = oneshot::Sender<Result<AuditRecord, StoreError>>;

/// Appends waiting for the write in progress.
#[derive(Debug, Default)]
struct Queue {
    waiting: Vec<(AuditEntry, Answer)>,
    /// Whether a write is in progress (by a caller, or by the draining task).
    writing: bool,
}

/// The audit trail `inner`, its concurrent appends committed together.
#[derive(Debug, Clone)]
pub struct GroupCommit {
    inner: Arc<dyn AuditLog>,
    queue: Arc<Mutex<Queue>>,
}

/// The write turn of a caller writing its own record: when it ends, however it ends, the turn
/// passes to a task that drains what queued meanwhile.
struct Turn<'a>(&'a GroupCommit);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.hand_over();
    }
}

/// The draining task's turn: should a batch write panic (or the task be dropped mid-write), the
/// turn passes on as a caller's does, instead of leaving the queue to a writer that is gone.
struct Draining<'a> {
    commit: &'a GroupCommit,
    done: bool,
}

impl Drop for Draining<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.commit.hand_over();
        }
    }
}

impl GroupCommit {
    /// `inner`, with appends made during a write committed together after it.
    pub fn new(inner: Arc<dyn AuditLog>) -> Self {
        Self {
            inner,
            queue: Arc::default(),
        }
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
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
            // No runtime left to write with: the waiting callers are told so (their answers
            // are dropped).
            Err(_) => {
                queue.waiting.clear();
                queue.writing = false;
            }
        }
    }

    /// Writes what is queued, a batch at a time, until nothing is.
    async fn drain(self) {
        let mut turn = Draining {
            commit: &self,
            done: false,
        };
        loop {
            let batch: Vec<(AuditEntry, Answer)> = {
                let mut queue = turn.commit.queue();
                if queue.waiting.is_empty() {
                    queue.writing = false;
                    turn.done = true;
                    return;
                }
                let n = queue.waiting.len().min(MOST);
                queue.waiting.drain(..n).collect()
            };
            let (entries, answers): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
            match turn.commit.inner.append_batch(&entries).await {
                Ok(records) if records.len() == answers.len() => {
                    for (answer, record) in answers.into_iter().zip(records) {
                        let _ = answer.send(Ok(record));
                    }
                }
                Ok(records) => {
                    let e = StoreError::Corrupt(format!(
                        "the audit trail wrote {} records for a batch of {}",
                        records.len(),
                        answers.len()
                    ));
                    for answer in answers {
                        let _ = answer.send(Err(e.clone()));
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
}

#[async_trait]
impl AuditLog for GroupCommit {
    async fn writable(&self) -> Result<(), StoreError> {
        self.inner.writable().await
    }

    async fn append(&self, entry: &AuditEntry) -> Result<AuditRecord, StoreError> {
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
                self.inner.append(entry).await
            }
        }
    }

    async fn append_batch(&self, entries: &[AuditEntry]) -> Result<Vec<AuditRecord>, StoreError> {
        self.inner.append_batch(entries).await
    }

    async fn records(&self, after: u64, limit: usize) -> Result<Vec<AuditRecord>, StoreError> {
        self.inner.records(after, limit).await
    }

    async fn head(&self) -> Result<Option<(u64, String)>, StoreError> {
        self.inner.head().await
    }

    async fn checkpoint(&self) -> Result<Option<AuditCheckpoint>, StoreError> {
        self.inner.checkpoint().await
    }

    async fn prune(&self, checkpoint: &AuditCheckpoint) -> Result<u64, StoreError> {
        self.inner.prune(checkpoint).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use quarry_testkit::{
        contract::audit::{check, check_concurrent, entry, verified},
        fakes::{FakeAuditLog, FakeHasher},
    };

    use super::*;

    /// Starts `n` appends while `fake` holds its writes, and waits until the first is being
    /// written and the others queue behind it.
    async fn queued(
        trail: &GroupCommit,
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

    #[tokio::test]
    async fn it_keeps_the_audit_contract() {
        check(
            GroupCommit::new(Arc::new(FakeAuditLog::default())),
            &FakeHasher,
        )
        .await;
        let shared: Arc<dyn AuditLog> = Arc::new(FakeAuditLog::default());
        let writers: Vec<Arc<dyn AuditLog>> = vec![
            Arc::new(GroupCommit::new(shared.clone())),
            Arc::new(GroupCommit::new(shared)),
        ];
        check_concurrent(writers, &FakeHasher).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn appends_made_while_one_is_written_are_written_together() {
        let fake = Arc::new(FakeAuditLog::default());
        let trail = GroupCommit::new(fake.clone());
        let held = fake.hold().await;
        let appends = queued(&trail, 50).await;
        drop(held);
        for (i, append) in (1..).zip(appends) {
            let record = append.await.unwrap().unwrap();
            assert_eq!(record.entry, entry(i), "each caller gets its own record");
        }
        assert_eq!(
            fake.writes(),
            [1, 49],
            "the first append alone, then the 49 queued behind it in one write"
        );
        assert_eq!(verified(&trail, &FakeHasher).await, 50);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_that_cannot_be_written_answers_every_caller_with_the_error() {
        let fake = Arc::new(FakeAuditLog::default());
        let trail = GroupCommit::new(fake.clone());
        let held = fake.hold().await;
        let appends = queued(&trail, 20).await;
        fake.set_down(true);
        drop(held);
        for append in appends {
            assert!(
                append.await.unwrap().is_err(),
                "an append answered although its record could not be written"
            );
        }
        fake.set_down(false);
        trail.append(&entry(99)).await.unwrap();
        assert_eq!(verified(&trail, &FakeHasher).await, 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_write_that_panics_leaves_the_trail_writable() {
        let fake = Arc::new(FakeAuditLog::default());
        let trail = GroupCommit::new(fake.clone());
        let held = fake.hold().await;
        let appends = queued(&trail, 10).await;
        fake.panic_next_batch();
        drop(held);
        let mut written = 0;
        for append in appends {
            let answer = tokio::time::timeout(Duration::from_secs(30), append)
                .await
                .expect("a caller of the panicked batch was left waiting")
                .unwrap();
            written += usize::from(answer.is_ok());
        }
        assert_eq!(
            written, 1,
            "only the append written alone is answered; the nine of the panicked batch are refused"
        );
        // Without the turn passed on, the queue would wait for the panicked writer forever.
        let after = tokio::time::timeout(Duration::from_secs(30), trail.append(&entry(99)))
            .await
            .expect("the trail stayed taken by the writer that panicked");
        after.unwrap();
        assert_eq!(verified(&trail, &FakeHasher).await, 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_caller_that_gives_up_leaves_the_queue_to_be_written() {
        let fake = Arc::new(FakeAuditLog::default());
        let trail = GroupCommit::new(fake.clone());
        let held = fake.hold().await;
        let mut appends = queued(&trail, 10).await;
        // The first caller, writing its own record, is cancelled mid-write.
        let first = appends.remove(0);
        first.abort();
        assert!(first.await.unwrap_err().is_cancelled());
        drop(held);
        for append in appends {
            tokio::time::timeout(Duration::from_secs(30), append)
                .await
                .expect("a queued append was left waiting")
                .unwrap()
                .unwrap();
        }
        assert_eq!(verified(&trail, &FakeHasher).await, 9);
    }
}
