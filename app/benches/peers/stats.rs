//! Samples to figures: each row keeps its rounds apart so the page can show the spread.

use std::time::Duration;

use serde_json::{Value, json};

/// The latencies of one target in one scenario, round by round.
#[derive(Default)]
pub(crate) struct Samples {
    rounds: Vec<Vec<Duration>>,
    pub(crate) errors: u64,
}

impl Samples {
    pub(crate) fn round(&mut self) -> &mut Vec<Duration> {
        self.rounds.push(Vec::new());
        self.rounds.last_mut().unwrap_or_else(|| unreachable!())
    }

    /// The pooled samples' median and p99, and each round's median, in microseconds.
    pub(crate) fn figures(&self) -> Value {
        let mut all: Vec<Duration> = self.rounds.iter().flatten().copied().collect();
        all.sort_unstable();
        let round_p50: Vec<f64> = self
            .rounds
            .iter()
            .map(|r| {
                let mut r = r.clone();
                r.sort_unstable();
                micros(quantile(&r, 0.5))
            })
            .collect();
        json!({
            "p50_us": micros(quantile(&all, 0.5)),
            "p99_us": micros(quantile(&all, 0.99)),
            "samples": all.len(),
            "rounds": self.rounds.len(),
            "round_p50_us": round_p50,
            "errors": self.errors,
        })
    }
}

pub(crate) fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub(crate) fn micros(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e7).round() / 10.0
}
