//! The published catalogue: pinned by a snapshot, hints and scopes that match each tool, input
//! schemas that take the spec's requests, output schemas that results conform to and can fail.

use quarry_domain::{
    ByteRange, ConnectionStatus, ListResourcesResult, Origin, ReadResourceResult, Resource,
    ResourceType, ResourceUri, ServerId, ServerName, ServerStatus,
};
use serde_json::{Value, json};

use super::*;
use crate::catalogue::{
    AUDIT_EXPORT_TOOL, CONFIGURE_AUTH_TOOL, REFRESH_AUTH_TOOL, REMOVE_AUTH_TOOL, TEMPLATES_TOOL,
    TEST_AUTH_TOOL,
};

fn validator(schema: &JsonObject) -> jsonschema::Validator {
    assert_eq!(schema.get("$schema"), Some(&json!(DRAFT)));
    jsonschema::draft202012::new(&Value::Object(schema.clone()))
        .expect("a valid draft 2020-12 schema")
}

fn tool(name: &str) -> Tool {
    catalogue()
        .into_iter()
        .find(|t| t.name == name)
        .expect("published")
}

// The whole catalogue as agents see it; a change here is a reviewed diff.
#[test]
fn the_catalogue_is_pinned() {
    insta::assert_json_snapshot!("catalogue", catalogue());
}

// The hints match what each tool does: reads are read-only, the purge destroys (cached) data.
#[test]
fn annotations_and_scopes_match_what_each_tool_does() {
    let names: Vec<_> = catalogue().iter().map(|t| t.name.to_string()).collect();
    assert_eq!(
        names,
        [
            LIST_TOOL,
            READ_TOOL,
            VERSIONS_TOOL,
            TEMPLATES_TOOL,
            PURGE_TOOL,
            ADD_SERVER_TOOL,
            REMOVE_SERVER_TOOL,
            CONFIGURE_AUTH_TOOL,
            TEST_AUTH_TOOL,
            REMOVE_AUTH_TOOL,
            REFRESH_AUTH_TOOL,
            AUDIT_EXPORT_TOOL
        ]
    );
    for t in catalogue() {
        let a = t.annotations.clone().expect("annotations");
        let (read_only, destructive, open_world, scope) = match t.name.as_ref() {
            LIST_TOOL | READ_TOOL => (true, false, true, "resources:read"),
            VERSIONS_TOOL => (true, false, false, "resources:read"),
            TEMPLATES_TOOL => (true, false, true, "resources:read"),
            PURGE_TOOL => (false, true, false, "cache:admin"),
            ADD_SERVER_TOOL => (false, false, true, "servers:admin"),
            REMOVE_SERVER_TOOL => (false, true, false, "servers:admin"),
            CONFIGURE_AUTH_TOOL => (false, false, true, "servers:admin"),
            TEST_AUTH_TOOL => (true, false, true, "servers:admin"),
            REMOVE_AUTH_TOOL => (false, true, false, "servers:admin"),
            REFRESH_AUTH_TOOL => (false, false, true, "servers:admin"),
            AUDIT_EXPORT_TOOL => (true, false, false, "audit:admin"),
            other => panic!("unexpected tool {other}"),
        };
        assert_eq!(a.read_only_hint, Some(read_only), "{}", t.name);
        assert_eq!(a.destructive_hint, Some(destructive), "{}", t.name);
        assert_eq!(a.idempotent_hint, Some(true), "{}", t.name);
        assert_eq!(a.open_world_hint, Some(open_world), "{}", t.name);
        assert!(
            t.title
                .as_deref()
                .is_some_and(|title| title.ends_with("Tool"))
        );
        let meta = t.meta.clone().expect("meta");
        assert_eq!(meta.0.get(SCOPE_KEY), Some(&json!(scope)), "{}", t.name);
        validator(&t.input_schema);
        validator(t.output_schema.as_ref().expect("output schema"));
        // Every mutation takes an idempotency key.
        if !read_only {
            let props = t
                .input_schema
                .get("properties")
                .and_then(Value::as_object)
                .unwrap();
            assert!(props.contains_key("idempotency_key"), "{}", t.name);
        }
    }
}

// The spec's request schemas, bounds included.
#[test]
fn input_schemas_take_the_specs_requests_and_refuse_out_of_bounds_ones() {
    let list = validator(&tool(LIST_TOOL).input_schema);
    let spec_example = json!({"server": "production-mcp", "filter_type": "file", "include_metadata": true, "limit": 50, "offset": 0});
    assert!(list.is_valid(&spec_example));
    assert!(list.is_valid(&json!({})));
    assert!(list.is_valid(&json!({"server": null, "filter_type": null, "limit": null})));
    for bad in [
        json!({"limit": 0}),
        json!({"limit": 1001}),
        json!({"offset": -1}),
        json!({"filter_type": "table"}),
        json!({"server": ""}),
        json!({"extra": 1}),
    ] {
        assert!(!list.is_valid(&bad), "{bad}");
    }
    let read = validator(&tool(READ_TOOL).input_schema);
    let spec_example = json!({"resource_uri": "mcp://production-mcp/files/config.yaml", "offset": 0, "limit": 4096, "version": "v3", "use_cache": true, "validate_checksum": true});
    assert!(read.is_valid(&spec_example));
    for bad in [
        json!({}),
        json!({"resource_uri": "http://x/y"}),
        json!({"resource_uri": "mcp://s/a b"}),
        json!({"resource_uri": "mcp://s/x", "limit": 10485761}),
        json!({"resource_uri": "mcp://s/x", "offset": -1}),
    ] {
        assert!(!read.is_valid(&bad), "{bad}");
    }
}

fn sample_resource() -> Resource {
    Resource {
        uri: ResourceUri::new(ServerName::parse("docs").unwrap(), "file:///a.md").unwrap(),
        name: "a".into(),
        resource_type: ResourceType::File,
        size: Some(3),
        mime_type: Some("text/markdown".into()),
        created_at: None,
        modified_at: Some("2026-04-08T12:00:00Z".parse().unwrap()),
        version: None,
        is_protected: false,
        metadata: serde_json::Map::new(),
    }
}

// What the tools return conforms to the output schemas they publish, errors included.
#[test]
fn results_and_errors_conform_to_the_output_schemas() {
    let name = ServerName::parse("docs").unwrap();
    let listing = ListResourcesResult {
        success: true,
        resources: vec![sample_resource()],
        servers: vec![ServerStatus {
            server_id: ServerId::derive(&name),
            server_name: name,
            endpoint: "stdio:node".into(),
            status: ConnectionStatus::Connected,
            authenticated: false,
            resource_count: 1,
            last_used: Some("2026-04-08T12:00:00Z".parse().unwrap()),
            last_error: None,
            skipped_entries: 0,
            skipped_reason: None,
        }],
        total_count: 1,
        cached_count: 1,
        cache_age_seconds: Some(12),
        partial: false,
        cache: quarry_domain::CacheHint::NONE,
    };
    let list = validator(tool(LIST_TOOL).output_schema.as_ref().unwrap());
    let value = serde_json::to_value(&listing).unwrap();
    assert!(
        list.is_valid(&value),
        "{:?}",
        list.iter_errors(&value)
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
    );

    let uri = sample_resource().uri;
    let slice = ByteRange::WHOLE.resolve(3).unwrap();
    let read_result = ReadResourceResult {
        success: true,
        origin: Origin::of(&uri),
        cache: quarry_domain::CacheHint::NONE,
        uri,
        content: Some("abc".into()),
        bytes_content: None,
        mime_type: Some("text/markdown".into()),
        size: 3,
        content_range: slice.content_range(),
        version: Some(quarry_domain::ResourceVersion {
            version: quarry_domain::VersionNumber::new(3).unwrap(),
            etag: "0123456789abcdef".into(),
            created_at: "2026-04-08T12:00:00Z".parse().unwrap(),
            size: 3,
            checksum: format!("sha256:{}", "ab".repeat(32)),
        }),
        cached: true,
        cached_at: Some("2026-04-08T12:00:00Z".parse().unwrap()),
        stale: true,
        upstream_error: Some(
            (&quarry_domain::Error::new(quarry_domain::ErrorCode::E003, "down")).into(),
        ),
        next_offset: Some(3),
        note: Some("continue at offset=3".into()),
    };
    let read = validator(tool(READ_TOOL).output_schema.as_ref().unwrap());
    let value = serde_json::to_value(&read_result).unwrap();
    assert!(
        read.is_valid(&value),
        "{:?}",
        read.iter_errors(&value)
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
    );

    let versions = validator(tool(VERSIONS_TOOL).output_schema.as_ref().unwrap());
    let history =
        json!({"success": true, "uri": "mcp://docs/x", "versions": [value["version"].clone()]});
    assert!(versions.is_valid(&history), "{history}");
    let purge = validator(tool(PURGE_TOOL).output_schema.as_ref().unwrap());
    assert!(purge.is_valid(&json!({"success": true, "purged_contents": 2, "purged_listings": 1})));

    let error = json!({"success": false, "error_code": "E002", "error_message": "not found", "uri": "mcp://docs/x"});
    assert!(read.is_valid(&error));
    assert!(
        list.is_valid(&json!({"success": false, "error_code": "E003", "error_message": "down"}))
    );

    // The schemas can fail: an error that does not say why, a result with a field missing.
    assert!(!read.is_valid(&json!({"success": false, "error_code": "E002"})));
    assert!(!list.is_valid(&json!({"success": false, "error_message": "down"})));
    let mut partial_listing = serde_json::to_value(&listing).unwrap();
    partial_listing
        .as_object_mut()
        .unwrap()
        .remove("total_count");
    assert!(
        !list.is_valid(&partial_listing),
        "total_count is always there"
    );
    let mut no_range = serde_json::to_value(&read_result).unwrap();
    no_range.as_object_mut().unwrap().remove("content_range");
    assert!(!read.is_valid(&no_range), "content_range is always there");
    for tool in catalogue() {
        let schema = validator(tool.output_schema.as_ref().unwrap());
        assert!(
            !schema.is_valid(&json!({"success": true})),
            "{}: a bare success is not a result",
            tool.name
        );
        assert!(
            !schema.is_valid(&json!({"success": false})),
            "{}",
            tool.name
        );
    }
}

// McpAuthTool: the spec's configure and test requests are valid input, bad ones are not, and
// every AuthResult (configured, tested, failed) conforms to the published output.
#[test]
fn the_auth_tools_take_the_specs_requests_and_return_auth_results() {
    let configure = validator(&tool(CONFIGURE_AUTH_TOOL).input_schema);
    let spec_example = json!({"server": "production-mcp", "auth_type": "api_key",
                              "credentials": {"key": "sk-xxxxx"}, "test_connection": true});
    assert!(configure.is_valid(&spec_example));
    for bad in [
        json!({"server": "production-mcp", "auth_type": "api_key"}),
        json!({"server": "production-mcp", "auth_type": "kerberos", "credentials": {}}),
        json!({"server": "production-mcp", "auth_type": "api_key", "credentials": {"pin": "1"}}),
    ] {
        assert!(!configure.is_valid(&bad), "{bad}");
    }
    assert!(
        validator(&tool(TEST_AUTH_TOOL).input_schema)
            .is_valid(&json!({"server": "production-mcp"}))
    );

    let server_id = ServerId::derive(&ServerName::parse("docs").unwrap());
    let tested = quarry_domain::AuthResult {
        success: true,
        server_id: server_id.clone(),
        connection_status: Some(ConnectionStatus::Connected),
        error_code: None,
        error_message: None,
        latency_ms: Some(45),
    };
    let failed = quarry_domain::AuthResult {
        success: false,
        connection_status: Some(ConnectionStatus::Error),
        error_code: Some(quarry_domain::ErrorCode::E005),
        error_message: Some("Authentication failed".into()),
        ..tested.clone()
    };
    let configured = quarry_domain::AuthResult {
        connection_status: None,
        latency_ms: None,
        ..tested.clone()
    };
    for (name, result) in [
        (TEST_AUTH_TOOL, &tested),
        (TEST_AUTH_TOOL, &failed),
        (CONFIGURE_AUTH_TOOL, &configured),
        (CONFIGURE_AUTH_TOOL, &failed),
        (REMOVE_AUTH_TOOL, &configured),
        (REFRESH_AUTH_TOOL, &tested),
        (REFRESH_AUTH_TOOL, &failed),
    ] {
        let schema = validator(tool(name).output_schema.as_ref().unwrap());
        let value = serde_json::to_value(result).unwrap();
        assert!(schema.is_valid(&value), "{name} {value}");
    }
    let untimed = serde_json::to_value(&configured).unwrap();
    assert!(
        !validator(tool(TEST_AUTH_TOOL).output_schema.as_ref().unwrap()).is_valid(&untimed),
        "a test result without its latency is refused"
    );
}
