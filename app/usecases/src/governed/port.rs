//! The driving port through the policy decorator: each method asks the policy first.

use async_trait::async_trait;
use quarry_domain::{
    AuditFilter, AuthResult, Endpoint, Error, IdempotencyKey, ListQuery, ListResourcesResult,
    ReadResourceResult, ResourceUri, ResourceVersion, ServerName, ServerSettings, ServerStatus,
    UpstreamAuth,
};
use quarry_ports::{
    AuditPage, GatewayTemplate, PurgeReport, ReadRequest, RemovedServer, Requester, ResourceGateway,
};

use super::Governed;

#[async_trait]
impl ResourceGateway for Governed {
    fn for_request(
        self: std::sync::Arc<Self>,
        _meta: quarry_ports::RequestMeta,
    ) -> std::sync::Arc<dyn ResourceGateway> {
        self
    }

    async fn list_resources(&self, query: ListQuery) -> Result<ListResourcesResult, Error> {
        let mut result = self.service.list(query, Some(self)).await?;
        let mut shown = Vec::with_capacity(result.servers.len());
        for s in result.servers {
            if self.may_list(&s.server_name).await? {
                shown.push(s);
            }
        }
        result.servers = shown;
        Ok(result)
    }

    async fn read_resource(&self, mut request: ReadRequest) -> Result<ReadResourceResult, Error> {
        self.check_read(&request.uri).await?;
        request.principal = self.agent.clone();
        // The policy decided this read for this agent: no one else may be served it from a
        // shared cache on the strength of that decision.
        let mut result = self.service.read_resource(request).await?;
        result.cache = result.cache.private();
        Ok(result)
    }

    async fn watch(&self, uri: &ResourceUri) -> Result<(), Error> {
        // Hearing that a resource changed tells something of it: only readers may.
        self.check_read(uri).await?;
        self.service.watch(uri).await
    }

    fn changes(&self) -> Box<dyn quarry_ports::ChangeFeed> {
        self.service.changes()
    }

    async fn list_templates(&self) -> Result<Vec<GatewayTemplate>, Error> {
        let mut shown = Vec::new();
        for t in self.service.list_templates().await? {
            if self.may_list(&t.server).await? {
                shown.push(t);
            }
        }
        Ok(shown)
    }

    async fn servers(&self) -> Vec<ServerStatus> {
        let mut shown = Vec::new();
        for s in self.service.servers().await {
            if self.may_list(&s.server_name).await.unwrap_or(false) {
                shown.push(s);
            }
        }
        shown
    }

    async fn versions(&self, uri: &ResourceUri) -> Result<Vec<ResourceVersion>, Error> {
        self.check_read(uri).await?;
        self.service.versions(uri).await
    }

    async fn purge(
        &self,
        server: Option<ServerName>,
        uri: Option<ResourceUri>,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<PurgeReport, Error> {
        self.check_configure().await?;
        self.service.purge(server, uri, idempotency_key).await
    }

    async fn add_server(
        &self,
        server: ServerSettings,
        _requester: Requester,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<ServerStatus, Error> {
        let command = matches!(server.spec.endpoint, Endpoint::Stdio { .. });
        self.check_register(command).await?;
        self.service
            .add_server(server, Requester::Governed, idempotency_key)
            .await
    }

    async fn remove_server(
        &self,
        name: ServerName,
        _requester: Requester,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<RemovedServer, Error> {
        self.check_register(false).await?;
        self.service
            .remove_server(name, Requester::Governed, idempotency_key)
            .await
    }

    async fn configure_auth(
        &self,
        server: ServerName,
        auth: UpstreamAuth,
        test_connection: bool,
        _requester: Requester,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<AuthResult, Error> {
        self.check_configure().await?;
        self.service
            .configure_auth(
                server,
                auth,
                test_connection,
                Requester::Governed,
                idempotency_key,
            )
            .await
    }

    async fn test_auth(&self, server: ServerName) -> Result<AuthResult, Error> {
        self.check_configure().await?;
        self.service.test_auth(server).await
    }

    async fn remove_auth(
        &self,
        server: ServerName,
        force: bool,
        _requester: Requester,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<AuthResult, Error> {
        self.check_configure().await?;
        self.service
            .remove_auth(server, force, Requester::Governed, idempotency_key)
            .await
    }

    async fn refresh_auth(
        &self,
        server: ServerName,
        _requester: Requester,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<AuthResult, Error> {
        self.check_configure().await?;
        self.service
            .refresh_auth(server, Requester::Governed, idempotency_key)
            .await
    }

    async fn export_audit(
        &self,
        filter: AuditFilter,
        after: u64,
        limit: usize,
    ) -> Result<AuditPage, Error> {
        self.check_configure().await?;
        self.service.export_audit(filter, after, limit).await
    }
}
