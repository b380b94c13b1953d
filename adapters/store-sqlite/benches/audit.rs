//! The audit trail's append on a real SQLite file: what one record costs a request.
//!
//! `cargo bench -p quarry-store-sqlite --bench audit`

#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use quarry_domain::Retention;
use quarry_ports::AuditLog;
use quarry_store_sqlite::{SqliteAudit, SqliteStore};
use quarry_testkit::{contract::audit::entry, fakes::FakeHasher};

fn append(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = rt
        .block_on(SqliteStore::open(
            &dir.path().join("quarry.db"),
            Retention::default(),
        ))
        .unwrap();
    let log = SqliteAudit::new(store, Arc::new(FakeHasher));
    let record = entry(1);
    rt.block_on(log.append(&record)).unwrap();
    c.bench_function("audit/append", |b| {
        b.to_async(&rt).iter(|| log.append(&record));
    });
}

criterion_group!(benches, append);
criterion_main!(benches);
