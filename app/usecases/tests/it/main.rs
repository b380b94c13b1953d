//! ResourceService against the testkit's fakes of every driven port (for behaviour) and mockall
//! (for injected faults). The real transports and stores are covered by the adapters' tests and
//! the binary's.

// A test that cannot set up its world should fail on the spot, saying where.
#![allow(clippy::unwrap_used)]
// The tests watch tokio's paused clock themselves; the service under test reads only its port.
#![allow(clippy::disallowed_methods)]

mod audited;
mod governed;
mod idempotency;
mod list;
mod read;
mod retention;
mod stampede;
mod supervision;
mod tokens;
mod unheard;
mod vault;

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering},
    },
    time::Duration,
};

use quarry_domain::{
    Body, ByteRange, Classifier, Content, Endpoint, ErrorCode, ListQuery, Principal, ResourceUri,
    Retention, RetryPolicy, ServerName, ServerSelector, ServerSettings, ServerSpec,
    VersionSelector,
};
use quarry_ports::{
    Clock, ContentCache, ContentHasher, MockUpstreamConnector, ReadRequest, ResourceGateway,
    ResourceKey, UpstreamConnector, UpstreamError, UpstreamObserver, VersionStore,
};
use quarry_testkit::fakes::{
    CountingConnector, FakeCipher, FakeConnector, FakeContentCache, FakeCredentialStore,
    FakeHasher, FakeIdempotencyStore, FakeInvalidationBus, FakeListingCache, FakeOAuth,
    FakeRegistry, FakeSession, FakeVersionStore, ManualClock,
};
use quarry_usecases::{Ports, ResourceService, ServiceOptions, Supervision};

pub(crate) fn text(t: &str) -> Content {
    Content {
        mime_type: Some("text/plain".into()),
        body: Body::Text(t.into()),
    }
}

pub(crate) fn settings(name: &str) -> ServerSettings {
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
        protection: quarry_domain::Protection::Nothing,
    }
}

pub(crate) fn options() -> ServiceOptions {
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
        require_auth_for_protected: true,
    }
}

pub(crate) struct World {
    pub(crate) service: Arc<ResourceService>,
    pub(crate) docs: Arc<FakeSession>,
    pub(crate) cache: Arc<FakeContentCache>,
    pub(crate) versions: Arc<FakeVersionStore>,
    pub(crate) clock: Arc<ManualClock>,
    pub(crate) connector: Arc<FakeConnector>,
}

impl World {
    fn observer(&self) -> Arc<dyn UpstreamObserver> {
        self.connector.observer().expect("connected")
    }
}

/// Every port faked, around `connector` and `versions`.
pub(crate) fn ports(
    connector: Arc<dyn UpstreamConnector>,
    cache: Arc<dyn ContentCache>,
    versions: Arc<dyn VersionStore>,
    clock: Arc<dyn Clock>,
) -> Ports {
    Ports {
        connector,
        cache,
        listings: Arc::new(FakeListingCache::default()),
        bus: Arc::new(FakeInvalidationBus::default()),
        versions,
        registry: Arc::new(FakeRegistry::default()),
        idempotency: Arc::new(FakeIdempotencyStore::default()),
        hasher: Arc::new(FakeHasher),
        clock,
        credentials: Arc::new(FakeCredentialStore::default()),
        cipher: Arc::new(FakeCipher::default()),
        oauth: Arc::new(FakeOAuth::default()),
        audit: None,
    }
}

/// A fake upstream session serving `file:///a.txt`.
pub(crate) fn docs_session() -> FakeSession {
    let s = FakeSession::default();
    s.set("file:///a.txt", text("héllo wörld"));
    s
}

pub(crate) async fn world_with(docs: FakeSession) -> World {
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
        down: AtomicBool::new(true),
        ..FakeSession::default()
    });
    let cache = Arc::new(FakeContentCache::new(1 << 20));
    let clock = Arc::new(ManualClock::new());
    let connector = Arc::new(FakeConnector::new(HashMap::from([
        ("docs".to_owned(), docs.clone()),
        ("down".to_owned(), down),
    ])));
    let versions = Arc::new(FakeVersionStore::new(Retention::default()));
    let service = ResourceService::new(
        vec![settings("docs"), settings("down")],
        ports(
            connector.clone(),
            cache.clone(),
            versions.clone(),
            clock.clone(),
        ),
        options(),
    );
    World {
        service,
        docs,
        cache,
        versions,
        clock,
        connector,
    }
}

pub(crate) async fn world() -> World {
    world_with(FakeSession::default()).await
}

pub(crate) fn read(uri: &str) -> ReadRequest {
    ReadRequest::whole(ResourceUri::parse(uri).unwrap())
}

pub(crate) const A: &str = "mcp://docs/file_3A///a.txt";

fn key_a() -> ResourceKey {
    ResourceKey::new(ServerName::parse("docs").unwrap(), "file:///a.txt")
}

/// `n` concurrent reads of `request`, each as a task of its own; every one must succeed.
pub(crate) async fn read_concurrently(
    service: &Arc<ResourceService>,
    n: usize,
    request: ReadRequest,
) -> Vec<quarry_domain::ReadResourceResult> {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (service, request) = (service.clone(), request.clone());
            tokio::spawn(async move { service.read_resource(request).await })
        })
        .collect();
    let mut results = Vec::with_capacity(n);
    for t in tasks {
        results.push(t.await.unwrap().unwrap());
    }
    results
}

/// A read of `A` that bypasses the cache.
pub(crate) fn fresh_a() -> ReadRequest {
    ReadRequest {
        use_cache: false,
        ..read(A)
    }
}
