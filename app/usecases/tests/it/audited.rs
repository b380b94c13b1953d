//! The audit decorator over the real use cases and fake upstreams: one record per request,
//! chained; nothing reaches the upstream while the trail cannot be written (E011), and service
//! resumes when it can; a denial by the policy is recorded as one; no secret reaches a record.

use quarry_domain::{GENESIS_HASH, Secret, UpstreamAuth, verify_chain};
use quarry_ports::{AuditLog, Requester};
use quarry_testkit::fakes::{FakeAuditLog, FakeMetrics};
use quarry_usecases::{Accounts, Audited};

use super::*;

fn accounted(
    world: &World,
    trail: Option<Arc<FakeAuditLog>>,
    metrics: &Arc<FakeMetrics>,
) -> Audited {
    Audited::new(
        world.service.clone(),
        Accounts {
            trail: trail.map(|t| t as Arc<dyn AuditLog>),
            metrics: metrics.clone(),
            hasher: Arc::new(FakeHasher),
            clock: world.clock.clone(),
        },
        Principal::new("alice"),
        "stdio",
    )
}

fn audited(world: &World, log: &Arc<FakeAuditLog>) -> Audited {
    accounted(world, Some(log.clone()), &Arc::new(FakeMetrics::default()))
}

// traces: SR-005.1, SR-005.3, AU-1 — a listing, a read of a range and a failed read give one
// record each, in order, chained, with what each concerned and what came of it.
#[tokio::test]
async fn au_1_every_request_has_its_record_in_one_chain() {
    let world = world().await;
    let log = Arc::new(FakeAuditLog::default());
    let gateway = audited(&world, &log);
    gateway.list_resources(ListQuery::default()).await.unwrap();
    let request = ReadRequest {
        range: ByteRange::new(0, Some(5)).unwrap(),
        ..read(A)
    };
    gateway.read_resource(request.clone()).await.unwrap();
    gateway.read_resource(request).await.unwrap();
    let missing = gateway
        .read_resource(read("mcp://docs/file_3A///nothing.txt"))
        .await;
    assert!(missing.is_err());

    let entries = log.entries();
    let actions: Vec<_> = entries.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(actions, ["list", "read", "read", "read"]);
    let first_read = &entries[1];
    assert_eq!(first_read.agent, "alice");
    assert_eq!(first_read.transport, "stdio");
    assert_eq!(first_read.resource_uri.as_deref(), Some(A));
    assert_eq!(first_read.server.as_deref(), Some("docs"));
    assert_eq!(first_read.byte_range.as_deref(), Some("0-4"));
    assert_eq!(first_read.result, "ok");
    assert_eq!(first_read.bytes_returned, Some(5));
    assert_eq!(first_read.cache_status.as_deref(), Some("miss"));
    assert_eq!(entries[2].cache_status.as_deref(), Some("hit"));
    assert_eq!(entries[3].result, "error");
    assert!(entries[3].error_code.is_some());
    let ids: std::collections::BTreeSet<_> = entries.iter().map(|e| &e.correlation_id).collect();
    assert_eq!(ids.len(), 4, "one correlation id per request");
    let records = log.records(0, 100).await.unwrap();
    assert_eq!(
        verify_chain(&records, (0, GENESIS_HASH.into()), |b| FakeHasher.sha256(b)).map(|v| v.0),
        Ok(4)
    );
}

// traces: SR-005.4, AU-2 — while the trail cannot be written, every request is refused with
// E011 before it reaches the upstream; once it can, service resumes without a restart.
#[tokio::test]
async fn au_2_an_unwritable_trail_refuses_requests_before_the_upstream() {
    let world = world().await;
    let log = Arc::new(FakeAuditLog::default());
    let metrics = Arc::new(FakeMetrics::default());
    let gateway = accounted(&world, Some(log.clone()), &metrics);
    log.set_down(true);
    let reads = world.docs.reads.load(Ordering::SeqCst);
    for _ in 0..3 {
        let refused = gateway.read_resource(read(A)).await.unwrap_err();
        assert_eq!(refused.code(), ErrorCode::E011, "{refused}");
    }
    let refused = gateway
        .list_resources(ListQuery::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), ErrorCode::E011);
    assert_eq!(
        world.docs.reads.load(Ordering::SeqCst),
        reads,
        "a request reached the upstream with no record possible"
    );
    assert!(log.entries().is_empty());
    assert_eq!(
        metrics.audit_failures(),
        4,
        "the metric counts every refusal"
    );
    let refused: Vec<_> = metrics
        .requests()
        .iter()
        .map(|e| e.error_code.clone())
        .collect();
    assert_eq!(refused, vec![Some("E011".to_owned()); 4]);
    log.set_down(false);
    gateway.read_resource(read(A)).await.unwrap();
    assert_eq!(log.entries().len(), 1);
    assert_eq!(metrics.audit_failures(), 4);
    assert_eq!(metrics.requests().len(), 5);
}

// With the trail off, requests are still counted and timed, and nothing is refused for it.
#[tokio::test]
async fn requests_are_metered_with_the_trail_off() {
    let world = world().await;
    let metrics = Arc::new(FakeMetrics::default());
    let gateway = accounted(&world, None, &metrics);
    gateway.read_resource(read(A)).await.unwrap();
    gateway.read_resource(read(A)).await.unwrap();
    let seen = metrics.requests();
    let cache: Vec<_> = seen.iter().map(|e| e.cache_status.as_deref()).collect();
    assert_eq!(cache, [Some("miss"), Some("hit")]);
    assert!(
        seen.iter()
            .all(|e| e.action == "read" && e.server.as_deref() == Some("docs"))
    );
    assert!(
        seen.iter().all(|e| e.input_digest.is_empty()),
        "no digest is made for nobody"
    );
}

// traces: SR-005.2, AU-4 — a credential change is recorded with the server and the type of the
// credential, and neither the secret nor a digest of it.
#[tokio::test]
async fn au_4_a_credential_change_is_recorded_without_its_secret() {
    let world = world().await;
    let log = Arc::new(FakeAuditLog::default());
    let gateway = audited(&world, &log);
    let secret = "canary-9f8e7d6c5b4a";
    let outcome = gateway
        .configure_auth(
            ServerName::parse("docs").unwrap(),
            UpstreamAuth::Bearer {
                token: Secret::parse("token", secret.to_owned()).unwrap(),
            },
            false,
            Requester::Operator,
            None,
        )
        .await;
    let entries = log.entries();
    assert_eq!(entries.len(), 1, "{outcome:?}");
    assert_eq!(entries[0].action, "auth_configure");
    let text = serde_json::to_string(&log.records(0, 10).await.unwrap()).unwrap();
    assert!(!text.contains(secret), "{text}");
    let digest_of_secret = FakeHasher.sha256(secret.as_bytes()).hex();
    assert!(!text.contains(&digest_of_secret));
    assert_eq!(entries[0].server.as_deref(), Some("docs"));
    assert_ne!(entries[0].input_digest, digest_of_secret);
}

// traces: SR-005.1 — a record carries the request's ids from the transport and how many times
// its upstream call was retried (every connection refused: one try and three retries on the
// server's schedule, on tokio's paused clock).
#[tokio::test(start_paused = true)]
async fn a_record_carries_the_request_ids_and_its_retries() {
    let (service, attempts) =
        super::supervision::refusing(settings("docs"), quarry_usecases::Supervision::default());
    let log = Arc::new(FakeAuditLog::default());
    let audited = Audited::new(
        service,
        Accounts {
            trail: Some(log.clone()),
            metrics: Arc::new(FakeMetrics::default()),
            hasher: Arc::new(FakeHasher),
            clock: Arc::new(ManualClock::new()),
        },
        Principal::new("alice"),
        "stdio",
    );
    let gateway = Arc::new(audited).for_request(quarry_ports::RequestMeta {
        mcp_request_id: Some("42".into()),
        host_request_id: Some("host-7".into()),
        ..Default::default()
    });
    let failed = gateway.read_resource(read(A)).await.unwrap_err();
    assert_eq!(failed.code(), ErrorCode::E003, "{failed}");
    assert_eq!(attempts.load(Ordering::SeqCst), 4);
    let entries = log.entries();
    assert_eq!(entries[0].retry_count, 3, "{:?}", entries[0]);
    assert_eq!(entries[0].mcp_request_id.as_deref(), Some("42"));
    assert_eq!(entries[0].host_request_id.as_deref(), Some("host-7"));
}
