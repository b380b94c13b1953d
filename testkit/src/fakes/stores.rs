//! Fakes of the store ports: versions, the runtime registry, idempotency reservations. Each can
//! be taken down (every call `Unavailable`); the version store can also damage a stored content,
//! so tests can show a corrupt version is refused.

use std::{
    collections::HashMap,
    sync::{
        Mutex, MutexGuard,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use quarry_domain::{
    Body, Content, Digest, IdempotencyKey, ResourceVersion, Retention, ServerName, ServerSettings,
    Timestamp, VersionNumber, VersionSelector,
};
use quarry_ports::{
    IdempotencyStore, Recorded, Remembered, Reservation, ResourceKey, ServerRegistry, StoreError,
    VersionStore, VersionSummary,
};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn check(down: &AtomicBool) -> Result<(), StoreError> {
    if down.load(Ordering::SeqCst) {
        return Err(StoreError::Unavailable("the fake store is down".into()));
    }
    Ok(())
}

#[derive(Debug, Clone)]
struct StoredVersion {
    version: ResourceVersion,
    digest: Digest,
    content: Option<Content>,
    seen: u64,
}

/// Versions in memory.
#[derive(Debug, Default)]
pub struct FakeVersionStore {
    retention: Retention,
    resources: Mutex<HashMap<ResourceKey, Vec<StoredVersion>>>,
    seen: Mutex<u64>,
    down: AtomicBool,
    /// The URIs each `summaries` call asked for, in order.
    pub summarised: Mutex<Vec<Vec<String>>>,
}

impl FakeVersionStore {
    /// A store keeping history as `retention` says.
    pub fn new(retention: Retention) -> Self {
        Self {
            retention,
            ..Self::default()
        }
    }

    /// Takes the store down (every call fails `Unavailable`) or back up.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Changes one byte of the stored content of version `n` of `key` (a damaged disk).
    pub fn damage(&self, key: &ResourceKey, n: u32) {
        let mut resources = lock(&self.resources);
        let Some(v) = resources
            .get_mut(key)
            .and_then(|vs| vs.iter_mut().find(|v| v.version.version.get() == n))
        else {
            return;
        };
        if let Some(content) = &mut v.content {
            let mut bytes = content.bytes().to_vec();
            if let Some(b) = bytes.first_mut() {
                *b ^= 0x01;
            }
            content.body = match String::from_utf8(bytes.clone()) {
                Ok(t) if content.is_text() => Body::Text(t),
                _ => Body::Blob(bytes),
            };
        }
    }

    fn retain(&self, versions: &mut [StoredVersion]) {
        let mut order: Vec<usize> = (0..versions.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(versions[i].seen));
        let mut kept = 0u64;
        for (rank, i) in order.into_iter().enumerate() {
            let Some(content) = &versions[i].content else {
                continue;
            };
            let size = content.len();
            let keep = rank == 0
                || (rank < self.retention.count as usize && kept + size <= self.retention.bytes);
            if keep {
                kept += size;
            } else {
                versions[i].content = None;
            }
        }
    }
}

#[async_trait]
impl VersionStore for FakeVersionStore {
    async fn record(
        &self,
        key: &ResourceKey,
        digest: Digest,
        content: &Content,
        now: Timestamp,
    ) -> Result<Recorded, StoreError> {
        check(&self.down)?;
        let seen = {
            let mut s = lock(&self.seen);
            *s += 1;
            *s
        };
        let mut resources = lock(&self.resources);
        let versions = resources.entry(key.clone()).or_default();
        let recorded = if let Some(v) = versions.iter_mut().find(|v| v.digest == digest) {
            v.seen = seen;
            v.content.get_or_insert_with(|| content.clone());
            Recorded {
                version: v.version.clone(),
                is_new: false,
            }
        } else {
            let number = versions
                .iter()
                .map(|v| v.version.version)
                .max()
                .map_or(VersionNumber::FIRST, VersionNumber::next);
            let version = ResourceVersion {
                version: number,
                etag: digest.etag(),
                created_at: now,
                size: content.len(),
                checksum: digest.checksum(),
            };
            versions.push(StoredVersion {
                version: version.clone(),
                digest,
                content: Some(content.clone()),
                seen,
            });
            Recorded {
                version,
                is_new: true,
            }
        };
        self.retain(versions);
        Ok(recorded)
    }

    async fn find(
        &self,
        key: &ResourceKey,
        selector: &VersionSelector,
    ) -> Result<Option<(ResourceVersion, Option<Content>)>, StoreError> {
        check(&self.down)?;
        Ok(lock(&self.resources).get(key).and_then(|vs| {
            vs.iter()
                .find(|v| match selector {
                    VersionSelector::Number(n) => v.version.version == *n,
                    VersionSelector::Etag(e) => &v.version.etag == e,
                })
                .map(|v| (v.version.clone(), v.content.clone()))
        }))
    }

    async fn history(&self, key: &ResourceKey) -> Result<Vec<ResourceVersion>, StoreError> {
        check(&self.down)?;
        let mut all: Vec<ResourceVersion> = lock(&self.resources)
            .get(key)
            .map(|vs| vs.iter().map(|v| v.version.clone()).collect())
            .unwrap_or_default();
        all.sort_by_key(|v| v.version);
        Ok(all)
    }

    async fn summaries(
        &self,
        server: &ServerName,
        uris: &[String],
    ) -> Result<Vec<VersionSummary>, StoreError> {
        check(&self.down)?;
        lock(&self.summarised).push(uris.to_vec());
        Ok(lock(&self.resources)
            .iter()
            .filter(|(k, vs)| {
                &k.server == server && uris.contains(&k.upstream_uri) && !vs.is_empty()
            })
            .filter_map(|(k, vs)| {
                let latest = vs.iter().max_by_key(|v| v.seen)?;
                let first = vs.iter().map(|v| v.version.created_at).min()?;
                Some(VersionSummary {
                    upstream_uri: k.upstream_uri.clone(),
                    latest: latest.version.version,
                    first_seen: first,
                })
            })
            .collect())
    }
}

/// Servers registered at runtime, in memory.
#[derive(Debug, Default)]
pub struct FakeRegistry {
    state: Mutex<(Vec<ServerSettings>, u64)>,
    down: AtomicBool,
}

impl FakeRegistry {
    /// Takes the registry down or back up.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }
}

#[async_trait]
impl ServerRegistry for FakeRegistry {
    async fn servers(&self) -> Result<Vec<ServerSettings>, StoreError> {
        check(&self.down)?;
        let mut all = lock(&self.state).0.clone();
        all.sort_by(|a, b| a.name().cmp(b.name()));
        Ok(all)
    }

    async fn save(&self, server: &ServerSettings, _now: Timestamp) -> Result<u64, StoreError> {
        check(&self.down)?;
        let mut state = lock(&self.state);
        if let Some(other) = state
            .0
            .iter()
            .find(|s| s.spec.id == server.spec.id && s.name() != server.name())
        {
            return Err(StoreError::Conflict(format!(
                "server '{}' already has the id {}",
                other.name(),
                server.spec.id
            )));
        }
        state.0.retain(|s| s.name() != server.name());
        state.0.push(server.clone());
        state.1 += 1;
        Ok(state.1)
    }

    async fn delete(&self, name: &ServerName) -> Result<Option<u64>, StoreError> {
        check(&self.down)?;
        let mut state = lock(&self.state);
        let before = state.0.len();
        state.0.retain(|s| s.name() != name);
        if state.0.len() == before {
            return Ok(None);
        }
        state.1 += 1;
        Ok(Some(state.1))
    }

    async fn generation(&self) -> Result<u64, StoreError> {
        check(&self.down)?;
        Ok(lock(&self.state).1)
    }
}

#[derive(Debug, Clone)]
struct Record {
    digest: String,
    result: Option<String>,
    reserved_at: Timestamp,
}

/// Idempotency reservations and results, in memory.
#[derive(Debug, Default)]
pub struct FakeIdempotencyStore {
    records: Mutex<HashMap<(String, String), Record>>,
    down: AtomicBool,
}

impl FakeIdempotencyStore {
    /// Takes the store down or back up.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }
}

#[async_trait]
impl IdempotencyStore for FakeIdempotencyStore {
    async fn reserve(
        &self,
        scope: &str,
        key: &IdempotencyKey,
        payload_digest: &str,
        now: Timestamp,
        stale_after: Duration,
    ) -> Result<Reservation, StoreError> {
        check(&self.down)?;
        let mut records = lock(&self.records);
        let slot = (scope.to_owned(), key.as_str().to_owned());
        if let Some(r) = records.get(&slot) {
            if r.digest != payload_digest {
                return Ok(Reservation::Conflict {
                    payload_digest: r.digest.clone(),
                });
            }
            if let Some(result) = &r.result {
                return Ok(Reservation::Done(Remembered {
                    payload_digest: r.digest.clone(),
                    result: result.clone(),
                }));
            }
            let stale = chrono::Duration::from_std(stale_after).unwrap_or(chrono::Duration::MAX);
            if r.reserved_at
                .checked_add_signed(stale)
                .is_none_or(|until| now < until)
            {
                return Ok(Reservation::Pending);
            }
        }
        records.insert(
            slot,
            Record {
                digest: payload_digest.to_owned(),
                result: None,
                reserved_at: now,
            },
        );
        Ok(Reservation::Granted)
    }

    async fn complete(
        &self,
        scope: &str,
        key: &IdempotencyKey,
        result: &str,
        _now: Timestamp,
    ) -> Result<(), StoreError> {
        check(&self.down)?;
        if let Some(r) = lock(&self.records).get_mut(&(scope.to_owned(), key.as_str().to_owned()))
            && r.result.is_none()
        {
            r.result = Some(result.to_owned());
        }
        Ok(())
    }

    async fn release(&self, scope: &str, key: &IdempotencyKey) -> Result<(), StoreError> {
        check(&self.down)?;
        let mut records = lock(&self.records);
        let slot = (scope.to_owned(), key.as_str().to_owned());
        if records.get(&slot).is_some_and(|r| r.result.is_none()) {
            records.remove(&slot);
        }
        Ok(())
    }
}
