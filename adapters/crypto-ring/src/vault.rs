//! The vault's cipher: AES-256-GCM envelope encryption with ring.
//!
//! Each record gets a random 256-bit data key; the credential is sealed under it, and the data key
//! is sealed (wrapped) under the key-encryption key. Every seal uses a fresh random 96-bit nonce,
//! and both seals bind the record's identity (server id, auth type, key id) as associated data, so
//! a record moved to another server, type or key fails to open. The key-encryption key comes from
//! `QUARRY_VAULT_KEY`, a key file, or a key file created (mode 0600) on first use.

use std::{
    io::Write,
    path::{Path, PathBuf},
    sync::OnceLock,
};

use base64::{Engine, engine::general_purpose::STANDARD};
use quarry_ports::{CipherError, CredentialCipher, SealIdentity, Sealed};
use ring::{
    aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey},
    rand::{SecureRandom, SystemRandom},
};
use zeroize::Zeroizing;

const KEY_LEN: usize = 32;
const TAG_LEN: usize = 16;

/// A key-encryption key: 32 random bytes, written as base64.
pub struct VaultKey(Zeroizing<[u8; KEY_LEN]>);

impl std::fmt::Debug for VaultKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VaultKey({})", self.id())
    }
}

impl VaultKey {
    /// A new random key.
    ///
    /// # Errors
    /// When the system's random source fails.
    pub fn generate() -> Result<Self, String> {
        let mut key = Zeroizing::new([0u8; KEY_LEN]);
        SystemRandom::new()
            .fill(key.as_mut())
            .map_err(|_| "the system's random source failed".to_owned())?;
        Ok(Self(key))
    }

    /// A key written as base64 of 32 bytes (surrounding whitespace ignored).
    ///
    /// # Errors
    /// When the text is not base64 of exactly 32 bytes; the message never holds the text.
    pub fn from_text(text: &str) -> Result<Self, String> {
        let bytes = Zeroizing::new(
            STANDARD
                .decode(text.trim())
                .map_err(|_| "a vault key must be base64 of 32 bytes".to_owned())?,
        );
        let mut key = Zeroizing::new([0u8; KEY_LEN]);
        if bytes.len() != KEY_LEN {
            return Err(format!(
                "a vault key must be base64 of 32 bytes, not {}",
                bytes.len()
            ));
        }
        key.copy_from_slice(&bytes);
        Ok(Self(key))
    }

    /// The key as base64.
    pub fn to_text(&self) -> Zeroizing<String> {
        Zeroizing::new(STANDARD.encode(self.0.as_ref()))
    }

    /// A public name for the key: the first 8 bytes of a SHA-256 over a label and the key.
    pub fn id(&self) -> String {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        ctx.update(b"quarry vault key id\0");
        ctx.update(self.0.as_ref());
        let digest = ctx.finish();
        let hex: String = digest.as_ref()[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("k-{hex}")
    }
}

/// Where the key-encryption key comes from.
#[derive(Debug, Clone)]
pub enum KeySource {
    /// The key itself (from `QUARRY_VAULT_KEY`).
    Text(Zeroizing<String>),
    /// A key file that must exist.
    File(PathBuf),
    /// A key file created with a new random key (mode 0600) the first time a key is needed.
    CreatedOnFirstUse(PathBuf),
}

/// AES-256-GCM envelope encryption under one key-encryption key, loaded when first needed.
#[derive(Debug)]
pub struct RingCipher {
    source: KeySource,
    key: OnceLock<Result<(String, LessSafeKey), String>>,
    rng: SystemRandom,
    /// Told once when a key file was created, with its path.
    on_create: fn(&Path),
}

impl RingCipher {
    /// A cipher whose key comes from `source`; `on_create` is told the path of a key file it
    /// creates (so the operator learns where it is).
    pub fn new(source: KeySource, on_create: fn(&Path)) -> Self {
        Self {
            source,
            key: OnceLock::new(),
            rng: SystemRandom::new(),
            on_create,
        }
    }

    /// Loads the key now (creating the key file if the source says so).
    ///
    /// # Errors
    /// When the key cannot be read, parsed or created; the message says where and why.
    pub fn load(&self) -> Result<String, String> {
        self.key().map(|(id, _)| id.clone())
    }

    fn key(&self) -> Result<&(String, LessSafeKey), String> {
        self.key
            .get_or_init(|| {
                let key = load_key(&self.source, self.on_create)?;
                let unbound = UnboundKey::new(&AES_256_GCM, key.0.as_ref())
                    .map_err(|_| "the vault key was refused by the cipher".to_owned())?;
                Ok((key.id(), LessSafeKey::new(unbound)))
            })
            .as_ref()
            .map_err(Clone::clone)
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
        let (key_id, kek) = self.key().map_err(CipherError::Failed)?;
        let mut data_key = Zeroizing::new([0u8; KEY_LEN]);
        self.rng
            .fill(data_key.as_mut())
            .map_err(|_| CipherError::Failed("the system's random source failed".into()))?;
        let dek = LessSafeKey::new(
            UnboundKey::new(&AES_256_GCM, data_key.as_ref())
                .map_err(|_| CipherError::Failed("a data key was refused".into()))?,
        );
        let ciphertext =
            self.seal_with(&dek, &associated_data(identity, key_id, "data"), plaintext)?;
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
        let (key_id, kek) = self.key().map_err(CipherError::Failed)?;
        if &sealed.key_id != key_id {
            return Err(CipherError::UnknownKey(sealed.key_id.clone()));
        }
        let data_key = open_with(
            kek,
            &associated_data(identity, key_id, "key"),
            &sealed.wrapped_key,
        )?;
        let dek = LessSafeKey::new(
            UnboundKey::new(&AES_256_GCM, &data_key).map_err(|_| CipherError::Integrity)?,
        );
        open_with(
            &dek,
            &associated_data(identity, key_id, "data"),
            &sealed.ciphertext,
        )
    }
}

fn load_key(source: &KeySource, on_create: fn(&Path)) -> Result<VaultKey, String> {
    match source {
        KeySource::Text(text) => {
            VaultKey::from_text(text).map_err(|e| format!("QUARRY_VAULT_KEY: {e}"))
        }
        KeySource::File(path) => read_key_file(path),
        KeySource::CreatedOnFirstUse(path) => match read_key_file(path) {
            Ok(key) => Ok(key),
            Err(_) if !path.exists() => {
                let key = VaultKey::generate()?;
                write_key_file(path, &key)?;
                on_create(path);
                Ok(key)
            }
            Err(e) => Err(e),
        },
    }
}

fn read_key_file(path: &Path) -> Result<VaultKey, String> {
    let text = Zeroizing::new(
        std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the vault key file {}: {e}", path.display()))?,
    );
    VaultKey::from_text(&text).map_err(|e| format!("the vault key file {}: {e}", path.display()))
}

/// Writes a new key file, readable by its owner only; never replaces an existing file.
fn write_key_file(path: &Path, key: &VaultKey) -> Result<(), String> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let fail =
        |e: std::io::Error| format!("cannot create the vault key file {}: {e}", path.display());
    let mut file = options.open(path).map_err(fail)?;
    file.write_all(key.to_text().as_bytes()).map_err(fail)?;
    file.write_all(b"\n").map_err(fail)?;
    file.sync_all().map_err(fail)
}

#[cfg(test)]
mod tests;
