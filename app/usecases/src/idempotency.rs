//! Running a mutation once per idempotency key, across every process that shares the store.
//!
//! The key is reserved in the store before the mutation runs (first writer wins). A repeat with
//! the same canonical payload waits for the first call and replays its result; another payload
//! under the same key is E010 at once. A mutation that fails releases its key, so a retry runs
//! again; a holder that died is taken over once its reservation is stale.

use std::{sync::Arc, time::Duration};

use quarry_domain::{Error, ErrorCode, IdempotencyKey, Payload};
use quarry_ports::{Clock, ContentHasher, IdempotencyStore, Reservation};

use crate::store_failed;

/// A reservation older than this belongs to a holder that died: the key is free again.
const STALE_AFTER: Duration = Duration::from_secs(300);
/// How often a caller waiting for another's result asks again.
const POLL: Duration = Duration::from_millis(10);
/// How long a caller waits for another's result before it gives up (E010).
const MAX_WAIT: Duration = Duration::from_secs(60);

/// Runs mutations once per key.
#[derive(Debug, Clone)]
pub(crate) struct Idempotency {
    pub(crate) store: Arc<dyn IdempotencyStore>,
    pub(crate) hasher: Arc<dyn ContentHasher>,
    pub(crate) clock: Arc<dyn Clock>,
}

impl Idempotency {
    /// Runs `op` unless `key` has already run it with `payload` (then its first result comes
    /// back); without a key, just runs it.
    ///
    /// # Errors
    /// `op`'s error; E010 when the key was used with another payload, or its first call is still
    /// running after a minute; E012 when the store fails.
    pub(crate) async fn once<T, F, Fut>(
        &self,
        scope: &str,
        key: Option<IdempotencyKey>,
        payload: Payload,
        op: F,
    ) -> Result<T, Error>
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let Some(key) = key else { return op().await };
        let digest = self.hasher.sha256(payload.as_bytes()).hex();
        let started = self.clock.monotonic();
        loop {
            let reservation = self
                .store
                .reserve(scope, &key, &digest, self.clock.now(), STALE_AFTER)
                .await
                .map_err(store_failed)?;
            match reservation {
                Reservation::Granted => return self.run(scope, &key, op).await,
                Reservation::Done(first) => {
                    return serde_json::from_str(&first.result).map_err(store_failed);
                }
                Reservation::Conflict { .. } => return Err(key.conflict()),
                Reservation::Pending => {
                    if self.clock.monotonic().saturating_sub(started) > MAX_WAIT {
                        return Err(Error::new(
                            ErrorCode::E010,
                            format!(
                                "the first call with idempotency_key {:?} is still running; try again later",
                                key.as_str().chars().take(64).collect::<String>()
                            ),
                        ));
                    }
                    tokio::time::sleep(POLL).await;
                }
            }
        }
    }

    async fn run<T, F, Fut>(&self, scope: &str, key: &IdempotencyKey, op: F) -> Result<T, Error>
    where
        T: serde::Serialize,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        match op().await {
            Ok(result) => {
                let json = serde_json::to_string(&result).map_err(store_failed)?;
                self.store
                    .complete(scope, key, &json, self.clock.now())
                    .await
                    .map_err(store_failed)?;
                Ok(result)
            }
            Err(e) => {
                if let Err(release) = self.store.release(scope, key).await {
                    tracing::error!("releasing an idempotency key failed: {release}");
                }
                Err(e)
            }
        }
    }
}
