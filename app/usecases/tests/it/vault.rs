//! The vault as the use cases use it: registry rows written before environments went into the
//! vault are moved there on load, and the sealed environment reaches the connection.

use std::{collections::BTreeMap, sync::Arc};

use quarry_domain::{AuthType, Endpoint, ServerName, ServerSettings, ServerSpec};
use quarry_ports::{CredentialStore, ResourceGateway, ServerRegistry};
use quarry_testkit::fakes::{
    FakeCipher, FakeConnector, FakeContentCache, FakeCredentialStore, FakeRegistry, FakeSession,
    FakeVersionStore, ManualClock,
};
use quarry_usecases::ResourceService;

use crate::{options, ports};

// traces: UC-9 — a registered stdio server whose row still holds its environment in plaintext
// (written by an earlier version) has it sealed into the vault on load and the row saved without
// it; the connection still gets the environment.
#[tokio::test]
async fn a_legacy_registry_row_has_its_environment_moved_into_the_vault() {
    let registry = Arc::new(FakeRegistry::default());
    let name = ServerName::parse("tools").unwrap();
    let env = BTreeMap::from([("TOOLS_TOKEN".to_owned(), "legacy-secret".to_owned())]);
    let legacy = ServerSettings::new(ServerSpec::new(
        name.clone(),
        Endpoint::Stdio {
            command: "tools".into(),
            args: vec![],
            env: env.clone(),
            cwd: None,
        },
    ));
    registry.save(&legacy, chrono::Utc::now()).await.unwrap();
    let credentials = Arc::new(FakeCredentialStore::default());
    let connector = Arc::new(FakeConnector::new(std::collections::HashMap::from([(
        "tools".to_owned(),
        Arc::new(FakeSession::default()),
    )])));
    connector.require("tools", quarry_domain::UpstreamAuth::environment(&env));
    let mut p = ports(
        connector,
        Arc::new(FakeContentCache::new(1 << 20)),
        Arc::new(FakeVersionStore::new(quarry_domain::Retention::default())),
        Arc::new(ManualClock::new()),
    );
    p.registry = registry.clone();
    p.credentials = credentials.clone();
    p.cipher = Arc::new(FakeCipher::default());
    let service = ResourceService::new(vec![], p, options());
    service.load_registry().await.unwrap();

    let row = registry.servers().await.unwrap().remove(0);
    assert!(
        matches!(&row.spec.endpoint, Endpoint::Stdio { env, .. } if env.is_empty()),
        "the row keeps no environment"
    );
    let sealed = credentials
        .get(&name)
        .await
        .unwrap()
        .expect("sealed in the vault");
    assert_eq!(sealed.identity.auth_type, AuthType::Environment);
    // The fake server accepts only a connection that carries the environment.
    let status = service.servers().await;
    assert_eq!(
        status[0].status,
        quarry_domain::ConnectionStatus::Connected,
        "{status:?}"
    );
}
