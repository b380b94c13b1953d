//! The audit trail's signing key: Ed25519 with ring, kept in a key file (mode 0600) created on
//! first use when allowed, or (with the store in memory) held in memory for the process. A checkpoint's signature can be checked by anyone holding the file;
//! its key id is the SHA-256 of the public half, so a signature by another key is told apart
//! from a forged one.

use std::{
    io::Write,
    path::{Path, PathBuf},
    sync::OnceLock,
};

use base64::Engine;
use quarry_domain::hex_lower;
use quarry_ports::{AuditSigner, SignError};
use ring::{
    rand::SystemRandom,
    signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey},
};
use zeroize::Zeroizing;

/// What a key file starts with.
const PREFIX: &str = "quarry-audit-ed25519:";

/// Ed25519 signatures by the key in a file.
pub struct RingSigner {
    /// None: a key of this process only.
    path: Option<PathBuf>,
    create: bool,
    on_create: fn(&Path),
    key: OnceLock<Ed25519KeyPair>,
}

impl std::fmt::Debug for RingSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingSigner")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

impl RingSigner {
    /// The key in `path`; created there (and `on_create` told) on first use when `create`.
    pub fn new(path: PathBuf, create: bool, on_create: fn(&Path)) -> Self {
        Self {
            path: Some(path),
            create,
            on_create,
            key: OnceLock::new(),
        }
    }

    /// A key made for this process, gone when it ends (for a trail kept in memory).
    pub fn ephemeral() -> Self {
        Self {
            path: None,
            create: true,
            on_create: |_| {},
            key: OnceLock::new(),
        }
    }

    fn place(&self) -> String {
        self.path
            .as_ref()
            .map_or_else(|| "(in memory)".to_owned(), |p| p.display().to_string())
    }

    fn fail(&self, why: impl std::fmt::Display) -> SignError {
        SignError::Key(format!("{}: {why}", self.place()))
    }

    fn read(&self, path: &Path) -> Result<Ed25519KeyPair, SignError> {
        let text = Zeroizing::new(std::fs::read_to_string(path).map_err(|e| self.fail(e))?);
        let encoded = text
            .trim()
            .strip_prefix(PREFIX)
            .ok_or_else(|| self.fail("not an audit signing key file"))?;
        let pkcs8 = Zeroizing::new(
            base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| self.fail(e))?,
        );
        Ed25519KeyPair::from_pkcs8(&pkcs8).map_err(|e| self.fail(e))
    }

    fn generate(&self, path: &Path) -> Result<(), SignError> {
        let pkcs8 = self.fresh()?;
        let text = Zeroizing::new(format!(
            "{PREFIX}{}\n",
            base64::engine::general_purpose::STANDARD.encode(pkcs8.as_ref())
        ));
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| self.fail(e))?;
        }
        match crate::files::create_owner_only(path) {
            Ok(mut file) => {
                file.write_all(text.as_bytes())
                    .and_then(|()| file.sync_all())
                    .map_err(|e| self.fail(e))?;
                (self.on_create)(path);
                Ok(())
            }
            // Another process made it first: use theirs.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(self.fail(e)),
        }
    }

    fn fresh(&self) -> Result<ring::pkcs8::Document, SignError> {
        Ed25519KeyPair::generate_pkcs8(&SystemRandom::new())
            .map_err(|_| self.fail("the system's random source failed"))
    }

    fn key(&self) -> Result<&Ed25519KeyPair, SignError> {
        if let Some(key) = self.key.get() {
            return Ok(key);
        }
        let key = match &self.path {
            Some(path) => {
                if self.create && !path.exists() {
                    self.generate(path)?;
                }
                self.read(path)?
            }
            None => Ed25519KeyPair::from_pkcs8(self.fresh()?.as_ref()).map_err(|e| self.fail(e))?,
        };
        Ok(self.key.get_or_init(|| key))
    }
}

impl AuditSigner for RingSigner {
    fn key_id(&self) -> Result<String, SignError> {
        let public = self.key()?.public_key().as_ref().to_vec();
        let digest = ring::digest::digest(&ring::digest::SHA256, &public);
        Ok(format!("ed25519:{}", hex_lower(&digest.as_ref()[..16])))
    }

    fn sign(&self, material: &[u8]) -> Result<String, SignError> {
        Ok(hex_lower(self.key()?.sign(material).as_ref()))
    }

    fn verify(&self, material: &[u8], key_id: &str, signature: &str) -> Result<(), SignError> {
        let own = self.key_id()?;
        if key_id != own {
            return Err(SignError::Invalid(format!(
                "it was made by key {key_id}, and {} holds {own}",
                self.place()
            )));
        }
        let signature =
            unhex(signature).ok_or_else(|| SignError::Invalid("it is not hex".into()))?;
        UnparsedPublicKey::new(&ED25519, self.key()?.public_key().as_ref())
            .verify(material, &signature)
            .map_err(|_| {
                SignError::Invalid("it is not this key's signature of the checkpoint".into())
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn silent(_: &Path) {}

    #[test]
    fn a_signature_verifies_and_any_change_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.key");
        let signer = RingSigner::new(path.clone(), true, silent);
        let id = signer.key_id().unwrap();
        let signature = signer.sign(b"checkpoint").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // Another handle on the same file verifies; a changed material or signature does not.
        let reader = RingSigner::new(path, false, silent);
        reader.verify(b"checkpoint", &id, &signature).unwrap();
        assert!(matches!(
            reader.verify(b"checkpoinT", &id, &signature),
            Err(SignError::Invalid(_))
        ));
        let mut forged = signature.clone();
        forged.replace_range(0..2, if &signature[0..2] == "00" { "01" } else { "00" });
        assert!(matches!(
            reader.verify(b"checkpoint", &id, &forged),
            Err(SignError::Invalid(_))
        ));
        // A signature by another key is named as such.
        let other = RingSigner::new(dir.path().join("other.key"), true, silent);
        let theirs = other.sign(b"checkpoint").unwrap();
        let err = reader
            .verify(b"checkpoint", &other.key_id().unwrap(), &theirs)
            .unwrap_err();
        assert!(err.to_string().contains("made by key"), "{err}");
    }

    #[test]
    fn a_missing_key_is_not_created_unless_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.key");
        let reader = RingSigner::new(path.clone(), false, silent);
        assert!(matches!(reader.key_id(), Err(SignError::Key(_))));
        assert!(!path.exists());
    }
}
