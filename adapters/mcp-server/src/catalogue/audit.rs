//! `mcp_audit_export`: the audit trail, a page at a time, for an administrator.

use rmcp::model::Tool;
use serde_json::json;

use super::{Hints, ToolSpec};

/// `mcp_audit_export`: read the audit trail.
pub(crate) const AUDIT_EXPORT_TOOL: &str = "mcp_audit_export";

pub(super) fn audit_export_tool() -> Tool {
    ToolSpec {
        name: AUDIT_EXPORT_TOOL,
        title: "McpAuditExportTool",
        description: "Read the audit trail: who listed, read, changed or was denied what, when, and why. \
         Filter by time, agent, server and decision; records come oldest first, each with its \
         hash-chain fields (previous_hash, record_hash) so a verifier can check them. Pass \
         next_after as after for the next page; it is null at the end of the trail. Needs the \
         administrator's permission (may_configure_mcp).",
        request: "AuditExportRequest",
        input: json!({
            "since": {"type": ["string", "null"], "format": "date-time",
                      "description": "Only records at or after this time (RFC 3339)"},
            "until": {"type": ["string", "null"], "format": "date-time",
                      "description": "Only records before this time (RFC 3339)"},
            "agent": {"type": ["string", "null"], "minLength": 1, "maxLength": 256},
            "server": {"type": ["string", "null"], "minLength": 1, "maxLength": 128},
            "decision": {"enum": ["allow", "deny", null]},
            "after": {"type": "integer", "minimum": 0, "default": 0,
                      "description": "Start after this record number (a page's next_after)"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100,
                      "description": "Records per page"}
        }),
        required: &[],
        result: "AuditExportResult",
        output: json!({
            "records": {"type": "array", "items": {
                "type": "object",
                "required": ["seq", "entry", "previous_hash", "record_hash"],
                "properties": {
                    "seq": {"type": "integer", "minimum": 1},
                    "entry": {"type": "object"},
                    "previous_hash": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                    "record_hash": {"type": "string", "pattern": "^[0-9a-f]{64}$"}
                }
            }},
            "next_after": {"type": ["integer", "null"], "minimum": 0}
        }),
        always: &["records", "next_after"],
        hints: Hints::reading(false),
        scope: "audit:admin",
    }
    .build()
}
