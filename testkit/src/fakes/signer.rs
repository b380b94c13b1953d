//! A signer for use-case tests: the "signature" is a keyed digest, checkable by the same fake.

use quarry_ports::{AuditSigner, ContentHasher, SignError};

use super::FakeHasher;

/// Signs with a name as its key (not cryptographic; the real one is Ed25519 in crypto-ring).
#[derive(Debug, Clone)]
pub struct FakeSigner {
    /// The key's name, which is also its id.
    pub key: String,
}

impl FakeSigner {
    fn mac(&self, material: &[u8]) -> String {
        let mut keyed = self.key.as_bytes().to_vec();
        keyed.push(0);
        keyed.extend_from_slice(material);
        FakeHasher.sha256(&keyed).hex()
    }
}

impl AuditSigner for FakeSigner {
    fn key_id(&self) -> Result<String, SignError> {
        Ok(self.key.clone())
    }

    fn sign(&self, material: &[u8]) -> Result<String, SignError> {
        Ok(self.mac(material))
    }

    fn verify(&self, material: &[u8], key_id: &str, signature: &str) -> Result<(), SignError> {
        if key_id != self.key {
            return Err(SignError::Invalid(format!("made by key {key_id}")));
        }
        if signature != self.mac(material) {
            return Err(SignError::Invalid("not this key's signature".into()));
        }
        Ok(())
    }
}
