//! Versions recorded together. A sighting to record joins a queue and waits for the write
//! turn; whoever gets the turn records every sighting queued by then (up to [`BATCH_BYTES`] of
//! content) in one transaction and answers each caller, its own answer among them. A caller
//! answered meanwhile stops waiting for the turn.
//!
//! Why: a burst of new contents (a cold cache's first reads of many resources at once) used to
//! pass the turn from caller to caller, one commit each, and under load each hand-off waited
//! for the runtime's threads to come round to the next caller: a hundred records of about
//! 50 µs apiece took 15-25 ms from the first to the last. Together they are one commit.

use quarry_ports::{Recorded, StoreError};
use tokio::sync::oneshot;

use super::{Sighting, here};
use crate::{SqliteStore, direct::Direct};

/// The most content one batch carries, so that its transaction holds the caller's thread for
/// a bounded time (each sighting's content is at most `RECORDED_HERE_MAX`).
const BATCH_BYTES: u64 = 1024 * 1024;

type Answer = oneshot::Sender<Result<Recorded, StoreError>>;

/// Sightings waiting for the write turn, in the order they came.
#[derive(Debug, Default)]
pub(crate) struct Queue(pub(super) Vec<(Sighting, Answer)>);

fn abandoned() -> StoreError {
    StoreError::Unavailable("the batch holding this version was abandoned unwritten".into())
}

impl SqliteStore {
    pub(super) fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.versions_queued
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records `sighting` with whatever else is queued when this caller, or another, gets the
    /// write turn.
    pub(super) async fn record_together(&self, sighting: Sighting) -> Result<Recorded, StoreError> {
        let (tx, mut rx) = oneshot::channel();
        self.queue().0.push((sighting, tx));
        loop {
            let mut turn = tokio::select! {
                biased;
                answer = &mut rx => return answer.unwrap_or_else(|_| Err(abandoned())),
                turn = self.write_turn() => turn,
            };
            match rx.try_recv() {
                Ok(answer) => return answer,
                Err(oneshot::error::TryRecvError::Closed) => return Err(abandoned()),
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            let batch = self.take_batch();
            self.record_batch(turn.as_mut(), batch).await;
            // This caller's sighting was beyond the batch's bound: it waits for the next turn.
        }
    }

    /// The sightings at the head of the queue, up to [`BATCH_BYTES`] (at least one), leaving
    /// out those whose caller has gone.
    fn take_batch(&self) -> Vec<(Sighting, Answer)> {
        let mut queue = self.queue();
        let mut bytes = 0;
        let mut n = 0;
        for (sighting, _) in &queue.0 {
            bytes += sighting.content.len();
            if n > 0 && bytes > BATCH_BYTES {
                break;
            }
            n += 1;
        }
        queue
            .0
            .drain(..n)
            .filter(|(_, answer)| !answer.is_closed())
            .collect()
    }

    /// Records `batch` in one transaction on `direct`, or each sighting through the pool when
    /// there is no direct connection (a store in memory) or its transaction failed; answers
    /// each caller.
    async fn record_batch(&self, direct: Option<&mut Direct>, batch: Vec<(Sighting, Answer)>) {
        if batch.is_empty() {
            return;
        }
        let sightings: Vec<&Sighting> = batch.iter().map(|(s, _)| s).collect();
        let written =
            direct.and_then(
                |direct| match here::record(direct, &sightings, self.retention) {
                    Ok((answers, checkpoint_due)) => {
                        if checkpoint_due {
                            self.checkpoint_soon();
                        }
                        Some(answers)
                    }
                    Err(e) => {
                        tracing::debug!(
                            "recording versions on this thread failed, the pool records them: {e}"
                        );
                        None
                    }
                },
            );
        let answers = match written {
            Some(answers) => answers,
            None => {
                let mut answers = Vec::with_capacity(sightings.len());
                for s in &sightings {
                    answers.push(
                        self.record_pooled(&s.key, s.digest, &s.content, s.now)
                            .await,
                    );
                }
                answers
            }
        };
        for ((_, tx), answer) in batch.into_iter().zip(answers) {
            let _ = tx.send(answer);
        }
    }
}
