//! The circuit breaker of one upstream server, as pure state.
//!
//! Time is monotonic and given by the caller (a [`Duration`] since the caller's clock origin), so
//! the same state machine serves the upstream supervisor, and later the policy worker and OAuth
//! refresh, and tests drive it without sleeping.

use std::time::Duration;

/// Consecutive failures of a server and when the next attempt is due.
///
/// Closed while failures stay under the threshold; open from the `threshold`-th consecutive
/// failure until the next attempt is due; a success closes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Circuit {
    threshold: u32,
    failures: u32,
    next_attempt: Option<Duration>,
}

impl Circuit {
    /// A closed circuit that opens after `threshold` consecutive failures (at least 1).
    pub fn new(threshold: u32) -> Self {
        Self {
            threshold: threshold.max(1),
            failures: 0,
            next_attempt: None,
        }
    }

    /// Consecutive failures so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// When the next connection attempt is due after a failure, if one failed.
    pub fn next_attempt(&self) -> Option<Duration> {
        self.next_attempt
    }

    /// `Some(until)` while the circuit is open at `now`: requests fail fast until then.
    pub fn open_until(&self, now: Duration) -> Option<Duration> {
        self.next_attempt
            .filter(|at| self.failures >= self.threshold && now < *at)
    }

    /// Records a failure at `now`; the next attempt is due `delay` later. Returns the failure
    /// count.
    pub fn record_failure(&mut self, now: Duration, delay: Duration) -> u32 {
        self.failures = self.failures.saturating_add(1);
        self.next_attempt = Some(now.saturating_add(delay));
        self.failures
    }

    /// Records a success: the circuit closes and the schedule starts again.
    pub fn record_success(&mut self) {
        self.failures = 0;
        self.next_attempt = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn opens_at_the_threshold_and_only_until_the_next_attempt() {
        let mut c = Circuit::new(3);
        c.record_failure(S(0), S(1));
        c.record_failure(S(1), S(2));
        assert_eq!(c.open_until(S(1)), None, "two failures keep it closed");
        assert_eq!(c.record_failure(S(3), S(4)), 3);
        assert_eq!(c.open_until(S(3)), Some(S(7)));
        assert_eq!(c.open_until(S(6)), Some(S(7)));
        assert_eq!(
            c.open_until(S(7)),
            None,
            "half-open once the attempt is due"
        );
    }

    #[test]
    fn a_success_closes_it() {
        let mut c = Circuit::new(1);
        c.record_failure(S(0), S(10));
        assert!(c.open_until(S(1)).is_some());
        c.record_success();
        assert_eq!(
            (c.failures(), c.open_until(S(1)), c.next_attempt()),
            (0, None, None)
        );
    }

    #[test]
    fn a_threshold_of_zero_means_one() {
        let mut c = Circuit::new(0);
        c.record_failure(S(0), S(5));
        assert_eq!(c.open_until(S(0)), Some(S(5)));
    }
}
