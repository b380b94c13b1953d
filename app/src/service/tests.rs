//! ResourceService against in-memory fakes (for behaviour) and mockall (for injected faults).
//! The real transports are covered by the adapter's and the binary's tests.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU32, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use chrono::TimeZone;
use quarry_cache_lru::LruContentCache;
use quarry_domain::{
    Body, ByteRange, Content, Endpoint, ErrorCode, ListQuery, ServerName, ServerSelector,
    ServerSpec, Timestamp,
};
use quarry_ports::{
    CacheKey, Clock, ContentCache, MockUpstreamConnector, ReadRequest, ResourceGateway,
    UpstreamConnector, UpstreamError, UpstreamListing, UpstreamResource, UpstreamSession,
    UpstreamTemplate,
};

use super::*;
use crate::config::{RetryPolicy, ServerSettings};

#[derive(Debug)]
struct FixedClock(Mutex<Timestamp>);

impl FixedClock {
    fn new() -> Arc<Self> {
        Arc::new(Self(Mutex::new(
            chrono::Utc.timestamp_opt(1_800_000_000, 0).unwrap(),
        )))
    }
    fn advance(&self, secs: i64) {
        *self.0.lock().unwrap() += chrono::Duration::seconds(secs);
    }
}

impl Clock for FixedClock {
    fn now(&self) -> Timestamp {
        *self.0.lock().unwrap()
    }
}

/// An upstream held in memory: its resources and how many reads reached it.
#[derive(Debug, Default)]
struct FakeSession {
    contents: Mutex<HashMap<String, Content>>,
    reads: AtomicU32,
    fail_listing: bool,
}

#[async_trait]
impl UpstreamSession for FakeSession {
    async fn list_resources(&self) -> Result<UpstreamListing, UpstreamError> {
        if self.fail_listing {
            return Err(UpstreamError::Unreachable("down".into()));
        }
        let contents = self.contents.lock().unwrap();
        let mut resources: Vec<_> = contents
            .keys()
            .map(|uri| UpstreamResource {
                uri: uri.clone(),
                name: uri.clone(),
                title: None,
                description: None,
                mime_type: None,
                size: None,
                last_modified: None,
            })
            .collect();
        resources.sort_by(|a, b| a.uri.cmp(&b.uri));
        Ok(UpstreamListing {
            resources,
            truncated: false,
        })
    }
    async fn list_templates(&self) -> Result<Vec<UpstreamTemplate>, UpstreamError> {
        Ok(vec![])
    }
    async fn read(&self, uri: &str, max_bytes: u64) -> Result<Content, UpstreamError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        let content = self.contents.lock().unwrap().get(uri).cloned();
        match content {
            None => Err(UpstreamError::NotFound(uri.into())),
            Some(c) if c.len() > max_bytes => Err(UpstreamError::TooLarge {
                size: c.len(),
                limit: max_bytes,
            }),
            Some(c) => Ok(c),
        }
    }
    fn is_closed(&self) -> bool {
        false
    }
    async fn close(&self) {}
}

#[derive(Debug)]
struct FakeConnector(HashMap<String, Arc<FakeSession>>);

#[async_trait]
impl UpstreamConnector for FakeConnector {
    async fn connect(&self, spec: &ServerSpec) -> Result<Arc<dyn UpstreamSession>, UpstreamError> {
        self.0
            .get(spec.name.as_str())
            .cloned()
            .map(|s| s as Arc<dyn UpstreamSession>)
            .ok_or_else(|| UpstreamError::Unreachable("no such process".into()))
    }
}

fn text(t: &str) -> Content {
    Content {
        mime_type: Some("text/plain".into()),
        body: Body::Text(t.into()),
    }
}

fn settings(name: &str) -> ServerSettings {
    ServerSettings {
        spec: ServerSpec::new(
            ServerName::parse(name).unwrap(),
            Endpoint::Http {
                url: format!("http://127.0.0.1:1/{name}"),
            },
        ),
        retry: RetryPolicy {
            attempts: 3,
            delay: Duration::from_secs(1),
        },
    }
}

fn options() -> ServiceOptions {
    ServiceOptions {
        cache_enabled: true,
        cache_ttl: Duration::from_secs(300),
        max_resource_bytes: 1024,
        classifier: Classifier::default(),
    }
}

struct World {
    service: ResourceService,
    docs: Arc<FakeSession>,
    cache: Arc<LruContentCache>,
    clock: Arc<FixedClock>,
}

fn world() -> World {
    let docs = Arc::new(FakeSession::default());
    docs.contents
        .lock()
        .unwrap()
        .insert("file:///a.txt".into(), text("héllo wörld"));
    docs.contents.lock().unwrap().insert(
        "file:///big.bin".into(),
        Content {
            mime_type: None,
            body: Body::Blob(vec![1; 2048]),
        },
    );
    let down = Arc::new(FakeSession {
        fail_listing: true,
        ..FakeSession::default()
    });
    let cache = Arc::new(LruContentCache::new(1 << 20));
    let clock = FixedClock::new();
    let connector = FakeConnector(HashMap::from([
        ("docs".to_owned(), docs.clone()),
        ("down".to_owned(), down),
    ]));
    let service = ResourceService::new(
        vec![settings("docs"), settings("down")],
        Arc::new(connector),
        cache.clone(),
        clock.clone(),
        options(),
    );
    World {
        service,
        docs,
        cache,
        clock,
    }
}

fn read(uri: &str) -> ReadRequest {
    ReadRequest::whole(ResourceUri::parse(uri).unwrap())
}

const A: &str = "mcp://docs/file_3A///a.txt";

// traces: REQ-071-028, REQ-071-029, REQ-071-032, SR-002.5
#[tokio::test]
async fn the_second_read_is_served_from_cache_and_says_so() {
    let w = world();
    let first = w.service.read_resource(read(A)).await.unwrap();
    assert!(!first.cached);
    assert_eq!(first.cached_at, None);
    w.clock.advance(10);
    let second = w.service.read_resource(read(A)).await.unwrap();
    assert!(second.cached);
    assert_eq!(
        second.cached_at,
        Some(w.clock.now() - chrono::Duration::seconds(10))
    );
    assert_eq!(second.content, first.content);
    assert_eq!(
        w.docs.reads.load(Ordering::SeqCst),
        1,
        "the upstream was asked once"
    );
}

// traces: REQ-071-030, SR-002.1 — TTL from configuration, with an injected clock.
#[tokio::test]
async fn content_is_refetched_once_the_ttl_has_passed() {
    let w = world();
    w.service.read_resource(read(A)).await.unwrap();
    w.clock.advance(299);
    assert!(w.service.read_resource(read(A)).await.unwrap().cached);
    w.clock.advance(1);
    assert!(!w.service.read_resource(read(A)).await.unwrap().cached);
    assert_eq!(w.docs.reads.load(Ordering::SeqCst), 2);
}

// traces: REQ-071-031, REQ-071-018
#[tokio::test]
async fn use_cache_false_bypasses_and_refreshes() {
    let w = world();
    w.service.read_resource(read(A)).await.unwrap();
    w.docs
        .contents
        .lock()
        .unwrap()
        .insert("file:///a.txt".into(), text("changed"));
    let bypass = ReadRequest {
        use_cache: false,
        ..read(A)
    };
    let fresh = w.service.read_resource(bypass).await.unwrap();
    assert!(!fresh.cached);
    assert_eq!(fresh.content.as_deref(), Some("changed"));
    let after = w.service.read_resource(read(A)).await.unwrap();
    assert!(after.cached);
    assert_eq!(
        after.content.as_deref(),
        Some("changed"),
        "the bypass refreshed the cache"
    );
}

// traces: REQ-071-027 — a corrupted cache entry is detected and never returned.
#[tokio::test]
async fn a_corrupted_cache_entry_is_dropped_and_refetched() {
    let w = world();
    w.service.read_resource(read(A)).await.unwrap();
    let key = CacheKey::new(ServerName::parse("docs").unwrap(), "file:///a.txt");
    let mut entry = w.cache.get(&key, w.clock.now()).await.unwrap();
    entry.content = text("tampered");
    w.cache.put(key.clone(), entry).await;
    let result = w.service.read_resource(read(A)).await.unwrap();
    assert!(!result.cached);
    assert_eq!(result.content.as_deref(), Some("héllo wörld"));
    assert_eq!(w.docs.reads.load(Ordering::SeqCst), 2);
}

// traces: REQ-071-033, REQ-071-034, REQ-071-035, REQ-071-036
#[tokio::test]
async fn ranges_cut_bytes_and_never_return_broken_text() {
    let w = world();
    let ranged = |offset, limit| ReadRequest {
        range: ByteRange::new(offset, Some(limit)).unwrap(),
        ..read(A)
    };
    let head = w.service.read_resource(ranged(0, 5)).await.unwrap();
    assert_eq!(head.content.as_deref(), Some("héll"), "é is two bytes");
    assert_eq!(head.content_range.as_str(), "bytes 0-4/13");
    assert_eq!(head.size, 13);
    // Bytes 0..2 end inside 'é': the exact bytes come back as bytes, not as repaired text.
    let split = w.service.read_resource(ranged(0, 2)).await.unwrap();
    assert_eq!(split.content, None);
    assert_eq!(split.bytes_content.as_deref(), Some("aMM="));
    let beyond = w.service.read_resource(ranged(13, 1)).await.unwrap_err();
    assert_eq!(beyond.code(), ErrorCode::E007);
}

#[tokio::test]
async fn bad_targets_get_their_codes() {
    let w = world();
    let unknown = w
        .service
        .read_resource(read("mcp://nope/x"))
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), ErrorCode::E003);
    let missing = w
        .service
        .read_resource(read("mcp://docs/file_3A///missing"))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), ErrorCode::E002);
    let version = ReadRequest {
        version: Some("v9".into()),
        ..read(A)
    };
    assert_eq!(
        w.service.read_resource(version).await.unwrap_err().code(),
        ErrorCode::E002
    );
    let big = w
        .service
        .read_resource(read("mcp://docs/file_3A///big.bin"))
        .await
        .unwrap_err();
    assert_eq!(big.code(), ErrorCode::E008);
    let q = ListQuery {
        server: Some(ServerSelector::new("nope").unwrap()),
        ..ListQuery::default()
    };
    assert_eq!(
        w.service.list_resources(q).await.unwrap_err().code(),
        ErrorCode::E003
    );
}

// traces: REQ-071-002, REQ-071-012 — a failing server marks the listing partial, never fails it.
#[tokio::test]
async fn a_failing_server_makes_the_listing_partial_not_failed() {
    let w = world();
    let result = w
        .service
        .list_resources(ListQuery::default())
        .await
        .unwrap();
    assert!(result.partial);
    assert_eq!(result.total_count, 2);
    let down = result
        .servers
        .iter()
        .find(|s| s.server_name.as_str() == "down")
        .unwrap();
    assert_eq!(down.status, quarry_domain::ConnectionStatus::Error);
    assert_eq!(down.last_error.as_deref(), Some("unreachable: down"));
    let docs = result
        .servers
        .iter()
        .find(|s| s.server_name.as_str() == "docs")
        .unwrap();
    assert_eq!(docs.status, quarry_domain::ConnectionStatus::Connected);
    assert_eq!(docs.resource_count, 2);
    assert!(docs.last_used.is_some());
}

#[tokio::test]
async fn selecting_by_id_lists_only_that_server() {
    let w = world();
    let id = quarry_domain::ServerId::derive(&ServerName::parse("docs").unwrap());
    let q = ListQuery {
        server: Some(ServerSelector::new(id.as_str()).unwrap()),
        ..ListQuery::default()
    };
    let result = w.service.list_resources(q).await.unwrap();
    assert!(!result.partial);
    assert_eq!(result.servers.len(), 1);
    assert!(
        result
            .resources
            .iter()
            .all(|r| r.uri.server().as_str() == "docs")
    );
}

// Reads retry a failed connection on the server's schedule (1 s, 2 s, 4 s), measured on tokio's
// paused clock rather than by sleeping.
#[tokio::test(start_paused = true)]
async fn reads_retry_a_dead_connection_on_the_configured_schedule() {
    let attempts = Arc::new(AtomicU32::new(0));
    let mut connector = MockUpstreamConnector::new();
    let seen = attempts.clone();
    connector.expect_connect().returning(move |_| {
        seen.fetch_add(1, Ordering::SeqCst);
        Err(UpstreamError::Unreachable("connection refused".into()))
    });
    let service = ResourceService::new(
        vec![settings("docs")],
        Arc::new(connector),
        Arc::new(LruContentCache::new(1 << 20)),
        FixedClock::new(),
        options(),
    );
    let started = tokio::time::Instant::now();
    let err = service.read_resource(read(A)).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::E003);
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        4,
        "one try and three retries"
    );
    assert_eq!(started.elapsed(), Duration::from_secs(1 + 2 + 4));
}
