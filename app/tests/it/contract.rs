//! The tool contract, as a host sees it over HTTP: the catalogue `tools/list` returns is exactly
//! the published one (names, order, draft 2020-12 schemas, annotations — destructive hints
//! included — and required scopes), and every mutation honours its `idempotency_key`: the same
//! key and arguments replay the first result, other arguments under the key are E010. (A call
//! refused before it changed anything, E001 say, leaves its key unused.)

use serde_json::{Value, json};

use quarry_testkit::{
    fixture::{self, FixtureArgs},
    oauth::{CLIENT_ID, CLIENT_SECRET, TestAuthServer},
};

use crate::{
    http::{ALICE_KEY, agent, keyed, served},
    support::{call_raw, http_fixture},
};

// The contract's catalogue test: what reaches the host is the catalogue, byte for byte.
#[tokio::test(flavor = "multi_thread")]
async fn tools_list_over_http_is_exactly_the_published_catalogue() {
    let dir = tempfile::tempdir().unwrap();
    let gw = served(dir.path(), &keyed(""), &[]).await;
    let host = agent(gw.addr, Some(ALICE_KEY)).await;
    let listed = host.list_all_tools().await.unwrap();
    let published = quarry_mcp_server::catalogue();
    assert_eq!(listed.len(), 12);
    assert_eq!(
        serde_json::to_value(&listed).unwrap(),
        serde_json::to_value(&published).unwrap()
    );
    for tool in &listed {
        assert_eq!(
            tool.input_schema["$schema"], "https://json-schema.org/draft/2020-12/schema",
            "{}",
            tool.name
        );
        let hints = tool.annotations.as_ref().unwrap();
        let mutates = hints.read_only_hint == Some(false);
        assert!(hints.destructive_hint.is_some(), "{}", tool.name);
        let properties = tool.input_schema["properties"].as_object().unwrap();
        assert_eq!(
            properties.contains_key("idempotency_key"),
            mutates,
            "{}: a mutation, and only a mutation, takes an idempotency key",
            tool.name
        );
    }
    host.cancel().await.unwrap();
}

// The contract's idempotency test, for every mutation the catalogue publishes.
#[tokio::test(flavor = "multi_thread")]
async fn every_mutation_replays_its_key_and_refuses_other_arguments_under_it() {
    // notes signs in with OAuth client credentials (so it can be refreshed); extra is added by
    // the tools and given a bearer token.
    let auth = TestAuthServer::start().await.unwrap();
    let notes = fixture::serve_http_oauth(
        FixtureArgs {
            name: "notes".into(),
            resources: 3,
            ..FixtureArgs::default()
        },
        &auth,
        None,
    )
    .await
    .unwrap();
    let extra = http_fixture("extra", 2).await;
    let dir = tempfile::tempdir().unwrap();
    let config = keyed(&format!(
        "[servers.notes]\nendpoint = {:?}\noauth_allow_private_network = true\n\n\
         [registry]\nallow_tool_registration = true\n\n",
        notes.url
    ));
    let gw = served(dir.path(), &config, &[]).await;
    let host = agent(gw.addr, Some(ALICE_KEY)).await;
    let signed_in = crate::support::call(
        &host,
        "mcp_auth_configure",
        json!({"server": "notes", "auth_type": "oauth2", "credentials": {
            "grant_type": "client_credentials", "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET}}),
    )
    .await;
    assert_eq!(signed_in["connection_status"], "connected");
    let token = json!({"token": "upstream-token-0123456789"});
    let cases = [
        (
            "purge_mcp_cache",
            json!({"server": "notes"}),
            json!({"server": "extra"}),
        ),
        (
            "add_mcp_server",
            json!({"name": "extra", "endpoint": extra.url}),
            json!({"name": "extra2", "endpoint": extra.url}),
        ),
        (
            "mcp_auth_configure",
            json!({"server": "extra", "auth_type": "bearer_token", "credentials": token}),
            json!({"server": "notes", "auth_type": "bearer_token", "credentials": token}),
        ),
        (
            "mcp_auth_refresh",
            json!({"server": "notes"}),
            json!({"server": "extra"}),
        ),
        (
            "mcp_auth_remove",
            json!({"server": "extra", "force": true}),
            json!({"server": "notes", "force": true}),
        ),
        (
            "remove_mcp_server",
            json!({"name": "extra"}),
            json!({"name": "notes"}),
        ),
    ];
    let mutations: Vec<String> = quarry_mcp_server::catalogue()
        .into_iter()
        .filter(|t| t.annotations.as_ref().unwrap().read_only_hint == Some(false))
        .map(|t| t.name.into_owned())
        .collect();
    let mut covered: Vec<String> = cases.iter().map(|c| c.0.to_owned()).collect();
    covered.sort();
    let mut expected = mutations.clone();
    expected.sort();
    assert_eq!(covered, expected, "every mutation has a case here");
    for (tool, first, other) in cases {
        let with_key = |mut args: Value| {
            args["idempotency_key"] = json!(format!("contract-{tool}"));
            args
        };
        let (failed, answer) = call_raw(&host, tool, with_key(first.clone())).await;
        assert!(!failed, "{tool}: {answer}");
        let (_, again) = call_raw(&host, tool, with_key(first.clone())).await;
        assert_eq!(again, answer, "{tool}: the same key and arguments replay");
        let (failed, changed) = call_raw(&host, tool, with_key(other)).await;
        assert!(failed, "{tool}: {changed}");
        assert_eq!(changed["error_code"], "E010", "{tool}: {changed}");
    }
    host.cancel().await.unwrap();
}
