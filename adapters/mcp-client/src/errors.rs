//! Mapping rmcp's errors to the upstream port's, once.

use quarry_domain::sanitize_label;
use quarry_ports::UpstreamError;
use rmcp::{ServiceError, model::ErrorCode};

/// What a failed request means for the caller.
pub(crate) fn from_service(error: ServiceError, reading: bool) -> UpstreamError {
    match error {
        ServiceError::McpError(data) => {
            let message = sanitize_label(&data.message);
            match data.code {
                ErrorCode::METHOD_NOT_FOUND => UpstreamError::MethodNotFound,
                ErrorCode(crate::answers::TOO_LARGE_CODE) => {
                    let field = |name: &str| {
                        data.data
                            .as_ref()
                            .and_then(|d| d.get(name))
                            .and_then(serde_json::Value::as_u64)
                            .unwrap_or(0)
                    };
                    UpstreamError::TooLarge {
                        size: field(crate::answers::SIZE_FIELD),
                        limit: field(crate::answers::LIMIT_FIELD),
                    }
                }
                ErrorCode(crate::answers::UNPARSABLE_CODE) => UpstreamError::BadResponse(message),
                ErrorCode(crate::answers::UNAUTHORIZED_CODE) => {
                    UpstreamError::Unauthorized(message)
                }
                ErrorCode::RESOURCE_NOT_FOUND => UpstreamError::NotFound(message),
                // Since 2026-07-28 (SEP-2164) a missing resource is -32602; older servers use it
                // for unknown URIs as well.
                ErrorCode::INVALID_PARAMS if reading => UpstreamError::NotFound(message),
                // Servers that predate both answer with another code and say so in words
                // (server-everything: -32603 "Unknown resource: ...").
                _ if reading && says_not_found(&message) => UpstreamError::NotFound(message),
                code => UpstreamError::Server {
                    code: code.0,
                    message,
                },
            }
        }
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
            UpstreamError::Unreachable("the connection to the server closed".into())
        }
        ServiceError::Timeout { timeout } => {
            UpstreamError::Timeout(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX))
        }
        other => UpstreamError::Protocol(sanitize_label(&other.to_string())),
    }
}

/// True when an error message says the resource does not exist.
fn says_not_found(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "unknown resource",
        "resource not found",
        "no such resource",
        "not found",
        "does not exist",
    ]
    .iter()
    .any(|phrase| m.contains(phrase))
}
