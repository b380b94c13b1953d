//! Resource versions: MCP has none, so Quarry makes them from content digests.
//!
//! A digest never seen before for a resource becomes its next version `v{n}`; a digest seen before
//! maps back to the version it got then. Etags derive from the digest, so an etag names exactly one
//! content.

use std::{fmt, num::NonZeroU32};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::Error;

/// A version's number: 1, 2, 3 ..., written `v1`, `v2`, `v3` on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VersionNumber(NonZeroU32);

impl VersionNumber {
    /// The first version of every resource.
    pub const FIRST: Self = Self(NonZeroU32::MIN);

    /// Version `n`.
    ///
    /// # Errors
    /// E001 for 0: versions start at 1.
    pub fn new(n: u32) -> Result<Self, Error> {
        NonZeroU32::new(n)
            .map(Self)
            .ok_or_else(|| Error::invalid("version numbers start at 1"))
    }

    /// The number.
    pub fn get(self) -> u32 {
        self.0.get()
    }

    /// The version after this one.
    pub fn next(self) -> Self {
        Self(self.0.saturating_add(1))
    }
}

impl fmt::Display for VersionNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}

impl PartialEq<&str> for VersionNumber {
    fn eq(&self, other: &&str) -> bool {
        other
            .strip_prefix('v')
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|n| n == self.get() && other.len() == 1 + n.to_string().len())
    }
}

impl Serialize for VersionNumber {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for VersionNumber {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        match VersionSelector::parse(&text) {
            Ok(VersionSelector::Number(n)) => Ok(n),
            _ => Err(serde::de::Error::custom(format!(
                "{text:?} is not a version (v1, v2, ...)"
            ))),
        }
    }
}

/// Lowercase hex of `bytes`, written into one string (a digest's hex is made on every audited
/// request: formatting each byte on its own allocated a string per byte).
pub fn hex_lower(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

/// The SHA-256 digest of a content's bytes (computed outside the domain).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest([u8; 32]);

impl Digest {
    /// Wraps 32 digest bytes.
    pub fn new(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The raw bytes.
    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Lowercase hex.
    pub fn hex(&self) -> String {
        hex_lower(&self.0)
    }

    /// `sha256:<64 hex>`, the spec's checksum format.
    pub fn checksum(&self) -> String {
        format!("sha256:{}", self.hex())
    }

    /// The entity tag: the first 16 hex digits of the digest.
    pub fn etag(&self) -> String {
        hex_lower(&self.0[..8])
    }

    /// Parses lowercase or uppercase hex of 32 bytes.
    ///
    /// # Errors
    /// E001 when not 64 hex digits.
    pub fn from_hex(hex: &str) -> Result<Self, Error> {
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::invalid("a digest is 64 hex digits"));
        }
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
                .map_err(|_| Error::invalid("a digest is 64 hex digits"))?;
        }
        Ok(Self(out))
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.etag())
    }
}

/// Which version a read asks for: `v3`, or an etag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionSelector {
    /// Version number `n` (`v{n}`).
    Number(VersionNumber),
    /// The version whose etag this is.
    Etag(String),
}

impl VersionSelector {
    /// Parses `v{n}` (n ≥ 1) or a 16-hex-digit etag.
    ///
    /// # Errors
    /// E001 for anything else.
    pub fn parse(text: &str) -> Result<Self, Error> {
        if let Some(n) = text.strip_prefix('v')
            && let Ok(n) = n.parse::<u32>()
            && let Ok(n) = VersionNumber::new(n)
            && text.len() == 1 + n.get().to_string().len()
        {
            return Ok(Self::Number(n));
        }
        let etag = text.trim_matches('"');
        if etag.len() == 16 && etag.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(Self::Etag(etag.to_ascii_lowercase()));
        }
        let shown: String = text.chars().take(64).collect();
        Err(Error::invalid(format!(
            "version {shown:?} is neither v1, v2, ... nor a 16-hex-digit etag"
        )))
    }
}

/// How much history is kept per resource: the content of the newest `count` versions, and no
/// more than `bytes` of it. Older versions keep their metadata; their content is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Versions whose content is kept.
    pub count: u32,
    /// Bytes of content kept per resource.
    pub bytes: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            count: 10,
            bytes: 64 * 1024 * 1024,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_and_etags_derive_from_the_digest() {
        let d = Digest::new([0xab; 32]);
        assert_eq!(d.checksum(), format!("sha256:{}", "ab".repeat(32)));
        assert_eq!(d.etag(), "abababababababab");
        let mut bytes = [0u8; 32];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::try_from(i * 37 % 256).unwrap();
        }
        let d = Digest::new(bytes);
        let expected: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(d.hex(), expected);
        assert_eq!(d.etag(), expected[..16]);
        assert_eq!(Digest::from_hex(&d.hex()).unwrap(), d);
        assert!(Digest::from_hex("zz").is_err());
    }

    #[test]
    fn version_numbers_are_written_and_read_as_v_n() {
        let v3 = VersionNumber::new(3).unwrap();
        assert_eq!(v3.to_string(), "v3");
        assert_eq!(v3, "v3");
        assert!(v3 != "v03" && v3 != "3" && v3 != "v4");
        assert_eq!(serde_json::to_value(v3).unwrap(), "v3");
        assert_eq!(
            serde_json::from_value::<VersionNumber>("v3".into()).unwrap(),
            v3
        );
        assert!(serde_json::from_value::<VersionNumber>("v0".into()).is_err());
        assert!(VersionNumber::new(0).is_err());
        assert_eq!(VersionNumber::FIRST.next(), VersionNumber::new(2).unwrap());
    }

    #[test]
    fn selectors_take_numbers_and_etags_only() {
        assert_eq!(
            VersionSelector::parse("v3").unwrap(),
            VersionSelector::Number(VersionNumber::new(3).unwrap())
        );
        assert_eq!(
            VersionSelector::parse("\"ABABABABABABABAB\"").unwrap(),
            VersionSelector::Etag("abababababababab".into())
        );
        for bad in ["v0", "v", "3", "v03", "v-1", "v1.0", "latest", "abababab"] {
            assert!(VersionSelector::parse(bad).is_err(), "{bad}");
        }
    }
}
