//! The system's clocks behind the Clock port: the wall clock, and tokio's monotonic clock (so
//! that deadlines, backoff and the circuit breaker agree with tokio's timers).

use std::time::Duration;

use quarry_domain::Timestamp;
use quarry_ports::Clock;

/// Real time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SystemClock {
    origin: tokio::time::Instant,
}

impl SystemClock {
    pub(crate) fn new() -> Self {
        Self {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        std::time::SystemTime::now().into()
    }

    fn monotonic(&self) -> Duration {
        self.origin.elapsed()
    }
}
