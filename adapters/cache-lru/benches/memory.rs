//! Memory of the LRU cache at its byte budget: fill a 100 MiB cache with entries of random sizes
//! (1 KiB to 1 MiB) until twice the budget has gone in, then compare the process's resident memory
//! growth with the bytes the cache accounts for. Prints one JSON line.

#![allow(clippy::unwrap_used, missing_docs)]

use chrono::{TimeZone, Utc};
use quarry_cache_lru::LruContentCache;
use quarry_domain::{Body, Content, Digest, ServerName};
use quarry_ports::{CachedContent, ContentCache, ResourceKey};

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn main() {
    // QUARRY_BENCH_QUICK=1 runs a small version.
    let quick = std::env::var_os("QUARRY_BENCH_QUICK").is_some();
    let budget: u64 = if quick { 4 << 20 } else { 100 << 20 };
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let cache = LruContentCache::new(budget);
        let server = ServerName::parse("bench").unwrap();
        let at = Utc.timestamp_opt(1_800_000_000, 0).unwrap();
        let before = rss_bytes();
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut inserted = 0u64;
        let mut i = 0u64;
        while inserted < 2 * budget {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let size = 1024 + (seed % (1024 * 1024)) as usize;
            let entry = CachedContent {
                content: std::sync::Arc::new(Content { mime_type: Some("application/octet-stream".into()), body: Body::Blob(vec![(i % 251) as u8; size]) }),
                digest: Digest::new([0; 32]),
                version: None,
                partition: None,
                cached_at: at,
                expires_at: at,
            };
            cache.put(ResourceKey::new(server.clone(), format!("bench://resource/{i}")), entry).await;
            inserted += size as u64;
            i += 1;
        }
        let stats = cache.stats().await;
        assert!(stats.bytes <= budget);
        let grown = rss_bytes().saturating_sub(before);
        println!(
            "{{\"budget_bytes\":{budget},\"accounted_bytes\":{},\"entries\":{},\"inserted_bytes\":{inserted},\"rss_growth_bytes\":{grown},\"rss_over_budget\":{:.3}}}",
            stats.bytes,
            stats.entries,
            grown as f64 / budget as f64
        );
    });
}
