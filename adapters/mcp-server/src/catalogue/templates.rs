//! `list_mcp_resource_templates`: the aggregated resource templates, for hosts that show tools
//! and not MCP's own `resources/templates/list`.

use rmcp::model::Tool;
use serde_json::json;

use super::{Hints, ToolSpec};

/// `list_mcp_resource_templates`: the templates of every server.
pub(crate) const TEMPLATES_TOOL: &str = "list_mcp_resource_templates";

pub(super) fn templates_tool() -> Tool {
    ToolSpec {
        name: TEMPLATES_TOOL,
        title: "ListMcpResourceTemplatesTool",
        description: "List the resource templates of the upstream servers, as gateway URI templates \
         (RFC 6570). Fill one in and give the URI to read_mcp_resource to read a resource no \
         listing shows.",
        request: "ListResourceTemplatesRequest",
        input: json!({
            "server": {"type": ["string", "null"], "minLength": 1, "maxLength": 128,
                       "description": "Only this server's templates"}
        }),
        required: &[],
        result: "ListResourceTemplatesResult",
        output: json!({
            "templates": {"type": "array", "items": {
                "type": "object",
                "required": ["server", "uri_template", "name"],
                "properties": {
                    "server": {"type": "string"},
                    "uri_template": {"type": "string"},
                    "name": {"type": "string"},
                    "description": {"type": ["string", "null"]},
                    "mime_type": {"type": ["string", "null"]}
                }
            }}
        }),
        always: &["templates"],
        hints: Hints::reading(true),
        scope: "resources:read",
    }
    .build()
}
