//! Which protocol era each upstream speaks. The modern one (2026-07-28: `server/discover`, no
//! initialize handshake, `subscriptions/listen`) is tried first, falling back to the 2025-11-25
//! handshake when the server answers as a legacy one; what each server spoke is remembered, so
//! its next session goes straight to it (and a server that stops speaking it is asked afresh).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use quarry_domain::ServerName;
use rmcp::{model::ProtocolVersion, service::ClientLifecycleMode};

/// True for a version of the modern era (2026-07-28 or later).
pub(crate) fn is_modern(version: &ProtocolVersion) -> bool {
    !version.has_initialize()
}

/// What each server spoke last (true: the modern era).
#[derive(Debug, Clone, Default)]
pub(crate) struct Eras(Arc<Mutex<HashMap<ServerName, bool>>>);

impl Eras {
    pub(crate) fn known(&self, server: &ServerName) -> Option<bool> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(server)
            .copied()
    }

    /// How to open the next session with `server`.
    pub(crate) fn lifecycle(&self, server: &ServerName) -> ClientLifecycleMode {
        match self.known(server) {
            Some(false) => ClientLifecycleMode::Initialize,
            Some(true) => ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
            None => ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
            },
        }
    }

    /// Remembers what `server` agreed to.
    pub(crate) fn learn(&self, server: &ServerName, version: &ProtocolVersion) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(server.clone(), is_modern(version));
    }

    /// After a handshake with `server` failed. When its era was not known yet, the discovery
    /// that was tried first is what failed (rmcp falls back by itself only when the answer says
    /// "legacy" plainly; a server may instead list only older versions, or answer discovery with
    /// something that is no discovery result): it is taken for a legacy server, asked the legacy
    /// way next. Otherwise what it speaks is asked afresh.
    pub(crate) fn failed(&self, server: &ServerName) {
        let mut known = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match known.get(server) {
            None => {
                known.insert(server.clone(), false);
            }
            Some(_) => {
                known.remove(server);
            }
        }
    }

    /// Forgets what `server` spoke (its session could not be opened that way).
    pub(crate) fn forget(&self, server: &ServerName) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(server);
    }
}
