//! The LRU content cache: the byte budget, exact accounting and least-recently-used eviction,
//! checked against a reference model; the contract suites for the in-memory adapters.

use proptest::prelude::*;
use quarry_testkit::contract::caches::{self, entry, key, t};

use super::*;

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

// The contract suites hold the in-memory adapters to what their ports promise.
#[test]
fn the_lru_cache_and_the_in_memory_listings_and_bus_keep_their_contracts() {
    block_on(async {
        caches::check_content(LruContentCache::new(1 << 20), 1 << 20).await;
        caches::check_listings(crate::InMemoryListingCache::new()).await;
        caches::check_bus(crate::InMemoryInvalidationBus::new()).await;
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

// A hit hands out the bytes the cache holds, not a copy made under its lock: two hits of one
// entry share one allocation, and the entry's weight is charged once however often it is read.
#[test]
fn hits_share_the_cached_bytes_instead_of_copying_them() {
    block_on(async {
        let cache = LruContentCache::new(1 << 20);
        cache.put(key(1), entry(64 * 1024, 0, 60)).await;
        let first = cache.get(&key(1), t(1)).await.unwrap();
        let second = cache.get(&key(1), t(1)).await.unwrap();
        assert!(std::sync::Arc::ptr_eq(&first.content, &second.content));
        assert_eq!(first.content.bytes().len(), 64 * 1024);
        let stats = cache.stats().await;
        assert_eq!(stats.entries, 1);
        assert_eq!(
            stats.bytes,
            key(1).weight() + entry(64 * 1024, 0, 60).weight()
        );
    });
}
