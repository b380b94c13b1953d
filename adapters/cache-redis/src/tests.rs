//! The cache ports' contracts against a real Redis, each test under a key prefix of its own
//! (cleared when it ends), and what only a shared cache shows: two replicas, one budget, one
//! truth; an outage is a miss, never an error.

use quarry_testkit::{contract::caches, services};

use super::*;

/// A link under a new prefix, cleared when dropped.
struct Prefixed(RedisLink);

impl Prefixed {
    fn new() -> Self {
        let prefix = format!("{}:", services::unique_name("quarry_test"));
        Self(
            RedisLink::open(&services::redis_url(), &prefix)
                .unwrap_or_else(|e| panic!("Redis for the tests: {e}")),
        )
    }

    async fn clear(self) {
        self.0.clear().await.expect("the test Redis answers");
    }
}

#[tokio::test]
async fn the_redis_caches_keep_their_contracts() {
    let link = Prefixed::new();
    caches::check_content(RedisContentCache::new(link.0.clone(), 1 << 20), 1 << 20).await;
    caches::check_listings(RedisListingCache::new(link.0.clone())).await;
    caches::check_bus(RedisInvalidationBus::new(link.0.clone())).await;
    assert_eq!(link.0.trouble(), None);
    link.clear().await;
}

#[tokio::test]
async fn two_replicas_share_entries_invalidations_and_one_budget() {
    use quarry_ports::{ContentCache, InvalidationBus};
    let link = Prefixed::new();
    let budget = 64 * 1024;
    let (a, b) = (
        RedisContentCache::new(link.0.clone(), budget),
        RedisContentCache::new(link.0.clone(), budget),
    );
    a.put(caches::key(1), caches::entry(100, 0, 60)).await;
    assert_eq!(
        b.get(&caches::key(1), caches::t(1)).await,
        Some(caches::entry(100, 0, 60)),
        "what one replica cached, the other serves"
    );
    b.invalidate(&caches::key(1)).await;
    assert_eq!(
        a.get_stale(&caches::key(1)).await,
        None,
        "and drops for both"
    );
    for i in 0..32 {
        let cache = if i % 2 == 0 { &a } else { &b };
        cache
            .put(caches::key(10 + i), caches::entry(8 * 1024, 0, 60))
            .await;
    }
    let stats = a.stats().await;
    assert!(stats.bytes <= budget, "{} > {budget}", stats.bytes);
    assert_eq!(stats, b.stats().await, "one budget, seen alike");
    assert!(stats.evictions > 0);
    let bus = (
        RedisInvalidationBus::new(link.0.clone()),
        RedisInvalidationBus::new(link.0.clone()),
    );
    let server = caches::key(1).server;
    let epoch = bus.0.advance(&server).await;
    assert_eq!(bus.1.epoch(&server).await, epoch, "epochs are shared");
    link.clear().await;
}

// traces: CA-4 — a damaged entry is a miss, never served.
#[tokio::test]
async fn a_damaged_entry_is_a_miss() {
    use quarry_ports::ContentCache;
    let link = Prefixed::new();
    let cache = RedisContentCache::new(link.0.clone(), 1 << 20);
    cache.put(caches::key(1), caches::entry(100, 0, 60)).await;
    let key = link.0.key(&format!("c:s/{}", caches::key(1).upstream_uri));
    for garbage in [
        &b"\xff\xff\xff\xffnot json"[..],
        b"",
        b"\x00\x00\x00\x02{}rest",
    ] {
        link.0
            .run("damaging an entry", async |conn| {
                redis::cmd("SET")
                    .arg(&key)
                    .arg(garbage)
                    .query_async::<()>(conn)
                    .await
            })
            .await
            .unwrap();
        assert_eq!(cache.get(&caches::key(1), caches::t(1)).await, None);
        assert_eq!(cache.get_stale(&caches::key(1)).await, None);
    }
    link.clear().await;
}

// traces: CA-4 — an unreachable Redis makes every call a miss, quickly, and says why.
#[tokio::test]
async fn an_unreachable_redis_is_a_miss_and_says_so() {
    use quarry_ports::{ContentCache, InvalidationBus, ListingCache};
    // Port 1 on loopback: nothing listens there.
    let link = RedisLink::open("redis://:hunter2@127.0.0.1:1", "q:").unwrap();
    let cache = RedisContentCache::new(link.clone(), 1 << 20);
    cache.put(caches::key(1), caches::entry(10, 0, 60)).await;
    assert_eq!(cache.get(&caches::key(1), caches::t(1)).await, None);
    assert_eq!(cache.purge(None).await, 0);
    let started = std::time::Instant::now();
    for _ in 0..100 {
        assert_eq!(cache.get(&caches::key(1), caches::t(1)).await, None);
    }
    assert!(
        started.elapsed() < std::time::Duration::from_millis(500),
        "while it rests, Redis is not asked: {:?}",
        started.elapsed()
    );
    let listings = RedisListingCache::new(link.clone());
    assert_eq!(
        listings.get(&caches::key(1).server, caches::t(1)).await,
        None
    );
    let bus = RedisInvalidationBus::new(link.clone());
    assert_eq!(
        bus.epoch(&caches::key(1).server).await,
        None,
        "nothing is cached meanwhile"
    );
    let trouble = link.trouble().expect("the outage is reported");
    assert!(!trouble.contains("hunter2"), "{trouble}");
    assert!(!format!("{link:?}").contains("hunter2"));
}
