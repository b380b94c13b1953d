//! Scopes over HTTP: each call needs the scopes every request needs and its tool's own (MCP's
//! resources methods: the read scope); a token short of them gets one 403 naming them all, and
//! the scope each tool publishes is the one the route check demands.

use serde_json::json;

use crate::{
    http::{INITIALIZE, agent, post, session_of},
    resource_server::{ALL_SCOPES, World, bearer, host, resource, tool_call, world},
    support::call,
};

// traces: OA-5, OA-8 — a valid token without the scope a call needs gets one 403
// `insufficient_scope` whose `scope` names every scope the call needs (the ones every request
// needs and the tool's), not one at a time; with them the call goes through.
#[tokio::test(flavor = "multi_thread")]
async fn oa_5_oa_8_missing_scopes_are_one_403_naming_them_all() {
    let World {
        issuer,
        port,
        gw,
        dir: _dir,
    } = world("", "required_scopes = [\"mcp\"]").await;
    let token = |scope: &str| issuer.sign(&issuer.claims("alice", scope, &resource(port)));
    let full = bearer(&token(&format!("mcp {ALL_SCOPES}")));
    let (status, head, _) = post(gw.addr, &host(gw.addr), &[&full], INITIALIZE).await;
    assert_eq!(status, 200);
    let sid = format!("Mcp-Session-Id: {}", session_of(&head).unwrap());
    let version = "MCP-Protocol-Version: 2025-11-25";
    let remove = tool_call("mcp_auth_remove", &json!({"server_id": "notes"}));
    let bare = bearer(&token("profile"));
    let (status, head, body) =
        post(gw.addr, &host(gw.addr), &[&bare, &sid, version], &remove).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        head.contains(
            "www-authenticate: bearer error=\"insufficient_scope\", scope=\"mcp servers:admin\""
        ),
        "{head}"
    );
    assert!(head.contains("resource_metadata=\""), "{head}");
    // Holding one of the two, the challenge still names both.
    let half = bearer(&token("mcp"));
    let (status, head, _) = post(gw.addr, &host(gw.addr), &[&half, &sid, version], &remove).await;
    assert_eq!(status, 403);
    assert!(head.contains("scope=\"mcp servers:admin\""), "{head}");
    // Even initialize needs what every request needs.
    assert_eq!(
        post(gw.addr, &host(gw.addr), &[&bare], INITIALIZE).await.0,
        403
    );
    let reader = agent(gw.addr, Some(token("mcp resources:read").as_str())).await;
    let listing = call(&reader, "list_mcp_resources", json!({})).await;
    assert_eq!(listing["success"], true);
    let (status, _, _) = post(gw.addr, &host(gw.addr), &[&full, &sid, version], &remove).await;
    assert_eq!(status, 200, "with every scope the call reaches the tool");
}

// The tool contract: the scope each tool's `_meta` names is the one the HTTP route check
// demands. For every published tool, a token with every other scope is refused with that scope
// named, and a token with it is let through to the tool.
#[tokio::test(flavor = "multi_thread")]
async fn each_tools_published_scope_is_the_one_the_route_check_demands() {
    let World {
        issuer,
        port,
        gw,
        dir: _dir,
    } = world("", "").await;
    let token = |scope: &str| bearer(&issuer.sign(&issuer.claims("root", scope, &resource(port))));
    let (_, head, _) = post(gw.addr, &host(gw.addr), &[&token(ALL_SCOPES)], INITIALIZE).await;
    let sid = format!("Mcp-Session-Id: {}", session_of(&head).unwrap());
    let version = "MCP-Protocol-Version: 2025-11-25";
    let tools = quarry_mcp_server::catalogue();
    assert_eq!(tools.len(), 12);
    for tool in tools {
        let published = tool.meta.as_ref().unwrap().0["io.quarry/required_scope"]
            .as_str()
            .unwrap()
            .to_owned();
        let others: Vec<&str> = ALL_SCOPES.split(' ').filter(|s| *s != published).collect();
        // Arguments that fail validation: the tool answers E001, and nothing changes.
        let body = tool_call(&tool.name, &json!({"not_an_argument": true}));
        let (status, head, _) = post(
            gw.addr,
            &host(gw.addr),
            &[&token(&others.join(" ")), &sid, version],
            &body,
        )
        .await;
        assert_eq!(status, 403, "{}", tool.name);
        assert!(
            head.contains(&format!("scope=\"{published}\"")),
            "{}: {head}",
            tool.name
        );
        let (status, _, answer) = post(
            gw.addr,
            &host(gw.addr),
            &[&token(&published), &sid, version],
            &body,
        )
        .await;
        assert_eq!(status, 200, "{}: {answer}", tool.name);
        assert!(answer.contains("\"id\":7"), "{}: {answer}", tool.name);
    }
    // MCP's own resources methods need the read scope.
    let native = r#"{"jsonrpc":"2.0","id":8,"method":"resources/list"}"#;
    let (status, head, _) = post(
        gw.addr,
        &host(gw.addr),
        &[&token("cache:admin"), &sid, version],
        native,
    )
    .await;
    assert_eq!(status, 403);
    assert!(head.contains("scope=\"resources:read\""), "{head}");
}
