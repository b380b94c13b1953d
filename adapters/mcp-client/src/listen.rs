//! Hearing of changes from a modern (2026-07-28) upstream, which has no `resources/subscribe`:
//! one `subscriptions/listen` stream per subscribed URI, and one for the resource list, each read
//! by a task that tells the application's observer. The streams end with their session.

use std::sync::{Arc, Mutex};

use quarry_domain::ServerName;
use quarry_ports::{UpstreamError, UpstreamObserver};
use rmcp::{
    RoleClient,
    model::{ServerNotification, SubscriptionFilter},
    service::Peer,
};
use tokio::task::AbortHandle;

use crate::errors::from_service;

/// A session's listening streams.
#[derive(Debug)]
pub(crate) struct Listens {
    server: ServerName,
    observer: Arc<dyn UpstreamObserver>,
    tasks: Mutex<Vec<AbortHandle>>,
}

impl Listens {
    pub(crate) fn new(server: ServerName, observer: Arc<dyn UpstreamObserver>) -> Arc<Self> {
        Arc::new(Self {
            server,
            observer,
            tasks: Mutex::new(Vec::new()),
        })
    }

    /// Opens a stream for `filter` and waits for the upstream's acknowledgment (within
    /// `timeout`); what it then announces reaches the observer until the session ends.
    pub(crate) async fn open(
        &self,
        peer: &Peer<RoleClient>,
        filter: SubscriptionFilter,
        timeout: std::time::Duration,
    ) -> Result<(), UpstreamError> {
        let mut stream = tokio::time::timeout(timeout, peer.listen(filter))
            .await
            .map_err(|_| {
                UpstreamError::Timeout(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX))
            })?
            .map_err(|e| from_service(e, false))?;
        let (server, observer) = (self.server.clone(), self.observer.clone());
        let task = tokio::spawn(async move {
            while let Ok(Some(notification)) = stream.next().await {
                match notification {
                    ServerNotification::ResourceUpdatedNotification(n) => {
                        observer.resource_updated(&server, &n.params.uri).await;
                    }
                    ServerNotification::ResourceListChangedNotification(_) => {
                        observer.resources_changed(&server).await;
                    }
                    _ => {}
                }
            }
            tracing::debug!(server = %server, "an upstream subscription stream ended");
        });
        self.tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(task.abort_handle());
        Ok(())
    }

    /// Ends every stream (their requests are cancelled).
    pub(crate) fn close(&self) {
        for task in self
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            task.abort();
        }
    }
}

impl Drop for Listens {
    fn drop(&mut self) {
        self.close();
    }
}
