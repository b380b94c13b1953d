//! The page the peer bench writes: ratios against the direct row and the best peer, and bars
//! that do not hold said so.

use serde_json::{Value, json};

use super::{Seen, render};

fn row(group: &str, target: &str, kind: &str, p50: f64) -> Value {
    json!({"group": group, "target": target, "kind": kind, "p50_us": p50, "p99_us": p50 * 2.0,
           "samples": 10, "rounds": 5, "round_p50_us": [p50, p50], "errors": 0})
}

fn burst(peak: f64) -> Value {
    json!({"clients": 10000, "errors": 0, "p50_us": 1.0, "p99_us": 2.0, "wall_ms": 10.0,
           "cache_budget_mb": 64, "rss_cache_filled_mb": 80.0, "rss_peak_mb": peak})
}

fn figures(quarry_1k: f64) -> Value {
    let g = "read 1 KiB, HTTP";
    json!({
        "rows": [
            row(g, "direct (the upstream's own HTTP)", "direct", 400.0),
            row(g, "mcp-proxy", "peer", 1200.0),
            row(g, "supergateway --stateful", "peer", 1000.0),
            row(g, "Quarry `resources/read`, cached", "quarry", quarry_1k),
            row(g, "Quarry `resources/read`, cache off", "quarry", 450.0),
        ],
        "burst": {"sessions": burst(100.0), "stateless": burst(500.0)},
        "versions": {"node": "v20", "server-everything": "x", "mcp-proxy": "y", "supergateway": "z"},
        "rounds": 5,
        "concurrent_rounds": 3,
        "seconds": 1,
    })
}

fn seen() -> Seen {
    Seen {
        invalidation_ns: 200_000.0,
        policy: json!({"single_ns": 130_000.0}),
        stampede: json!({"cold_reads_per_s": 100_000.0, "warm_reads_per_s": 500_000.0}),
        memory: json!({"rss_growth_bytes": 100.0 * 1_048_576.0}),
    }
}

#[test]
fn rows_are_ratios_of_the_direct_read_and_of_the_best_peer() {
    let page = render(&figures(250.0), &seen()).unwrap();
    // 250 µs against the direct 400 µs and the best peer's 1 ms.
    assert!(
        page.contains("| Quarry `resources/read`, cached | 250.0 µs | 500.0 µs | 0.62× | 0.25× |"),
        "{page}"
    );
    assert!(
        page.contains("| mcp-proxy | 1.20 ms | 2.40 ms | 3.00× | — |"),
        "{page}"
    );
    assert!(page.contains("4.80× and 4.00× faster | yes |"), "{page}");
    assert!(
        page.contains(
            "cached 1 KiB over HTTP faster than the direct read | 250.0 µs against 400.0 µs | yes |"
        ),
        "{page}"
    );
}

#[test]
fn the_header_gives_the_rounds_of_each_kind_of_row() {
    let page = render(&figures(250.0), &seen()).unwrap();
    assert!(
        page.contains("Each row is 5 rounds (3 for the concurrent clients' rows), interleaved"),
        "{page}"
    );
}

#[test]
fn a_bar_that_does_not_hold_says_so() {
    let page = render(&figures(500.0), &seen()).unwrap();
    assert!(page.contains("2.40× and 2.00× faster | **no** |"), "{page}");
    // The stateless burst peaked at 500 MiB with a 64 MiB budget; the sessions one held.
    let line = |era: &str| {
        page.lines()
            .find(|l| l.contains(era) && l.starts_with("| 10,000"))
            .unwrap_or_default()
            .to_owned()
    };
    assert!(line("2026-07-28").ends_with("| **no** |"), "{page}");
    assert!(line("2025-11-25").ends_with("| yes |"), "{page}");
    // A cold burst 5× slower than a warm one misses its 2× target.
    assert!(
        page.contains("| 5.00× (100000 against 500000 reads/s) | **no** |"),
        "{page}"
    );
}
