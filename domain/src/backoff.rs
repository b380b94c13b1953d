//! Retry and reconnection delays: the schedule (1 s, 2 s, 4 s ... at most 30 s) and its jitter.
//!
//! Pure arithmetic: no clock, no randomness source. The jitter is derived from a seed the caller
//! gives (a server's name and the attempt), so many gateways do not retry in step, yet a test can
//! predict every delay.

use std::time::Duration;

use serde::Serialize;

/// How a server's reads retry a failed connection, and the base of its reconnection backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RetryPolicy {
    /// Retries after the first failure.
    pub attempts: u32,
    /// Delay before the first retry; each next one doubles, up to [`RetryPolicy::MAX_DELAY`].
    pub delay: Duration,
}

impl RetryPolicy {
    /// The longest wait between two attempts.
    pub const MAX_DELAY: Duration = Duration::from_secs(30);
    /// The most retries a server may ask for.
    pub const MAX_ATTEMPTS: u32 = 10;

    /// The delay before retry number `n` (1-based): `delay × 2^(n-1)`, at most 30 s.
    pub fn delay_before(&self, n: u32) -> Duration {
        let factor = 2u32.saturating_pow(n.saturating_sub(1));
        self.delay.saturating_mul(factor).min(Self::MAX_DELAY)
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 3,
            delay: Duration::from_secs(1),
        }
    }
}

/// A backoff schedule with jitter: the delay before connection attempt `failures + 1`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The nominal schedule.
    pub policy: RetryPolicy,
    /// Random spread of each delay, as a fraction of it (0.2: ±20 %), in `[0, 1]`.
    pub jitter: f64,
}

impl Backoff {
    /// The delay after `failures` consecutive failures (at least one is assumed), spread by the
    /// jitter in a way that depends only on `seed` and `failures`.
    pub fn delay(&self, failures: u32, seed: &str) -> Duration {
        let nominal = self.policy.delay_before(failures.max(1));
        if self.jitter <= 0.0 {
            return nominal;
        }
        nominal.mul_f64((1.0 + self.jitter * spread(failures, seed)).max(0.0))
    }
}

/// A well-spread number in `[-1, 1]` from the seed and the attempt (FNV-1a, then a mix): the
/// jitter only has to keep gateways from retrying in step, not to be unpredictable.
fn spread(failures: u32, seed: &str) -> f64 {
    let mut x = u64::from(failures).wrapping_add(0x9e37_79b9_7f4a_7c15);
    for b in seed.bytes() {
        x = (x ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    x ^= x >> 33;
    (x % 2001) as f64 / 1000.0 - 1.0
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn delays_double_up_to_thirty_seconds() {
        let p = RetryPolicy::default();
        let secs: Vec<u64> = (1..=7).map(|n| p.delay_before(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 30, 30]);
    }

    #[test]
    fn no_jitter_is_the_nominal_schedule() {
        let b = Backoff {
            policy: RetryPolicy::default(),
            jitter: 0.0,
        };
        assert_eq!(b.delay(3, "docs"), Duration::from_secs(4));
        assert_eq!(b.delay(0, "docs"), Duration::from_secs(1));
    }

    #[test]
    fn jitter_differs_between_servers() {
        let b = Backoff {
            policy: RetryPolicy::default(),
            jitter: 0.2,
        };
        let delays: std::collections::HashSet<Duration> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|s| b.delay(4, s))
            .collect();
        assert!(delays.len() > 1, "{delays:?}");
    }

    proptest! {
        #[test]
        fn jitter_stays_within_its_fraction(failures in 1u32..20, seed in ".{0,20}", jitter in 0.0f64..=1.0) {
            let b = Backoff { policy: RetryPolicy::default(), jitter };
            let nominal = b.policy.delay_before(failures).as_secs_f64();
            let got = b.delay(failures, &seed).as_secs_f64();
            prop_assert!(got >= nominal * (1.0 - jitter) - 1e-6, "{got} < {nominal}");
            prop_assert!(got <= nominal * (1.0 + jitter) + 1e-6, "{got} > {nominal}");
        }
    }
}
