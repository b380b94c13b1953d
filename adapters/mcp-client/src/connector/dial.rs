//! Dialling a streamable HTTP endpoint: rmcp's transport over Quarry's guarded reqwest client,
//! with the credential's headers, the message bounds and session recovery.

use std::{collections::HashMap, sync::Arc, time::Duration};

use quarry_domain::{ServerSpec, UpstreamAuth, sanitize_label};
use quarry_ports::{AccessTokens, UpstreamError};
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::{
    service::ClientServiceExt,
    transport::{
        StreamableHttpClientTransport, common::client_side_sse::ExponentialBackoff,
        streamable_http_client::StreamableHttpClientTransportConfig,
    },
};

use super::RmcpConnector;
use crate::{
    correlated::Correlated, coverage::Coverage, handler::UpstreamHandler, http::GuardedHttp,
    session::Seen,
};

impl RmcpConnector {
    /// The MCP handshake with the streamable HTTP server at `url`, within `spec`'s timeout.
    pub(crate) async fn dial(
        &self,
        spec: &ServerSpec,
        url: &str,
        auth: Option<&UpstreamAuth>,
        tokens: Option<Arc<dyn AccessTokens>>,
        handler: UpstreamHandler,
    ) -> Result<(Dialled, Seen), UpstreamError> {
        let deadline = spec.timeout;
        let timeout_ms = u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX);
        let mut retry = ExponentialBackoff::default();
        retry.max_times = Some(3);
        retry.max_delay = Some(Duration::from_secs(30));
        // A message over the bound answers its own request (E008); see `http.rs`.
        let bound = self.max_message_bytes();
        let mut config = StreamableHttpClientTransportConfig::with_uri(url)
            .max_json_response_size(bound)
            .max_sse_event_size(bound)
            .reinit_on_expired_session(true)
            .custom_headers(auth_headers(auth)?);
        config.retry_config = Arc::new(retry);
        let oauth = tokens.is_some();
        let (server, observer) = handler.observer();
        let coverage = Coverage::new(server, observer);
        let http = GuardedHttp::new(self.client_for(spec, auth)?, tokens, coverage.clone());
        let refused = http.refusals();
        let transport = Correlated::new(
            StreamableHttpClientTransport::with_client(http, config),
            coverage.clone(),
        );
        let skipped = transport.skipped();
        let lifecycle = self.eras.lifecycle(&spec.name);
        let served =
            tokio::time::timeout(deadline, handler.serve_with_lifecycle(transport, lifecycle))
                .await
                .map_err(|_| UpstreamError::Timeout(timeout_ms))
                .inspect_err(|_| self.eras.forget(&spec.name))?;
        let service = served
            .inspect_err(|_| self.eras.failed(&spec.name))
            .map_err(|e| match refused.last() {
                None if refused.tls().is_some() => UpstreamError::Tls(format!(
                    "'{}' at {}: {}",
                    spec.name,
                    sanitize_label(url),
                    refused.tls().unwrap_or_default()
                )),
                Some(why) => UpstreamError::Unauthorized(format!(
                    "'{}' at {} refused the connection: {why}{}",
                    spec.name,
                    sanitize_label(url),
                    if auth.is_some() || oauth {
                        ""
                    } else {
                        " (no credential is configured for it)"
                    }
                )),
                None => UpstreamError::Unreachable(format!(
                    "MCP handshake with '{}' at {} failed: {}",
                    spec.name,
                    sanitize_label(url),
                    sanitize_label(&e.to_string())
                )),
            })?;
        self.learned(spec, &service);
        Ok((service, (skipped, coverage)))
    }

    /// Remembers the era `service` agreed on with `spec`'s server.
    pub(super) fn learned(&self, spec: &ServerSpec, service: &Dialled) {
        if let Some(info) = service.peer_info() {
            tracing::debug!(server = %spec.name, protocol = %info.protocol_version, "session opened");
            self.eras.learn(&spec.name, &info.protocol_version);
        }
    }
}

/// A session rmcp runs over HTTP.
pub(crate) type Dialled = rmcp::service::RunningService<rmcp::RoleClient, UpstreamHandler>;

/// The headers that carry `auth`, marked sensitive so no HTTP library logs them.
fn auth_headers(
    auth: Option<&UpstreamAuth>,
) -> Result<HashMap<HeaderName, HeaderValue>, UpstreamError> {
    let mut headers = HashMap::new();
    for (name, value) in auth.map(UpstreamAuth::headers).unwrap_or_default() {
        let bad = || {
            UpstreamError::Unauthorized(format!("the credential's header {name} cannot be sent"))
        };
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad())?;
        let mut value = HeaderValue::from_str(value.expose()).map_err(|_| bad())?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    Ok(headers)
}
