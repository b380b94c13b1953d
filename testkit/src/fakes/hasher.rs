//! A deterministic 256-bit stand-in for SHA-256: four FNV-1a lanes with different seeds.
//!
//! Use-case tests need a digest that is the same for the same bytes and differs for different
//! ones; the real SHA-256 is the crypto adapter's, tested there against the FIPS vectors.

use quarry_domain::Digest;
use quarry_ports::ContentHasher;

/// Not cryptographic; for tests only.
#[derive(Debug, Clone, Copy, Default)]
pub struct FakeHasher;

impl ContentHasher for FakeHasher {
    fn sha256(&self, bytes: &[u8]) -> Digest {
        let mut out = [0u8; 32];
        for (lane, chunk) in out.chunks_mut(8).enumerate() {
            let mut h: u64 =
                0xcbf2_9ce4_8422_2325 ^ (lane as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            for &b in bytes {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
            h ^= bytes.len() as u64;
            chunk.copy_from_slice(&h.to_be_bytes());
        }
        Digest::new(out)
    }
}
