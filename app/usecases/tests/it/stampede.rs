//! Stampedes: concurrent misses for one content (per principal) or one server's listing reach the
//! upstream once; a caller that gives up does not cancel the shared call for the others.

use std::sync::atomic::Ordering;

use super::*;

fn slow_docs() -> FakeSession {
    FakeSession {
        delay: Some(Duration::from_millis(50)),
        ..FakeSession::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_misses_of_one_resource_share_one_upstream_read() {
    let w = world_with(slow_docs()).await;
    for result in read_concurrently(&w.service, 50, read(A)).await {
        assert_eq!(result.content.as_deref(), Some("héllo wörld"));
        assert_eq!(result.version.unwrap().version, "v1");
    }
    assert_eq!(
        w.docs.reads.load(Ordering::SeqCst),
        1,
        "one upstream read for 50 misses"
    );
    assert!(
        w.service.read_resource(read(A)).await.unwrap().cached,
        "and it was cached once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_misses_of_one_listing_share_one_listing() {
    let w = world().await;
    let docs = || ListQuery {
        server: Some(ServerSelector::new("docs").unwrap()),
        ..ListQuery::default()
    };
    let lists: Vec<_> = (0..20)
        .map(|_| {
            let service = w.service.clone();
            tokio::spawn(async move { service.list_resources(docs()).await })
        })
        .collect();
    for l in lists {
        assert_eq!(l.await.unwrap().unwrap().total_count, 2);
    }
    assert_eq!(w.docs.lists.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_gives_up_does_not_cancel_the_shared_read() {
    let w = world_with(slow_docs()).await;
    let first = {
        let service = w.service.clone();
        tokio::spawn(async move { service.read_resource(read(A)).await })
    };
    while w.docs.reads.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    let second = {
        let service = w.service.clone();
        tokio::spawn(async move { service.read_resource(read(A)).await })
    };
    first.abort();
    let result = second.await.unwrap().unwrap();
    assert_eq!(result.content.as_deref(), Some("héllo wörld"));
    assert_eq!(
        w.docs.reads.load(Ordering::SeqCst),
        1,
        "the second joined the first's read"
    );
}

// A read that bypasses the cache wants the upstream's content as of now: it never joins a read
// that started earlier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bypassing_reads_are_not_shared() {
    let w = world_with(slow_docs()).await;
    read_concurrently(&w.service, 5, fresh_a()).await;
    assert_eq!(w.docs.reads.load(Ordering::SeqCst), 5);
}
