//! One upstream's side of its credential: sessions replaced when it changes, and a session of
//! its own for a connection test.

use std::sync::Arc;

use quarry_ports::{UpstreamError, UpstreamObserver, UpstreamSession};

use super::{Upstream, lock};

impl Upstream {
    /// What the connector says of `auth` beyond its shape (a certificate and key that match).
    pub(crate) fn check_auth(
        &self,
        auth: &quarry_domain::UpstreamAuth,
    ) -> Result<(), UpstreamError> {
        self.wiring.connector.check_auth(auth)
    }

    /// Requests to this server in flight now.
    pub(crate) async fn in_flight(&self) -> usize {
        self.pool.in_flight().await
    }

    /// Its credential changed: sessions opened before end (once their requests are done), and
    /// the next request opens one with the new credential.
    pub(crate) async fn credential_changed(&self) {
        self.pool.replace_all().await;
        let mut r = lock(&self.status);
        r.authenticated = false;
        r.last_error = None;
        drop(r);
        self.breaker.succeeded();
    }

    /// A fresh session outside the pool, with the stored credential: for a connection test.
    pub(crate) async fn open_alone(&self) -> Result<Arc<dyn UpstreamSession>, UpstreamError> {
        let spec = &self.settings.spec;
        let auth = self.wiring.vault.credential(spec).await?;
        let observer: Arc<dyn UpstreamObserver> = self.wiring.invalidator.clone();
        self.wiring
            .connector
            .connect(spec, auth.as_ref(), observer)
            .await
    }
}
