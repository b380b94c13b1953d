//! The hashing port: SHA-256 of content, computed by a cryptography adapter.

use quarry_domain::Digest;

/// Computes content digests.
///
/// Contract: the SHA-256 of exactly `bytes` (FIPS 180-4); the same bytes always give the same
/// digest. Never fails.
#[cfg_attr(feature = "mocks", mockall::automock)]
pub trait ContentHasher: Send + Sync + std::fmt::Debug {
    /// SHA-256 of `bytes`.
    fn sha256(&self, bytes: &[u8]) -> Digest;
}
