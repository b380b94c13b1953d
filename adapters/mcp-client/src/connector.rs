//! Opening sessions: spawning stdio children or dialling streamable HTTP endpoints (`dial.rs`).

mod dial;

use std::{process::Stdio, sync::Arc, time::Duration};

use async_trait::async_trait;
use quarry_domain::{Endpoint, ServerSpec, UpstreamAuth, sanitize_label};
use quarry_ports::{
    AccessTokens, TraceContext, UpstreamConnector, UpstreamError, UpstreamObserver, UpstreamSession,
};
use rmcp::{
    model::{ClientConfig, Implementation, ProtocolVersion},
    service::ClientServiceExt,
};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};

use crate::{
    correlated::Correlated, coverage::Coverage, eras::Eras, handler::UpstreamHandler, listen,
    session::RmcpSession, stdio::ChildTransport,
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
    /// The current request's trace, carried to upstreams when traces are exported.
    trace: Option<Arc<dyn TraceContext>>,
    /// What each server spoke last.
    eras: Eras,
    /// The listen streams of each HTTP server, shared by its sessions.
    listens: listen::Shared,
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
        let http = http_client()
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Self {
            http,
            max_content_bytes,
            trace: None,
            eras: Eras::default(),
            listens: listen::Shared::default(),
        })
    }

    /// Requests to upstreams carry the current request's trace (`_meta.traceparent`, and the
    /// `traceparent` header over HTTP), as `trace` tells it.
    #[must_use]
    pub fn with_trace(mut self, trace: Arc<dyn TraceContext>) -> Self {
        self.trace = Some(trace);
        self
    }

    /// The largest JSON-RPC message accepted: base64 grows content by 4/3, plus room for the
    /// envelope.
    fn max_message_bytes(&self) -> usize {
        let encoded = self.max_content_bytes.saturating_mul(4) / 3 + 64 * 1024;
        usize::try_from(encoded).unwrap_or(usize::MAX)
    }
}

/// The HTTP client every upstream connection starts from: TLS 1.3 at least, no redirects
/// (credentials go in headers, and must not follow one to another origin).
fn http_client() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(10))
        .pool_idle_timeout(Duration::from_secs(90))
        .tls_version_min(reqwest::tls::Version::TLS_1_3)
}

/// A client certificate and key as reqwest takes them; errors say what is wrong, never a value.
fn identity(certificate: &str, private_key: &str) -> Result<reqwest::Identity, UpstreamError> {
    let pem = zeroize::Zeroizing::new(format!("{certificate}\n{private_key}\n"));
    let refused = || {
        UpstreamError::Unauthorized(
            "the client certificate or its private key does not parse, or they do not belong together"
                .into(),
        )
    };
    let identity = reqwest::Identity::from_pem(pem.as_bytes()).map_err(|_| refused())?;
    // Building a client with it is what checks that the key is the certificate's.
    http_client()
        .identity(identity.clone())
        .build()
        .map_err(|_| refused())?;
    Ok(identity)
}

impl RmcpConnector {
    /// The client for one server: the shared one, or one of its own where it has a client
    /// certificate, a private CA or allows TLS 1.2.
    fn client_for(
        &self,
        spec: &ServerSpec,
        auth: Option<&UpstreamAuth>,
    ) -> Result<reqwest::Client, UpstreamError> {
        let certificate = match auth {
            Some(UpstreamAuth::ClientCertificate {
                certificate,
                private_key,
            }) => Some(identity(certificate, private_key.expose())?),
            _ => None,
        };
        if certificate.is_none() && spec.tls == quarry_domain::TlsPolicy::default() {
            return Ok(self.http.clone());
        }
        let mut builder = tls_builder(spec)?;
        if let Some(identity) = certificate {
            builder = builder.identity(identity);
        }
        builder.build().map_err(|e| {
            UpstreamError::Unreachable(format!(
                "cannot build the HTTPS client for '{}': {}",
                spec.name,
                sanitize_label(&e.to_string())
            ))
        })
    }
}

/// A client builder for `spec`'s server as its TLS policy says: TLS 1.3 (or 1.2 where allowed),
/// the system's roots or the server's own CA file, no redirects.
pub(crate) fn tls_builder(spec: &ServerSpec) -> Result<reqwest::ClientBuilder, UpstreamError> {
    let mut builder = http_client();
    if spec.tls.allow_tls12 {
        builder = builder.tls_version_min(reqwest::tls::Version::TLS_1_2);
    }
    if let Some(file) = &spec.tls.ca_file {
        let unusable = |why: String| {
            UpstreamError::Tls(format!(
                "the CA file {} of '{}' {why}",
                sanitize_label(file),
                spec.name
            ))
        };
        let pem = std::fs::read(file).map_err(|e| unusable(format!("cannot be read: {e}")))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|_| unusable("holds no PEM certificate".into()))?;
        if certs.is_empty() {
            return Err(unusable("holds no PEM certificate".into()));
        }
        builder = builder.tls_certs_only(certs);
    }
    Ok(builder)
}

/// What Quarry tells upstreams of itself. It asks for the modern era first (see `eras.rs`); a
/// server that answers as a legacy one is offered the newest version with the initialize
/// handshake (2025-11-25), and servers that know only older ones negotiate down.
pub(crate) fn client_info() -> ClientConfig {
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
    fn check_auth(&self, auth: &UpstreamAuth) -> Result<(), UpstreamError> {
        match auth {
            UpstreamAuth::ClientCertificate {
                certificate,
                private_key,
            } => identity(certificate, private_key.expose()).map(|_| ()),
            _ => Ok(()),
        }
    }

    async fn connect<'a>(
        &self,
        spec: &ServerSpec,
        auth: Option<&'a UpstreamAuth>,
        tokens: Option<Arc<dyn AccessTokens>>,
        observer: Arc<dyn UpstreamObserver>,
    ) -> Result<Arc<dyn UpstreamSession>, UpstreamError> {
        let before = self.eras.known(&spec.name);
        let first = self
            .connect_once(spec, auth, tokens.clone(), observer.clone())
            .await;
        // A server found to speak only the legacy era is asked again at once, the legacy way.
        match first {
            Err(_) if before.is_none() && self.eras.known(&spec.name) == Some(false) => {
                self.connect_once(spec, auth, tokens, observer).await
            }
            other => other,
        }
    }
}

impl RmcpConnector {
    /// One attempt at a session with `spec`'s server, in the era [`Eras`] suggests.
    async fn connect_once(
        &self,
        spec: &ServerSpec,
        auth: Option<&UpstreamAuth>,
        tokens: Option<Arc<dyn AccessTokens>>,
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
                let (server, observer) = handler.observer();
                let coverage = Coverage::new(server, observer);
                let transport =
                    Correlated::new(ChildTransport::new(stdout, stdin, limit), coverage.clone());
                let skipped = transport.skipped();
                let lifecycle = self.eras.lifecycle(&spec.name);
                let service = tokio::time::timeout(
                    deadline,
                    handler.clone().serve_with_lifecycle(transport, lifecycle),
                )
                .await
                .map_err(|_| UpstreamError::Timeout(timeout_ms))
                .and_then(|served| {
                    served
                        .inspect_err(|_| self.eras.failed(&spec.name))
                        .map_err(|e| {
                            UpstreamError::Unreachable(format!(
                                "MCP handshake with '{}' failed: {}",
                                spec.name,
                                sanitize_label(&e.to_string())
                            ))
                        })
                })?;
                self.learned(spec, &service);
                Ok(Arc::new(
                    RmcpSession::new(
                        spec.clone(),
                        service,
                        Some(child),
                        self.max_content_bytes,
                        (skipped, coverage),
                        &self.listens,
                    )
                    .await
                    .traced(self.trace.clone()),
                ))
            }
            Endpoint::Http { url } => {
                let (service, seen) = self.dial(spec, url, auth, tokens, handler).await?;
                Ok(Arc::new(
                    RmcpSession::new(
                        spec.clone(),
                        service,
                        None,
                        self.max_content_bytes,
                        seen,
                        &self.listens,
                    )
                    .await
                    .traced(self.trace.clone()),
                ))
            }
        }
    }
}
