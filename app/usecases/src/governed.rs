//! The policy decorator: [`Governed`] wraps the gateway for one agent and asks the policy
//! before anything reaches a use case. Listings show exactly what the agent may read (servers
//! by `may_list_resources`, resources by `may_access_mcp`, protected ones by
//! `may_read_protected_resource` too), before paging; reads and version reads are checked on
//! the exact gateway URI before the cache or an upstream is touched; every change (servers,
//! credentials, the cache) needs `may_configure_mcp`. A denial is E004 with the same text
//! whether the resource exists or not; an engine that cannot decide is E011 (deny).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use async_trait::async_trait;
use quarry_domain::{
    AuthResult, Error, ErrorCode, IdempotencyKey, ListQuery, ListResourcesResult, PolicyRequest,
    Principal, ReadResourceResult, ResourceUri, ResourceVersion, ServerName, ServerSettings,
    ServerStatus, UpstreamAuth,
};
use quarry_ports::{
    GatewayTemplate, PolicyEngine, PurgeReport, ReadRequest, RemovedServer, Requester,
    ResourceGateway,
};

use crate::{ResourceService, list::Visibility};

/// Decisions kept before the cache starts over (a policy is fixed for the decorator's life).
const MAX_CACHED: usize = 100_000;

/// The gateway as one agent may use it.
#[derive(Debug)]
pub struct Governed {
    service: Arc<ResourceService>,
    policy: Arc<dyn PolicyEngine>,
    agent: Principal,
    transport: String,
    decisions: Mutex<HashMap<(PolicyRequest, bool), bool>>,
}

impl Governed {
    /// The gateway for `agent`, reached over `transport` (`stdio`, `http`), under `policy`.
    pub fn new(
        service: Arc<ResourceService>,
        policy: Arc<dyn PolicyEngine>,
        agent: Principal,
        transport: &str,
    ) -> Self {
        Self {
            service,
            policy,
            agent,
            transport: transport.to_owned(),
            decisions: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the policy allows `request`; `protected` says whether its resource is declared
    /// protected. Cached per request.
    async fn allows(&self, request: PolicyRequest, protected: bool) -> Result<bool, Error> {
        let key = (request, protected);
        if let Some(d) = self.lock().get(&key) {
            return Ok(*d);
        }
        let context = [
            ("transport".to_owned(), self.transport.clone()),
            ("protected".to_owned(), protected.to_string()),
        ];
        let decision = self.policy.decide(&key.0, &context).await.map_err(|e| {
            tracing::warn!(agent = %self.agent, "{e}: denied");
            Error::new(ErrorCode::E011, format!("{e}; the request is denied"))
        })?;
        tracing::debug!(agent = %self.agent, request = ?key.0, allowed = decision.allowed, why = %decision.why, "policy decision");
        let mut cache = self.lock();
        if cache.len() >= MAX_CACHED {
            cache.clear();
        }
        cache.insert(key, decision.allowed);
        Ok(decision.allowed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(PolicyRequest, bool), bool>> {
        self.decisions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// May the agent read `resource` of `server`?
    async fn may_read(
        &self,
        server: &ServerName,
        resource: &str,
        protected: bool,
    ) -> Result<bool, Error> {
        let access = PolicyRequest::Access {
            agent: self.agent.clone(),
            server: server.clone(),
            resource: resource.to_owned(),
        };
        if !self.allows(access, protected).await? {
            return Ok(false);
        }
        if !protected {
            return Ok(true);
        }
        let protected_read = PolicyRequest::Protected {
            agent: self.agent.clone(),
            resource: resource.to_owned(),
        };
        self.allows(protected_read, true).await
    }

    /// E004 unless the agent may read `uri`.
    async fn check_read(&self, uri: &ResourceUri) -> Result<(), Error> {
        let protected = self.service.is_protected(uri);
        if self.may_read(uri.server(), uri.as_str(), protected).await? {
            Ok(())
        } else {
            Err(denied(&format!("reading {uri}")))
        }
    }

    /// E004 unless the agent may change servers, credentials and the cache.
    async fn check_configure(&self) -> Result<(), Error> {
        let request = PolicyRequest::Configure {
            agent: self.agent.clone(),
        };
        if self.allows(request, false).await? {
            Ok(())
        } else {
            Err(denied(
                "changing the gateway's servers, credentials or cache",
            ))
        }
    }

    async fn may_list(&self, server: &ServerName) -> Result<bool, Error> {
        let request = PolicyRequest::List {
            agent: self.agent.clone(),
            server: server.clone(),
        };
        self.allows(request, false).await
    }
}

fn denied(what: &str) -> Error {
    Error::new(ErrorCode::E004, format!("access denied by policy: {what}"))
}

#[async_trait]
impl Visibility for Governed {
    async fn server(&self, server: &ServerName) -> Result<bool, Error> {
        self.may_list(server).await
    }

    async fn resources(
        &self,
        resources: &[(ServerName, String, bool)],
    ) -> Result<Vec<bool>, Error> {
        let mut shown = Vec::with_capacity(resources.len());
        for (server, uri, protected) in resources {
            shown.push(self.may_read(server, uri, *protected).await?);
        }
        Ok(shown)
    }

    fn denied(&self, server: &ServerName) -> Error {
        denied(&format!("listing server '{server}'"))
    }
}

#[async_trait]
impl ResourceGateway for Governed {
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
        self.service.read_resource(request).await
    }

    async fn list_templates(&self) -> Result<Vec<GatewayTemplate>, Error> {
        let mut shown = Vec::new();
        for t in self.service.list_templates().await? {
            let server = t
                .uri_template
                .strip_prefix("mcp://")
                .and_then(|r| r.split('/').next());
            if let Some(Ok(name)) = server.map(ServerName::parse)
                && self.may_list(&name).await?
            {
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
        requester: Requester,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<ServerStatus, Error> {
        self.check_configure().await?;
        self.service
            .add_server(server, requester, idempotency_key)
            .await
    }

    async fn remove_server(
        &self,
        name: ServerName,
        requester: Requester,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<RemovedServer, Error> {
        self.check_configure().await?;
        self.service
            .remove_server(name, requester, idempotency_key)
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
        self.check_configure().await?;
        self.service
            .configure_auth(server, auth, test_connection, requester, idempotency_key)
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
        requester: Requester,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<AuthResult, Error> {
        self.check_configure().await?;
        self.service
            .remove_auth(server, force, requester, idempotency_key)
            .await
    }

    async fn refresh_auth(
        &self,
        server: ServerName,
        requester: Requester,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<AuthResult, Error> {
        self.check_configure().await?;
        self.service
            .refresh_auth(server, requester, idempotency_key)
            .await
    }
}
