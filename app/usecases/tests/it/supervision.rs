//! Upstream supervision: retries, backoff, the circuit breaker, the pool, health checks.

use std::sync::Mutex;

use quarry_ports::UpstreamSession;

use super::*;

/// A service over `docs` whose every connection attempt is refused, counting the attempts.
pub(crate) fn refusing(
    docs: ServerSettings,
    supervision: Supervision,
) -> (Arc<ResourceService>, Arc<AtomicU32>) {
    let attempts = Arc::new(AtomicU32::new(0));
    let seen = attempts.clone();
    let mut connector = MockUpstreamConnector::new();
    connector.expect_connect().returning(move |_, _, _, _| {
        seen.fetch_add(1, Ordering::SeqCst);
        Err(UpstreamError::Unreachable("connection refused".into()))
    });
    let service = ResourceService::new(
        vec![docs],
        ports(
            Arc::new(connector),
            Arc::new(FakeContentCache::new(1 << 20)),
            // Never reached: no connection, so no content to record.
            Arc::new(quarry_ports::MockVersionStore::new()),
            Arc::new(ManualClock::new()),
        ),
        ServiceOptions {
            supervision,
            ..options()
        },
    );
    (service, attempts)
}

// Reads retry a failed connection on the server's schedule (1 s, 2 s, 4 s), measured on tokio's
// paused clock rather than by sleeping.
#[tokio::test(start_paused = true)]
async fn reads_retry_a_dead_connection_on_the_configured_schedule() {
    let (service, attempts) = refusing(settings("docs"), Supervision::default());
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

pub(crate) fn service_with(
    connector: Arc<dyn UpstreamConnector>,
    store: Arc<dyn VersionStore>,
    supervision: Supervision,
) -> Arc<ResourceService> {
    ResourceService::new(
        vec![settings("docs")],
        ports(
            connector,
            Arc::new(FakeContentCache::new(1 << 20)),
            store,
            Arc::new(ManualClock::new()),
        ),
        ServiceOptions {
            supervision,
            ..options()
        },
    )
}

/// A service whose one server never answers, and the times it was tried.
fn always_down(jitter: f64) -> (Arc<ResourceService>, Arc<Mutex<Vec<tokio::time::Instant>>>) {
    let attempts: Arc<Mutex<Vec<tokio::time::Instant>>> = Arc::default();
    let seen = attempts.clone();
    let mut connector = MockUpstreamConnector::new();
    connector.expect_connect().returning(move |_, _, _, _| {
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
    // 120 s covers attempts at about 0, 1, 3, 7, 15, 31, 61 and 91 s even with every delay 20 %
    // longer: the gaps checked below really happened.
    assert!(times.len() >= 7, "only {} attempts in 120 s", times.len());
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
    let supervision = Supervision {
        jitter: 0.0,
        circuit_threshold: 3,
        ..Supervision::default()
    };
    let mut docs = settings("docs");
    docs.retry.attempts = 0;
    let (service, calls) = refusing(docs, supervision);
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
        let s = FakeSession {
            delay: Some(Duration::from_millis(20)),
            in_flight,
            max_in_flight: max,
            ..FakeSession::default()
        };
        s.set("file:///a.txt", text("héllo wörld"));
        s
    });
    let store = Arc::new(FakeVersionStore::new(Retention::default()));
    let service = service_with(connector.clone(), store, Supervision::default());
    for r in read_concurrently(&service, 200, fresh_a()).await {
        assert_eq!(r.content.as_deref(), Some("héllo wörld"));
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
    let connector = CountingConnector::new(docs_session);
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

// A session that replaces sessions which all died may have missed announcements: what is cached
// for the server is dropped. A session that only grows the pool drops nothing.
#[tokio::test]
async fn replacing_dead_sessions_drops_the_servers_cache() {
    let connector = CountingConnector::new(docs_session);
    let store = Arc::new(FakeVersionStore::new(Retention::default()));
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

// traces: RC-8 — a resource whose read hangs fails only its own request: a dozen concurrent reads
// of another resource on the same server succeed meanwhile, and however often it hangs the
// circuit stays closed (the session still answers a ping, so the timeout was about the resource).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rc_8_a_hanging_resource_fails_only_its_own_requests() {
    let docs = FakeSession::default();
    docs.hanging
        .lock()
        .unwrap()
        .insert("file:///hang".into(), Duration::from_millis(300));
    let w = world_with(docs).await;
    let hang = "mcp://docs/file_3A///hang";
    let stuck = {
        let service = w.service.clone();
        tokio::spawn(async move { service.read_resource(read(hang)).await })
    };
    while w.docs.reads.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    let started = std::time::Instant::now();
    for r in read_concurrently(&w.service, 12, fresh_a()).await {
        assert_eq!(r.content.as_deref(), Some("héllo wörld"));
    }
    assert!(
        started.elapsed() < Duration::from_millis(250),
        "the other reads did not wait behind the hanging one"
    );
    assert_eq!(stuck.await.unwrap().unwrap_err().code(), ErrorCode::E009);
    for _ in 0..7 {
        assert_eq!(
            w.service
                .read_resource(read(hang))
                .await
                .unwrap_err()
                .code(),
            ErrorCode::E009
        );
    }
    let after = w.service.read_resource(fresh_a()).await;
    assert!(after.is_ok(), "no circuit opened: {after:?}");
    let status = &w.service.servers_status()[0];
    assert_eq!(status.status, quarry_domain::ConnectionStatus::Connected);
}

// traces: AV-2, RC-8 — a read that kills its session is retried once, on a new session, and no
// more (retry_attempts = 3 notwithstanding: the request may be what kills it); the next read of
// another resource succeeds.
#[tokio::test]
async fn av_2_a_read_that_kills_its_session_is_retried_once() {
    let connector = CountingConnector::new(|| {
        let s = docs_session();
        s.deadly.lock().unwrap().push("file:///crash".into());
        s
    });
    let service = service_with(
        connector.clone(),
        Arc::new(FakeVersionStore::new(Retention::default())),
        Supervision::default(),
    );
    let err = service
        .read_resource(read("mcp://docs/file_3A///crash"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::E003);
    assert_eq!(connector.count(), 2, "one try, one retry on a new session");
    let fine = service.read_resource(read(A)).await.unwrap();
    assert_eq!(fine.content.as_deref(), Some("héllo wörld"));
}

// The whole read, retries and their delays included, stays within the server's timeout.
#[tokio::test(start_paused = true)]
async fn a_read_never_takes_longer_than_the_servers_timeout() {
    let mut docs = settings("docs");
    docs.spec.timeout = Duration::from_secs(2);
    let (service, calls) = refusing(docs, Supervision::default());
    let started = tokio::time::Instant::now();
    let err = service.read_resource(read(A)).await.unwrap_err();
    assert!(
        started.elapsed() <= Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        err.code(),
        ErrorCode::E003,
        "the last failure, once no retry fits: {err:?}"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "tried at 0 s and 1 s; 1 + 2 s would not fit"
    );
}
