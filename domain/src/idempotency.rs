//! Idempotency keys and the canonical payload a key is bound to.
//!
//! A mutation called with a key runs once: a repeat with the same payload replays the first
//! result, another payload under the same key is a conflict (E010). "The same payload" is decided
//! on [`Payload`], a canonical JSON encoding (object keys sorted, no white space), so two calls
//! that differ only in argument order or formatting are the same call, and a field added to an
//! argument type cannot silently change what counts as equal the way `Debug` output would.

use std::fmt;

use serde::Serialize;
use serde_json::Value;

use crate::{Error, ErrorCode};

/// A caller's idempotency key: 1 to 128 characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// The longest key accepted.
    pub const MAX_CHARS: usize = 128;

    /// Parses a key.
    ///
    /// # Errors
    /// E001 when empty or longer than 128 characters.
    pub fn parse(key: &str) -> Result<Self, Error> {
        let chars = key.chars().count();
        if chars == 0 || chars > Self::MAX_CHARS {
            return Err(Error::invalid(
                "idempotency_key must be 1 to 128 characters",
            ));
        }
        Ok(Self(key.to_owned()))
    }

    /// The key as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The conflict error for this key: its first 64 characters, quoted.
    pub fn conflict(&self) -> Error {
        let shown: String = self.0.chars().take(64).collect();
        Error::new(
            ErrorCode::E010,
            format!("idempotency_key {shown:?} was first used with different arguments"),
        )
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The canonical encoding of a mutation's arguments: JSON with object keys sorted and no white
/// space. Hash it to bind a key to its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload(String);

impl Payload {
    /// The canonical encoding of `arguments`.
    ///
    /// # Errors
    /// E012 when the arguments cannot be encoded as JSON (a map with non-string keys).
    pub fn of(arguments: &impl Serialize) -> Result<Self, Error> {
        let value = serde_json::to_value(arguments).map_err(|_| Error::internal())?;
        let mut out = String::new();
        write_canonical(&value, &mut out);
        Ok(Self(out))
    }

    /// The encoded bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn keys_are_bounded() {
        assert!(IdempotencyKey::parse("k-1").is_ok());
        assert!(IdempotencyKey::parse(&"é".repeat(128)).is_ok());
        for bad in [String::new(), "x".repeat(129)] {
            assert_eq!(
                IdempotencyKey::parse(&bad).unwrap_err().code(),
                ErrorCode::E001
            );
        }
    }

    #[test]
    fn payloads_ignore_key_order_and_nothing_else() {
        let a = Payload::of(&json!({"b": 1, "a": {"y": [1, 2], "x": null}})).unwrap();
        let b = Payload::of(&json!({"a": {"x": null, "y": [1, 2]}, "b": 1})).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.as_bytes(), br#"{"a":{"x":null,"y":[1,2]},"b":1}"#);
        let c = Payload::of(&json!({"a": {"x": null, "y": [2, 1]}, "b": 1})).unwrap();
        assert_ne!(a, c, "array order matters");
        let d = Payload::of(&json!({"b": "1", "a": {"y": [1, 2], "x": null}})).unwrap();
        assert_ne!(a, d, "types matter");
    }

    #[test]
    fn conflicts_quote_a_bounded_key() {
        let key = IdempotencyKey::parse(&"k".repeat(100)).unwrap();
        let e = key.conflict();
        assert_eq!(e.code(), ErrorCode::E010);
        assert!(e.message().contains(&"k".repeat(64)) && !e.message().contains(&"k".repeat(65)));
    }
}
