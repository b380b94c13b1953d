//! The server registry contract (see [`ServerRegistry`]): round trips, unique names, generations
//! that grow with every real change and are returned by the change itself.

use std::{collections::BTreeMap, time::Duration};

use chrono::TimeZone;
use quarry_domain::{Endpoint, RetryPolicy, ServerId, ServerName, ServerSettings, ServerSpec};
use quarry_ports::{ServerRegistry, StoreError};

/// A stdio server with every field set to something other than its default (sample data).
pub fn stdio_server(name: &str) -> ServerSettings {
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
    ServerSettings {
        spec,
        retry: RetryPolicy {
            attempts: 2,
            delay: Duration::from_millis(500),
        },
        pool_size: 3,
        protection: quarry_domain::Protection::Nothing,
    }
}

fn http(name: &str) -> ServerSettings {
    ServerSettings::new(ServerSpec::new(
        ServerName::parse(name).unwrap(),
        Endpoint::Http {
            url: "https://mcp.example.com/mcp".into(),
        },
    ))
}

/// Runs the contract against an empty registry.
pub async fn check(registry: impl ServerRegistry) {
    let at = chrono::Utc.timestamp_opt(1_800_000_000, 0).unwrap();
    let g0 = registry.generation().await.unwrap();
    let a = stdio_server("alpha");
    let b = http("beta");
    let g1 = registry.save(&a, at).await.unwrap();
    let g2 = registry.save(&b, at).await.unwrap();
    assert!(
        g0 < g1 && g1 < g2,
        "{g0} {g1} {g2}: every save bumps the generation"
    );
    assert_eq!(
        registry.generation().await.unwrap(),
        g2,
        "saves return the real generation"
    );
    assert_eq!(
        registry.servers().await.unwrap(),
        vec![a.clone(), b.clone()],
        "every field round-trips, sorted by name"
    );

    let mut a2 = a.clone();
    a2.pool_size = 7;
    let g3 = registry.save(&a2, at).await.unwrap();
    assert!(g3 > g2);
    assert_eq!(
        registry.servers().await.unwrap(),
        vec![a2.clone(), b.clone()],
        "same name replaces"
    );

    let mut twin = http("gamma");
    twin.spec.id = ServerId::parse(b.spec.id.as_str()).unwrap();
    assert!(
        matches!(registry.save(&twin, at).await, Err(StoreError::Conflict(_))),
        "another server's id is a conflict"
    );
    assert_eq!(
        registry.generation().await.unwrap(),
        g3,
        "a refused save changes nothing"
    );

    let g4 = registry.delete(&a.spec.name).await.unwrap();
    assert!(g4.is_some_and(|g| g > g3));
    assert_eq!(
        registry.delete(&a.spec.name).await.unwrap(),
        None,
        "only a real change bumps it"
    );
    assert_eq!(registry.generation().await.unwrap(), g4.unwrap_or_default());
    assert_eq!(registry.servers().await.unwrap(), vec![b]);
}
