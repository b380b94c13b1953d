//! The answers a transport gives a request itself when the server's real answer cannot be
//! delivered (too large to accept, or not parsable), so the request fails at once instead of at
//! its deadline. `errors.rs` turns them back into [`quarry_ports::UpstreamError`]s.

use rmcp::model::{ErrorCode, ErrorData, RequestId};
use serde_json::json;

/// The JSON-RPC error code of the synthetic "too large" answer.
pub(crate) const TOO_LARGE_CODE: i32 = -32_050;
/// The JSON-RPC error code of the synthetic "could not be parsed" answer.
pub(crate) const UNPARSABLE_CODE: i32 = -32_051;
/// The JSON-RPC error code of the synthetic "the server refused the credentials" answer.
pub(crate) const UNAUTHORIZED_CODE: i32 = -32_052;
/// The field of the "too large" answer's `data` that carries the message's size in bytes.
pub(crate) const SIZE_FIELD: &str = "size";
/// The field of that answer's `data` that carries the limit in bytes.
pub(crate) const LIMIT_FIELD: &str = "limit";

/// Bytes of each end of a message enough to find its id.
pub(crate) const EDGE: usize = 256;

/// "The response (at least `size` bytes) is over `limit`."
pub(crate) fn too_large(size: usize, limit: usize) -> ErrorData {
    ErrorData::new(
        ErrorCode(TOO_LARGE_CODE),
        "the response is over the size limit",
        Some(json!({ SIZE_FIELD: size, LIMIT_FIELD: limit })),
    )
}

/// "The response does not parse", with why.
pub(crate) fn unparsable(why: &str) -> ErrorData {
    ErrorData::new(
        ErrorCode(UNPARSABLE_CODE),
        format!("the response does not parse: {why}"),
        None,
    )
}

/// "The server refused the credentials", with why.
pub(crate) fn unauthorized(why: &str) -> ErrorData {
    ErrorData::new(ErrorCode(UNAUTHORIZED_CODE), why.to_owned(), None)
}

/// The request id a response carries, read from its first bytes (`{"jsonrpc":"2.0","id":7,...`,
/// as rmcp writes) or its last ones (`...,"jsonrpc":"2.0","id":7}`, as the TypeScript SDK
/// writes).
pub(crate) fn response_id(head: &[u8], tail: &[u8]) -> Option<RequestId> {
    let head = String::from_utf8_lossy(head);
    let tail = String::from_utf8_lossy(tail);
    let from_head = head
        .strip_prefix("{\"jsonrpc\":\"2.0\",\"id\":")
        .and_then(|rest| rest.split([',', '}']).next());
    let from_tail = tail
        .trim_end()
        .strip_suffix('}')
        .and_then(|rest| {
            rest.rsplit_once("\"jsonrpc\":\"2.0\",\"id\":")
                .map(|(_, id)| id)
        })
        .or_else(|| {
            tail.trim_end()
                .strip_suffix('}')
                .and_then(|rest| rest.rsplit_once("\"id\":").map(|(_, id)| id))
                .filter(|id| !id.contains(','))
        });
    from_head
        .or(from_tail)
        .map(str::trim)
        .filter(|id| is_plain_id(id))
        .and_then(|id| serde_json::from_str(id).ok())
}

/// [`response_id`] of a whole message.
pub(crate) fn id_of(message: &[u8]) -> Option<RequestId> {
    let edge = message.len().min(EDGE);
    response_id(&message[..edge], &message[message.len() - edge..])
}

fn is_plain_id(id: &str) -> bool {
    let number = !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit() || b == b'-');
    let string = id.len() >= 2
        && id.starts_with('"')
        && id.ends_with('"')
        && id[1..id.len() - 1]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    number || string
}
