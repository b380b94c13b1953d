//! The credential vault as the use cases see it: a server's credential sealed on the way in and
//! opened on the way out, so only the cipher and the connection ever hold plaintext.

use std::sync::Arc;

use quarry_domain::{Error, ErrorCode, ServerName, ServerSpec, UpstreamAuth};
use quarry_ports::{
    Clock, CredentialCipher, CredentialStore, SealIdentity, StoredCredential, UpstreamError,
};

use crate::store_failed;

/// Sealed credentials, one per server.
#[derive(Debug, Clone)]
pub(crate) struct Vault {
    pub(crate) store: Arc<dyn CredentialStore>,
    pub(crate) cipher: Arc<dyn CredentialCipher>,
    pub(crate) clock: Arc<dyn Clock>,
}

impl Vault {
    /// The credential to connect to `spec` with, if one is stored.
    ///
    /// # Errors
    /// [`UpstreamError::Unauthorized`] when the stored credential cannot be read or opened (the
    /// vault key is missing or wrong, the record was altered): connecting without it would only
    /// be refused.
    pub(crate) async fn credential(
        &self,
        spec: &ServerSpec,
    ) -> Result<Option<UpstreamAuth>, UpstreamError> {
        let unusable = |why: String| {
            UpstreamError::Unauthorized(format!(
                "the stored credential for '{}' cannot be used: {why}",
                spec.name
            ))
        };
        let Some(stored) = self
            .store
            .get(&spec.name)
            .await
            .map_err(|e| unusable(e.to_string()))?
        else {
            return Ok(None);
        };
        // The identity is the server's as configured now: a record moved from another server
        // fails to open.
        let identity = SealIdentity {
            server_id: spec.id.clone(),
            auth_type: stored.identity.auth_type,
        };
        let plaintext = self
            .cipher
            .open(&identity, &stored.sealed)
            .map_err(|e| unusable(e.to_string()))?;
        UpstreamAuth::from_plaintext(identity.auth_type, &plaintext)
            .map(Some)
            .map_err(|e| unusable(e.message().to_owned()))
    }

    /// Seals and stores `auth` as the credential of `spec`.
    ///
    /// # Errors
    /// E005 when it cannot be sealed (no usable vault key); E012 when the store fails.
    pub(crate) async fn put(&self, spec: &ServerSpec, auth: &UpstreamAuth) -> Result<(), Error> {
        let identity = SealIdentity {
            server_id: spec.id.clone(),
            auth_type: auth.auth_type(),
        };
        let sealed = self
            .cipher
            .seal(&identity, &auth.to_plaintext())
            .map_err(|e| {
                Error::new(
                    ErrorCode::E005,
                    format!("the credential cannot be stored: {e}"),
                )
            })?;
        self.store
            .put(&StoredCredential {
                server: spec.name.clone(),
                identity,
                sealed,
                updated_at: self.clock.now(),
            })
            .await
            .map_err(store_failed)
    }

    /// Removes the credential of `server`; true when there was one.
    ///
    /// # Errors
    /// E012 when the store fails.
    pub(crate) async fn remove(&self, server: &ServerName) -> Result<bool, Error> {
        self.store.remove(server).await.map_err(store_failed)
    }

    /// Opens every stored credential once: all of them must open under the keys configured.
    ///
    /// # Errors
    /// E005 naming the servers whose credentials do not open, and the keys they were sealed
    /// with; E012 when the store fails.
    pub(crate) async fn check(&self) -> Result<usize, Error> {
        let all = self.store.all().await.map_err(store_failed)?;
        let unopened: Vec<String> = all
            .iter()
            .filter_map(|c| match self.cipher.open(&c.identity, &c.sealed) {
                Ok(_) => None,
                Err(e) => Some(format!("'{}' ({e})", c.server)),
            })
            .collect();
        if unopened.is_empty() {
            return Ok(all.len());
        }
        Err(Error::new(
            ErrorCode::E005,
            format!(
                "the vault key does not open the stored credentials of {}; set QUARRY_VAULT_KEY or \
                 security.vault_key_file to the key they were stored under, or store them again \
                 with `quarry auth configure`",
                unopened.join(", ")
            ),
        ))
    }

    /// Re-wraps every stored credential under a new key, telling `progress` (done, total) as it
    /// goes; the old keys open records until every one is re-wrapped, then only the new key is
    /// kept. Safe to run while gateways serve, and to run again after an interruption.
    ///
    /// # Errors
    /// E005 when a new key cannot be made or a record cannot be opened (the old keys are then
    /// kept); E012 when the store fails.
    pub(crate) async fn rotate(
        &self,
        progress: &(dyn Fn(usize, usize) + Send + Sync),
    ) -> Result<VaultRotation, Error> {
        let refused = |e: quarry_ports::CipherError| {
            Error::new(
                ErrorCode::E005,
                format!("the vault key cannot be rotated: {e}"),
            )
        };
        let key_id = self.cipher.begin_rotation().map_err(refused)?;
        let all = self.store.all().await.map_err(store_failed)?;
        let total = all.len();
        let mut rewrapped = 0;
        for (done, mut record) in all.into_iter().enumerate() {
            // A record changed meanwhile (configured again) is read again; one sealed under
            // the new key is done.
            for _ in 0..3 {
                if record.sealed.key_id == key_id {
                    break;
                }
                let new = self.cipher.rewrap(&record.identity, &record.sealed).map_err(|e| {
                    Error::new(
                        ErrorCode::E005,
                        format!(
                            "the credential of '{}' cannot be re-wrapped ({e}); the old keys are kept",
                            record.server
                        ),
                    )
                })?;
                if self
                    .store
                    .replace_sealed(&record.server, &record.sealed, &new)
                    .await
                    .map_err(store_failed)?
                {
                    rewrapped += 1;
                    break;
                }
                match self.store.get(&record.server).await.map_err(store_failed)? {
                    Some(now) => record = now,
                    None => break,
                }
            }
            progress(done + 1, total);
        }
        let left = self
            .store
            .all()
            .await
            .map_err(store_failed)?
            .into_iter()
            .filter(|c| c.sealed.key_id != key_id)
            .count();
        if left > 0 {
            return Err(Error::new(
                ErrorCode::E005,
                format!("{left} credential(s) are still under an old key; run the rotation again"),
            ));
        }
        self.cipher.finish_rotation().map_err(refused)?;
        Ok(VaultRotation {
            key_id,
            rewrapped,
            total,
        })
    }
}

/// What a key rotation did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct VaultRotation {
    /// The key every credential is now sealed under.
    pub key_id: String,
    /// Credentials re-wrapped by this rotation.
    pub rewrapped: usize,
    /// Credentials stored.
    pub total: usize,
}
