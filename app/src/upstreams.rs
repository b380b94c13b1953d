//! The registered upstream servers: one session each, opened when first needed, reopened when it
//! dies, and a status that says honestly what happened last.

use std::sync::{Arc, Mutex};

use quarry_domain::{
    ConnectionStatus, Error, ErrorCode, ServerName, ServerSelector, ServerStatus, Timestamp,
};
use quarry_ports::{UpstreamConnector, UpstreamError, UpstreamObserver, UpstreamSession};

use crate::config::ServerSettings;

/// One registered server.
#[derive(Debug)]
pub(crate) struct Upstream {
    pub(crate) settings: ServerSettings,
    session: tokio::sync::Mutex<Option<Arc<dyn UpstreamSession>>>,
    status: Mutex<StatusRecord>,
}

#[derive(Debug, Clone, Default)]
struct StatusRecord {
    connected: bool,
    resource_count: u64,
    last_used: Option<Timestamp>,
    last_error: Option<String>,
}

impl Upstream {
    fn record(&self) -> std::sync::MutexGuard<'_, StatusRecord> {
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The server's name.
    pub(crate) fn name(&self) -> &ServerName {
        &self.settings.spec.name
    }

    /// The live session, connecting first if there is none or it died; the flag is true when the
    /// session is new. Concurrent callers share one connection attempt.
    pub(crate) async fn session(
        &self,
        connector: &dyn UpstreamConnector,
        observer: Arc<dyn UpstreamObserver>,
    ) -> Result<(Arc<dyn UpstreamSession>, bool), UpstreamError> {
        let mut slot = self.session.lock().await;
        if let Some(session) = slot.as_ref() {
            if !session.is_closed() {
                return Ok((session.clone(), false));
            }
            session.close().await;
            *slot = None;
        }
        match connector.connect(&self.settings.spec, observer).await {
            Ok(session) => {
                *slot = Some(session.clone());
                let mut r = self.record();
                r.connected = true;
                r.last_error = None;
                Ok((session, true))
            }
            Err(e) => {
                self.failed(&e);
                Err(e)
            }
        }
    }

    /// Records a successful use.
    pub(crate) fn used(&self, now: Timestamp) {
        let mut r = self.record();
        r.last_used = Some(now);
        r.connected = true;
    }

    /// Records how many resources the server listed.
    pub(crate) fn listed(&self, count: u64) {
        self.record().resource_count = count;
    }

    /// Records a failure. Failures that end the session mark the server disconnected-in-error;
    /// an answer the server gave (not found, its own error) leaves it connected.
    pub(crate) fn failed(&self, error: &UpstreamError) {
        let mut r = self.record();
        match error {
            UpstreamError::NotFound(_)
            | UpstreamError::TooLarge { .. }
            | UpstreamError::MethodNotFound => {}
            other => {
                r.last_error = Some(other.to_string());
                if matches!(
                    other,
                    UpstreamError::Unreachable(_) | UpstreamError::Timeout(_)
                ) {
                    r.connected = false;
                }
            }
        }
    }

    /// The status as listings report it.
    pub(crate) fn status(&self) -> ServerStatus {
        let r = self.record().clone();
        let spec = &self.settings.spec;
        let status = match (r.connected, &r.last_error) {
            (true, _) => ConnectionStatus::Connected,
            (false, Some(_)) => ConnectionStatus::Error,
            (false, None) => ConnectionStatus::Disconnected,
        };
        ServerStatus {
            server_id: spec.id.clone(),
            server_name: spec.name.clone(),
            endpoint: spec.endpoint.display_uri(),
            status,
            authenticated: false,
            resource_count: r.resource_count,
            last_used: r.last_used,
            last_error: r.last_error,
        }
    }

    /// Ends the session, stopping a child process.
    pub(crate) async fn close(&self) {
        if let Some(session) = self.session.lock().await.take() {
            session.close().await;
        }
        self.record().connected = false;
    }
}

/// Every registered server.
#[derive(Debug)]
pub(crate) struct Upstreams {
    servers: Vec<Arc<Upstream>>,
}

impl Upstreams {
    pub(crate) fn new(settings: Vec<ServerSettings>) -> Self {
        Self {
            servers: settings
                .into_iter()
                .map(|settings| {
                    Arc::new(Upstream {
                        settings,
                        session: tokio::sync::Mutex::new(None),
                        status: Mutex::new(StatusRecord::default()),
                    })
                })
                .collect(),
        }
    }

    /// Every server, in name order.
    pub(crate) fn all(&self) -> &[Arc<Upstream>] {
        &self.servers
    }

    /// The server with exactly this name.
    ///
    /// # Errors
    /// E003 when no server has this name.
    pub(crate) fn by_name(&self, name: &ServerName) -> Result<&Arc<Upstream>, Error> {
        self.servers
            .iter()
            .find(|u| u.name() == name)
            .ok_or_else(|| not_registered(name.as_str()))
    }

    /// The servers a listing selects.
    ///
    /// # Errors
    /// E003 when a selector names no registered server.
    pub(crate) fn select(
        &self,
        selector: Option<&ServerSelector>,
    ) -> Result<Vec<Arc<Upstream>>, Error> {
        match selector {
            None => Ok(self.servers.clone()),
            Some(sel) => {
                let found: Vec<_> = self
                    .servers
                    .iter()
                    .filter(|u| sel.selects(&u.settings.spec.name, &u.settings.spec.id))
                    .cloned()
                    .collect();
                if found.is_empty() {
                    Err(not_registered(sel.as_str()))
                } else {
                    Ok(found)
                }
            }
        }
    }

    /// Closes every session.
    pub(crate) async fn close_all(&self) {
        futures::future::join_all(self.servers.iter().map(|u| u.close())).await;
    }
}

fn not_registered(name: &str) -> Error {
    let shown: String = name.chars().take(128).collect();
    Error::new(
        ErrorCode::E003,
        format!("server '{shown}' is not registered"),
    )
}
