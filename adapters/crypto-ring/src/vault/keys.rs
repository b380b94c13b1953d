//! The vault's key-encryption keys: where they come from, and key files.
//!
//! A key source holds one or more keys, one per line (or comma-separated in
//! `QUARRY_VAULT_KEY`): the first seals, every one opens. Rotation adds a new first key to a key
//! file, and when every record is re-wrapped, leaves only that one. Key files are replaced
//! atomically (a new file renamed over the old), so a crash leaves the old file or the new one.

use std::{
    io::Write,
    path::{Path, PathBuf},
    sync::Arc,
};

use base64::{Engine, engine::general_purpose::STANDARD};
use ring::{
    aead::{AES_256_GCM, LessSafeKey, UnboundKey},
    rand::{SecureRandom, SystemRandom},
};
use zeroize::Zeroizing;

pub(super) const KEY_LEN: usize = 32;

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
        if bytes.len() != KEY_LEN {
            return Err(format!(
                "a vault key must be base64 of 32 bytes, not {}",
                bytes.len()
            ));
        }
        let mut key = Zeroizing::new([0u8; KEY_LEN]);
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
        format!(
            "k-{}",
            quarry_domain::hex_lower(&ctx.finish().as_ref()[..8])
        )
    }
}

/// Where the key-encryption keys come from.
#[derive(Debug, Clone)]
pub enum KeySource {
    /// The keys themselves, base64, comma-separated, the sealing one first (`QUARRY_VAULT_KEY`).
    Text(Zeroizing<String>),
    /// A key file that must exist.
    File(PathBuf),
    /// A key file created with a new random key (mode 0600) the first time a key is needed.
    CreatedOnFirstUse(PathBuf),
}

impl KeySource {
    fn file(&self) -> Option<&Path> {
        match self {
            Self::Text(_) => None,
            Self::File(path) | Self::CreatedOnFirstUse(path) => Some(path),
        }
    }
}

/// The keys loaded: the first seals, all open.
pub(super) struct Ring {
    pub(super) keys: Vec<(String, Arc<LessSafeKey>)>,
}

impl Ring {
    pub(super) fn current(&self) -> &(String, Arc<LessSafeKey>) {
        &self.keys[0]
    }

    pub(super) fn by_id(&self, id: &str) -> Option<&Arc<LessSafeKey>> {
        self.keys.iter().find(|(k, _)| k == id).map(|(_, key)| key)
    }

    fn of(keys: &[VaultKey]) -> Result<Self, String> {
        if keys.is_empty() {
            return Err("no vault key is given".into());
        }
        let keys = keys
            .iter()
            .map(|k| {
                let unbound = UnboundKey::new(&AES_256_GCM, k.0.as_ref())
                    .map_err(|_| "a vault key was refused by the cipher".to_owned())?;
                Ok((k.id(), Arc::new(LessSafeKey::new(unbound))))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Self { keys })
    }
}

/// Loads the keys of `source`, creating the key file if it says so.
pub(super) fn load(source: &KeySource, on_create: fn(&Path)) -> Result<Ring, String> {
    Ring::of(&read(source, on_create)?)
}

fn read(source: &KeySource, on_create: fn(&Path)) -> Result<Vec<VaultKey>, String> {
    match source {
        KeySource::Text(text) => parse(text).map_err(|e| format!("QUARRY_VAULT_KEY: {e}")),
        KeySource::File(path) => read_file(path),
        KeySource::CreatedOnFirstUse(path) => match read_file(path) {
            Ok(keys) => Ok(keys),
            Err(_) if !path.exists() => {
                let key = VaultKey::generate()?;
                write_file(path, std::slice::from_ref(&key), false)?;
                on_create(path);
                Ok(vec![key])
            }
            Err(e) => Err(e),
        },
    }
}

fn parse(text: &str) -> Result<Vec<VaultKey>, String> {
    text.split([',', '\n'])
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(VaultKey::from_text)
        .collect()
}

fn read_file(path: &Path) -> Result<Vec<VaultKey>, String> {
    let text = Zeroizing::new(
        std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the vault key file {}: {e}", path.display()))?,
    );
    parse(&text).map_err(|e| format!("the vault key file {}: {e}", path.display()))
}

/// Puts a new key first in the source's key file, keeping the others for opening; returns its
/// id. A source that is not a file gets no new key: its first key is the one to re-wrap to.
pub(super) fn add_key(source: &KeySource, on_create: fn(&Path)) -> Result<Option<String>, String> {
    let Some(path) = source.file() else {
        return Ok(None);
    };
    let mut keys = read(source, on_create)?;
    let new = VaultKey::generate()?;
    let id = new.id();
    keys.insert(0, new);
    write_file(path, &keys, true)?;
    Ok(Some(id))
}

/// Leaves only the first key in the source's key file.
pub(super) fn keep_only_current(source: &KeySource, on_create: fn(&Path)) -> Result<(), String> {
    let Some(path) = source.file() else {
        return Ok(());
    };
    let mut keys = read(source, on_create)?;
    keys.truncate(1);
    write_file(path, &keys, true)
}

/// Writes `keys` to a key file readable by its owner only. A new file is never written over an
/// existing one; a replacement is written beside it and renamed over it.
fn write_file(path: &Path, keys: &[VaultKey], replace: bool) -> Result<(), String> {
    let fail =
        |e: std::io::Error| format!("cannot write the vault key file {}: {e}", path.display());
    let target = if replace {
        path.with_extension("key.new")
    } else {
        path.to_path_buf()
    };
    if replace {
        let _ = std::fs::remove_file(&target);
    }
    let mut file = crate::files::create_owner_only(&target).map_err(fail)?;
    for key in keys {
        file.write_all(key.to_text().as_bytes()).map_err(fail)?;
        file.write_all(b"\n").map_err(fail)?;
    }
    file.sync_all().map_err(fail)?;
    if replace {
        std::fs::rename(&target, path).map_err(fail)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
        }
    }
    Ok(())
}
