//! One server's circuit breaker: the domain's [`Circuit`] state, its backoff schedule and a lock.
//!
//! Time is the clock port's monotonic reading, so the breaker follows tokio's paused clock in
//! tests and never jumps with the wall clock.

use std::{
    sync::{Mutex, MutexGuard},
    time::Duration,
};

use quarry_domain::{Backoff, Circuit};

/// The breaker of one server.
#[derive(Debug)]
pub(crate) struct Breaker {
    circuit: Mutex<Circuit>,
    backoff: Backoff,
    /// What spreads this server's jitter apart from other servers' (its name).
    seed: String,
}

impl Breaker {
    pub(crate) fn new(threshold: u32, backoff: Backoff, seed: &str) -> Self {
        Self {
            circuit: Mutex::new(Circuit::new(threshold)),
            backoff,
            seed: seed.to_owned(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Circuit> {
        self.circuit.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `Some((failures, until))` while open at `now`.
    pub(crate) fn open_until(&self, now: Duration) -> Option<(u32, Duration)> {
        let c = self.lock();
        c.open_until(now).map(|until| (c.failures(), until))
    }

    /// When the next connection attempt is due, if a failure scheduled one.
    pub(crate) fn next_attempt(&self) -> Option<Duration> {
        self.lock().next_attempt()
    }

    /// Records a failure of the server at `now` and schedules the next attempt.
    pub(crate) fn failed(&self, now: Duration) {
        let mut c = self.lock();
        let delay = self
            .backoff
            .delay(c.failures().saturating_add(1), &self.seed);
        c.record_failure(now, delay);
    }

    /// Records a success: the circuit closes.
    pub(crate) fn succeeded(&self) {
        self.lock().record_success();
    }
}
