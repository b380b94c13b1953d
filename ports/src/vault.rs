//! The credential vault: a cipher that seals credentials (a cryptography adapter) and a store
//! that keeps only what it sealed (a database adapter). Plaintext never reaches the store.

use async_trait::async_trait;
use quarry_domain::{AuthType, ServerId, ServerName, Timestamp};
use zeroize::Zeroizing;

use crate::StoreError;

/// What a sealed record is bound to: opening it as anything else fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealIdentity {
    /// The server the credential is for.
    pub server_id: ServerId,
    /// The credential's type.
    pub auth_type: AuthType,
}

/// A credential as the cipher sealed it: opaque bytes and the key that wrapped them.
#[derive(Clone, PartialEq, Eq)]
pub struct Sealed {
    /// The key-encryption key's id (which key can open it).
    pub key_id: String,
    /// The record's data key, wrapped by that key (nonce, ciphertext, tag).
    pub wrapped_key: Vec<u8>,
    /// The credential under the data key (nonce, ciphertext, tag).
    pub ciphertext: Vec<u8>,
}

impl std::fmt::Debug for Sealed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealed")
            .field("key_id", &self.key_id)
            .field(
                "wrapped_key",
                &format_args!("{} bytes", self.wrapped_key.len()),
            )
            .field(
                "ciphertext",
                &format_args!("{} bytes", self.ciphertext.len()),
            )
            .finish()
    }
}

/// Why a record could not be sealed or opened. Never carries plaintext.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CipherError {
    /// The record was sealed under a key this cipher does not hold.
    #[error("the credential was sealed with key {0}, which is not the vault key configured")]
    UnknownKey(String),
    /// The record was altered, moved to another identity, or is not a sealed record.
    #[error("the credential failed its integrity check (altered, or stored for another server)")]
    Integrity,
    /// The system's random source or cipher failed.
    #[error("the cipher failed: {0}")]
    Failed(String),
}

/// Seals and opens credentials (AES-256-GCM envelope encryption in the adapter).
///
/// Contract: `open(identity, seal(identity, p)) == p`; opening with another identity, with any
/// byte of the sealed record changed, or under another key fails ([`CipherError::Integrity`] or
/// [`CipherError::UnknownKey`]) and yields no plaintext. Two seals of the same plaintext differ.
#[cfg_attr(feature = "mocks", mockall::automock)]
pub trait CredentialCipher: Send + Sync + std::fmt::Debug {
    /// Seals `plaintext` for `identity`.
    fn seal(&self, identity: &SealIdentity, plaintext: &[u8]) -> Result<Sealed, CipherError>;

    /// Opens a record sealed for `identity`.
    fn open(
        &self,
        identity: &SealIdentity,
        sealed: &Sealed,
    ) -> Result<Zeroizing<Vec<u8>>, CipherError>;

    /// Starts a key rotation: where the cipher keeps its keys (a key file) a new key becomes the
    /// one that seals, and the old ones still open. Returns the id of the key records are to be
    /// re-wrapped under.
    fn begin_rotation(&self) -> Result<String, CipherError>;

    /// The record re-wrapped under the sealing key: it opens to the same plaintext.
    fn rewrap(&self, identity: &SealIdentity, sealed: &Sealed) -> Result<Sealed, CipherError>;

    /// Ends a rotation: only the sealing key is kept.
    fn finish_rotation(&self) -> Result<(), CipherError>;
}

/// One stored credential: who it is for, what it is, and the sealed bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCredential {
    /// The server's name (one credential per server).
    pub server: ServerName,
    /// What it was sealed for.
    pub identity: SealIdentity,
    /// The sealed record.
    pub sealed: Sealed,
    /// When it was stored.
    pub updated_at: Timestamp,
}

/// Keeps sealed credentials, one per server.
///
/// Contract: `put` replaces the server's credential; `get` and `all` return exactly what was
/// put; `remove` says whether there was one; `replace_sealed` changes a record only while it is
/// still the one it was given. The store sees sealed bytes only.
///
/// # Errors
/// Every method: [`StoreError::Unavailable`] when the backend cannot be reached;
/// [`StoreError::Corrupt`] when a stored row cannot be read back.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait CredentialStore: Send + Sync + std::fmt::Debug {
    /// Stores (or replaces) a server's credential.
    async fn put(&self, credential: &StoredCredential) -> Result<(), StoreError>;

    /// The server's credential, if any.
    async fn get(&self, server: &ServerName) -> Result<Option<StoredCredential>, StoreError>;

    /// Removes the server's credential; true when there was one.
    async fn remove(&self, server: &ServerName) -> Result<bool, StoreError>;

    /// Every stored credential, by server name.
    async fn all(&self) -> Result<Vec<StoredCredential>, StoreError>;

    /// Replaces the server's sealed record with `new` only if it is still `old` (a credential
    /// configured meanwhile is kept); true when it was replaced.
    async fn replace_sealed(
        &self,
        server: &ServerName,
        old: &Sealed,
        new: &Sealed,
    ) -> Result<bool, StoreError>;
}
