//! The credential store contract (see [`CredentialStore`]): sealed records come back exactly as
//! they were put, one per server, replaced by a later put, gone after a remove.

use chrono::TimeZone;
use quarry_domain::{AuthType, ServerId, ServerName};
use quarry_ports::{CredentialStore, SealIdentity, Sealed, StoredCredential};

/// A sealed-looking record for `server` (sample data: the bytes are not a real seal).
pub fn record(server: &str, auth_type: AuthType, fill: u8) -> StoredCredential {
    let name = ServerName::parse(server).unwrap();
    StoredCredential {
        identity: SealIdentity {
            server_id: ServerId::derive(&name),
            auth_type,
        },
        server: name,
        sealed: Sealed {
            key_id: "k-0011223344556677".into(),
            wrapped_key: vec![fill; 60],
            ciphertext: (0..=255).chain([0, fill]).collect(),
        },
        updated_at: chrono::Utc.timestamp_micros(1_700_000_000_123_456).unwrap(),
    }
}

/// Runs the contract against a fresh, empty store.
pub async fn check(store: impl CredentialStore) {
    let docs = ServerName::parse("docs").unwrap();
    assert_eq!(store.get(&docs).await.unwrap(), None);
    assert!(!store.remove(&docs).await.unwrap(), "nothing to remove");

    let first = record("docs", AuthType::ApiKey, 1);
    store.put(&first).await.unwrap();
    assert_eq!(store.get(&docs).await.unwrap(), Some(first.clone()));

    let other = record("wiki", AuthType::BearerToken, 2);
    store.put(&other).await.unwrap();
    let replaced = record("docs", AuthType::BearerToken, 3);
    store.put(&replaced).await.unwrap();
    assert_eq!(store.get(&docs).await.unwrap(), Some(replaced));
    assert_eq!(store.get(&other.server).await.unwrap(), Some(other.clone()));

    assert_eq!(
        store.all().await.unwrap(),
        [store.get(&docs).await.unwrap().unwrap(), other.clone()]
    );
    // A re-wrap applies only to the record it was computed from.
    let current = store.get(&docs).await.unwrap().unwrap();
    let rewrapped = record("docs", AuthType::BearerToken, 9).sealed;
    assert!(
        !store
            .replace_sealed(&docs, &first.sealed, &rewrapped)
            .await
            .unwrap()
    );
    assert_eq!(store.get(&docs).await.unwrap(), Some(current.clone()));
    assert!(
        store
            .replace_sealed(&docs, &current.sealed, &rewrapped)
            .await
            .unwrap()
    );
    assert_eq!(store.get(&docs).await.unwrap().unwrap().sealed, rewrapped);

    assert!(store.remove(&docs).await.unwrap());
    assert_eq!(store.get(&docs).await.unwrap(), None);
    assert!(!store.remove(&docs).await.unwrap());
    assert_eq!(store.get(&other.server).await.unwrap(), Some(other));
}
