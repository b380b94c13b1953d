//! Every registered server: those of the configuration file, and those added at runtime.

use std::{
    sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard},
    time::Duration,
};

use quarry_domain::{Error, ErrorCode, ServerName, ServerSelector, ServerSettings};

use crate::upstream::{Upstream, Wiring};

/// The registered servers, sorted by name.
#[derive(Debug)]
pub(crate) struct Upstreams {
    servers: RwLock<Vec<Arc<Upstream>>>,
    configured: Vec<ServerName>,
    wiring: Wiring,
}

impl Upstreams {
    pub(crate) fn new(settings: Vec<ServerSettings>, wiring: Wiring) -> Self {
        let configured = settings.iter().map(|s| s.name().clone()).collect();
        let mut servers: Vec<Arc<Upstream>> = settings
            .into_iter()
            .map(|s| Upstream::new(s, wiring.clone()))
            .collect();
        servers.sort_by(|a, b| a.name().cmp(b.name()));
        Self {
            servers: RwLock::new(servers),
            configured,
            wiring,
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, Vec<Arc<Upstream>>> {
        self.servers.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Vec<Arc<Upstream>>> {
        self.servers.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Every server.
    pub(crate) fn all(&self) -> Vec<Arc<Upstream>> {
        self.read().clone()
    }

    /// True for a server of the configuration file.
    pub(crate) fn is_configured(&self, name: &ServerName) -> bool {
        self.configured.contains(name)
    }

    /// Adds a server.
    ///
    /// # Errors
    /// E001 when the name is taken, exactly or but for letter case, or the id is.
    pub(crate) fn insert(&self, settings: ServerSettings) -> Result<Arc<Upstream>, Error> {
        let mut servers = self.write();
        let name = settings.name();
        if let Some(taken) = servers
            .iter()
            .find(|u| u.name() == name || u.name().collides_with(name))
        {
            return Err(Error::invalid(format!(
                "a server named '{}' is already registered{}",
                taken.name(),
                if taken.name() == name {
                    ""
                } else {
                    " (names must differ by more than letter case)"
                }
            )));
        }
        if let Some(taken) = servers
            .iter()
            .find(|u| u.settings.spec.id == settings.spec.id)
        {
            return Err(Error::invalid(format!(
                "server '{}' already has the id {}",
                taken.name(),
                settings.spec.id
            )));
        }
        let upstream = Upstream::new(settings, self.wiring.clone());
        servers.push(upstream.clone());
        servers.sort_by(|a, b| a.name().cmp(b.name()));
        Ok(upstream)
    }

    /// Takes a server out of the registry (its sessions are the caller's to close).
    pub(crate) fn take(&self, name: &ServerName) -> Option<Arc<Upstream>> {
        let mut servers = self.write();
        let at = servers.iter().position(|u| u.name() == name)?;
        Some(servers.remove(at))
    }

    /// The server with exactly this name.
    ///
    /// # Errors
    /// E003 when no server has this name.
    pub(crate) fn by_name(&self, name: &ServerName) -> Result<Arc<Upstream>, Error> {
        self.read()
            .iter()
            .find(|u| u.name() == name)
            .cloned()
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
        let all = self.all();
        let Some(sel) = selector else { return Ok(all) };
        let found: Vec<_> = all
            .into_iter()
            .filter(|u| sel.selects(&u.settings.spec.name, &u.settings.spec.id))
            .collect();
        if found.is_empty() {
            Err(not_registered(sel.as_str()))
        } else {
            Ok(found)
        }
    }

    /// Drains and closes every server's sessions.
    pub(crate) async fn close_all(&self, drain: Duration) {
        let all = self.all();
        futures::future::join_all(all.iter().map(|u| u.close(drain))).await;
    }
}

fn not_registered(name: &str) -> Error {
    let shown: String = name.chars().take(128).collect();
    Error::new(
        ErrorCode::E003,
        format!("server '{shown}' is not registered"),
    )
}
