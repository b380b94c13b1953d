use chrono::{Duration, TimeZone, Utc};
use proptest::prelude::*;
use quarry_domain::{Body, Content, Digest};

use super::*;

fn t(secs: i64) -> Timestamp {
    Utc.timestamp_opt(1_700_000_000 + secs, 0).unwrap()
}

fn key(i: usize) -> ResourceKey {
    ResourceKey::new(ServerName::parse("s").unwrap(), format!("r://{i}"))
}

fn entry(size: usize, at: i64, ttl: i64) -> CachedContent {
    CachedContent {
        content: Content {
            mime_type: None,
            body: Body::Blob(vec![7; size]),
        },
        cached_at: t(at),
        expires_at: t(at) + Duration::seconds(ttl),
        digest: Digest::new([0; 32]),
        version: None,
        partition: None,
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

// traces: SR-002.1 — TTL expiry with an injected time, no sleeping.
#[test]
fn entries_expire_at_their_ttl() {
    block_on(async {
        let cache = LruContentCache::new(1 << 20);
        cache.put(key(1), entry(10, 0, 300)).await;
        assert!(cache.get(&key(1), t(299)).await.is_some());
        assert!(cache.get(&key(1), t(300)).await.is_none());
        // Kept, for degraded mode, until evicted or purged.
        let stale = cache.get_stale(&key(1)).await.unwrap();
        assert_eq!(stale.expires_at, t(300));
        assert_eq!(cache.stats().await.entries, 1);
    });
}

#[test]
fn an_entry_bigger_than_the_budget_is_not_stored() {
    block_on(async {
        let cache = LruContentCache::new(1000);
        cache.put(key(1), entry(10, 0, 60)).await;
        cache.put(key(1), entry(5000, 0, 60)).await;
        assert!(
            cache.get(&key(1), t(1)).await.is_none(),
            "the old value is not served either"
        );
        assert_eq!(cache.stats().await.bytes, 0);
    });
}

#[test]
fn purge_by_server_drops_only_that_server() {
    block_on(async {
        let cache = LruContentCache::new(1 << 20);
        cache.put(key(1), entry(10, 0, 60)).await;
        let other = ResourceKey::new(ServerName::parse("o").unwrap(), "r://1");
        cache.put(other.clone(), entry(10, 0, 60)).await;
        assert_eq!(cache.purge(Some(ServerName::parse("s").unwrap())).await, 1);
        assert!(cache.get(&other, t(1)).await.is_some());
        assert_eq!(cache.purge(None).await, 1);
        assert_eq!(
            cache.stats().await,
            CacheStats {
                entries: 0,
                bytes: 0,
                capacity_bytes: 1 << 20
            }
        );
    });
}

#[derive(Debug, Clone)]
enum Op {
    Put(usize, usize),
    Get(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0usize..20, 0usize..3000).prop_map(|(k, s)| Op::Put(k, s)),
        (0usize..20).prop_map(Op::Get),
    ]
}

proptest! {
    // traces: SR-002.3 — the cache never exceeds its byte budget, its accounting is exact, and it
    // evicts the least recently used entry first (checked against a reference model).
    #[test]
    fn ca_3_never_over_budget_and_evicts_least_recently_used(ops in proptest::collection::vec(op(), 1..200)) {
        block_on(async {
            let capacity = 10_000u64;
            let cache = LruContentCache::new(capacity);
            // Reference model: most recently used last.
            let mut model: Vec<(usize, u64)> = Vec::new();
            for op in ops {
                match op {
                    Op::Put(k, size) => {
                        let cost = key(k).weight() + entry(size, 0, 60).weight();
                        cache.put(key(k), entry(size, 0, 60)).await;
                        model.retain(|(mk, _)| *mk != k);
                        if cost <= capacity {
                            while model.iter().map(|(_, c)| c).sum::<u64>() + cost > capacity {
                                model.remove(0);
                            }
                            model.push((k, cost));
                        }
                    }
                    Op::Get(k) => {
                        let hit = cache.get(&key(k), t(1)).await.is_some();
                        let pos = model.iter().position(|(mk, _)| *mk == k);
                        prop_assert_eq!(hit, pos.is_some());
                        if let Some(p) = pos {
                            let e = model.remove(p);
                            model.push(e);
                        }
                    }
                }
                let stats = cache.stats().await;
                prop_assert!(stats.bytes <= capacity);
                prop_assert_eq!(stats.bytes, model.iter().map(|(_, c)| c).sum::<u64>());
                prop_assert_eq!(stats.entries, model.len() as u64);
            }
            Ok(())
        })?;
    }
}
