//! Idempotency keys: one run per key, replays of the first result, conflicts for other payloads,
//! and keys freed when their mutation fails.

use quarry_domain::IdempotencyKey;

use super::*;

fn key(k: &str) -> Option<IdempotencyKey> {
    Some(IdempotencyKey::parse(k).unwrap())
}

#[tokio::test]
async fn a_repeated_purge_replays_its_first_result_and_another_payload_conflicts() {
    let w = world().await;
    w.service.read_resource(read(A)).await.unwrap();
    let docs = Some(ServerName::parse("docs").unwrap());
    let first = w
        .service
        .purge(docs.clone(), None, key("p-1"))
        .await
        .unwrap();
    assert_eq!(first.contents, 1);
    w.service.read_resource(read(A)).await.unwrap();
    let again = w.service.purge(docs, None, key("p-1")).await.unwrap();
    assert_eq!(again, first, "replayed, not run again");
    assert!(
        w.service.read_resource(read(A)).await.unwrap().cached,
        "the replay purged nothing"
    );
    let other = w.service.purge(None, None, key("p-1")).await.unwrap_err();
    assert_eq!(other.code(), ErrorCode::E010);
}

#[tokio::test]
async fn a_failed_mutation_frees_its_key() {
    let w = world().await;
    let ghost = Some(ServerName::parse("ghost").unwrap());
    let failed = w.service.purge(ghost, None, key("p-2")).await.unwrap_err();
    assert_eq!(failed.code(), ErrorCode::E003);
    let docs = Some(ServerName::parse("docs").unwrap());
    w.service
        .purge(docs, None, key("p-2"))
        .await
        .expect("the key is free again, even for other arguments");
}

#[tokio::test]
async fn concurrent_calls_with_one_key_run_once() {
    let w = Arc::new(world().await);
    w.service.read_resource(read(A)).await.unwrap();
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let w = w.clone();
            tokio::spawn(async move { w.service.purge(None, None, key("p-3")).await.unwrap() })
        })
        .collect();
    let mut reports = Vec::new();
    for c in calls {
        reports.push(c.await.unwrap());
    }
    assert!(reports.iter().all(|r| *r == reports[0]), "{reports:?}");
    assert_eq!(reports[0].contents, 1, "the one run purged the one entry");
}
