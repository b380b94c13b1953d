//! The clock port: the only way the application learns the time, so tests can set it.

use std::time::Duration;

use quarry_domain::Timestamp;

/// Tells the time: the wall clock for what is recorded and shown, a monotonic one for deadlines,
/// backoff and circuit breakers (it never goes back when the wall clock is set).
#[cfg_attr(feature = "mocks", mockall::automock)]
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now, in UTC.
    fn now(&self) -> Timestamp;

    /// Time since the clock's own origin; only differences between two readings mean anything.
    fn monotonic(&self) -> Duration;
}
