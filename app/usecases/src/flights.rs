//! Sharing one upstream call among concurrent callers that want the same thing (single flight).
//!
//! The first caller for a key starts the call as a task of its own; callers that arrive while it
//! runs wait for the same outcome. A caller that gives up (its request was cancelled) does not
//! cancel the call for the others. The key is forgotten once the call ends, so the next miss
//! calls again.

use std::{
    collections::HashMap,
    future::Future,
    hash::Hash,
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use futures::{
    FutureExt,
    future::{BoxFuture, Shared},
};

type Flight<V> = Shared<BoxFuture<'static, V>>;

/// Calls in flight, by key.
#[derive(Debug)]
pub(crate) struct Flights<K, V: Clone> {
    running: Mutex<HashMap<K, (u64, Flight<V>)>>,
    next_id: AtomicU64,
}

impl<K, V: Clone> Default for Flights<K, V> {
    fn default() -> Self {
        Self {
            running: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
        }
    }
}

impl<K, V> Flights<K, V>
where
    K: Hash + Eq + Clone,
    V: Clone + Send + Sync + 'static,
{
    /// The outcome of the call in flight for `key`, or of `start()` when none is.
    ///
    /// `panicked` is the outcome callers get if the call's task panics or is cancelled at
    /// shutdown.
    pub(crate) async fn run<F, Fut>(&self, key: K, start: F, panicked: fn() -> V) -> V
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = V> + Send + 'static,
    {
        let (id, flight) = {
            let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((id, flight)) = running.get(&key) {
                (*id, flight.clone())
            } else {
                let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                // The call's retries count toward the request that started it.
                // And its log lines and trace belong to that request's span.
                let task = tokio::spawn(tracing::Instrument::in_current_span(
                    crate::audited::counting_retries(crate::audited::retry_counter(), start()),
                ));
                let flight: Flight<V> = async move { task.await.unwrap_or_else(|_| panicked()) }
                    .boxed()
                    .shared();
                running.insert(key.clone(), (id, flight.clone()));
                (id, flight)
            }
        };
        let outcome = flight.await;
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        if running.get(&key).is_some_and(|(current, _)| *current == id) {
            running.remove(&key);
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::{Arc, atomic::AtomicU32},
        time::Duration,
    };

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn concurrent_callers_share_one_call_and_the_next_miss_calls_again() {
        let flights: Arc<Flights<&str, u32>> = Arc::default();
        let calls = Arc::new(AtomicU32::new(0));
        let start = |calls: Arc<AtomicU32>| {
            move || async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                calls.fetch_add(1, Ordering::SeqCst) + 1
            }
        };
        let waiters: Vec<_> = (0..20)
            .map(|_| {
                let (flights, calls) = (flights.clone(), calls.clone());
                tokio::spawn(async move { flights.run("k", start(calls), || 0).await })
            })
            .collect();
        for w in waiters {
            assert_eq!(w.await.unwrap(), 1);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(flights.run("k", start(calls.clone()), || 0).await, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_that_gives_up_does_not_cancel_the_call_for_the_others() {
        let flights: Arc<Flights<&str, u32>> = Arc::default();
        let slow = || async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            7
        };
        let first = {
            let flights = flights.clone();
            tokio::spawn(async move { flights.run("k", slow, || 0).await })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        let second = {
            let flights = flights.clone();
            tokio::spawn(async move { flights.run("k", || async { 99 }, || 0).await })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        first.abort();
        assert_eq!(
            second.await.unwrap(),
            7,
            "joined the first call, which went on"
        );
    }
}
