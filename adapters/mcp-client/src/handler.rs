//! The client side of a session: what Quarry tells an upstream about itself and what it does with
//! the upstream's notifications.

use std::sync::Arc;

use quarry_domain::ServerName;
use quarry_ports::UpstreamObserver;
use rmcp::{
    ClientHandler, RoleClient,
    model::{ClientConfig, ResourceUpdatedNotificationParam},
    service::NotificationContext,
};

/// Forwards an upstream's resource notifications to the application's observer.
#[derive(Debug, Clone)]
pub(crate) struct UpstreamHandler {
    server: ServerName,
    info: ClientConfig,
    observer: Arc<dyn UpstreamObserver>,
}

impl UpstreamHandler {
    pub(crate) fn new(
        server: ServerName,
        info: ClientConfig,
        observer: Arc<dyn UpstreamObserver>,
    ) -> Self {
        Self {
            server,
            info,
            observer,
        }
    }
}

impl UpstreamHandler {
    /// The server it is for, and who is told of its changes.
    pub(crate) fn observer(&self) -> (ServerName, Arc<dyn UpstreamObserver>) {
        (self.server.clone(), self.observer.clone())
    }
}

impl ClientHandler for UpstreamHandler {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        tracing::debug!(server = %self.server, uri = %quarry_domain::sanitize_label(&params.uri), "upstream resource updated");
        self.observer
            .resource_updated(&self.server, &params.uri)
            .await;
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        tracing::debug!(server = %self.server, "upstream resource list changed");
        self.observer.resources_changed(&self.server).await;
    }
}
