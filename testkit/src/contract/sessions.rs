//! The session store contract (see [`SessionStore`]): records round trip with their
//! subscriptions, `open` replaces, what has no record changes nothing, `close` and `expire`
//! forget; and two handles on one backend see one another's writes.

use std::collections::BTreeSet;

use quarry_domain::Principal;
use quarry_ports::SessionStore;

use super::versions::at;

const INIT: &str =
    r#"{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}"#;

fn uris(of: &[&str]) -> BTreeSet<String> {
    of.iter().map(|u| (*u).to_owned()).collect()
}

/// Runs the contract against an empty store.
pub async fn check(store: impl SessionStore) {
    let alice = Principal::new("alice");
    assert_eq!(store.find("k1").await.unwrap(), None, "empty at first");
    store.open("k1", &alice, INIT, at(10)).await.unwrap();
    let found = store.find("k1").await.unwrap().expect("opened");
    assert_eq!(found.owner, alice);
    assert_eq!(found.initialize, INIT);
    assert!(found.subscriptions.is_empty());
    assert_eq!(found.last_used, at(10));

    // Subscriptions: a set; unsubscribing what is not there is no error.
    for uri in ["mcp://a/x", "mcp://b/y", "mcp://a/x"] {
        store.subscribe("k1", uri).await.unwrap();
    }
    store.unsubscribe("k1", "mcp://never").await.unwrap();
    let found = store.find("k1").await.unwrap().unwrap();
    assert_eq!(found.subscriptions, uris(&["mcp://a/x", "mcp://b/y"]));
    store.unsubscribe("k1", "mcp://b/y").await.unwrap();
    let found = store.find("k1").await.unwrap().unwrap();
    assert_eq!(found.subscriptions, uris(&["mcp://a/x"]));

    // Touch moves last use forward, never back.
    store.touch("k1", at(20)).await.unwrap();
    store.touch("k1", at(15)).await.unwrap();
    assert_eq!(store.find("k1").await.unwrap().unwrap().last_used, at(20));

    // Nothing is made for a key without a record.
    store.subscribe("ghost", "mcp://a/x").await.unwrap();
    store.touch("ghost", at(30)).await.unwrap();
    assert_eq!(store.find("ghost").await.unwrap(), None);
    store.close("ghost").await.unwrap();

    // Open replaces: a new owner, no subscriptions left over.
    let bob = Principal::new("bob");
    store.open("k1", &bob, "{}", at(40)).await.unwrap();
    let found = store.find("k1").await.unwrap().unwrap();
    assert_eq!(
        (found.owner, found.initialize.as_str()),
        (bob.clone(), "{}")
    );
    assert!(found.subscriptions.is_empty(), "{:?}", found.subscriptions);

    // Close forgets; a key opened again starts with no subscriptions.
    store.subscribe("k1", "mcp://a/x").await.unwrap();
    store.close("k1").await.unwrap();
    assert_eq!(store.find("k1").await.unwrap(), None);
    store.open("k1", &bob, "{}", at(41)).await.unwrap();
    assert!(
        store
            .find("k1")
            .await
            .unwrap()
            .unwrap()
            .subscriptions
            .is_empty(),
        "closing dropped the subscriptions"
    );

    // Expire forgets what was last used before the bound, and only that.
    store.open("old", &alice, INIT, at(50)).await.unwrap();
    store.subscribe("old", "mcp://a/x").await.unwrap();
    store.open("new", &alice, INIT, at(60)).await.unwrap();
    store.touch("k1", at(70)).await.unwrap();
    assert_eq!(store.expire(at(60)).await.unwrap(), 1, "only 'old'");
    assert_eq!(store.find("old").await.unwrap(), None);
    assert!(store.find("new").await.unwrap().is_some());
    assert!(store.find("k1").await.unwrap().is_some());
    store.open("old", &alice, INIT, at(80)).await.unwrap();
    assert!(
        store
            .find("old")
            .await
            .unwrap()
            .unwrap()
            .subscriptions
            .is_empty(),
        "expiring dropped the subscriptions"
    );
}

/// Two handles on one backend (two replicas): what one writes the other reads.
pub async fn check_shared(one: impl SessionStore, two: impl SessionStore) {
    let alice = Principal::new("alice");
    one.open("shared", &alice, INIT, at(1)).await.unwrap();
    one.subscribe("shared", "mcp://a/x").await.unwrap();
    let seen = two
        .find("shared")
        .await
        .unwrap()
        .expect("the other handle sees it");
    assert_eq!(seen.owner, alice);
    assert_eq!(seen.subscriptions, uris(&["mcp://a/x"]));
    two.subscribe("shared", "mcp://b/y").await.unwrap();
    two.touch("shared", at(5)).await.unwrap();
    let back = one.find("shared").await.unwrap().unwrap();
    assert_eq!(back.subscriptions, uris(&["mcp://a/x", "mcp://b/y"]));
    assert_eq!(back.last_used, at(5));
    two.close("shared").await.unwrap();
    assert_eq!(one.find("shared").await.unwrap(), None);
}
