//! The clock port: the only way the application learns the time, so tests can set it.

use quarry_domain::Timestamp;

/// Tells the time.
#[cfg_attr(feature = "mocks", mockall::automock)]
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now, in UTC.
    fn now(&self) -> Timestamp;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        std::time::SystemTime::now().into()
    }
}
