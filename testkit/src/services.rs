//! Where the tests' shared services are, and names that keep each test's data apart.
//!
//! Tests reach PostgreSQL and Redis through `QUARRY_TEST_POSTGRES_URL` and
//! `QUARRY_TEST_REDIS_URL`, defaulting to the local servers on their standard loopback ports
//! (`cargo xtask ci` starts its own and sets these where none answers). A test that needs one
//! and cannot reach it fails; it never skips. Each test works in a schema or under a key prefix
//! of its own, from [`unique_name`], and removes it when done.

use std::sync::atomic::{AtomicU64, Ordering};

/// The PostgreSQL the tests use.
pub fn postgres_url() -> String {
    std::env::var("QUARRY_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// The Redis the tests use.
pub fn redis_url() -> String {
    std::env::var("QUARRY_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// A name no other test, process or run uses: lowercase letters, digits and `_`, starting with
/// `prefix` (a schema name or a key prefix).
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{prefix}_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}
