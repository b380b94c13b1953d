//! The ports' contracts against a real PostgreSQL, each store in a schema of its own (removed
//! when the test ends), and what only a shared store shows: several pools on one schema, as
//! several replicas are.

use std::sync::{Arc, Mutex};

use quarry_domain::Retention;
use quarry_testkit::{contract, services};

use super::*;

/// The schemas a test made, which go when it ends (even when it fails).
#[derive(Default)]
struct Schemas(Mutex<Vec<PostgresTarget>>);

impl Schemas {
    /// A store in a new schema, or in `schema` when given (a second replica on it).
    async fn store(&self, schema: Option<&str>, retention: Retention) -> PostgresStore {
        let target = PostgresTarget {
            url: services::postgres_url(),
            schema: schema.map_or_else(|| services::unique_name("quarry_test"), str::to_owned),
        };
        let store = PostgresStore::connect(&target, retention, 4)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL for the tests ({target:?}): {e}"));
        self.0.lock().unwrap().push(target);
        store
    }
}

impl Drop for Schemas {
    fn drop(&mut self) {
        let targets = std::mem::take(&mut *self.0.lock().unwrap());
        // A runtime and connections of their own: the test's runtime is blocked here.
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                for target in targets {
                    if let Err(e) = PostgresStore::drop_schema(&target).await {
                        eprintln!("could not drop the test schema {}: {e}", target.schema);
                    }
                }
            });
        })
        .join()
        .unwrap();
    }
}

#[tokio::test]
async fn the_postgres_store_keeps_the_version_store_contract() {
    let schemas = Arc::new(Schemas::default());
    let made = schemas.clone();
    contract::versions::check(move |retention| {
        let made = made.clone();
        async move { made.store(None, retention).await }
    })
    .await;
}

#[test]
fn the_postgres_store_numbers_versions_as_the_contract_says() {
    let schemas = Schemas::default();
    contract::versions::check_numbering_property(|retention| schemas.store(None, retention));
}

#[tokio::test]
async fn the_postgres_store_keeps_the_registry_and_vault_contracts() {
    let schemas = Schemas::default();
    contract::registry::check(schemas.store(None, Retention::default()).await).await;
    contract::vault::check(schemas.store(None, Retention::default()).await).await;
}

#[tokio::test]
async fn the_postgres_store_keeps_the_idempotency_contract_across_replicas() {
    let schemas = Schemas::default();
    contract::idempotency::check(schemas.store(None, Retention::default()).await).await;
    let one = schemas.store(None, Retention::default()).await;
    let two = schemas.store(Some(&one.schema), Retention::default()).await;
    contract::idempotency::check_shared(Arc::new(one), Arc::new(two)).await;
}

#[tokio::test]
async fn the_postgres_store_keeps_the_session_contract_across_replicas() {
    let schemas = Schemas::default();
    contract::sessions::check(schemas.store(None, Retention::default()).await).await;
    let one = schemas.store(None, Retention::default()).await;
    let two = schemas.store(Some(&one.schema), Retention::default()).await;
    contract::sessions::check_shared(one, two).await;
}

#[tokio::test]
async fn the_postgres_audit_trail_is_one_chain_with_several_writers() {
    let schemas = Schemas::default();
    let hasher: Arc<dyn quarry_ports::ContentHasher> = Arc::new(quarry_testkit::fakes::FakeHasher);
    contract::audit::check(
        PostgresAudit::new(
            schemas.store(None, Retention::default()).await,
            hasher.clone(),
        ),
        hasher.as_ref(),
    )
    .await;
    let one = schemas.store(None, Retention::default()).await;
    let two = schemas.store(Some(&one.schema), Retention::default()).await;
    contract::audit::check_concurrent(
        vec![
            Arc::new(PostgresAudit::new(one, hasher.clone())),
            Arc::new(PostgresAudit::new(two, hasher.clone())),
        ],
        hasher.as_ref(),
    )
    .await;
}

/// Seeing the latest content again writes nothing and takes no lock: it is answered while
/// another replica holds the resource's recording lock, where a new content waits for it.
#[tokio::test]
async fn an_unchanged_sighting_takes_no_lock() {
    use contract::versions::{at, digest_of, key, text};
    use quarry_ports::VersionStore;
    let schemas = Schemas::default();
    let store = schemas.store(None, Retention::default()).await;
    let k = key("file:///a");
    let first = store
        .record(&k, digest_of("one"), &text("one"), at(0))
        .await
        .unwrap();
    // Another replica is recording this resource: it holds its advisory lock.
    let mut other = store.pool.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1 || chr(10) || $2, 0))")
        .bind(k.server.as_str())
        .bind(&k.upstream_uri)
        .execute(&mut *other)
        .await
        .unwrap();
    let again = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        store.record(&k, digest_of("one"), &text("one"), at(1)),
    )
    .await
    .expect("an unchanged sighting waited for the recording lock")
    .unwrap();
    assert_eq!(again.version, first.version);
    assert!(!again.is_new);
    assert!(
        tokio::time::timeout(
            std::time::Duration::from_millis(300),
            store.record(&k, digest_of("two"), &text("two"), at(2)),
        )
        .await
        .is_err(),
        "a new content was recorded while another replica held the lock"
    );
    other.rollback().await.unwrap();
    let second = store
        .record(&k, digest_of("two"), &text("two"), at(3))
        .await
        .unwrap();
    assert_eq!(second.version.version, "v2");
}

#[tokio::test]
async fn two_replicas_on_one_schema_see_one_registry() {
    use quarry_ports::ServerRegistry;
    let schemas = Schemas::default();
    let one = schemas.store(None, Retention::default()).await;
    let two = schemas.store(Some(&one.schema), Retention::default()).await;
    let alpha = contract::registry::stdio_server("alpha");
    let generation = one.save(&alpha, contract::versions::at(0)).await.unwrap();
    assert_eq!(two.servers().await.unwrap(), vec![alpha]);
    assert_eq!(two.generation().await.unwrap(), generation);
}

#[test]
fn passwords_are_kept_out_of_what_is_shown() {
    assert_eq!(
        redacted("postgres://quarry:s3cret@db:5432/q"),
        "postgres://quarry:***@db:5432/q"
    );
    assert_eq!(redacted("postgres://quarry@db/q"), "postgres://quarry@db/q");
    let target = PostgresTarget {
        url: "postgres://u:hunter2@h/d".into(),
        schema: "quarry".into(),
    };
    assert!(!format!("{target:?}").contains("hunter2"));
    assert!(valid_schema("quarry_1") && !valid_schema("1q") && !valid_schema("a;drop"));
}

#[tokio::test]
async fn an_unreachable_database_is_unavailable_with_no_password_in_the_message() {
    let target = PostgresTarget {
        // Port 1 on loopback: nothing listens there.
        url: "postgres://quarry:hunter2@127.0.0.1:1/quarry".into(),
        schema: "quarry".into(),
    };
    let err = PostgresStore::connect(&target, Retention::default(), 1)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    assert!(!err.to_string().contains("hunter2"), "{err}");
}
