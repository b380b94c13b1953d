//! ResourceService against in-memory fakes of the upstreams (for behaviour), the real SQLite store
//! in memory, and mockall (for injected faults). The real transports are covered by the adapter's
//! and the binary's tests.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use chrono::TimeZone;
use quarry_cache_lru::LruContentCache;
use quarry_domain::{
    Body, ByteRange, Content, Endpoint, ErrorCode, ListQuery, Principal, Retention, ServerName,
    ServerSelector, ServerSpec, Timestamp,
};
use quarry_ports::{
    Clock, ContentCache, Fetched, MockUpstreamConnector, ReadRequest, ResourceGateway, ResourceKey,
    UpstreamConnector, UpstreamError, UpstreamListing, UpstreamObserver, UpstreamResource,
    UpstreamSession, UpstreamTemplate,
};
use quarry_store_sqlite::SqliteStore;

use super::*;
use crate::config::{RetryPolicy, ServerSettings, Supervision};

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

/// An upstream held in memory: its resources, hints, and how many calls reached it.
#[derive(Debug, Default)]
struct FakeSession {
    contents: Mutex<HashMap<String, Content>>,
    reads: AtomicU32,
    lists: AtomicU32,
    down: AtomicBool,
    closed: AtomicBool,
    /// Reads take this long (real time).
    delay: Option<Duration>,
    in_flight: Arc<AtomicUsize>,
    max_in_flight: Arc<AtomicUsize>,
    fail_listing: bool,
    ttl: Option<Duration>,
    private: bool,
}

impl FakeSession {
    fn set(&self, uri: &str, content: Content) {
        self.contents.lock().unwrap().insert(uri.into(), content);
    }
}

#[async_trait]
impl UpstreamSession for FakeSession {
    async fn list_resources(&self) -> Result<UpstreamListing, UpstreamError> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        if self.fail_listing || self.down.load(Ordering::SeqCst) {
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
    async fn read(&self, uri: &str, max_bytes: u64) -> Result<Fetched, UpstreamError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        if let Some(delay) = self.delay {
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_in_flight.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(delay).await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
        }
        if self.down.load(Ordering::SeqCst) {
            return Err(UpstreamError::Timeout(30_000));
        }
        let content = self.contents.lock().unwrap().get(uri).cloned();
        match content {
            None => Err(UpstreamError::NotFound(uri.into())),
            Some(c) if c.len() > max_bytes => Err(UpstreamError::TooLarge {
                size: c.len(),
                limit: max_bytes,
            }),
            Some(content) => Ok(Fetched {
                content,
                ttl: self.ttl,
                private: self.private,
            }),
        }
    }
    async fn subscribe(&self, _uri: &str) -> Result<bool, UpstreamError> {
        Ok(true)
    }
    async fn ping(&self) -> Result<(), UpstreamError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(UpstreamError::Timeout(1000));
        }
        Ok(())
    }
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
    async fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }
}

/// Hands out the fake sessions and keeps the observer, so tests can announce changes.
#[derive(Debug, Default)]
struct FakeConnector {
    sessions: HashMap<String, Arc<FakeSession>>,
    observer: Mutex<Option<Arc<dyn UpstreamObserver>>>,
}

#[async_trait]
impl UpstreamConnector for FakeConnector {
    async fn connect(
        &self,
        spec: &ServerSpec,
        observer: Arc<dyn UpstreamObserver>,
    ) -> Result<Arc<dyn UpstreamSession>, UpstreamError> {
        *self.observer.lock().unwrap() = Some(observer);
        self.sessions
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
        pool_size: 10,
    }
}

fn options() -> ServiceOptions {
    ServiceOptions {
        cache_enabled: true,
        cache_ttl: Duration::from_secs(300),
        max_resource_bytes: 1024,
        classifier: Classifier::default(),
        supervision: Supervision {
            jitter: 0.0,
            ..Supervision::default()
        },
        allow_tool_registration: false,
        allow_tool_commands: false,
    }
}

struct World {
    service: ResourceService,
    docs: Arc<FakeSession>,
    cache: Arc<LruContentCache>,
    clock: Arc<FixedClock>,
    connector: Arc<FakeConnector>,
}

impl World {
    fn observer(&self) -> Arc<dyn UpstreamObserver> {
        self.connector
            .observer
            .lock()
            .unwrap()
            .clone()
            .expect("connected")
    }
}

async fn world_with(docs: FakeSession) -> World {
    let docs = Arc::new(docs);
    docs.set("file:///a.txt", text("héllo wörld"));
    docs.set(
        "file:///big.bin",
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
    let connector = Arc::new(FakeConnector {
        sessions: HashMap::from([("docs".to_owned(), docs.clone()), ("down".to_owned(), down)]),
        observer: Mutex::new(None),
    });
    let store = Arc::new(SqliteStore::in_memory(Retention::default()).await.unwrap());
    let service = ResourceService::new(
        vec![settings("docs"), settings("down")],
        connector.clone(),
        cache.clone(),
        stores(store),
        clock.clone(),
        options(),
    );
    World {
        service,
        docs,
        cache,
        clock,
        connector,
    }
}

async fn world() -> World {
    world_with(FakeSession::default()).await
}

fn read(uri: &str) -> ReadRequest {
    ReadRequest::whole(ResourceUri::parse(uri).unwrap())
}

const A: &str = "mcp://docs/file_3A///a.txt";

fn key_a() -> ResourceKey {
    ResourceKey::new(ServerName::parse("docs").unwrap(), "file:///a.txt")
}

// traces: REQ-071-028, REQ-071-029, REQ-071-032, SR-002.5
#[tokio::test]
async fn the_second_read_is_served_from_cache_and_says_so() {
    let w = world().await;
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
        second.version, first.version,
        "the cached entry knows its version"
    );
    assert_eq!(
        w.docs.reads.load(Ordering::SeqCst),
        1,
        "the upstream was asked once"
    );
}

// traces: REQ-071-030, SR-002.1 — TTL from configuration, with an injected clock.
#[tokio::test]
async fn content_is_refetched_once_the_ttl_has_passed() {
    let w = world().await;
    w.service.read_resource(read(A)).await.unwrap();
    w.clock.advance(299);
    assert!(w.service.read_resource(read(A)).await.unwrap().cached);
    w.clock.advance(1);
    assert!(!w.service.read_resource(read(A)).await.unwrap().cached);
    assert_eq!(w.docs.reads.load(Ordering::SeqCst), 2);
}

// An upstream's ttlMs shortens the cache lifetime, never lengthens it.
#[tokio::test]
async fn an_upstream_ttl_hint_shortens_the_cache_lifetime() {
    let w = world_with(FakeSession {
        ttl: Some(Duration::from_secs(10)),
        ..FakeSession::default()
    })
    .await;
    w.service.read_resource(read(A)).await.unwrap();
    w.clock.advance(9);
    assert!(w.service.read_resource(read(A)).await.unwrap().cached);
    w.clock.advance(1);
    assert!(!w.service.read_resource(read(A)).await.unwrap().cached);

    let long = world_with(FakeSession {
        ttl: Some(Duration::from_secs(86_400)),
        ..FakeSession::default()
    })
    .await;
    long.service.read_resource(read(A)).await.unwrap();
    long.clock.advance(300);
    assert!(
        !long.service.read_resource(read(A)).await.unwrap().cached,
        "capped by the configured 300 s"
    );
}

// traces: CA-1 — content an upstream marks private is never served to another principal.
#[tokio::test]
async fn ca_1_private_content_is_cached_per_principal() {
    let w = world_with(FakeSession {
        private: true,
        ..FakeSession::default()
    })
    .await;
    let alice = ReadRequest {
        principal: Principal::new("alice"),
        ..read(A)
    };
    let bob = ReadRequest {
        principal: Principal::new("bob"),
        ..read(A)
    };
    assert!(!w.service.read_resource(alice.clone()).await.unwrap().cached);
    assert!(w.service.read_resource(alice.clone()).await.unwrap().cached);
    assert!(
        !w.service.read_resource(bob).await.unwrap().cached,
        "bob never gets alice's entry"
    );
    assert_eq!(w.docs.reads.load(Ordering::SeqCst), 2);
}

// traces: REQ-071-031, REQ-071-018
#[tokio::test]
async fn use_cache_false_bypasses_and_refreshes() {
    let w = world().await;
    w.service.read_resource(read(A)).await.unwrap();
    w.docs.set("file:///a.txt", text("changed"));
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

// traces: REQ-071-027, SR-002 — a corrupted cache entry is detected and never returned.
#[tokio::test]
async fn a_corrupted_cache_entry_is_dropped_and_refetched() {
    let w = world().await;
    w.service.read_resource(read(A)).await.unwrap();
    let mut entry = w.cache.get(&key_a(), w.clock.now()).await.unwrap();
    entry.content = text("tampered");
    w.cache.put(key_a(), entry).await;
    let result = w.service.read_resource(read(A)).await.unwrap();
    assert!(!result.cached);
    assert_eq!(result.content.as_deref(), Some("héllo wörld"));
    assert_eq!(w.docs.reads.load(Ordering::SeqCst), 2);
}

// traces: REQ-071-024, REQ-071-025, REQ-071-026, SR-001.1, SR-001.2, SR-001.4, SR-001.5
#[tokio::test]
async fn a_change_becomes_the_next_version_and_earlier_versions_stay_readable() {
    let w = world().await;
    let v1 = w.service.read_resource(read(A)).await.unwrap();
    let v1_meta = v1.version.clone().unwrap();
    assert_eq!(v1_meta.version, "v1");
    assert_eq!(
        v1_meta.checksum,
        sha256("héllo wörld".as_bytes()).checksum()
    );
    assert_eq!(v1_meta.size, 13);

    w.docs.set("file:///a.txt", text("second edition"));
    let v2 = w
        .service
        .read_resource(ReadRequest {
            use_cache: false,
            ..read(A)
        })
        .await
        .unwrap();
    assert_eq!(v2.version.as_ref().unwrap().version, "v2");
    let latest = w.service.read_resource(read(A)).await.unwrap();
    assert_eq!(
        latest.version.as_ref().unwrap().version,
        "v2",
        "no version asked: the latest"
    );
    assert_eq!(latest.content.as_deref(), Some("second edition"));

    let old = w
        .service
        .read_resource(ReadRequest {
            version: Some("v1".into()),
            ..read(A)
        })
        .await
        .unwrap();
    assert_eq!(old.content.as_deref(), Some("héllo wörld"));
    assert_eq!(old.version.as_ref(), Some(&v1_meta));
    let by_etag = w
        .service
        .read_resource(ReadRequest {
            version: Some(v1_meta.etag.clone()),
            ..read(A)
        })
        .await
        .unwrap();
    assert_eq!(by_etag.content, old.content);

    let history = w
        .service
        .versions(&ResourceUri::parse(A).unwrap())
        .await
        .unwrap();
    assert_eq!(
        history
            .iter()
            .map(|v| v.version.as_str())
            .collect::<Vec<_>>(),
        ["v1", "v2"]
    );

    let unknown = w
        .service
        .read_resource(ReadRequest {
            version: Some("v9".into()),
            ..read(A)
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), ErrorCode::E002);
    let malformed = w
        .service
        .read_resource(ReadRequest {
            version: Some("latest".into()),
            ..read(A)
        })
        .await
        .unwrap_err();
    assert_eq!(malformed.code(), ErrorCode::E001);
}

// traces: REQ-071-011, REQ-071-009 — listings carry the latest version and first sighting.
#[tokio::test]
async fn listings_report_versions_once_known() {
    let w = world().await;
    w.service.read_resource(read(A)).await.unwrap();
    let q = ListQuery {
        server: Some(ServerSelector::new("docs").unwrap()),
        ..ListQuery::default()
    };
    let listed = w.service.list_resources(q).await.unwrap();
    let a = listed
        .resources
        .iter()
        .find(|r| r.uri.as_str() == A)
        .unwrap();
    assert_eq!(a.version.as_deref(), Some("v1"));
    assert_eq!(a.created_at, Some(w.clock.now()));
    let big = listed
        .resources
        .iter()
        .find(|r| r.uri.as_str() != A)
        .unwrap();
    assert_eq!(big.version, None, "never read, so no version yet");
}

// traces: REQ-071-016, REQ-071-017, REQ-071-018, SR-002.4 — listings are cached apart from content.
#[tokio::test]
async fn listings_are_cached_counted_and_bypassable() {
    let w = world().await;
    let q = || ListQuery {
        server: Some(ServerSelector::new("docs").unwrap()),
        ..ListQuery::default()
    };
    let first = w.service.list_resources(q()).await.unwrap();
    assert_eq!((first.cached_count, first.cache_age_seconds), (0, None));
    w.clock.advance(42);
    let second = w.service.list_resources(q()).await.unwrap();
    assert_eq!(second.cached_count, 2);
    assert_eq!(second.cache_age_seconds, Some(42));
    assert_eq!(w.docs.lists.load(Ordering::SeqCst), 1);
    let bypass = w
        .service
        .list_resources(ListQuery {
            use_cache: false,
            ..q()
        })
        .await
        .unwrap();
    assert_eq!(bypass.cached_count, 0);
    assert_eq!(w.docs.lists.load(Ordering::SeqCst), 2);
    // list_changed from the upstream drops the cached listing.
    w.observer()
        .resources_changed(&ServerName::parse("docs").unwrap())
        .await;
    assert_eq!(w.service.list_resources(q()).await.unwrap().cached_count, 0);
    assert_eq!(w.docs.lists.load(Ordering::SeqCst), 3);
}

// traces: CA-2, SR-001.5 — after resources/updated no read returns the old content.
#[tokio::test]
async fn ca_2_an_update_announcement_invalidates_the_cached_content() {
    let w = world().await;
    w.service.read_resource(read(A)).await.unwrap();
    w.docs.set("file:///a.txt", text("updated"));
    assert_eq!(
        w.service
            .read_resource(read(A))
            .await
            .unwrap()
            .content
            .as_deref(),
        Some("héllo wörld")
    );
    w.observer()
        .resource_updated(&ServerName::parse("docs").unwrap(), "file:///a.txt")
        .await;
    let after = w.service.read_resource(read(A)).await.unwrap();
    assert!(!after.cached);
    assert_eq!(after.content.as_deref(), Some("updated"));
}

// traces: AV-5 — with the upstream down, expired cached content is served, marked stale.
// (The fake times out rather than refusing, so no retry schedule runs; the binary's test kills a
// real process.)
#[tokio::test]
async fn av_5_a_down_upstream_gets_stale_content_served_with_its_error() {
    let w = world().await;
    w.service.read_resource(read(A)).await.unwrap();
    w.clock.advance(301);
    w.docs.down.store(true, Ordering::SeqCst);
    let stale = w.service.read_resource(read(A)).await.unwrap();
    assert!(stale.cached && stale.stale);
    assert_eq!(stale.content.as_deref(), Some("héllo wörld"));
    let failure = stale.upstream_error.unwrap();
    assert_eq!(failure.error_code, ErrorCode::E009);
    assert!(failure.error_message.contains("timed out"));
    // Nothing cached: the error itself.
    let none = w
        .service
        .read_resource(read("mcp://docs/file_3A///big.bin"))
        .await
        .unwrap_err();
    assert_eq!(none.code(), ErrorCode::E009);
    // Asking for fresh content gets the error, not stale content.
    let fresh = w
        .service
        .read_resource(ReadRequest {
            use_cache: false,
            ..read(A)
        })
        .await
        .unwrap_err();
    assert_eq!(fresh.code(), ErrorCode::E009);
}

// traces: REQ-071-033, REQ-071-034, REQ-071-035, REQ-071-036, IV-3
#[tokio::test]
async fn iv_3_ranges_cut_bytes_and_never_return_broken_text() {
    let w = world().await;
    let ranged = |offset, limit| ReadRequest {
        range: ByteRange::new(offset, Some(limit)).unwrap(),
        ..read(A)
    };
    let head = w.service.read_resource(ranged(0, 5)).await.unwrap();
    assert_eq!(head.content.as_deref(), Some("héll"), "é is two bytes");
    assert_eq!(head.content_range.as_str(), "bytes 0-4/13");
    assert_eq!(head.size, 13);
    assert_eq!(
        head.next_offset, None,
        "the range asked for was returned whole"
    );
    // Bytes 0..2 end inside 'é': the exact bytes come back as bytes, not as repaired text.
    let split = w.service.read_resource(ranged(0, 2)).await.unwrap();
    assert_eq!(split.content, None);
    assert_eq!(split.bytes_content.as_deref(), Some("aMM="));
    let beyond = w.service.read_resource(ranged(13, 1)).await.unwrap_err();
    assert_eq!(beyond.code(), ErrorCode::E007);
}

// Agent-sized results: a read larger than the inline limit returns its first part, cut on a
// character boundary, and says where to continue.
#[tokio::test]
async fn reads_over_the_inline_limit_come_back_in_parts() {
    let w = world().await;
    let capped = |offset: i64| ReadRequest {
        range: ByteRange::new(offset, None).unwrap(),
        inline_limit: Some(2),
        ..read(A)
    };
    let first = w.service.read_resource(capped(0)).await.unwrap();
    assert_eq!(
        first.content.as_deref(),
        Some("h"),
        "the cut moves back before 'é'"
    );
    assert_eq!(first.next_offset, Some(1));
    assert!(first.note.as_deref().unwrap().contains("offset=1"));
    let second = w.service.read_resource(capped(1)).await.unwrap();
    assert_eq!(second.content.as_deref(), Some("é"));
    assert_eq!(second.content_range.as_str(), "bytes 1-2/13");
    let mut text = String::new();
    let mut offset = 0;
    loop {
        let part = w.service.read_resource(capped(offset)).await.unwrap();
        text.push_str(part.content.as_deref().unwrap());
        match part.next_offset {
            Some(next) => offset = next as i64,
            None => break,
        }
    }
    assert_eq!(
        text, "héllo wörld",
        "walking next_offset reassembles the content"
    );
    let blob = ReadRequest {
        inline_limit: Some(1000),
        ..read("mcp://docs/file_3A///big.bin")
    };
    let part = w.service.read_resource(blob).await.unwrap_err();
    assert_eq!(
        part.code(),
        ErrorCode::E008,
        "over max_resource_size (1024 here) is refused whole"
    );
}

#[tokio::test]
async fn bad_targets_get_their_codes() {
    let w = world().await;
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
    assert_eq!(
        w.service
            .versions(&ResourceUri::parse("mcp://nope/x").unwrap())
            .await
            .unwrap_err()
            .code(),
        ErrorCode::E003
    );
}

// traces: SR-002.2 — explicit purge.
#[tokio::test]
async fn purge_drops_content_and_listings() {
    let w = world().await;
    w.service.read_resource(read(A)).await.unwrap();
    w.service
        .list_resources(ListQuery::default())
        .await
        .unwrap();
    let one = w
        .service
        .purge(None, Some(ResourceUri::parse(A).unwrap()), None)
        .await
        .unwrap();
    assert_eq!((one.contents, one.listings), (1, 0));
    assert!(!w.service.read_resource(read(A)).await.unwrap().cached);
    let all = w.service.purge(None, None, None).await.unwrap();
    assert_eq!((all.contents, all.listings), (1, 1));
    assert!(!w.service.read_resource(read(A)).await.unwrap().cached);
    let bad = w
        .service
        .purge(Some(ServerName::parse("nope").unwrap()), None, None)
        .await
        .unwrap_err();
    assert_eq!(bad.code(), ErrorCode::E003);
}

// traces: REQ-071-002, REQ-071-012 — a failing server marks the listing partial, never fails it.
#[tokio::test]
async fn a_failing_server_makes_the_listing_partial_not_failed() {
    let w = world().await;
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
    let w = world().await;
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
    connector.expect_connect().returning(move |_, _| {
        seen.fetch_add(1, Ordering::SeqCst);
        Err(UpstreamError::Unreachable("connection refused".into()))
    });
    let service = ResourceService::new(
        vec![settings("docs")],
        Arc::new(connector),
        Arc::new(LruContentCache::new(1 << 20)),
        // Never reached (no connection and no content); a real pool's timers misbehave on a paused clock.
        stores(Arc::new(quarry_ports::MockVersionStore::new())),
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

/// Makes a new session per connection, so pools and reconnections can be counted.
#[derive(Debug)]
struct CountingConnector {
    made: Mutex<Vec<Arc<FakeSession>>>,
    template: fn() -> FakeSession,
}

impl CountingConnector {
    fn new(template: fn() -> FakeSession) -> Arc<Self> {
        Arc::new(Self {
            made: Mutex::new(Vec::new()),
            template,
        })
    }
    fn count(&self) -> usize {
        self.made.lock().unwrap().len()
    }
}

#[async_trait]
impl UpstreamConnector for CountingConnector {
    async fn connect(
        &self,
        _spec: &ServerSpec,
        _observer: Arc<dyn UpstreamObserver>,
    ) -> Result<Arc<dyn UpstreamSession>, UpstreamError> {
        let session = Arc::new((self.template)());
        session.set("file:///a.txt", text("héllo wörld"));
        self.made.lock().unwrap().push(session.clone());
        Ok(session)
    }
}

fn service_with(
    connector: Arc<dyn UpstreamConnector>,
    store: Arc<dyn quarry_ports::VersionStore>,
    supervision: Supervision,
) -> ResourceService {
    ResourceService::new(
        vec![settings("docs")],
        connector,
        Arc::new(LruContentCache::new(1 << 20)),
        stores(store),
        FixedClock::new(),
        ServiceOptions {
            supervision,
            ..options()
        },
    )
}

/// A service whose one server never answers, and the times it was tried.
fn always_down(jitter: f64) -> (ResourceService, Arc<Mutex<Vec<tokio::time::Instant>>>) {
    let attempts: Arc<Mutex<Vec<tokio::time::Instant>>> = Arc::default();
    let seen = attempts.clone();
    let mut connector = MockUpstreamConnector::new();
    connector.expect_connect().returning(move |_, _| {
        seen.lock().unwrap().push(tokio::time::Instant::now());
        Err(UpstreamError::Unreachable("connection refused".into()))
    });
    let supervision = Supervision {
        jitter,
        circuit_threshold: 100,
        ..Supervision::default()
    };
    let service = service_with(
        Arc::new(connector),
        Arc::new(quarry_ports::MockVersionStore::new()),
        supervision,
    );
    (service, attempts)
}

// traces: AV-1 — a server that is down is retried at 1, 2, 4, 8, 16, 30 s, measured on tokio's
// paused clock (an injected timer), with jitter off so the schedule is exact.
#[tokio::test(start_paused = true)]
async fn av_1_reconnects_follow_the_backoff_schedule() {
    let (service, attempts) = always_down(0.0);
    let started = tokio::time::Instant::now();
    service.start_supervision();
    tokio::time::sleep(Duration::from_secs(92)).await;
    let offsets: Vec<u64> = attempts
        .lock()
        .unwrap()
        .iter()
        .map(|t| (*t - started).as_secs())
        .collect();
    assert_eq!(offsets, [0, 1, 3, 7, 15, 31, 61, 91]);
    let status = service.servers_status();
    assert_eq!(status[0].status, quarry_domain::ConnectionStatus::Error);
    assert_eq!(
        status[0].last_error.as_deref(),
        Some("unreachable: connection refused")
    );
    service.shutdown().await;
}

// The schedule's jitter spreads each delay within the configured fraction.
#[tokio::test(start_paused = true)]
async fn av_1_jitter_stays_within_its_fraction() {
    let (service, attempts) = always_down(0.2);
    service.start_supervision();
    tokio::time::sleep(Duration::from_secs(120)).await;
    let times = attempts.lock().unwrap().clone();
    for (n, pair) in times.windows(2).enumerate() {
        let gap = (pair[1] - pair[0]).as_secs_f64();
        let nominal = (1u64 << n).min(30) as f64;
        assert!(
            (gap - nominal).abs() <= nominal * 0.2 + 0.001,
            "gap {n}: {gap} vs {nominal}"
        );
    }
    service.shutdown().await;
}

// traces: AV-2 — after repeated failures the circuit opens: requests fail fast with E003 without
// touching the upstream, until the schedule allows the next attempt.
#[tokio::test(start_paused = true)]
async fn av_2_the_circuit_opens_after_repeated_failures_and_fails_fast() {
    let calls = Arc::new(AtomicU32::new(0));
    let seen = calls.clone();
    let mut connector = MockUpstreamConnector::new();
    connector.expect_connect().returning(move |_, _| {
        seen.fetch_add(1, Ordering::SeqCst);
        Err(UpstreamError::Unreachable("refused".into()))
    });
    let supervision = Supervision {
        jitter: 0.0,
        circuit_threshold: 3,
        ..Supervision::default()
    };
    let mut docs = settings("docs");
    docs.retry.attempts = 0;
    let service = ResourceService::new(
        vec![docs],
        Arc::new(connector),
        Arc::new(LruContentCache::new(1 << 20)),
        stores(Arc::new(quarry_ports::MockVersionStore::new())),
        FixedClock::new(),
        ServiceOptions {
            supervision,
            ..options()
        },
    );
    for _ in 0..3 {
        assert_eq!(
            service.read_resource(read(A)).await.unwrap_err().code(),
            ErrorCode::E003
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    let fast = service.read_resource(read(A)).await.unwrap_err();
    assert_eq!(fast.code(), ErrorCode::E003);
    assert!(
        fast.message()
            .contains("circuit open after 3 consecutive failures"),
        "{}",
        fast.message()
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "the open circuit did not touch the upstream"
    );
    // The third failure scheduled the next attempt 4 s later; then the circuit lets one through.
    tokio::time::sleep(Duration::from_secs(4)).await;
    service.read_resource(read(A)).await.unwrap_err();
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

// traces: AV-4, SC-006 — 200 concurrent reads all complete; the server gets at most its pool of
// sessions and at most pool × 8 requests at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn av_4_two_hundred_concurrent_reads_respect_the_pool() {
    static IN_FLIGHT: std::sync::OnceLock<(Arc<AtomicUsize>, Arc<AtomicUsize>)> =
        std::sync::OnceLock::new();
    let (in_flight, max) = IN_FLIGHT
        .get_or_init(|| (Arc::default(), Arc::default()))
        .clone();
    let connector = CountingConnector::new(|| {
        let (in_flight, max) = IN_FLIGHT.get().unwrap().clone();
        FakeSession {
            delay: Some(Duration::from_millis(20)),
            in_flight,
            max_in_flight: max,
            ..FakeSession::default()
        }
    });
    let store = Arc::new(SqliteStore::in_memory(Retention::default()).await.unwrap());
    let service = Arc::new(service_with(
        connector.clone(),
        store,
        Supervision::default(),
    ));
    let reads: Vec<_> = (0..200)
        .map(|_| {
            let service = service.clone();
            tokio::spawn(async move {
                service
                    .read_resource(ReadRequest {
                        use_cache: false,
                        ..read(A)
                    })
                    .await
            })
        })
        .collect();
    for r in reads {
        assert_eq!(
            r.await.unwrap().unwrap().content.as_deref(),
            Some("héllo wörld")
        );
    }
    assert!(connector.count() <= 10, "{} sessions", connector.count());
    assert!(connector.count() >= 2, "the load spread over the pool");
    let peak = max.load(Ordering::SeqCst);
    assert!(peak <= 80, "{peak} requests in flight at once");
    assert_eq!(in_flight.load(Ordering::SeqCst), 0);
    service.shutdown().await;
    assert!(
        connector.made.lock().unwrap().iter().all(|s| s.is_closed()),
        "shutdown closes every session"
    );
}

// Health checks: a session that stops answering pings is closed and replaced.
#[tokio::test(start_paused = true)]
async fn a_session_failing_its_health_check_is_replaced() {
    let connector = CountingConnector::new(FakeSession::default);
    let service = service_with(
        connector.clone(),
        Arc::new(quarry_ports::MockVersionStore::new()),
        Supervision {
            jitter: 0.0,
            ..Supervision::default()
        },
    );
    service.start_supervision();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(connector.count(), 1, "connected at start");
    connector.made.lock().unwrap()[0]
        .down
        .store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(60)).await;
    let made = connector.made.lock().unwrap().clone();
    assert!(made[0].is_closed(), "the silent session was closed");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(connector.count(), 2, "and replaced on the backoff schedule");
    service.shutdown().await;
}

/// A registry with nothing registered, and no idempotency records: for tests about other things.
#[derive(Debug, Default)]
struct EmptyRegistry;

#[async_trait]
impl quarry_ports::ServerRegistry for EmptyRegistry {
    async fn servers(
        &self,
    ) -> Result<Vec<quarry_ports::RegisteredServer>, quarry_ports::StoreError> {
        Ok(vec![])
    }
    async fn save(
        &self,
        _: &quarry_ports::RegisteredServer,
        _: Timestamp,
    ) -> Result<(), quarry_ports::StoreError> {
        Ok(())
    }
    async fn delete(&self, _: &ServerName) -> Result<bool, quarry_ports::StoreError> {
        Ok(false)
    }
    async fn generation(&self) -> Result<u64, quarry_ports::StoreError> {
        Ok(0)
    }
}

#[async_trait]
impl quarry_ports::IdempotencyStore for EmptyRegistry {
    async fn recall(
        &self,
        _: &str,
        _: &str,
    ) -> Result<Option<quarry_ports::Remembered>, quarry_ports::StoreError> {
        Ok(None)
    }
    async fn remember(
        &self,
        _: &str,
        _: &str,
        _: quarry_ports::Remembered,
        _: Timestamp,
    ) -> Result<(), quarry_ports::StoreError> {
        Ok(())
    }
}

fn stores(versions: Arc<dyn quarry_ports::VersionStore>) -> Stores {
    Stores {
        versions,
        registry: Arc::new(EmptyRegistry),
        idempotency: Arc::new(EmptyRegistry),
    }
}

// A session that replaces sessions which all died may have missed announcements: what is cached
// for the server is dropped. A session that only grows the pool drops nothing.
#[tokio::test]
async fn replacing_dead_sessions_drops_the_servers_cache() {
    let connector = CountingConnector::new(FakeSession::default);
    let store = Arc::new(SqliteStore::in_memory(Retention::default()).await.unwrap());
    let service = service_with(connector.clone(), store, Supervision::default());
    service.read_resource(read(A)).await.unwrap();
    assert!(service.read_resource(read(A)).await.unwrap().cached);
    connector.made.lock().unwrap()[0]
        .closed
        .store(true, Ordering::SeqCst);
    let other = service
        .read_resource(read("mcp://docs/file_3A///missing"))
        .await
        .unwrap_err();
    assert_eq!(other.code(), ErrorCode::E002);
    assert_eq!(connector.count(), 2, "a new session replaced the dead one");
    assert!(
        !service.read_resource(read(A)).await.unwrap().cached,
        "the cache was dropped"
    );
}
