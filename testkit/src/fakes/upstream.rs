//! Fake upstream servers: sessions held in memory, and connectors that hand them out.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use quarry_domain::{Content, ServerSpec, UpstreamAuth};
use quarry_ports::{
    Fetched, UpstreamConnector, UpstreamError, UpstreamListing, UpstreamObserver, UpstreamResource,
    UpstreamSession, UpstreamTemplate,
};

/// An upstream held in memory: its resources, hints, and how many calls reached it.
#[derive(Debug, Default)]
pub struct FakeSession {
    /// Resources by upstream URI.
    pub contents: Mutex<HashMap<String, Content>>,
    /// Reads that reached it.
    pub reads: AtomicU32,
    /// Listings that reached it.
    pub lists: AtomicU32,
    /// Subscriptions asked of it.
    pub subscribes: AtomicU32,
    /// While set, reads time out, listings fail and pings fail.
    pub down: AtomicBool,
    /// Set once closed (or to make it look dead).
    pub closed: AtomicBool,
    /// Reads take this long (tokio time).
    pub delay: Option<Duration>,
    /// Reads in flight now, and at most so far, across every session sharing the counters.
    pub in_flight: Arc<AtomicUsize>,
    /// See `in_flight`.
    pub max_in_flight: Arc<AtomicUsize>,
    /// The `ttlMs` hint reads carry.
    pub ttl: Option<Duration>,
    /// Reads are marked `cacheScope: private`.
    pub private: bool,
    /// When set, what listings return instead of one entry per content (to list what a hostile
    /// server lists: duplicates, odd URIs, dates in the future).
    pub listing: Mutex<Option<Vec<UpstreamResource>>>,
    /// Reads of these URIs hang for the duration given, then time out; the session itself keeps
    /// answering (pings, other reads).
    pub hanging: Mutex<HashMap<String, Duration>>,
    /// Reads of these URIs kill the session (as a crashing process would) and fail.
    pub deadly: Mutex<Vec<String>>,
}

impl FakeSession {
    /// Sets a resource's content.
    pub fn set(&self, uri: &str, content: Content) {
        self.contents
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uri.into(), content);
    }
}

#[async_trait]
impl UpstreamSession for FakeSession {
    async fn list_resources(&self) -> Result<UpstreamListing, UpstreamError> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        if self.down.load(Ordering::SeqCst) {
            return Err(UpstreamError::Unreachable("down".into()));
        }
        if let Some(listing) = self
            .listing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Ok(UpstreamListing {
                resources: listing,
                ..UpstreamListing::default()
            });
        }
        let contents = self.contents.lock().unwrap_or_else(|e| e.into_inner());
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
            ..UpstreamListing::default()
        })
    }

    async fn list_templates(&self) -> Result<Vec<UpstreamTemplate>, UpstreamError> {
        Ok(vec![])
    }

    async fn read(&self, uri: &str, max_bytes: u64) -> Result<Fetched, UpstreamError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        if self.closed.load(Ordering::SeqCst) {
            return Err(UpstreamError::Unreachable("the session is closed".into()));
        }
        let hang = self
            .hanging
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(uri)
            .copied();
        if let Some(hang) = hang {
            tokio::time::sleep(hang).await;
            return Err(UpstreamError::Timeout(
                u64::try_from(hang.as_millis()).unwrap_or(u64::MAX),
            ));
        }
        let deadly = self
            .deadly
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|d| d == uri);
        if deadly {
            self.closed.store(true, Ordering::SeqCst);
            return Err(UpstreamError::Unreachable(
                "the connection to the server closed".into(),
            ));
        }
        if let Some(delay) = self.delay {
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_in_flight.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(delay).await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
        }
        if self.down.load(Ordering::SeqCst) {
            return Err(UpstreamError::Timeout(30_000));
        }
        let content = self
            .contents
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(uri)
            .cloned();
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
        self.subscribes.fetch_add(1, Ordering::SeqCst);
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

/// Hands out one fake session per server name, and keeps the observer so tests can announce
/// changes.
#[derive(Debug, Default)]
pub struct FakeConnector {
    /// The session of each server, by name.
    pub sessions: HashMap<String, Arc<FakeSession>>,
    observer: Mutex<Option<Arc<dyn UpstreamObserver>>>,
    required: Mutex<HashMap<String, UpstreamAuth>>,
}

impl FakeConnector {
    /// A connector for these servers.
    pub fn new(sessions: HashMap<String, Arc<FakeSession>>) -> Self {
        Self {
            sessions,
            observer: Mutex::new(None),
            required: Mutex::new(HashMap::new()),
        }
    }

    /// Makes the server `name` accept only connections that carry `auth`.
    pub fn require(&self, name: &str, auth: UpstreamAuth) {
        self.required
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_owned(), auth);
    }

    /// The observer the last connection was given.
    pub fn observer(&self) -> Option<Arc<dyn UpstreamObserver>> {
        self.observer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

#[async_trait]
impl UpstreamConnector for FakeConnector {
    async fn connect<'a>(
        &self,
        spec: &ServerSpec,
        auth: Option<&'a UpstreamAuth>,
        _tokens: Option<Arc<dyn quarry_ports::AccessTokens>>,
        observer: Arc<dyn UpstreamObserver>,
    ) -> Result<Arc<dyn UpstreamSession>, UpstreamError> {
        *self.observer.lock().unwrap_or_else(|e| e.into_inner()) = Some(observer);
        let required = self
            .required
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(spec.name.as_str())
            .cloned();
        if let Some(required) = required
            && auth != Some(&required)
        {
            return Err(UpstreamError::Unauthorized(
                "the fake server refused the credential".into(),
            ));
        }
        let session = self
            .sessions
            .get(spec.name.as_str())
            .cloned()
            .ok_or_else(|| UpstreamError::Unreachable("no such process".into()))?;
        // Connecting again to the same fake server opens it again.
        session.closed.store(false, Ordering::SeqCst);
        Ok(session)
    }
}

/// Makes a new session per connection from a template, so pools and reconnections can be
/// counted.
#[derive(Debug)]
pub struct CountingConnector {
    /// Every session made, in order.
    pub made: Mutex<Vec<Arc<FakeSession>>>,
    template: fn() -> FakeSession,
}

impl CountingConnector {
    /// A connector whose sessions start as `template()` returns them.
    pub fn new(template: fn() -> FakeSession) -> Arc<Self> {
        Arc::new(Self {
            made: Mutex::new(Vec::new()),
            template,
        })
    }

    /// Sessions made so far.
    pub fn count(&self) -> usize {
        self.made.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The `n`-th session made.
    pub fn session(&self, n: usize) -> Arc<FakeSession> {
        self.made.lock().unwrap_or_else(|e| e.into_inner())[n].clone()
    }
}

#[async_trait]
impl UpstreamConnector for CountingConnector {
    async fn connect<'a>(
        &self,
        _spec: &ServerSpec,
        _auth: Option<&'a UpstreamAuth>,
        _tokens: Option<Arc<dyn quarry_ports::AccessTokens>>,
        _observer: Arc<dyn UpstreamObserver>,
    ) -> Result<Arc<dyn UpstreamSession>, UpstreamError> {
        let session = Arc::new((self.template)());
        self.made
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(session.clone());
        Ok(session)
    }
}
