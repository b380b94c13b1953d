//! Every fake keeps the contract of the port it fakes.

use quarry_domain::Retention;

use super::*;
use std::sync::Arc;

use crate::fakes::{
    FakeAuditLog, FakeContentCache, FakeCredentialStore, FakeHasher, FakeIdempotencyStore,
    FakeInvalidationBus, FakeListingCache, FakeRegistry, FakeVersionStore,
};

#[tokio::test]
async fn the_fake_version_store_keeps_the_contract() {
    versions::check(|r: Retention| async move { FakeVersionStore::new(r) }).await;
}

#[test]
fn the_fake_version_store_numbers_versions_as_the_contract_says() {
    versions::check_numbering_property(|r: Retention| async move { FakeVersionStore::new(r) });
}

#[tokio::test]
async fn the_fake_registry_keeps_the_contract() {
    registry::check(FakeRegistry::default()).await;
}

#[tokio::test]
async fn the_fake_idempotency_store_keeps_the_contract() {
    idempotency::check(FakeIdempotencyStore::default()).await;
}

#[tokio::test]
async fn the_fake_caches_keep_their_contracts() {
    caches::check_content(FakeContentCache::new(1 << 20), 1 << 20).await;
    caches::check_listings(FakeListingCache::default()).await;
    caches::check_bus(FakeInvalidationBus::default()).await;
}

#[tokio::test]
async fn the_fake_credential_store_keeps_the_contract() {
    vault::check(FakeCredentialStore::default()).await;
}

#[tokio::test]
async fn the_fake_audit_log_keeps_the_contract() {
    audit::check(FakeAuditLog::default(), &FakeHasher).await;
    audit::check_concurrent(vec![Arc::new(FakeAuditLog::default())], &FakeHasher).await;
}
