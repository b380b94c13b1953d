//! Cryptography through ring, behind Quarry's ports: SHA-256 content digests, the vault's
//! AES-256-GCM envelope encryption, and the audit trail's Ed25519 checkpoint signatures.
//!
//! Architecture invariant: ring is used here and nowhere else; no ring type leaves this crate.

mod files;
mod signing;
mod vault;

pub use signing::RingSigner;
pub use vault::{KeySource, RingCipher, VaultKey};

use quarry_domain::Digest;
use quarry_ports::ContentHasher;

/// SHA-256 with ring.
#[derive(Debug, Clone, Copy, Default)]
pub struct RingHasher;

impl ContentHasher for RingHasher {
    fn sha256(&self, bytes: &[u8]) -> Digest {
        let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
        let mut out = [0u8; 32];
        out.copy_from_slice(digest.as_ref());
        Digest::new(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_match_the_fips_180_vectors() {
        let h = RingHasher;
        assert_eq!(
            h.sha256(b"").hex(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            h.sha256(b"abc").hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
