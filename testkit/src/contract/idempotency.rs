//! The idempotency store contract (see [`IdempotencyStore`]): first writer wins, pending holders
//! are waited for, results replay forever, other payloads conflict, released and stale keys are
//! free again, and scopes are apart.

use std::{sync::Arc, time::Duration};

use chrono::TimeZone;
use quarry_domain::{IdempotencyKey, Timestamp};
use quarry_ports::{IdempotencyStore, Remembered, Reservation};

fn at(secs: i64) -> Timestamp {
    chrono::Utc.timestamp_opt(1_800_000_000 + secs, 0).unwrap()
}

fn key(k: &str) -> IdempotencyKey {
    IdempotencyKey::parse(k).unwrap()
}

const HOUR: Duration = Duration::from_secs(3600);

/// Runs the contract against an empty store.
pub async fn check(store: impl IdempotencyStore + 'static) {
    let store: Arc<dyn IdempotencyStore> = Arc::new(store);
    check_shared(store.clone(), store).await;
}

/// Runs the contract against two handles on one empty store (two processes on one file, two
/// replicas on one database): what one reserves, the other sees.
pub async fn check_shared(one: Arc<dyn IdempotencyStore>, two: Arc<dyn IdempotencyStore>) {
    let k = key("k-1");
    assert_eq!(
        one.reserve("tool", &k, "d1", at(0), HOUR).await.unwrap(),
        Reservation::Granted
    );
    assert_eq!(
        two.reserve("tool", &k, "d1", at(1), HOUR).await.unwrap(),
        Reservation::Pending
    );
    assert_eq!(
        two.reserve("tool", &k, "d2", at(1), HOUR).await.unwrap(),
        Reservation::Conflict {
            payload_digest: "d1".into()
        }
    );
    one.complete("tool", &k, "{\"n\":1}", at(2)).await.unwrap();
    let done = Reservation::Done(Remembered {
        payload_digest: "d1".into(),
        result: "{\"n\":1}".into(),
    });
    assert_eq!(
        two.reserve("tool", &k, "d1", at(3), HOUR).await.unwrap(),
        done
    );
    assert_eq!(
        one.reserve("tool", &k, "d1", at(999_999), Duration::ZERO)
            .await
            .unwrap(),
        done,
        "a result replays forever, whatever the staleness bound"
    );
    two.complete("tool", &k, "{\"n\":2}", at(4)).await.unwrap();
    assert_eq!(
        one.reserve("tool", &k, "d1", at(5), HOUR).await.unwrap(),
        done,
        "the first result stands"
    );
    two.release("tool", &k).await.unwrap();
    assert_eq!(
        one.reserve("tool", &k, "d1", at(6), HOUR).await.unwrap(),
        done,
        "release frees only a pending key"
    );

    assert_eq!(
        two.reserve("other", &k, "d9", at(0), HOUR).await.unwrap(),
        Reservation::Granted,
        "keys are per scope"
    );

    let failed = key("k-failed");
    assert_eq!(
        one.reserve("tool", &failed, "d", at(0), HOUR)
            .await
            .unwrap(),
        Reservation::Granted
    );
    one.release("tool", &failed).await.unwrap();
    assert_eq!(
        two.reserve("tool", &failed, "other", at(1), HOUR)
            .await
            .unwrap(),
        Reservation::Granted,
        "a released key is free, for any payload"
    );

    let dead = key("k-dead");
    assert_eq!(
        one.reserve("tool", &dead, "d", at(0), Duration::from_secs(60))
            .await
            .unwrap(),
        Reservation::Granted
    );
    assert_eq!(
        two.reserve("tool", &dead, "d", at(59), Duration::from_secs(60))
            .await
            .unwrap(),
        Reservation::Pending
    );
    assert_eq!(
        two.reserve("tool", &dead, "d", at(61), Duration::from_secs(60))
            .await
            .unwrap(),
        Reservation::Granted,
        "a holder that never finished is taken over once stale"
    );

    // Of many concurrent reservations of one fresh key, exactly one is granted.
    let race = key("k-race");
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let store = if i % 2 == 0 { one.clone() } else { two.clone() };
            let race = race.clone();
            tokio::spawn(async move {
                store
                    .reserve("tool", &race, "d", at(0), HOUR)
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut granted = 0;
    for t in tasks {
        match t.await.unwrap() {
            Reservation::Granted => granted += 1,
            Reservation::Pending => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(granted, 1, "first writer wins");
}
