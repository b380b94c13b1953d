//! The shared caches: content, listings and invalidation epochs in one Redis, so that every
//! replica serves what any replica fetched and a change one replica hears drops the entry for
//! all of them.
//!
//! Content is a least-recently-used cache bounded by bytes, kept exact across replicas by Lua
//! scripts that charge, evict and touch atomically (`content.rs`); listings expire by Redis TTL
//! (`listings.rs`); epochs are counters (`bus.rs`). Every key starts with the configured
//! prefix, so several deployments (or tests) share one Redis without meeting.
//!
//! A cache never fails its caller: when Redis cannot be reached or answers late (1 s), the call
//! is a miss, a dropped write or an unknown epoch (so nothing is cached meanwhile), it is logged,
//! and Redis is left alone for a second before it is tried again, so an outage costs the
//! requests no more than going to the upstream. [`RedisLink::trouble`] says what went wrong
//! while it lasts.
//!
//! Architecture invariant: the redis crate stays here; Redis errors end at this seam.

mod bus;
mod content;
mod listings;
mod wire;

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use redis::{
    RedisResult,
    aio::{ConnectionManager, ConnectionManagerConfig},
};

pub use bus::RedisInvalidationBus;
pub use content::RedisContentCache;
pub use listings::RedisListingCache;

/// How long a command may take before it counts as a failure.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long Redis is left alone after a failure.
const BACKOFF: Duration = Duration::from_secs(1);

/// One connection to Redis (multiplexed, reconnecting), shared by the three caches, and what
/// the last failure was.
#[derive(Clone)]
pub struct RedisLink {
    conn: ConnectionManager,
    prefix: Arc<str>,
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    /// Redis is not asked before this.
    resting_until: Option<Instant>,
    /// The failure that started the current outage.
    trouble: Option<String>,
}

impl std::fmt::Debug for RedisLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLink")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// `url` with any password replaced by `***`, for messages and logs.
pub fn redacted(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((_, host)) => format!("{scheme}://***@{host}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

impl RedisLink {
    /// A link to the Redis at `url` (`redis://[user:password@]host[:port][/db]`); every key it
    /// writes starts with `prefix`. It connects on first use, so a Redis that is down at start
    /// only makes the caches miss until it is up.
    ///
    /// # Errors
    /// When `url` is not a Redis URL (the message has no password in it).
    pub fn open(url: &str, prefix: &str) -> Result<Self, String> {
        let client = redis::Client::open(url)
            .map_err(|e| format!("{} is not a Redis URL: {e}", redacted(url)))?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_connection_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_lazy_with_config(client, config)
            .map_err(|e| format!("{}: {e}", redacted(url)))?;
        Ok(Self {
            conn,
            prefix: prefix.into(),
            state: Arc::default(),
        })
    }

    /// What went wrong with Redis, while it is going wrong (`None` once a command succeeds).
    pub fn trouble(&self) -> Option<String> {
        self.lock().trouble.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.prefix)
    }

    /// Runs `command` unless Redis is resting; `None` when it is, or when the command failed
    /// (logged, and Redis rests).
    pub(crate) async fn run<T, F>(&self, what: &str, command: F) -> Option<T>
    where
        F: AsyncFnOnce(&mut ConnectionManager) -> RedisResult<T>,
    {
        if self
            .lock()
            .resting_until
            .is_some_and(|t| Instant::now() < t)
        {
            return None;
        }
        let mut conn = self.conn.clone();
        match command(&mut conn).await {
            Ok(value) => {
                let mut state = self.lock();
                if let Some(trouble) = state.trouble.take() {
                    tracing::info!("the shared cache (Redis) answers again after: {trouble}");
                }
                state.resting_until = None;
                Some(value)
            }
            Err(e) => {
                let mut state = self.lock();
                if state.trouble.is_none() {
                    tracing::warn!(
                        "the shared cache (Redis) failed ({what}: {e}); requests go to the upstreams until it answers"
                    );
                }
                state.trouble = Some(format!("{what}: {e}"));
                state.resting_until = Some(Instant::now() + BACKOFF);
                None
            }
        }
    }

    /// Deletes every key under the prefix (tests, and tearing a deployment's cache down); how
    /// many there were.
    pub async fn clear(&self) -> Option<u64> {
        let pattern = format!("{}*", self.prefix);
        self.run("clearing the prefix", async |conn| {
            let mut cursor: u64 = 0;
            let mut removed = 0;
            loop {
                let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(500)
                    .query_async(conn)
                    .await?;
                if !keys.is_empty() {
                    removed += redis::cmd("DEL")
                        .arg(&keys)
                        .query_async::<u64>(conn)
                        .await?;
                }
                if next == 0 {
                    return Ok(removed);
                }
                cursor = next;
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests;
