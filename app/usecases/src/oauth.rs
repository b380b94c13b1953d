//! OAuth 2 credentials beyond configure, test and remove: `mcp_auth_refresh` (renew now,
//! without a person) and `quarry auth login` (a person signs in; the tokens are sealed).

use std::sync::Arc;

use quarry_domain::{
    AuthResult, ConnectionStatus, Error, ErrorCode, IdempotencyKey, OAuthCredential, Payload,
    ServerName, UpstreamAuth,
};
use quarry_ports::{Browser, OAuthFailure, Requester};
use serde_json::json;

use crate::service::ResourceService;

/// What a sign-in may set beyond what the stored credential holds.
#[derive(Debug, Clone, Default)]
pub struct SignIn {
    /// A pre-registered client id.
    pub client_id: Option<String>,
    /// Its secret.
    pub client_secret: Option<quarry_domain::Secret>,
    /// The URL of Quarry's client ID metadata document.
    pub client_metadata_url: Option<String>,
    /// The scopes to ask for.
    pub scope: Option<String>,
}

impl ResourceService {
    /// `mcp_auth_refresh` and `quarry auth refresh`.
    pub(crate) async fn refresh_credential(
        &self,
        server: ServerName,
        requester: Requester,
        key: Option<IdempotencyKey>,
    ) -> Result<AuthResult, Error> {
        self.check_agent_may_register(requester, None)?;
        let payload = Payload::of(&json!({ "server": server }))?;
        self.idempotency
            .once("mcp_auth_refresh", key, payload, || async {
                self.sync_registry().await;
                let upstream = self.upstreams.by_name(&server)?;
                let stored = self
                    .vault
                    .credential(&upstream.settings.spec)
                    .await
                    .map_err(|e| e.into_error(server.as_str()))?;
                let Some(auth @ UpstreamAuth::OAuth2(_)) = stored else {
                    let what = stored.map_or("no credential".to_owned(), |a| {
                        format!("a {} credential", a.auth_type())
                    });
                    return Err(Error::invalid(format!(
                        "server '{server}' has {what}: only OAuth 2 tokens are refreshed"
                    )));
                };
                let Some(tokens) = upstream.tokens_for(Some(&auth)) else {
                    return Err(Error::internal());
                };
                if let Err(e) = tokens.renew_now().await {
                    let error = e.into_error(server.as_str());
                    return Ok(AuthResult {
                        success: false,
                        server_id: upstream.settings.spec.id.clone(),
                        connection_status: Some(ConnectionStatus::Authenticating),
                        error_code: Some(error.code()),
                        error_message: Some(error.message().to_owned()),
                        latency_ms: None,
                    });
                }
                tracing::info!(server = %server, "OAuth token refreshed");
                Ok(self.try_connection(&upstream).await)
            })
            .await
    }

    /// `quarry auth login SERVER`: the authorization-code flow, `browser` shown the URL; the
    /// tokens are sealed as the server's credential, and a connection is tried with them.
    ///
    /// # Errors
    /// E003 for an unknown server; E001 for a stdio server; E005 when the sign-in fails (the
    /// message says at which step); E012 when the store fails.
    pub async fn sign_in(
        &self,
        server: ServerName,
        with: SignIn,
        browser: Arc<dyn Browser>,
    ) -> Result<AuthResult, Error> {
        self.sync_registry().await;
        let upstream = self.upstreams.by_name(&server)?;
        let spec = &upstream.settings.spec;
        if matches!(spec.endpoint, quarry_domain::Endpoint::Stdio { .. }) {
            return Err(Error::invalid(format!(
                "server '{server}' is a stdio program: OAuth is for HTTP servers"
            )));
        }
        let mut credential = match self.vault.credential(spec).await {
            Ok(Some(UpstreamAuth::OAuth2(stored))) => *stored,
            _ => OAuthCredential::new(quarry_domain::OAuthGrant::AuthorizationCode),
        };
        credential.access_token = None;
        credential.refresh_token = None;
        credential.expires_at = None;
        if with.client_id.is_some() {
            credential.client_id = with.client_id;
            credential.client_secret = with.client_secret;
            credential.token_endpoint_auth_method = None;
        }
        if with.client_metadata_url.is_some() {
            credential.client_metadata_url = with.client_metadata_url;
        }
        if with.scope.is_some() {
            credential.scope = with.scope;
        }
        let signed_in = upstream
            .sign_in(&credential, browser.as_ref())
            .await
            .map_err(|e| {
                let why = match e {
                    OAuthFailure::NeedsLogin(why) | OAuthFailure::Unavailable(why) => why,
                };
                Error::new(
                    ErrorCode::E005,
                    format!("signing in to '{server}' failed: {why}"),
                )
            })?;
        self.vault
            .put(spec, &UpstreamAuth::OAuth2(Box::new(signed_in)))
            .await?;
        upstream.credential_changed().await;
        tracing::info!(server = %server, "signed in with OAuth");
        Ok(self.try_connection(&upstream).await)
    }
}
