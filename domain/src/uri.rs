//! Gateway URIs: `mcp://{server}/{escaped upstream URI}`, a bijection with (server, upstream URI).
//!
//! Escaping keeps `A-Z a-z 0-9 / . -` and writes every other byte as `_` and two uppercase hex
//! digits, so every gateway URI matches the spec's pattern `^mcp://[a-zA-Z0-9_-]+/[a-zA-Z0-9_/.-]+$`.
//! Decoding accepts only the canonical form: each resource has exactly one gateway URI, so no alias
//! can slip past a cache key or a policy rule written for another. Paths are never normalised,
//! so a path with a `.` or `..` segment is refused rather than forwarded: what an upstream would
//! make of it is not the gateway's to guess, and a policy rule must see the path it governs.

use std::fmt;

use serde::{Serialize, Serializer};

use crate::{Error, ServerName};

const SCHEME: &str = "mcp://";

/// The longest gateway URI accepted: a bound on work and memory for hostile input.
const MAX_URI_LEN: usize = 16 * 1024;

/// A resource's gateway URI, valid by construction.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceUri {
    server: ServerName,
    upstream: String,
    gateway: String,
}

impl ResourceUri {
    /// The gateway URI for `upstream` on `server`.
    ///
    /// # Errors
    /// E001 when `upstream` is empty (the pattern needs at least one path byte), holds a NUL or a
    /// `.`/`..` segment, or its gateway URI would be longer than [`ResourceUri::parse`] accepts —
    /// whatever it refuses could never be read back.
    pub fn new(server: ServerName, upstream: &str) -> Result<Self, Error> {
        let gateway = Self::gateway_text(&server, upstream)?;
        Ok(Self {
            server,
            upstream: upstream.to_owned(),
            gateway,
        })
    }

    /// The text of the gateway URI [`ResourceUri::new`] would make, without building the rest
    /// (for listings of many thousands of resources).
    ///
    /// # Errors
    /// As [`ResourceUri::new`].
    pub fn gateway_text(server: &ServerName, upstream: &str) -> Result<String, Error> {
        if upstream.is_empty() {
            return Err(Error::invalid("an upstream resource URI must not be empty"));
        }
        if upstream.contains('\0') {
            return Err(Error::invalid(
                "an upstream resource URI must not contain NUL",
            ));
        }
        refuse_dot_segments(upstream)?;
        let gateway = format!("{SCHEME}{server}/{}", encode_path(upstream));
        if gateway.len() > MAX_URI_LEN {
            return Err(Error::invalid(format!(
                "the gateway URI would be {} bytes long; the limit is {MAX_URI_LEN}",
                gateway.len()
            )));
        }
        Ok(gateway)
    }

    /// Parses a gateway URI.
    ///
    /// # Errors
    /// E001 when the text is not `mcp://{server}/{path}` in the spec's pattern, when the path is
    /// not in canonical escaped form, or when the decoded upstream URI is not UTF-8 or holds a NUL.
    pub fn parse(text: &str) -> Result<Self, Error> {
        if text.len() > MAX_URI_LEN {
            return Err(Error::invalid(format!(
                "resource_uri is {} bytes long; the limit is {MAX_URI_LEN}",
                text.len()
            )));
        }
        let rest = text.strip_prefix(SCHEME).ok_or_else(|| {
            Error::invalid(format!(
                "resource_uri {} must start with mcp:// (pattern mcp://{{server}}/{{path}})",
                shown(text)
            ))
        })?;
        let (server, path) = rest.split_once('/').ok_or_else(|| {
            Error::invalid(format!(
                "resource_uri {} has no path after the server name",
                shown(text)
            ))
        })?;
        let server = ServerName::parse(server)
            .map_err(|e| Error::invalid(format!("resource_uri: {}", e.message())))?;
        let upstream = decode_path(path)?;
        refuse_dot_segments(&upstream)?;
        Ok(Self {
            server,
            upstream,
            gateway: text.to_owned(),
        })
    }

    /// The server the resource lives on.
    pub fn server(&self) -> &ServerName {
        &self.server
    }

    /// The URI the upstream server knows the resource by.
    pub fn upstream(&self) -> &str {
        &self.upstream
    }

    /// The gateway URI as text.
    pub fn as_str(&self) -> &str {
        &self.gateway
    }

    /// The gateway URI as text, owned.
    pub fn into_string(self) -> String {
        self.gateway
    }
}

/// True when a `/`-separated segment of `upstream` is `.` or `..`.
pub fn has_dot_segment(upstream: &str) -> bool {
    upstream.split('/').any(|s| s == "." || s == "..")
}

fn refuse_dot_segments(upstream: &str) -> Result<(), Error> {
    if has_dot_segment(upstream) {
        return Err(Error::invalid(
            "a resource path with a '.' or '..' segment is refused: the gateway never normalises paths",
        ));
    }
    Ok(())
}

impl fmt::Display for ResourceUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.gateway)
    }
}

impl Serialize for ResourceUri {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.gateway)
    }
}

fn is_kept(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'/' | b'.' | b'-')
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Escapes an upstream URI into the path part of a gateway URI.
pub fn encode_path(upstream: &str) -> String {
    let mut out = String::with_capacity(upstream.len() + upstream.len() / 4);
    for &byte in upstream.as_bytes() {
        if is_kept(byte) {
            out.push(char::from(byte));
        } else {
            out.push('_');
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0xF)]));
        }
    }
    out
}

fn hex_value(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

fn decode_path(path: &str) -> Result<String, Error> {
    if path.is_empty() {
        return Err(Error::invalid("resource_uri has an empty path"));
    }
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let byte = bytes[i];
        if is_kept(byte) {
            out.push(byte);
            i += 1;
        } else if byte == b'_' {
            let decoded = match (bytes.get(i + 1), bytes.get(i + 2)) {
                (Some(&hi), Some(&lo)) => hex_value(hi).zip(hex_value(lo)).map(|(h, l)| h << 4 | l),
                _ => None,
            };
            let decoded = decoded.ok_or_else(|| {
                Error::invalid(format!(
                    "resource_uri path has '_' at byte {i} not followed by two uppercase hex digits"
                ))
            })?;
            if is_kept(decoded) {
                return Err(Error::invalid(format!(
                    "resource_uri path escapes {:?} at byte {i}; that character must be written as itself",
                    char::from(decoded)
                )));
            }
            if decoded == 0 {
                return Err(Error::invalid("resource_uri path contains a NUL byte"));
            }
            out.push(decoded);
            i += 3;
        } else {
            return Err(Error::invalid(format!(
                "resource_uri path has {:?} at byte {i}; allowed are A-Z a-z 0-9 _ / . -",
                char::from(byte)
            )));
        }
    }
    String::from_utf8(out)
        .map_err(|_| Error::invalid("resource_uri path does not decode to UTF-8 text"))
}

/// Maps an upstream RFC 6570 URI template to a gateway template: literal parts are escaped as in
/// [`encode_path`], `{...}` expressions are kept, so a client expanding the template with a value
/// made of kept characters gets the gateway URI of the upstream expansion.
pub fn template_to_gateway(server: &ServerName, upstream_template: &str) -> String {
    let mut out = format!("{SCHEME}{server}/");
    let mut rest = upstream_template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}').map(|c| open + c) else {
            break;
        };
        out.push_str(&encode_path(&rest[..open]));
        out.push_str(&rest[open..=close]);
        rest = &rest[close + 1..];
    }
    out.push_str(&encode_path(rest));
    out
}

/// A bounded, debug-quoted rendering of untrusted text for error messages.
fn shown(text: &str) -> String {
    const MAX: usize = 120;
    if text.len() <= MAX {
        format!("{text:?}")
    } else {
        let mut end = MAX;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        format!("{:?}... ({} bytes)", &text[..end], text.len())
    }
}

#[cfg(test)]
mod tests;
