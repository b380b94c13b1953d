//! The audit trail's append on a real PostgreSQL (a schema of its own, dropped after): what one
//! record costs a request on the shared store, beside `quarry-store-sqlite`'s `audit/append`.
//!
//! `cargo bench -p quarry-store-postgres --bench audit` (the database from
//! `QUARRY_TEST_POSTGRES_URL`, the local one by default)

#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use quarry_domain::Retention;
use quarry_ports::AuditLog;
use quarry_store_postgres::{PostgresAudit, PostgresStore, PostgresTarget};
use quarry_testkit::{contract::audit::entry, fakes::FakeHasher, services};

fn append(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let target = PostgresTarget {
        url: services::postgres_url(),
        schema: services::unique_name("quarry_bench"),
    };
    let store = rt
        .block_on(PostgresStore::connect(&target, Retention::default(), 4))
        .unwrap();
    let log = PostgresAudit::new(store.clone(), Arc::new(FakeHasher));
    let record = entry(1);
    rt.block_on(log.append(&record)).unwrap();
    c.bench_function("audit/append_postgres", |b| {
        b.to_async(&rt).iter(|| log.append(&record));
    });
    rt.block_on(async {
        store.close().await;
        PostgresStore::drop_schema(&target).await.unwrap();
    });
}

criterion_group!(benches, append);
criterion_main!(benches);
