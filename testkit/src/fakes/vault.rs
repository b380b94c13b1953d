//! Fakes of the vault's ports: a credential store in memory, and a cipher that only pretends to
//! encrypt (it binds the identity, so a record opens for its own server only). Both can be
//! taken down.

use std::{
    collections::HashMap,
    sync::{
        Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use async_trait::async_trait;
use quarry_domain::ServerName;
use quarry_ports::{
    CipherError, CredentialCipher, CredentialStore, SealIdentity, Sealed, StoreError,
    StoredCredential,
};
use zeroize::Zeroizing;

/// Sealed credentials in memory.
#[derive(Debug, Default)]
pub struct FakeCredentialStore {
    rows: Mutex<HashMap<ServerName, StoredCredential>>,
    down: AtomicBool,
}

impl FakeCredentialStore {
    /// Takes the store down or back up.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    fn check(
        &self,
    ) -> Result<std::sync::MutexGuard<'_, HashMap<ServerName, StoredCredential>>, StoreError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable(
                "the fake credential store is down".into(),
            ));
        }
        Ok(self.rows.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[async_trait]
impl CredentialStore for FakeCredentialStore {
    async fn put(&self, credential: &StoredCredential) -> Result<(), StoreError> {
        self.check()?
            .insert(credential.server.clone(), credential.clone());
        Ok(())
    }

    async fn get(&self, server: &ServerName) -> Result<Option<StoredCredential>, StoreError> {
        Ok(self.check()?.get(server).cloned())
    }

    async fn remove(&self, server: &ServerName) -> Result<bool, StoreError> {
        Ok(self.check()?.remove(server).is_some())
    }

    async fn all(&self) -> Result<Vec<StoredCredential>, StoreError> {
        let mut all: Vec<_> = self.check()?.values().cloned().collect();
        all.sort_by(|a, b| a.server.cmp(&b.server));
        Ok(all)
    }

    async fn replace_sealed(
        &self,
        server: &ServerName,
        old: &Sealed,
        new: &Sealed,
    ) -> Result<bool, StoreError> {
        let mut rows = self.check()?;
        match rows.get_mut(server) {
            Some(row) if &row.sealed == old => {
                row.sealed = new.clone();
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

/// A cipher that keeps the plaintext readable (it is a fake) but binds the identity: a record
/// opens only for the identity it was sealed for.
#[derive(Debug, Default)]
pub struct FakeCipher {
    down: AtomicBool,
}

impl FakeCipher {
    /// Makes every seal and open fail (a missing or wrong key) or work again.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    fn label(identity: &SealIdentity) -> Vec<u8> {
        format!("{}/{}|", identity.server_id.as_str(), identity.auth_type).into_bytes()
    }
}

impl CredentialCipher for FakeCipher {
    fn seal(&self, identity: &SealIdentity, plaintext: &[u8]) -> Result<Sealed, CipherError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(CipherError::Failed("the fake cipher has no key".into()));
        }
        let mut ciphertext = Self::label(identity);
        ciphertext.extend_from_slice(plaintext);
        Ok(Sealed {
            key_id: "k-fake".into(),
            wrapped_key: Vec::new(),
            ciphertext,
        })
    }

    fn open(
        &self,
        identity: &SealIdentity,
        sealed: &Sealed,
    ) -> Result<Zeroizing<Vec<u8>>, CipherError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(CipherError::UnknownKey(sealed.key_id.clone()));
        }
        sealed
            .ciphertext
            .strip_prefix(Self::label(identity).as_slice())
            .map(|plain| Zeroizing::new(plain.to_vec()))
            .ok_or(CipherError::Integrity)
    }

    fn begin_rotation(&self) -> Result<String, CipherError> {
        Ok("k-fake".into())
    }

    fn rewrap(&self, identity: &SealIdentity, sealed: &Sealed) -> Result<Sealed, CipherError> {
        self.open(identity, sealed)?;
        Ok(sealed.clone())
    }

    fn finish_rotation(&self) -> Result<(), CipherError> {
        Ok(())
    }
}
