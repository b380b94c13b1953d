//! Content in Redis: least-recently-used, bounded by bytes, exact across replicas.
//!
//! Beside the entries (`{prefix}c:{server}/{uri}`) Redis keeps a sorted set of entry keys by
//! last use (`lru`, scored by the `tick` counter), each entry's charge (`w`), the bytes charged
//! (`bytes`) and the evictions (`evictions`). Lua scripts put, touch, remove and evict, so two
//! replicas never overrun the budget between them. Entries carry no Redis expiry: like the
//! in-memory cache, an expired entry stays until evicted, for degraded mode (`get_stale`), and
//! `get` checks freshness against the caller's clock.

use std::sync::LazyLock;

use async_trait::async_trait;
use quarry_domain::{ServerName, Timestamp};
use quarry_ports::{CacheStats, CachedContent, ContentCache, ResourceKey};
use redis::Script;

use crate::{
    RedisLink,
    wire::{decode_content, encode_content},
};

/// KEYS: 1 lru, 2 w, 3 bytes, 4 evictions, 5 tick, then the script's own.
const BOOKS: &str = r"
local LRU, W, BYTES, EVICTIONS, TICK = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local function remove(k)
  local w = redis.call('HGET', W, k)
  if not w then return 0 end
  redis.call('HDEL', W, k)
  redis.call('ZREM', LRU, k)
  redis.call('DEL', k)
  redis.call('DECRBY', BYTES, w)
  return 1
end
";

/// KEYS[6] the entry; ARGV: value, charge, capacity. 1 when stored.
static PUT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{BOOKS}
remove(KEYS[6])
local charge, capacity = tonumber(ARGV[2]), tonumber(ARGV[3])
if charge > capacity then return 0 end
local bytes = tonumber(redis.call('GET', BYTES) or '0')
while bytes + charge > capacity do
  local victim = redis.call('ZRANGE', LRU, 0, 0)[1]
  if not victim then break end
  bytes = bytes - tonumber(redis.call('HGET', W, victim) or '0')
  remove(victim)
  redis.call('INCR', EVICTIONS)
end
redis.call('SET', KEYS[6], ARGV[1])
redis.call('HSET', W, KEYS[6], charge)
redis.call('ZADD', LRU, redis.call('INCR', TICK), KEYS[6])
redis.call('INCRBY', BYTES, charge)
return 1"
    ))
});

/// KEYS[6] the entry; ARGV[1] '1' to count it as a use. The entry's bytes, or nil.
static GET: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{BOOKS}
local v = redis.call('GET', KEYS[6])
if v and ARGV[1] == '1' then redis.call('ZADD', LRU, 'XX', redis.call('INCR', TICK), KEYS[6]) end
return v"
    ))
});

/// KEYS[6] the entry. 1 when there was one.
static REMOVE: LazyLock<Script> =
    LazyLock::new(|| Script::new(&format!("{BOOKS}\nreturn remove(KEYS[6])")));

/// ARGV[1] the prefix of the entries to drop. How many were dropped.
static PURGE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{BOOKS}
local n = 0
for _, k in ipairs(redis.call('ZRANGE', LRU, 0, -1)) do
  if string.sub(k, 1, #ARGV[1]) == ARGV[1] then n = n + remove(k) end
end
return n"
    ))
});

/// Content shared by every replica, within one byte budget.
#[derive(Debug, Clone)]
pub struct RedisContentCache {
    link: RedisLink,
    capacity: u64,
    books: [String; 5],
}

impl RedisContentCache {
    /// A cache of at most `capacity_bytes` (across every replica), through `link`.
    pub fn new(link: RedisLink, capacity_bytes: u64) -> Self {
        let books = ["lru", "w", "bytes", "evictions", "tick"].map(|k| link.key(k));
        Self {
            link,
            capacity: capacity_bytes,
            books,
        }
    }

    /// The link this cache talks through (for its health).
    pub fn link(&self) -> &RedisLink {
        &self.link
    }

    fn entry_key(&self, key: &ResourceKey) -> String {
        self.link
            .key(&format!("c:{}/{}", key.server, key.upstream_uri))
    }

    async fn fetch(&self, key: &ResourceKey, touch: bool) -> Option<CachedContent> {
        let entry = self.entry_key(key);
        let bytes = self
            .link
            .run::<Option<Vec<u8>>, _>("reading content", async |conn| {
                GET.key(&self.books[..])
                    .key(&entry)
                    .arg(if touch { "1" } else { "0" })
                    .invoke_async(conn)
                    .await
            })
            .await??;
        match decode_content(&bytes) {
            Ok(content) => Some(content),
            Err(e) => {
                tracing::warn!(server = %key.server, "a shared cache entry does not decode ({e}); fetched afresh");
                None
            }
        }
    }
}

#[async_trait]
impl ContentCache for RedisContentCache {
    async fn get(&self, key: &ResourceKey, now: Timestamp) -> Option<CachedContent> {
        self.fetch(key, true).await.filter(|e| e.is_fresh(now))
    }

    async fn get_stale(&self, key: &ResourceKey) -> Option<CachedContent> {
        self.fetch(key, false).await
    }

    async fn put(&self, key: ResourceKey, entry: CachedContent) {
        let charge = key.weight() + entry.weight();
        let target = self.entry_key(&key);
        let value = encode_content(&entry);
        self.link
            .run("storing content", async |conn| {
                PUT.key(&self.books[..])
                    .key(&target)
                    .arg(value)
                    .arg(charge)
                    .arg(self.capacity)
                    .invoke_async::<u8>(conn)
                    .await
            })
            .await;
    }

    async fn invalidate(&self, key: &ResourceKey) {
        let entry = self.entry_key(key);
        self.link
            .run("dropping content", async |conn| {
                REMOVE
                    .key(&self.books[..])
                    .key(&entry)
                    .invoke_async::<u8>(conn)
                    .await
            })
            .await;
    }

    async fn purge(&self, server: Option<ServerName>) -> u64 {
        let prefix = match &server {
            Some(s) => self.link.key(&format!("c:{s}/")),
            None => self.link.key("c:"),
        };
        self.link
            .run("purging content", async |conn| {
                PURGE
                    .key(&self.books[..])
                    .arg(&prefix)
                    .invoke_async(conn)
                    .await
            })
            .await
            .unwrap_or(0)
    }

    async fn stats(&self) -> CacheStats {
        let [lru, _, bytes, evictions, _] = &self.books;
        let counts: Option<(u64, Option<u64>, Option<u64>)> = self
            .link
            .run("reading the cache's occupancy", async |conn| {
                redis::pipe()
                    .zcard(lru)
                    .get(bytes)
                    .get(evictions)
                    .query_async(conn)
                    .await
            })
            .await;
        let (entries, bytes, evictions) = counts.unwrap_or_default();
        CacheStats {
            entries,
            bytes: bytes.unwrap_or(0),
            capacity_bytes: self.capacity,
            evictions: evictions.unwrap_or(0),
            degraded: counts.is_none() || self.link.trouble().is_some(),
        }
    }
}
