//! Announcing upstream changes to agents: the URIs agents watch are subscribed at their
//! upstream (again on every new session), and what upstreams announce is published to every
//! MCP session as gateway URIs, which forwards what its agent subscribed to.

use async_trait::async_trait;
use quarry_domain::{Error, ErrorCode, ResourceUri};
use quarry_ports::{ChangeFeed, ResourceChange};
use tokio::sync::broadcast;

use crate::{
    ResourceService,
    upstream::{Attempts, MAX_WATCHED},
};

/// Changes held for a reader that has not caught up yet; past that it misses the oldest.
pub(crate) const FEED_DEPTH: usize = 1024;

/// One reader's view of the changes announced since it was made.
pub(crate) struct Feed(pub(crate) broadcast::Receiver<ResourceChange>);

#[async_trait]
impl ChangeFeed for Feed {
    async fn next(&mut self) -> Option<ResourceChange> {
        loop {
            match self.0.recv().await {
                Ok(change) => return Some(change),
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::warn!(
                        missed,
                        "a session fell behind the change feed; changes were not forwarded"
                    );
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

impl ResourceService {
    /// `resources/subscribe` and `subscriptions/listen`: the upstream is asked to announce
    /// changes to `uri`. A server that cannot be reached now is asked once a session is up.
    pub(crate) async fn watch_resource(&self, uri: &ResourceUri) -> Result<(), Error> {
        let upstream = self.upstream_for(uri.server()).await?;
        if !upstream.watched(uri.upstream()) {
            return Err(Error::new(
                ErrorCode::E001,
                format!(
                    "server '{}' already has {MAX_WATCHED} subscribed resources; no more are taken",
                    upstream.name()
                ),
            ));
        }
        let attempts = Attempts {
            retries: 0,
            deadline: Some(upstream.settings.spec.timeout),
            total: Some(upstream.settings.spec.timeout),
        };
        let asked = upstream
            .call(attempts, |session| async move {
                session.subscribe(uri.upstream()).await
            })
            .await;
        match asked {
            Ok(true) => {}
            Ok(false) => {
                tracing::info!(server = %upstream.name(), "the server does not announce changes; subscribers will hear of none");
            }
            Err(e) => {
                tracing::warn!(server = %upstream.name(), "subscribing failed; it is retried with the next session: {e}");
            }
        }
        Ok(())
    }
}
