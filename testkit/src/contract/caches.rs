//! The contracts of the three cache ports: content ([`ContentCache`]), listings
//! ([`ListingCache`]) and invalidation epochs ([`InvalidationBus`]).

use std::sync::Arc;

use chrono::{Duration, TimeZone};
use quarry_domain::{
    Body, CacheScope, Content, Digest, ResourceType, ResourceUri, ServerName, Timestamp,
};
use quarry_ports::{
    CacheStats, CachedContent, CachedListing, ContentCache, InvalidationBus, ListedEntry,
    ListingCache, ResourceKey, UpstreamResource,
};

/// A fixed instant plus `secs`.
pub fn t(secs: i64) -> Timestamp {
    chrono::Utc.timestamp_opt(1_700_000_000 + secs, 0).unwrap()
}

fn server(name: &str) -> ServerName {
    ServerName::parse(name).unwrap()
}

/// Resource number `i` of server `s`.
pub fn key(i: usize) -> ResourceKey {
    ResourceKey::new(server("s"), format!("r://{i}"))
}

/// An entry of `size` bytes cached at `t(at)` for `ttl` seconds.
pub fn entry(size: usize, at: i64, ttl: i64) -> CachedContent {
    CachedContent {
        content: Arc::new(Content {
            mime_type: None,
            body: Body::Blob(vec![7; size]),
        }),
        cached_at: t(at),
        expires_at: t(at) + Duration::seconds(ttl),
        digest: Digest::new([0; 32]),
        version: None,
        partition: None,
    }
}

/// Runs the content cache contract against an empty cache with a budget of `capacity` bytes
/// (at least 64 KiB).
pub async fn check_content(cache: impl ContentCache, capacity: u64) {
    assert!(capacity >= 64 * 1024);
    // traces: SR-002.1 — TTL expiry with an injected time, no sleeping.
    cache.put(key(1), entry(10, 0, 300)).await;
    assert!(cache.get(&key(1), t(299)).await.is_some());
    assert!(
        cache.get(&key(1), t(300)).await.is_none(),
        "never served once expired"
    );
    let stale = cache.get_stale(&key(1)).await.unwrap();
    assert_eq!(
        stale.expires_at,
        t(300),
        "kept, for degraded mode, until evicted or purged"
    );
    assert_eq!(cache.stats().await.entries, 1);

    // An entry bigger than the budget is not stored, and the key's old value goes too.
    cache.put(key(2), entry(10, 0, 60)).await;
    cache.put(key(2), entry(capacity as usize + 1, 0, 60)).await;
    assert!(
        cache.get(&key(2), t(1)).await.is_none(),
        "the old value is not served either"
    );

    cache.invalidate(&key(1)).await;
    assert!(cache.get_stale(&key(1)).await.is_none(), "invalidated");

    // Purge by server drops only that server.
    cache.put(key(3), entry(10, 0, 60)).await;
    let other = ResourceKey::new(server("o"), "r://1");
    cache.put(other.clone(), entry(10, 0, 60)).await;
    assert_eq!(cache.purge(Some(server("s"))).await, 1);
    assert!(cache.get(&other, t(1)).await.is_some());
    assert_eq!(cache.purge(None).await, 1);
    assert_eq!(
        cache.stats().await,
        CacheStats {
            entries: 0,
            bytes: 0,
            capacity_bytes: capacity,
            evictions: 0,
            degraded: false,
        },
        "purges and invalidations are no evictions"
    );

    // The budget holds whatever is put.
    for i in 0..64 {
        cache
            .put(key(100 + i), entry(capacity as usize / 16, 0, 60))
            .await;
        let stats = cache.stats().await;
        assert!(stats.bytes <= capacity, "{} > {capacity}", stats.bytes);
    }
    assert!(
        cache.get(&key(163), t(1)).await.is_some(),
        "the newest entry is kept"
    );
    let stats = cache.stats().await;
    assert_eq!(
        stats.evictions,
        64 - stats.entries,
        "every entry dropped to make room is counted"
    );
}

fn listing(n: usize, at: i64, ttl: i64) -> CachedListing {
    let entries = (0..n)
        .map(|i| {
            let uri = format!("file:///{i}");
            ListedEntry {
                gateway_uri: ResourceUri::new(server("s"), &uri).unwrap().into_string(),
                resource_type: ResourceType::File,
                resource: UpstreamResource {
                    uri,
                    name: format!("r{i}"),
                    title: None,
                    description: None,
                    mime_type: None,
                    size: Some(i as u64),
                    last_modified: None,
                },
            }
        })
        .collect();
    CachedListing {
        resources: Arc::new(entries),
        truncated: n > 2,
        fetched_at: t(at),
        expires_at: t(at) + Duration::seconds(ttl),
        scope: CacheScope::Public,
    }
}

/// Runs the listing cache contract against an empty cache.
pub async fn check_listings(cache: impl ListingCache) {
    let (s, o) = (server("s"), server("o"));
    assert_eq!(cache.get(&s, t(0)).await, None);
    cache.put(&s, listing(3, 0, 300)).await;
    assert_eq!(
        cache.get(&s, t(299)).await,
        Some(listing(3, 0, 300)),
        "round-trips whole"
    );
    assert_eq!(
        cache.get(&s, t(300)).await,
        None,
        "never served once expired"
    );
    cache.put(&s, listing(1, 10, 300)).await;
    assert_eq!(
        cache.get(&s, t(11)).await,
        Some(listing(1, 10, 300)),
        "put replaces"
    );
    cache.put(&o, listing(2, 10, 300)).await;
    assert_eq!(cache.drop_listings(Some(s.clone())).await, 1);
    assert_eq!(cache.drop_listings(Some(s.clone())).await, 0);
    assert!(cache.get(&o, t(11)).await.is_some(), "only that server's");
    assert_eq!(cache.drop_listings(None).await, 1);
    assert_eq!(cache.get(&o, t(11)).await, None);
}

/// Runs the invalidation bus contract against a fresh bus.
pub async fn check_bus(bus: impl InvalidationBus) {
    let (s, o) = (server("s"), server("o"));
    assert_eq!(bus.epoch(&s).await, Some(0), "epochs start at 0");
    let mut last = 0;
    for _ in 0..3 {
        let next = bus.advance(&s).await.unwrap();
        assert!(next > last, "advance is strictly larger");
        assert_eq!(
            bus.epoch(&s).await,
            Some(next),
            "and is what epoch says next"
        );
        last = next;
    }
    assert_eq!(bus.epoch(&o).await, Some(0), "other servers are unaffected");
}
