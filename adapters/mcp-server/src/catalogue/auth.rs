//! McpAuthTool's operations as tools: configure, test and remove a server's credential. Split so
//! that each carries the hints of what it does (test reads; remove destroys).

use rmcp::model::Tool;
use serde_json::{Value, json};

use super::{Hints, ToolSpec, idempotency_key};

/// `mcp_auth_configure`: store (sealed) a server's credential.
pub(crate) const CONFIGURE_AUTH_TOOL: &str = "mcp_auth_configure";
/// `mcp_auth_test`: connect with a server's credential and say how it went.
pub(crate) const TEST_AUTH_TOOL: &str = "mcp_auth_test";
/// `mcp_auth_remove`: delete a server's credential.
pub(crate) const REMOVE_AUTH_TOOL: &str = "mcp_auth_remove";

const SERVER_NAME: &str = "^[A-Za-z0-9_-]{1,128}$";

fn auth_result() -> Value {
    json!({
        "server_id": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{8,}$"},
        "connection_status": {"type": "string", "enum": ["connected", "disconnected", "authenticating", "error"]},
        "latency_ms": {"type": "integer", "minimum": 0}
    })
}

pub(super) fn configure_auth_tool() -> Tool {
    ToolSpec {
        name: CONFIGURE_AUTH_TOOL,
        title: "McpAuthConfigureTool",
        description: "Give Quarry the credential for an upstream HTTP server: an API key (sent in a \
         header, X-API-Key unless named), a bearer token, or a client certificate and key (PEM) for \
         mutual TLS. It is validated, encrypted at rest and \
         never shown again; new connections carry it. By default the connection is tested at once.",
        request: "ConfigureAuthRequest",
        input: json!({
            "server": {"type": "string", "pattern": SERVER_NAME},
            "auth_type": {"type": "string", "enum": ["api_key", "bearer_token", "certificate"]},
            "credentials": {
                "type": "object",
                "description": "api_key: {key, header?}; bearer_token: {token}; certificate: {certificate, private_key} (PEM)",
                "properties": {
                    "key": {"type": "string", "minLength": 1, "maxLength": 8192},
                    "header": {"type": "string", "minLength": 1, "maxLength": 64},
                    "token": {"type": "string", "minLength": 1, "maxLength": 8192},
                    "certificate": {"type": "string", "minLength": 1, "maxLength": 65536},
                    "private_key": {"type": "string", "minLength": 1, "maxLength": 65536}
                },
                "additionalProperties": false
            },
            "test_connection": {"type": "boolean", "default": true},
            "idempotency_key": idempotency_key()
        }),
        required: &["server", "auth_type", "credentials"],
        result: "AuthResult",
        output: auth_result(),
        always: &["server_id"],
        hints: Hints {
            read_only: false,
            destructive: false,
            idempotent: true,
            open_world: true,
        },
        scope: "servers:admin",
    }
    .build()
}

pub(super) fn test_auth_tool() -> Tool {
    ToolSpec {
        name: TEST_AUTH_TOOL,
        title: "McpAuthTestTool",
        description: "Connect to an upstream server afresh with its stored credential (if any), \
         initialise and list once; say whether it worked and how long it took. Changes nothing.",
        request: "TestAuthRequest",
        input: json!({
            "server": {"type": "string", "pattern": SERVER_NAME}
        }),
        required: &["server"],
        result: "AuthResult",
        output: auth_result(),
        always: &["server_id", "connection_status", "latency_ms"],
        hints: Hints {
            read_only: true,
            destructive: false,
            idempotent: true,
            open_world: true,
        },
        scope: "servers:admin",
    }
    .build()
}

pub(super) fn remove_auth_tool() -> Tool {
    ToolSpec {
        name: REMOVE_AUTH_TOOL,
        title: "McpAuthRemoveTool",
        description: "Delete an upstream server's stored credential; connections opened with it \
         end. Refused while requests to the server are in flight, unless force is true.",
        request: "RemoveAuthRequest",
        input: json!({
            "server": {"type": "string", "pattern": SERVER_NAME},
            "force": {"type": "boolean", "default": false},
            "idempotency_key": idempotency_key()
        }),
        required: &["server"],
        result: "AuthResult",
        output: auth_result(),
        always: &["server_id"],
        hints: Hints {
            read_only: false,
            destructive: true,
            idempotent: true,
            open_world: false,
        },
        scope: "servers:admin",
    }
    .build()
}
