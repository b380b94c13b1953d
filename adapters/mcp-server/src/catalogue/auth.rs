//! McpAuthTool's operations as tools: configure, test, remove and refresh a server's credential. Split so
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
/// `mcp_auth_refresh`: renew a server's OAuth 2 token now.
pub(crate) const REFRESH_AUTH_TOOL: &str = "mcp_auth_refresh";

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
         header, X-API-Key unless named), a bearer token, a client certificate and key (PEM) for \
         mutual TLS, or OAuth 2 (a machine client for client credentials, or tokens Quarry then \
         refreshes by itself). It is validated, encrypted at rest and \
         never shown again; new connections carry it. By default the connection is tested at once.",
        request: "ConfigureAuthRequest",
        input: json!({
            "server": {"type": "string", "pattern": SERVER_NAME},
            "auth_type": {"type": "string", "enum": ["api_key", "oauth2", "certificate", "bearer_token"]},
            "credentials": {
                "type": "object",
                "description": "api_key: {key, header?}; bearer_token: {token}; certificate: \
                 {certificate, private_key} (PEM); oauth2: {grant_type?, client_id?, client_secret?, \
                 private_key? (PEM, for private_key_jwt), client_metadata_url?, \
                 token_endpoint_auth_method?, scope?, access_token?, refresh_token?, expires_at?, \
                 issuer?, token_endpoint?, resource?} (discovery finds what is not given)",
                "properties": {
                    "key": {"type": "string", "minLength": 1, "maxLength": 8192},
                    "header": {"type": "string", "minLength": 1, "maxLength": 64},
                    "token": {"type": "string", "minLength": 1, "maxLength": 8192},
                    "certificate": {"type": "string", "minLength": 1, "maxLength": 65536},
                    "private_key": {"type": "string", "minLength": 1, "maxLength": 65536},
                    "grant_type": {"type": "string", "enum": ["authorization_code", "client_credentials"]},
                    "client_id": {"type": "string", "minLength": 1, "maxLength": 2048},
                    "client_secret": {"type": "string", "minLength": 1, "maxLength": 8192},
                    "client_metadata_url": {"type": "string", "format": "uri", "maxLength": 2048},
                    "token_endpoint_auth_method": {"type": "string", "enum": ["client_secret_basic", "client_secret_post", "private_key_jwt", "none"]},
                    "scope": {"type": "string", "minLength": 1, "maxLength": 2048},
                    "access_token": {"type": "string", "minLength": 1, "maxLength": 8192},
                    "refresh_token": {"type": "string", "minLength": 1, "maxLength": 8192},
                    "expires_at": {"type": "integer", "description": "seconds since the Unix epoch"},
                    "issuer": {"type": "string", "format": "uri", "maxLength": 2048},
                    "token_endpoint": {"type": "string", "format": "uri", "maxLength": 2048},
                    "resource": {"type": "string", "maxLength": 2048}
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

pub(super) fn refresh_auth_tool() -> Tool {
    ToolSpec {
        name: REFRESH_AUTH_TOOL,
        title: "McpAuthRefreshTool",
        description: "Renew an upstream server's OAuth 2 access token now (with its refresh token, \
         or its client credentials), store it encrypted, and test the connection with it. Quarry \
         also renews tokens by itself before they expire; when only a person can sign in again, \
         the result says so (E005, naming quarry auth login).",
        request: "RefreshAuthRequest",
        input: json!({
            "server": {"type": "string", "pattern": SERVER_NAME},
            "idempotency_key": idempotency_key()
        }),
        required: &["server"],
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
