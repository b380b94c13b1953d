//! A probe of one streamable HTTP server, outside any pool: connect (authenticating as the
//! server demands), list its tools and resources, and optionally call one tool. For operators
//! checking a server before registering it, and for the conformance suite's client scenarios.

use std::sync::Arc;

use async_trait::async_trait;
use quarry_domain::{Endpoint, ServerName, ServerSpec, sanitize_label};
use quarry_ports::{AccessTokens, UpstreamError, UpstreamObserver};
use rmcp::model::CallToolRequestParams;

use crate::{RmcpConnector, errors::from_service, handler::UpstreamHandler};

/// What a probe found.
#[derive(Debug, Clone)]
pub struct Probe {
    /// The name the server gave.
    pub server: String,
    /// The protocol version agreed.
    pub protocol_version: String,
    /// Its tools' names.
    pub tools: Vec<String>,
    /// How many resources its first listing page held (none: it offers no resources).
    pub resources: Option<usize>,
    /// The tool called, and whether it reported an error.
    pub called: Option<(String, bool)>,
}

#[derive(Debug)]
struct Unheard;

#[async_trait]
impl UpstreamObserver for Unheard {
    async fn resource_updated(&self, _server: &ServerName, _upstream_uri: &str) {}
    async fn resources_changed(&self, _server: &ServerName) {}
    async fn unheard(&self, _server: &ServerName) {}
}

impl RmcpConnector {
    /// Probes `spec`'s server (see the module), sending the tokens `tokens` holds.
    ///
    /// # Errors
    /// What connecting gives ([`UpstreamError::Unauthorized`] when authentication fails), or
    /// the failure of a listing or the call.
    pub async fn probe(
        &self,
        spec: &ServerSpec,
        tokens: Option<Arc<dyn AccessTokens>>,
        call_tool: Option<&str>,
    ) -> Result<Probe, UpstreamError> {
        let Endpoint::Http { url } = &spec.endpoint else {
            return Err(UpstreamError::Unreachable(
                "only HTTP servers are probed".into(),
            ));
        };
        let handler = UpstreamHandler::new(
            spec.name.clone(),
            crate::connector::client_info(),
            Arc::new(Unheard),
        );
        let (service, _) = self.dial(spec, url, None, tokens, handler).await?;
        let info = service.peer_info();
        let with_deadline = |what: &'static str| {
            let ms = u64::try_from(spec.timeout.as_millis()).unwrap_or(u64::MAX);
            move |_| UpstreamError::Timeout(ms).to_string() + what
        };
        let tools = match tokio::time::timeout(spec.timeout, service.list_tools(None))
            .await
            .map_err(|e| UpstreamError::Unreachable(with_deadline(" listing tools")(e)))?
        {
            Ok(list) => list.tools.into_iter().map(|t| t.name.to_string()).collect(),
            Err(e) => match from_service(e, false) {
                UpstreamError::MethodNotFound => Vec::new(),
                other => return Err(other),
            },
        };
        let resources = match tokio::time::timeout(spec.timeout, service.list_resources(None))
            .await
            .map_err(|e| UpstreamError::Unreachable(with_deadline(" listing resources")(e)))?
        {
            Ok(page) => Some(page.resources.len()),
            Err(e) => match from_service(e, false) {
                UpstreamError::MethodNotFound => None,
                other => return Err(other),
            },
        };
        let called = match call_tool {
            None => None,
            Some(name) => {
                let result = tokio::time::timeout(
                    spec.timeout,
                    service.call_tool(CallToolRequestParams::new(name.to_owned())),
                )
                .await
                .map_err(|e| UpstreamError::Unreachable(with_deadline(" calling the tool")(e)))?
                .map_err(|e| from_service(e, false))?;
                Some((sanitize_label(name), result.is_error.unwrap_or(false)))
            }
        };
        let _ = service.cancel().await;
        Ok(Probe {
            server: info
                .as_ref()
                .and_then(|i| i.server_info.as_ref())
                .map(|s| sanitize_label(&s.name))
                .unwrap_or_default(),
            protocol_version: info
                .map(|i| i.protocol_version.to_string())
                .unwrap_or_default(),
            tools,
            resources,
            called,
        })
    }
}
