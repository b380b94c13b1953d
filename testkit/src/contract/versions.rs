//! The version store contract (see [`VersionStore`]): numbering, digests mapping back,
//! lookups by number and etag, retention, concurrent recorders, summaries.

use std::{collections::HashMap, future::Future};

use chrono::TimeZone;
use proptest::{
    prop_assert_eq,
    test_runner::{Config as ProptestConfig, TestRunner},
};
use quarry_domain::{
    Body, Content, Digest, Retention, ServerName, Timestamp, VersionNumber, VersionSelector,
};
use quarry_ports::{ResourceKey, VersionStore};

/// Makes a fresh, empty store with the given retention.
pub trait Maker<S>: Sync {
    /// A new empty store.
    fn make(&self, retention: Retention) -> impl Future<Output = S> + Send;
}

impl<S, F, Fut> Maker<S> for F
where
    F: Fn(Retention) -> Fut + Sync,
    Fut: Future<Output = S> + Send,
{
    fn make(&self, retention: Retention) -> impl Future<Output = S> + Send {
        self(retention)
    }
}

/// Runs every async check of the contract against stores made by `make`.
pub async fn check<S: VersionStore + 'static>(make: impl Maker<S>) {
    a_new_digest_is_the_next_version_and_an_old_one_maps_back(&make).await;
    versions_are_found_by_number_or_etag_with_their_content(&make).await;
    retention_drops_old_content_and_keeps_metadata(&make).await;
    concurrent_recorders_never_share_a_number(&make).await;
}

/// A resource of server `docs` (sample data for store tests).
pub fn key(uri: &str) -> ResourceKey {
    ResourceKey::new(ServerName::parse("docs").unwrap(), uri)
}

/// Plain-text content.
pub fn text(t: &str) -> Content {
    Content {
        mime_type: Some("text/plain".into()),
        body: Body::Text(t.into()),
    }
}

fn n(v: u32) -> VersionNumber {
    VersionNumber::new(v).unwrap()
}

/// A stand-in digest of `t`: any injective one works for a store; the gateway hashes with
/// SHA-256.
pub fn digest_of(t: &str) -> Digest {
    let mut d = [0u8; 32];
    for (i, b) in t.bytes().enumerate() {
        d[i % 32] ^= b.wrapping_add(i as u8);
    }
    d[31] = t.len() as u8;
    Digest::new(d)
}

/// A fixed instant plus `secs`.
pub fn at(secs: i64) -> Timestamp {
    chrono::Utc.timestamp_opt(1_800_000_000 + secs, 0).unwrap()
}

fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

// traces: SR-001.1, SR-001.3, SR-001.4
async fn a_new_digest_is_the_next_version_and_an_old_one_maps_back<S: VersionStore>(
    make: &impl Maker<S>,
) {
    let store = make.make(Retention::default()).await;
    let k = key("file:///a");
    let v1 = store
        .record(&k, digest_of("one"), &text("one"), at(0))
        .await
        .unwrap();
    assert_eq!(
        (v1.version.version.to_string().as_str(), v1.is_new),
        ("v1", true)
    );
    let again = store
        .record(&k, digest_of("one"), &text("one"), at(5))
        .await
        .unwrap();
    assert_eq!(
        (again.version.version.to_string().as_str(), again.is_new),
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
    assert_eq!(
        (v2.version.version.to_string().as_str(), v2.is_new),
        ("v2", true)
    );
    assert_eq!(v2.version.checksum, digest_of("two").checksum());
    let back = store
        .record(&k, digest_of("one"), &text("one"), at(20))
        .await
        .unwrap();
    assert_eq!(
        (back.version.version.to_string().as_str(), back.is_new),
        ("v1", false)
    );

    let history = store.history(&k).await.unwrap();
    assert_eq!(
        history
            .iter()
            .map(|v| v.version.to_string())
            .collect::<Vec<_>>(),
        ["v1", "v2"]
    );
    let docs = ServerName::parse("docs").unwrap();
    let asked = |uris: &[&str]| uris.iter().map(|u| (*u).to_owned()).collect::<Vec<_>>();
    let summary = store
        .summaries(&docs, &asked(&["file:///a", "file:///never-read"]))
        .await
        .unwrap();
    assert_eq!(summary.len(), 1, "a URI without versions is left out");
    assert_eq!(summary[0].upstream_uri, "file:///a");
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
    // Only the URIs asked for are summarised.
    let only_b = store
        .summaries(&docs, &asked(&["file:///b"]))
        .await
        .unwrap();
    assert_eq!(
        only_b
            .iter()
            .map(|s| (s.upstream_uri.as_str(), s.first_seen))
            .collect::<Vec<_>>(),
        [("file:///b", at(30))]
    );
    let both = store
        .summaries(&docs, &asked(&["file:///a", "file:///b"]))
        .await
        .unwrap();
    assert_eq!(both.len(), 2);
    assert!(store.summaries(&docs, &[]).await.unwrap().is_empty());
}

// traces: REQ-071-024, SR-001.2 — by number and by etag.
async fn versions_are_found_by_number_or_etag_with_their_content<S: VersionStore>(
    make: &impl Maker<S>,
) {
    let store = make.make(Retention::default()).await;
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
        .find(&k, &VersionSelector::Number(n(1)))
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
            .find(&k, &VersionSelector::Number(n(3)))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .find(&key("file:///x"), &VersionSelector::Number(n(1)))
            .await
            .unwrap()
            .is_none()
    );
}

async fn retention_drops_old_content_and_keeps_metadata<S: VersionStore>(make: &impl Maker<S>) {
    let store = make
        .make(Retention {
            count: 2,
            bytes: 1 << 20,
        })
        .await;
    let k = key("file:///a");
    for (i, t) in ["one", "two", "three"].iter().enumerate() {
        store
            .record(&k, digest_of(t), &text(t), at(i as i64))
            .await
            .unwrap();
    }
    let (_, old) = store
        .find(&k, &VersionSelector::Number(n(1)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(old, None);
    assert!(
        store
            .find(&k, &VersionSelector::Number(n(2)))
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
            .find(&k, &VersionSelector::Number(n(1)))
            .await
            .unwrap()
            .unwrap()
            .1,
        Some(text("one"))
    );

    let tight = make
        .make(Retention {
            count: 10,
            bytes: 4,
        })
        .await;
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
            .find(&k, &VersionSelector::Number(n(1)))
            .await
            .unwrap()
            .unwrap()
            .1,
        None
    );
    assert!(
        tight
            .find(&k, &VersionSelector::Number(n(2)))
            .await
            .unwrap()
            .unwrap()
            .1
            .is_some()
    );
}

async fn concurrent_recorders_never_share_a_number<S: VersionStore + 'static>(
    make: &impl Maker<S>,
) {
    let store = std::sync::Arc::new(make.make(Retention::default()).await);
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

/// Version numbers are monotonic in order of first sighting and a digest maps to one version,
/// over 48 generated sequences of sightings. Runs its own runtime: call it from a plain `#[test]`.
pub fn check_numbering_property<S: VersionStore>(make: impl Maker<S>) {
    let mut runner = TestRunner::new(ProptestConfig::with_cases(48));
    let outcome = runner.run(&proptest::collection::vec(0u8..6, 1..30), |seq| {
        block_on(async {
            let store = make.make(Retention::default()).await;
            let k = key("file:///p");
            let mut assigned: HashMap<u8, VersionNumber> = HashMap::new();
            for (i, d) in seq.iter().enumerate() {
                let t = format!("content-{d}");
                let r = store
                    .record(&k, digest_of(&t), &text(&t), at(i as i64))
                    .await
                    .unwrap();
                let expected_new = !assigned.contains_key(d);
                prop_assert_eq!(r.is_new, expected_new);
                if expected_new {
                    prop_assert_eq!(
                        r.version.version.to_string(),
                        format!("v{}", assigned.len() + 1)
                    );
                    assigned.insert(*d, r.version.version);
                } else {
                    prop_assert_eq!(&r.version.version, &assigned[d]);
                }
            }
            prop_assert_eq!(store.history(&k).await.unwrap().len(), assigned.len());
            Ok(())
        })
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
}
