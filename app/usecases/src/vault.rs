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
}
