use std::collections::HashMap;

use proptest::prelude::*;

use super::*;

fn key(uri: &str) -> ResourceKey {
    ResourceKey::new(ServerName::parse("docs").unwrap(), uri)
}

fn text(t: &str) -> Content {
    Content {
        mime_type: Some("text/plain".into()),
        body: Body::Text(t.into()),
    }
}

fn digest_of(t: &str) -> Digest {
    // Any injective stand-in works for the store; the app hashes with SHA-256.
    let mut d = [0u8; 32];
    for (i, b) in t.bytes().enumerate() {
        d[i % 32] ^= b.wrapping_add(i as u8);
    }
    d[31] = t.len() as u8;
    Digest::new(d)
}

fn at(secs: i64) -> Timestamp {
    Utc.timestamp_opt(1_800_000_000 + secs, 0).unwrap()
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

// traces: SR-001.1, SR-001.3, SR-001.4
#[tokio::test]
async fn a_new_digest_is_the_next_version_and_an_old_one_maps_back() {
    let store = SqliteStore::in_memory(Retention::default()).await.unwrap();
    let k = key("file:///a");
    let v1 = store
        .record(&k, digest_of("one"), &text("one"), at(0))
        .await
        .unwrap();
    assert_eq!((v1.version.version.as_str(), v1.is_new), ("v1", true));
    let again = store
        .record(&k, digest_of("one"), &text("one"), at(5))
        .await
        .unwrap();
    assert_eq!(
        (again.version.version.as_str(), again.is_new),
        ("v1", false)
    );
    assert_eq!(
        again.version.created_at,
        at(0),
        "a version keeps its first sighting"
    );
    let v2 = store
        .record(&k, digest_of("two"), &text("two"), at(10))
        .await
        .unwrap();
    assert_eq!((v2.version.version.as_str(), v2.is_new), ("v2", true));
    assert_eq!(v2.version.checksum, digest_of("two").checksum());
    let back = store
        .record(&k, digest_of("one"), &text("one"), at(20))
        .await
        .unwrap();
    assert_eq!((back.version.version.as_str(), back.is_new), ("v1", false));

    let history = store.history(&k).await.unwrap();
    assert_eq!(
        history
            .iter()
            .map(|v| v.version.as_str())
            .collect::<Vec<_>>(),
        ["v1", "v2"]
    );
    let summary = store
        .summaries(&ServerName::parse("docs").unwrap())
        .await
        .unwrap();
    assert_eq!(summary.len(), 1);
    assert_eq!(
        summary[0].latest, "v1",
        "the latest is the most recently seen"
    );
    assert_eq!(summary[0].first_seen, at(0));
    // Another resource has its own numbering.
    let other = store
        .record(&key("file:///b"), digest_of("two"), &text("two"), at(30))
        .await
        .unwrap();
    assert_eq!(other.version.version, "v1");
}

// traces: REQ-071-024, SR-001.2 — by number and by etag.
#[tokio::test]
async fn versions_are_found_by_number_or_etag_with_their_content() {
    let store = SqliteStore::in_memory(Retention::default()).await.unwrap();
    let k = key("file:///a");
    store
        .record(&k, digest_of("one"), &text("one"), at(0))
        .await
        .unwrap();
    let blob = Content {
        mime_type: None,
        body: Body::Blob(vec![0, 159, 255]),
    };
    store
        .record(&k, digest_of("bin"), &blob, at(1))
        .await
        .unwrap();
    let (v, content) = store
        .find(&k, &VersionSelector::Number(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(v.version, "v1");
    assert_eq!(content, Some(text("one")));
    let (v, content) = store
        .find(&k, &VersionSelector::Etag(digest_of("bin").etag()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(v.version, "v2");
    assert_eq!(content, Some(blob), "binary comes back byte for byte");
    assert!(
        store
            .find(&k, &VersionSelector::Number(3))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .find(&key("file:///x"), &VersionSelector::Number(1))
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn retention_drops_old_content_and_keeps_metadata() {
    let store = SqliteStore::in_memory(Retention {
        count: 2,
        bytes: 1 << 20,
    })
    .await
    .unwrap();
    let k = key("file:///a");
    for (i, t) in ["one", "two", "three"].iter().enumerate() {
        store
            .record(&k, digest_of(t), &text(t), at(i as i64))
            .await
            .unwrap();
    }
    let (_, old) = store
        .find(&k, &VersionSelector::Number(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(old, None);
    assert!(
        store
            .find(&k, &VersionSelector::Number(2))
            .await
            .unwrap()
            .unwrap()
            .1
            .is_some()
    );
    assert_eq!(store.history(&k).await.unwrap().len(), 3);
    // Seeing v1's content again brings it back.
    store
        .record(&k, digest_of("one"), &text("one"), at(9))
        .await
        .unwrap();
    assert_eq!(
        store
            .find(&k, &VersionSelector::Number(1))
            .await
            .unwrap()
            .unwrap()
            .1,
        Some(text("one"))
    );

    let tight = SqliteStore::in_memory(Retention {
        count: 10,
        bytes: 4,
    })
    .await
    .unwrap();
    tight
        .record(&k, digest_of("abc"), &text("abc"), at(0))
        .await
        .unwrap();
    tight
        .record(&k, digest_of("defg"), &text("defg"), at(1))
        .await
        .unwrap();
    assert_eq!(
        tight
            .find(&k, &VersionSelector::Number(1))
            .await
            .unwrap()
            .unwrap()
            .1,
        None
    );
    assert!(
        tight
            .find(&k, &VersionSelector::Number(2))
            .await
            .unwrap()
            .unwrap()
            .1
            .is_some()
    );
}

#[tokio::test]
async fn history_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/quarry.db");
    let store = SqliteStore::open(&path, Retention::default())
        .await
        .unwrap();
    store
        .record(&key("file:///a"), digest_of("one"), &text("one"), at(0))
        .await
        .unwrap();
    store.close().await;
    let reopened = SqliteStore::open(&path, Retention::default())
        .await
        .unwrap();
    assert_eq!(reopened.history(&key("file:///a")).await.unwrap().len(), 1);
    let v = reopened
        .record(&key("file:///a"), digest_of("two"), &text("two"), at(1))
        .await
        .unwrap();
    assert_eq!(v.version.version, "v2");
}

#[tokio::test]
async fn concurrent_recorders_never_share_a_number() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("q.db"), Retention::default())
        .await
        .unwrap();
    let k = key("file:///a");
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let store = store.clone();
            let k = k.clone();
            tokio::spawn(async move {
                let t = format!("content {i}");
                store
                    .record(&k, digest_of(&t), &text(&t), at(i))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut numbers = Vec::new();
    for t in tasks {
        numbers.push(t.await.unwrap().version.version);
    }
    numbers.sort();
    numbers.dedup();
    assert_eq!(numbers.len(), 20);
    assert_eq!(store.history(&k).await.unwrap().len(), 20);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    // Version numbers are monotonic in order of first sighting and a digest maps to one version.
    #[test]
    fn numbers_grow_and_each_digest_has_one_version(seq in proptest::collection::vec(0u8..6, 1..30)) {
        block_on(async {
            let store = SqliteStore::in_memory(Retention::default()).await.unwrap();
            let k = key("file:///p");
            let mut assigned: HashMap<u8, String> = HashMap::new();
            for (i, d) in seq.iter().enumerate() {
                let t = format!("content-{d}");
                let r = store.record(&k, digest_of(&t), &text(&t), at(i as i64)).await.unwrap();
                let expected_new = !assigned.contains_key(d);
                prop_assert_eq!(r.is_new, expected_new);
                if expected_new {
                    prop_assert_eq!(r.version.version.clone(), format!("v{}", assigned.len() + 1));
                    assigned.insert(*d, r.version.version.clone());
                } else {
                    prop_assert_eq!(&r.version.version, &assigned[d]);
                }
            }
            prop_assert_eq!(store.history(&k).await.unwrap().len(), assigned.len());
            Ok(())
        })?;
    }
}

mod registry {
    use std::{collections::BTreeMap, time::Duration};

    use quarry_domain::{Endpoint, ServerName, ServerSpec};
    use quarry_ports::{IdempotencyStore, RegisteredServer, Remembered, ServerRegistry};

    use super::*;

    fn stdio(name: &str) -> RegisteredServer {
        let mut spec = ServerSpec::new(
            ServerName::parse(name).unwrap(),
            Endpoint::Stdio {
                command: "node".into(),
                args: vec!["server.js".into(), "--flag".into()],
                env: BTreeMap::from([("MODE".into(), "test".into())]),
                cwd: Some("/tmp".into()),
            },
        );
        spec.timeout = Duration::from_millis(2500);
        RegisteredServer {
            spec,
            retry_attempts: 2,
            retry_delay: Duration::from_millis(500),
            pool_size: 3,
        }
    }

    #[tokio::test]
    async fn servers_round_trip_and_every_change_bumps_the_generation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        let store = SqliteStore::open(&path, Retention::default())
            .await
            .unwrap();
        let g0 = store.generation().await.unwrap();
        let a = stdio("alpha");
        let b = RegisteredServer {
            spec: ServerSpec::new(
                ServerName::parse("beta").unwrap(),
                Endpoint::Http {
                    url: "https://mcp.example.com/mcp".into(),
                },
            ),
            retry_attempts: 3,
            retry_delay: Duration::from_secs(1),
            pool_size: 10,
        };
        store.save(&a, at(0)).await.unwrap();
        store.save(&b, at(1)).await.unwrap();
        let g2 = store.generation().await.unwrap();
        assert_eq!(g2, g0 + 2);
        store.close().await;
        let reopened = SqliteStore::open(&path, Retention::default())
            .await
            .unwrap();
        assert_eq!(
            reopened.servers().await.unwrap(),
            vec![a.clone(), b.clone()],
            "survives a restart"
        );
        assert!(reopened.delete(&a.spec.name).await.unwrap());
        assert!(!reopened.delete(&a.spec.name).await.unwrap());
        assert_eq!(
            reopened.generation().await.unwrap(),
            g2 + 1,
            "only a real change bumps it"
        );
        assert_eq!(reopened.servers().await.unwrap(), vec![b]);
    }

    #[tokio::test]
    async fn the_first_result_under_a_key_stands() {
        let store = SqliteStore::in_memory(Retention::default()).await.unwrap();
        assert_eq!(store.recall("tool", "k").await.unwrap(), None);
        let first = Remembered {
            payload_digest: "d1".into(),
            result: "{\"n\":1}".into(),
        };
        store
            .remember("tool", "k", first.clone(), at(0))
            .await
            .unwrap();
        store
            .remember(
                "tool",
                "k",
                Remembered {
                    payload_digest: "d2".into(),
                    result: "{}".into(),
                },
                at(1),
            )
            .await
            .unwrap();
        assert_eq!(store.recall("tool", "k").await.unwrap(), Some(first));
        assert_eq!(
            store.recall("other", "k").await.unwrap(),
            None,
            "keys are per tool"
        );
    }
}
