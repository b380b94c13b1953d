//! The vault's cipher: AES-256-GCM envelope encryption with ring.
//!
//! Each record gets a random 256-bit data key; the credential is sealed under it, and the data key
//! is sealed (wrapped) under the key-encryption key. Every seal uses a fresh random 96-bit nonce;
//! both seals bind the record's identity (server id, auth type) as associated data, and the wrap
//! binds the key's id too, so a record moved to another server, type or key fails to open.
//! Rotation re-wraps only the data key: the credential's ciphertext never changes. The keys come
//! from `QUARRY_VAULT_KEY`, a key file, or a key file created (mode 0600) on first use.

mod keys;

use std::{
    path::Path,
    sync::{Arc, RwLock},
};

use keys::Ring;
pub use keys::{KeySource, VaultKey};
use quarry_ports::{CipherError, CredentialCipher, SealIdentity, Sealed};
use ring::{
    aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey},
    rand::{SecureRandom, SystemRandom},
};
use zeroize::Zeroizing;

const TAG_LEN: usize = 16;

/// AES-256-GCM envelope encryption under the key-encryption keys of a source, loaded when first
/// needed and again when a record names a key they do not hold (another process rotated them).
pub struct RingCipher {
    source: KeySource,
    ring: RwLock<Option<Arc<Ring>>>,
    rng: SystemRandom,
    /// Told once when a key file was created, with its path.
    on_create: fn(&Path),
}

impl std::fmt::Debug for RingCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingCipher")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl RingCipher {
    /// A cipher whose key comes from `source`; `on_create` is told the path of a key file it
    /// creates (so the operator learns where it is).
    pub fn new(source: KeySource, on_create: fn(&Path)) -> Self {
        Self {
            source,
            ring: RwLock::new(None),
            rng: SystemRandom::new(),
            on_create,
        }
    }

    /// Loads the key now (creating the key file if the source says so).
    ///
    /// # Errors
    /// When the key cannot be read, parsed or created; the message says where and why.
    pub fn load(&self) -> Result<String, String> {
        self.ring().map(|r| r.current().0.clone())
    }

    fn ring(&self) -> Result<Arc<Ring>, String> {
        if let Some(ring) = self.ring.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
            return Ok(ring.clone());
        }
        self.reload()
    }

    fn reload(&self) -> Result<Arc<Ring>, String> {
        let ring = Arc::new(keys::load(&self.source, self.on_create)?);
        *self.ring.write().unwrap_or_else(|e| e.into_inner()) = Some(ring.clone());
        Ok(ring)
    }

    /// The key that opens a record sealed under `key_id`, reading the source again once if the
    /// keys loaded do not hold it.
    fn opener(&self, key_id: &str) -> Result<Arc<LessSafeKey>, CipherError> {
        let ring = self.ring().map_err(CipherError::Failed)?;
        if let Some(key) = ring.by_id(key_id) {
            return Ok(key.clone());
        }
        let ring = self.reload().map_err(CipherError::Failed)?;
        ring.by_id(key_id)
            .cloned()
            .ok_or_else(|| CipherError::UnknownKey(key_id.to_owned()))
    }

    fn data_key(
        &self,
        identity: &SealIdentity,
        sealed: &Sealed,
    ) -> Result<Zeroizing<Vec<u8>>, CipherError> {
        let kek = self.opener(&sealed.key_id)?;
        open_with(
            &kek,
            &associated_data(identity, &sealed.key_id, "key"),
            &sealed.wrapped_key,
        )
    }

    fn nonce(&self) -> Result<[u8; NONCE_LEN], CipherError> {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng
            .fill(&mut nonce)
            .map_err(|_| CipherError::Failed("the system's random source failed".into()))?;
        Ok(nonce)
    }

    /// `nonce || ciphertext || tag` of `plaintext` under `key`.
    fn seal_with(
        &self,
        key: &LessSafeKey,
        aad: &[u8],
        plaintext: &[u8],
    ) -> Result<Vec<u8>, CipherError> {
        let nonce = self.nonce()?;
        let mut out = Vec::with_capacity(NONCE_LEN + plaintext.len() + TAG_LEN);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plaintext);
        let tag = key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut out[NONCE_LEN..],
            )
            .map_err(|_| CipherError::Failed("sealing failed".into()))?;
        out.extend_from_slice(tag.as_ref());
        Ok(out)
    }
}

fn open_with(
    key: &LessSafeKey,
    aad: &[u8],
    sealed: &[u8],
) -> Result<Zeroizing<Vec<u8>>, CipherError> {
    if sealed.len() < NONCE_LEN + TAG_LEN {
        return Err(CipherError::Integrity);
    }
    let (nonce, body) = sealed.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| CipherError::Integrity)?;
    let mut buffer = Zeroizing::new(body.to_vec());
    let len = key
        .open_in_place(nonce, Aad::from(aad), buffer.as_mut_slice())
        .map_err(|_| CipherError::Integrity)?
        .len();
    buffer.truncate(len);
    Ok(buffer)
}

/// The associated data of a record: a label, its identity and the key id, NUL-separated.
fn associated_data(identity: &SealIdentity, key_id: &str, part: &str) -> Vec<u8> {
    format!(
        "quarry-vault/v1\0{part}\0{}\0{}\0{key_id}",
        identity.server_id.as_str(),
        identity.auth_type.as_str()
    )
    .into_bytes()
}

impl CredentialCipher for RingCipher {
    fn seal(&self, identity: &SealIdentity, plaintext: &[u8]) -> Result<Sealed, CipherError> {
        let ring = self.ring().map_err(CipherError::Failed)?;
        let (key_id, kek) = ring.current();
        let mut data_key = Zeroizing::new([0u8; keys::KEY_LEN]);
        self.rng
            .fill(data_key.as_mut())
            .map_err(|_| CipherError::Failed("the system's random source failed".into()))?;
        let dek = LessSafeKey::new(
            UnboundKey::new(&AES_256_GCM, data_key.as_ref())
                .map_err(|_| CipherError::Failed("a data key was refused".into()))?,
        );
        let ciphertext = self.seal_with(&dek, &associated_data(identity, "", "data"), plaintext)?;
        let wrapped_key = self.seal_with(
            kek,
            &associated_data(identity, key_id, "key"),
            data_key.as_ref(),
        )?;
        Ok(Sealed {
            key_id: key_id.clone(),
            wrapped_key,
            ciphertext,
        })
    }

    fn open(
        &self,
        identity: &SealIdentity,
        sealed: &Sealed,
    ) -> Result<Zeroizing<Vec<u8>>, CipherError> {
        // The data key is bound to the key id too: a record relabelled with another key's id
        // fails its integrity check.
        let data_key = self.data_key(identity, sealed)?;
        let dek = LessSafeKey::new(
            UnboundKey::new(&AES_256_GCM, &data_key).map_err(|_| CipherError::Integrity)?,
        );
        open_with(
            &dek,
            &associated_data(identity, "", "data"),
            &sealed.ciphertext,
        )
    }

    fn begin_rotation(&self) -> Result<String, CipherError> {
        keys::add_key(&self.source, self.on_create).map_err(CipherError::Failed)?;
        let ring = self.reload().map_err(CipherError::Failed)?;
        Ok(ring.current().0.clone())
    }

    fn rewrap(&self, identity: &SealIdentity, sealed: &Sealed) -> Result<Sealed, CipherError> {
        let data_key = self.data_key(identity, sealed)?;
        let ring = self.ring().map_err(CipherError::Failed)?;
        let (key_id, kek) = ring.current();
        let wrapped_key =
            self.seal_with(kek, &associated_data(identity, key_id, "key"), &data_key)?;
        Ok(Sealed {
            key_id: key_id.clone(),
            wrapped_key,
            ..sealed.clone()
        })
    }

    fn finish_rotation(&self) -> Result<(), CipherError> {
        keys::keep_only_current(&self.source, self.on_create).map_err(CipherError::Failed)?;
        self.reload().map(|_| ()).map_err(CipherError::Failed)
    }
}

#[cfg(test)]
mod tests;
