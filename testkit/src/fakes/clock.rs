//! A clock tests set by hand: the wall clock moves only when told; the monotonic clock follows
//! tokio's (paused, in tests that pause it), so timers and the circuit breaker agree.

use std::{sync::Mutex, time::Duration};

use chrono::TimeZone;
use quarry_domain::Timestamp;
use quarry_ports::Clock;

/// A wall clock set by the test, and tokio's monotonic clock.
#[derive(Debug)]
pub struct ManualClock {
    wall: Mutex<Timestamp>,
    origin: tokio::time::Instant,
}

impl ManualClock {
    /// 2027-01-15T08:00:00Z, and the monotonic clock's origin now.
    pub fn new() -> Self {
        Self {
            wall: Mutex::new(
                chrono::Utc
                    .timestamp_opt(1_800_000_000, 0)
                    .single()
                    .unwrap_or_default(),
            ),
            origin: tokio::time::Instant::now(),
        }
    }

    /// Moves the wall clock forward.
    pub fn advance(&self, secs: i64) {
        *self.wall.lock().unwrap_or_else(|e| e.into_inner()) += chrono::Duration::seconds(secs);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.wall.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn monotonic(&self) -> Duration {
        self.origin.elapsed()
    }
}
