//! Listings across servers, cached apart from content, and the cache purge.

use super::*;

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
    assert_eq!(a.version.map(|v| v.to_string()).as_deref(), Some("v1"));
    assert_eq!(a.created_at, Some(w.clock.now()));
    let big = listed
        .resources
        .iter()
        .find(|r| r.uri.as_str() != A)
        .unwrap();
    assert_eq!(big.version, None, "never read, so no version yet");
}

// traces: REQ-071-011 — a page of a listing asks the version store for its own
// resources only, so its cost does not grow with everything the store holds for the server.
#[tokio::test]
async fn a_page_asks_the_version_store_for_its_own_resources_only() {
    let w = world().await;
    w.service.read_resource(read(A)).await.unwrap();
    w.service
        .read_resource(read("mcp://docs/file_3A///big.bin"))
        .await
        .ok();
    let page = |offset| ListQuery {
        server: Some(ServerSelector::new("docs").unwrap()),
        limit: quarry_domain::PageLimit::new(1).unwrap(),
        offset,
        ..ListQuery::default()
    };
    let first = w.service.list_resources(page(0)).await.unwrap();
    let second = w.service.list_resources(page(1)).await.unwrap();
    let asked = w.versions.summarised.lock().unwrap().clone();
    let listed = |l: &quarry_domain::ListResourcesResult| {
        l.resources
            .iter()
            .map(|r| r.uri.upstream().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(asked, [listed(&first), listed(&second)]);
    assert_ne!(listed(&first), listed(&second));
    let a = [first.resources, second.resources]
        .concat()
        .into_iter()
        .find(|r| r.uri.as_str() == A)
        .unwrap();
    assert_eq!(a.version.map(|v| v.to_string()).as_deref(), Some("v1"));
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

// traces: RC-7 — a hostile listing: duplicates (within the listing, as a looping cursor repeats
// pages) are listed once, a `lastModified` in the future cannot sort an entry to the top, and an
// upstream URI that could not be read back is left out rather than listed unreadable.
#[tokio::test]
async fn rc_7_duplicates_future_dates_and_unreadable_uris_are_tamed() {
    let entry = |uri: &str, days: i64| quarry_ports::UpstreamResource {
        uri: uri.into(),
        name: uri.into(),
        title: None,
        description: None,
        mime_type: None,
        size: None,
        last_modified: Some(ManualClock::new().now() + chrono::Duration::days(days)),
    };
    let docs = FakeSession::default();
    *docs.listing.lock().unwrap() = Some(vec![
        entry("file:///old", -30),
        entry("file:///newer", -1),
        entry("file:///old", -30),
        entry("file:///from-9999", 3_000_000),
        entry("file:///a/../b", 0),
        entry("file:///newer", -1),
    ]);
    let w = world_with(docs).await;
    let listed = w
        .service
        .list_resources(ListQuery {
            server: Some(ServerSelector::new("docs").unwrap()),
            ..ListQuery::default()
        })
        .await
        .unwrap();
    let uris: Vec<&str> = listed.resources.iter().map(|r| r.uri.upstream()).collect();
    assert_eq!(uris, ["file:///from-9999", "file:///newer", "file:///old"]);
    assert_eq!(listed.total_count, 3);
    assert_eq!(
        listed.resources[0].modified_at,
        Some(w.clock.now()),
        "a date in the future is taken as now"
    );
    assert_eq!(listed.servers[0].resource_count, 3);
}
