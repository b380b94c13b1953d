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
                ErrorCode(crate::guard::TOO_LARGE_CODE) => UpstreamError::TooLarge {
                    size: first_number(&data.message).unwrap_or(0),
                    limit: data
                        .message
                        .rsplit_once("limit is ")
                        .and_then(|(_, n)| n.trim().parse().ok())
                        .unwrap_or(0),
                },
                ErrorCode::RESOURCE_NOT_FOUND => UpstreamError::NotFound(message),
                // Since 2026-07-28 (SEP-2164) a missing resource is -32602; older servers use it
                // for unknown URIs as well.
                ErrorCode::INVALID_PARAMS if reading => UpstreamError::NotFound(message),
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

/// The first whole number in `text`.
fn first_number(text: &str) -> Option<u64> {
    text.split(|c: char| !c.is_ascii_digit())
        .find(|s| !s.is_empty())
        .and_then(|s| s.parse().ok())
}
