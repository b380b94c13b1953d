//! Opening sessions: spawning stdio children or dialling streamable HTTP endpoints.

use std::{collections::HashMap, process::Stdio, sync::Arc, time::Duration};

use async_trait::async_trait;
use quarry_domain::{Endpoint, ServerSpec, UpstreamAuth, sanitize_label};
use quarry_ports::{UpstreamConnector, UpstreamError, UpstreamObserver, UpstreamSession};
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::{
    ServiceExt,
    model::{ClientConfig, Implementation, ProtocolVersion},
    transport::{
        StreamableHttpClientTransport, common::client_side_sse::ExponentialBackoff,
        streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};

use crate::{
    correlated::Correlated, handler::UpstreamHandler, http::GuardedHttp, session::RmcpSession,
    stdio::ChildTransport,
};

/// Environment variables a child inherits from the gateway; everything else it gets must be
/// configured for it explicitly. Secrets in the gateway's environment never leak to upstreams.
const INHERITED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "TZ",
    "SYSTEMROOT",
];

/// Connects to upstream MCP servers with rmcp.
#[derive(Debug, Clone)]
pub struct RmcpConnector {
    http: reqwest::Client,
    max_content_bytes: u64,
}

impl RmcpConnector {
    /// A connector whose sessions accept content up to `max_content_bytes` (the configured
    /// `max_resource_size_mb`); larger messages are refused by the transport itself.
    ///
    /// # Errors
    /// When the HTTP client cannot be built (no TLS roots, for instance).
    pub fn new(max_content_bytes: u64) -> Result<Self, String> {
        // One crypto library for the whole process: rustls over ring. Installing twice is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            // Credentials go in headers: a redirect (to another origin, say) is never followed.
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(90))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Self {
            http,
            max_content_bytes,
        })
    }

    /// The largest JSON-RPC message accepted: base64 grows content by 4/3, plus room for the
    /// envelope.
    fn max_message_bytes(&self) -> usize {
        let encoded = self.max_content_bytes.saturating_mul(4) / 3 + 64 * 1024;
        usize::try_from(encoded).unwrap_or(usize::MAX)
    }
}

/// Quarry offers upstreams the newest protocol with the initialize handshake (2025-11-25), under
/// which `resources/subscribe` announces changes; servers that know only older ones negotiate down.
fn client_info() -> ClientConfig {
    let mut info = ClientConfig::default();
    info.protocol_version = ProtocolVersion::LATEST_WITH_INITIALIZE;
    info.client_info = Implementation::new("quarry", env!("CARGO_PKG_VERSION"));
    info
}

fn spawn_child(
    spec: &ServerSpec,
    command: &str,
    args: &[String],
    env: &std::collections::BTreeMap<String, String>,
    cwd: Option<&str>,
    auth: Option<&UpstreamAuth>,
) -> Result<Child, UpstreamError> {
    let mut cmd = Command::new(command);
    cmd.args(args)
        .env_clear()
        .envs(
            INHERITED_ENV
                .iter()
                .filter_map(|k| std::env::var_os(k).map(|v| (*k, v))),
        )
        .envs(env)
        // The environment kept in the vault (a server registered at runtime) wins.
        .envs(
            auth.map(UpstreamAuth::env)
                .unwrap_or_default()
                .iter()
                .map(|(k, v)| (k.as_str(), v.expose())),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    cmd.spawn().map_err(|e| {
        UpstreamError::Unreachable(format!(
            "cannot start '{}' for server '{}': {e}",
            sanitize_label(command),
            spec.name
        ))
    })
}

/// Forwards a child's stderr to the log, line by line and bounded, so it never reaches the
/// gateway's own stdout.
fn forward_stderr(server: String, child: &mut Child) {
    let Some(stderr) = child.stderr.take() else {
        return;
    };
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::debug!(target: "quarry::upstream", server = %server, "stderr: {}", sanitize_label(&line));
        }
    });
}

#[async_trait]
impl UpstreamConnector for RmcpConnector {
    async fn connect<'a>(
        &self,
        spec: &ServerSpec,
        auth: Option<&'a UpstreamAuth>,
        observer: Arc<dyn UpstreamObserver>,
    ) -> Result<Arc<dyn UpstreamSession>, UpstreamError> {
        let handler = UpstreamHandler::new(spec.name.clone(), client_info(), observer);
        let deadline = spec.timeout;
        let timeout_ms = u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX);
        match &spec.endpoint {
            Endpoint::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let mut child = spawn_child(spec, command, args, env, cwd.as_deref(), auth)?;
                forward_stderr(spec.name.to_string(), &mut child);
                let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
                    return Err(UpstreamError::Unreachable(
                        "child has no stdio pipes".into(),
                    ));
                };
                let limit = self.max_message_bytes();
                let transport = Correlated::new(ChildTransport::new(stdout, stdin, limit));
                let skipped = transport.skipped();
                let service = tokio::time::timeout(deadline, handler.clone().serve(transport))
                    .await
                    .map_err(|_| UpstreamError::Timeout(timeout_ms))?
                    .map_err(|e| {
                        UpstreamError::Unreachable(format!(
                            "MCP handshake with '{}' failed: {}",
                            spec.name,
                            sanitize_label(&e.to_string())
                        ))
                    })?;
                Ok(Arc::new(
                    RmcpSession::new(
                        spec.clone(),
                        service,
                        Some(child),
                        self.max_content_bytes,
                        skipped,
                    )
                    .await,
                ))
            }
            Endpoint::Http { url } => {
                let mut retry = ExponentialBackoff::default();
                retry.max_times = Some(3);
                retry.max_delay = Some(Duration::from_secs(30));
                // A message over the bound answers its own request (E008); see `http.rs`.
                let bound = self.max_message_bytes();
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .max_json_response_size(bound)
                    .max_sse_event_size(bound)
                    .reinit_on_expired_session(true)
                    .custom_headers(auth_headers(auth)?);
                config.retry_config = Arc::new(retry);
                let http = GuardedHttp::new(self.http.clone());
                let refused = http.refusals();
                let transport =
                    Correlated::new(StreamableHttpClientTransport::with_client(http, config));
                let skipped = transport.skipped();
                let service = tokio::time::timeout(deadline, handler.clone().serve(transport))
                    .await
                    .map_err(|_| UpstreamError::Timeout(timeout_ms))?
                    .map_err(|e| match refused.last() {
                        Some(why) => UpstreamError::Unauthorized(format!(
                            "'{}' at {} refused the connection: {why}{}",
                            spec.name,
                            sanitize_label(url),
                            if auth.is_some() {
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
                Ok(Arc::new(
                    RmcpSession::new(spec.clone(), service, None, self.max_content_bytes, skipped)
                        .await,
                ))
            }
        }
    }
}

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
