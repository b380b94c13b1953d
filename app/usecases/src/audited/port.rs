//! The driving port through the audit decorator: each method's record — what it concerned,
//! a digest of its arguments, and what came of it.

use async_trait::async_trait;
use quarry_domain::{
    AuditFilter, AuthResult, Error, IdempotencyKey, ListQuery, ListResourcesResult,
    ReadResourceResult, ResourceUri, ResourceVersion, ServerName, ServerSettings, ServerStatus,
    UpstreamAuth,
};
use quarry_ports::RequestMeta;
use quarry_ports::{
    AuditPage, GatewayTemplate, PurgeReport, ReadRequest, RemovedServer, Requester, ResourceGateway,
};
use serde_json::json;
use std::sync::Arc;

use super::{Audited, Outcome, Subject, content_bytes, range_text, server_subject, uri_subject};

#[async_trait]
impl ResourceGateway for Audited {
    fn for_request(self: Arc<Self>, meta: RequestMeta) -> Arc<dyn ResourceGateway> {
        Arc::new(self.scoped(meta))
    }

    async fn list_resources(&self, query: ListQuery) -> Result<ListResourcesResult, Error> {
        let input = json!({
            "server": query.server.as_ref().map(|s| s.as_str()),
            "filter_type": format!("{:?}", query.filter_type),
            "limit": format!("{:?}", query.limit),
            "offset": query.offset,
            "use_cache": query.use_cache,
        });
        let subject = Subject {
            server: query.server.as_ref().map(|s| s.as_str().to_owned()),
            ..Subject::default()
        };
        self.recorded(
            "list",
            input,
            subject,
            self.inner.list_resources(query),
            |r| Outcome {
                cache_status: Some(if r.cached_count > 0 { "hit" } else { "miss" }),
                bytes_returned: None,
            },
        )
        .await
    }

    async fn read_resource(&self, request: ReadRequest) -> Result<ReadResourceResult, Error> {
        let input = json!({
            "uri": request.uri.as_str(),
            "range": range_text(request.range),
            "use_cache": request.use_cache,
            "version": format!("{:?}", request.version),
            "validate_checksum": request.validate_checksum,
        });
        let action = if request.version.is_some() {
            "read_version"
        } else {
            "read"
        };
        let subject = uri_subject(&request.uri, range_text(request.range));
        self.recorded(
            action,
            input,
            subject,
            self.inner.read_resource(request),
            |r| Outcome {
                cache_status: Some(if r.cached { "hit" } else { "miss" }),
                bytes_returned: Some(content_bytes(r)),
            },
        )
        .await
    }

    async fn watch(&self, uri: &ResourceUri) -> Result<(), Error> {
        self.inner.watch(uri).await
    }

    fn changes(&self) -> Box<dyn quarry_ports::ChangeFeed> {
        self.inner.changes()
    }

    async fn list_templates(&self) -> Result<Vec<GatewayTemplate>, Error> {
        self.inner.list_templates().await
    }

    async fn servers(&self) -> Vec<ServerStatus> {
        self.inner.servers().await
    }

    async fn versions(&self, uri: &ResourceUri) -> Result<Vec<ResourceVersion>, Error> {
        self.recorded(
            "versions",
            json!({"uri": uri.as_str()}),
            uri_subject(uri, None),
            self.inner.versions(uri),
            |_| Outcome::default(),
        )
        .await
    }

    async fn purge(
        &self,
        server: Option<ServerName>,
        uri: Option<ResourceUri>,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<PurgeReport, Error> {
        let input = json!({
            "server": server.as_ref().map(ServerName::as_str),
            "uri": uri.as_ref().map(ResourceUri::as_str),
            "idempotency_key": idempotency_key.as_ref().map(IdempotencyKey::as_str),
        });
        let subject = match (&uri, &server) {
            (Some(u), _) => uri_subject(u, None),
            (None, Some(s)) => server_subject(s),
            (None, None) => Subject::default(),
        };
        self.recorded(
            "purge",
            input,
            subject,
            self.inner.purge(server, uri, idempotency_key),
            |_| Outcome::default(),
        )
        .await
    }

    async fn add_server(
        &self,
        server: ServerSettings,
        requester: Requester,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<ServerStatus, Error> {
        let input = json!({
            "server": format!("{:?}", server.spec),
            "idempotency_key": idempotency_key.as_ref().map(IdempotencyKey::as_str),
        });
        let subject = server_subject(&server.spec.name);
        self.recorded(
            "add_server",
            input,
            subject,
            self.inner.add_server(server, requester, idempotency_key),
            |_| Outcome::default(),
        )
        .await
    }

    async fn remove_server(
        &self,
        name: ServerName,
        requester: Requester,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<RemovedServer, Error> {
        let input = json!({
            "server": name.as_str(),
            "idempotency_key": idempotency_key.as_ref().map(IdempotencyKey::as_str),
        });
        let subject = server_subject(&name);
        self.recorded(
            "remove_server",
            input,
            subject,
            self.inner.remove_server(name, requester, idempotency_key),
            |_| Outcome::default(),
        )
        .await
    }

    async fn configure_auth(
        &self,
        server: ServerName,
        auth: UpstreamAuth,
        test_connection: bool,
        requester: Requester,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<AuthResult, Error> {
        // The secret's type only: a digest of a weak secret could be guessed back.
        let input = json!({
            "server": server.as_str(),
            "auth_type": auth.auth_type().as_str(),
            "test_connection": test_connection,
        });
        let subject = server_subject(&server);
        self.recorded(
            "auth_configure",
            input,
            subject,
            self.inner
                .configure_auth(server, auth, test_connection, requester, idempotency_key),
            |_| Outcome::default(),
        )
        .await
    }

    async fn test_auth(&self, server: ServerName) -> Result<AuthResult, Error> {
        let subject = server_subject(&server);
        self.recorded(
            "auth_test",
            json!({"server": server.as_str()}),
            subject,
            self.inner.test_auth(server),
            |_| Outcome::default(),
        )
        .await
    }

    async fn remove_auth(
        &self,
        server: ServerName,
        force: bool,
        requester: Requester,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<AuthResult, Error> {
        let input = json!({"server": server.as_str(), "force": force});
        let subject = server_subject(&server);
        self.recorded(
            "auth_remove",
            input,
            subject,
            self.inner
                .remove_auth(server, force, requester, idempotency_key),
            |_| Outcome::default(),
        )
        .await
    }

    async fn refresh_auth(
        &self,
        server: ServerName,
        requester: Requester,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<AuthResult, Error> {
        let subject = server_subject(&server);
        self.recorded(
            "auth_refresh",
            json!({"server": server.as_str()}),
            subject,
            self.inner.refresh_auth(server, requester, idempotency_key),
            |_| Outcome::default(),
        )
        .await
    }

    async fn export_audit(
        &self,
        filter: AuditFilter,
        after: u64,
        limit: usize,
    ) -> Result<AuditPage, Error> {
        let input = json!({"filter": &filter, "after": after, "limit": limit});
        let subject = Subject {
            server: filter.server.clone(),
            ..Subject::default()
        };
        self.recorded(
            "audit_export",
            input,
            subject,
            self.inner.export_audit(filter, after, limit),
            |_| Outcome::default(),
        )
        .await
    }
}
