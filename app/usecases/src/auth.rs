//! McpAuthTool's use cases: configure a server's credential (sealed into the vault), test the
//! connection with it, remove it. Agents may change credentials only where the registry tools
//! are allowed (`registry.allow_tool_registration`); operators always may.

use std::sync::Arc;

use quarry_domain::{
    AuthResult, ConnectionStatus, Endpoint, Error, ErrorCode, IdempotencyKey, Payload, ResourceUri,
    ServerName, UpstreamAuth,
};
use quarry_ports::Requester;
use serde_json::json;

use crate::{service::ResourceService, upstream::Upstream};

impl ResourceService {
    /// `mcp_auth_configure` and `quarry auth configure`.
    pub(crate) async fn configure_credential(
        &self,
        server: ServerName,
        auth: UpstreamAuth,
        test_connection: bool,
        requester: Requester,
        key: Option<IdempotencyKey>,
    ) -> Result<AuthResult, Error> {
        self.check_agent_may_register(requester, None)?;
        // The payload names what is configured, never the secret: a key reused with another
        // secret replays the first result.
        let header = match &auth {
            UpstreamAuth::ApiKey { header, .. } => Some(header.clone()),
            _ => None,
        };
        let payload = Payload::of(&json!({
            "server": server,
            "auth_type": auth.auth_type().as_str(),
            "header": header,
            "test_connection": test_connection,
        }))?;
        self.idempotency
            .once("mcp_auth_configure", key, payload, || async {
                self.sync_registry().await;
                let upstream = self.upstreams.by_name(&server)?;
                if matches!(upstream.settings.spec.endpoint, Endpoint::Stdio { .. }) {
                    return Err(Error::invalid(format!(
                        "server '{server}' is a stdio program: it takes its secrets in `env`; \
                         credentials are sent to HTTP servers"
                    )));
                }
                upstream
                    .check_auth(&auth)
                    .map_err(|e| Error::invalid(format!("credentials: {e}")))?;
                self.vault.put(&upstream.settings.spec, &auth).await?;
                upstream.credential_changed().await;
                tracing::info!(server = %server, auth_type = %auth.auth_type(), "credential configured");
                if test_connection {
                    return Ok(self.try_connection(&upstream).await);
                }
                Ok(done(&upstream))
            })
            .await
    }

    /// `mcp_auth_test` and `quarry auth test`.
    pub(crate) async fn test_connection(&self, server: ServerName) -> Result<AuthResult, Error> {
        self.sync_registry().await;
        let upstream = self.upstreams.by_name(&server)?;
        Ok(self.try_connection(&upstream).await)
    }

    /// `mcp_auth_remove` and `quarry auth remove`.
    pub(crate) async fn remove_credential(
        &self,
        server: ServerName,
        force: bool,
        requester: Requester,
        key: Option<IdempotencyKey>,
    ) -> Result<AuthResult, Error> {
        self.check_agent_may_register(requester, None)?;
        let payload = Payload::of(&json!({ "server": server, "force": force }))?;
        self.idempotency
            .once("mcp_auth_remove", key, payload, || async {
                self.sync_registry().await;
                let upstream = self.upstreams.by_name(&server)?;
                if matches!(upstream.settings.spec.endpoint, Endpoint::Stdio { .. }) {
                    return Err(Error::invalid(format!(
                        "server '{server}' is a stdio program: its secrets are its `env`, part of \
                         its registration (remove or add the server again to change them)"
                    )));
                }
                let busy = upstream.in_flight().await;
                if busy > 0 && !force {
                    return Err(Error::invalid(format!(
                        "{busy} request(s) to '{server}' are in flight; try again when they are \
                         done, or remove the credential anyway with force"
                    )));
                }
                if !self.vault.remove(&server).await? {
                    return Err(Error::invalid(format!(
                        "server '{server}' has no credential to remove"
                    )));
                }
                upstream.credential_changed().await;
                tracing::info!(server = %server, "credential removed");
                Ok(done(&upstream))
            })
            .await
    }

    /// True when the configuration declares `uri` protected.
    pub(crate) fn is_protected(&self, uri: &ResourceUri) -> bool {
        self.upstreams
            .by_name(uri.server())
            .is_ok_and(|u| u.settings.protection.covers(uri.upstream()))
    }

    /// A protected resource is read only with a credential for its server, checked before each
    /// access (from the cache too) where `security.require_auth_for_protected` is set.
    ///
    /// # Errors
    /// E005 when the resource is protected and the server has no usable credential.
    pub(crate) async fn check_protected(
        &self,
        upstream: &Upstream,
        uri: &ResourceUri,
    ) -> Result<(), Error> {
        if !self.options.require_auth_for_protected
            || !upstream.settings.protection.covers(uri.upstream())
        {
            return Ok(());
        }
        let server = upstream.name();
        match self.vault.credential(&upstream.settings.spec).await {
            // An OAuth credential is valid only while its tokens can be had without a person.
            Ok(Some(_)) if upstream.needs_sign_in() => Err(Error::new(
                ErrorCode::E005,
                format!(
                    "{uri} is protected and the OAuth grant of server '{server}' needs a new \
                     sign-in (quarry auth login {server})"
                ),
            )),
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(Error::new(
                ErrorCode::E005,
                format!(
                    "{uri} is protected: reading it needs a credential for server '{server}' \
                     (quarry auth configure {server})"
                ),
            )),
            Err(e) => Err(e.into_error(server.as_str())),
        }
    }

    /// Connects afresh with the stored credential, initialises and lists once.
    pub(crate) async fn try_connection(&self, upstream: &Arc<Upstream>) -> AuthResult {
        let started = self.clock.monotonic();
        let outcome = async {
            let session = upstream.open_alone().await?;
            let listed = match session.list_resources().await {
                // A server without resources still accepted the connection.
                Err(quarry_ports::UpstreamError::MethodNotFound) => Ok(()),
                other => other.map(|_| ()),
            };
            session.close().await;
            listed
        }
        .await;
        let elapsed = self.clock.monotonic().saturating_sub(started);
        let latency_ms = Some(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX));
        let server_id = upstream.settings.spec.id.clone();
        match outcome {
            Ok(()) => AuthResult {
                success: true,
                server_id,
                connection_status: Some(ConnectionStatus::Connected),
                error_code: None,
                error_message: None,
                latency_ms,
            },
            Err(e) => {
                let error = e.into_error(upstream.name().as_str());
                AuthResult {
                    success: false,
                    server_id,
                    connection_status: Some(ConnectionStatus::Error),
                    error_code: Some(error.code()),
                    error_message: Some(error.message().to_owned()),
                    latency_ms,
                }
            }
        }
    }
}

/// A change that needed no connection.
fn done(upstream: &Upstream) -> AuthResult {
    AuthResult {
        success: true,
        server_id: upstream.settings.spec.id.clone(),
        connection_status: None,
        error_code: None,
        error_message: None,
        latency_ms: None,
    }
}
