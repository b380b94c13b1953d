//! Servers registered at runtime: loading them beside the configuration file's, picking up
//! another process's changes, and adding and removing them (as an operator, or as an agent where
//! the configuration allows).

use std::{collections::HashSet, sync::Arc, time::Duration};

use quarry_domain::{
    Endpoint, Error, ErrorCode, IdempotencyKey, Payload, ServerName, ServerSettings, ServerStatus,
    UpstreamAuth,
};
use quarry_ports::{RemovedServer, Requester};
use serde_json::json;

use crate::{ResourceService, store_failed, upstream::Upstream};

/// The settings without a stdio server's environment, and that environment as a credential.
fn without_env(mut server: ServerSettings) -> (ServerSettings, Option<UpstreamAuth>) {
    match &mut server.spec.endpoint {
        Endpoint::Stdio { env, .. } if !env.is_empty() => {
            let environment = UpstreamAuth::environment(env);
            env.clear();
            (server, Some(environment))
        }
        _ => (server, None),
    }
}

/// How often a process looks for registry changes made by another.
const SYNC_EVERY: Duration = Duration::from_secs(1);

/// What this process last loaded of the registry, and when it last looked (monotonic).
#[derive(Debug, Default)]
pub(crate) struct RegistrySeen {
    generation: Option<u64>,
    checked: Option<Duration>,
}

impl ResourceService {
    /// Loads the servers registered at runtime (by a tool or `quarry servers add`), beside those
    /// of the configuration file, which win a name clash.
    ///
    /// # Errors
    /// E012 when the registry cannot be read.
    pub async fn load_registry(&self) -> Result<(), Error> {
        let generation = self.registry.generation().await.map_err(store_failed)?;
        let stored = self.registry.servers().await.map_err(store_failed)?;
        let wanted: HashSet<ServerName> = stored.iter().map(|s| s.name().clone()).collect();
        for settings in stored {
            let settings = self.seal_legacy_env(settings).await;
            if self.upstreams.by_name(settings.name()).is_ok() {
                continue;
            }
            match self.upstreams.insert(settings) {
                Ok(upstream) => self.supervise_one(&upstream),
                Err(e) => tracing::warn!("a registered server is skipped: {}", e.message()),
            }
        }
        for upstream in self.upstreams.all() {
            let name = upstream.name().clone();
            if !self.upstreams.is_configured(&name) && !wanted.contains(&name) {
                self.retire(&name).await;
            }
        }
        self.saw(generation);
        Ok(())
    }

    /// A row written before environments went into the vault: its environment is sealed and
    /// the row saved without it. If that fails the server keeps its environment for now.
    async fn seal_legacy_env(&self, settings: ServerSettings) -> ServerSettings {
        let (stripped, environment) = without_env(settings.clone());
        let Some(environment) = environment else {
            return settings;
        };
        let moved = async {
            self.vault.put(&stripped.spec, &environment).await?;
            self.registry
                .save(&stripped, self.clock.now())
                .await
                .map_err(store_failed)
        };
        match moved.await {
            Ok(_) => {
                tracing::info!(server = %stripped.name(), "moved a registered server's environment into the vault");
                stripped
            }
            Err(e) => {
                tracing::warn!(server = %stripped.name(), "its environment stays in the registry for now: {}", e.message());
                settings
            }
        }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, RegistrySeen> {
        self.registry_seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that this process's view matches registry `generation`.
    fn saw(&self, generation: u64) {
        let mut seen = self.seen();
        seen.generation = Some(generation);
        seen.checked = Some(self.clock.monotonic());
    }

    /// Picks up registry changes made by another process, looking at most once a second.
    pub(crate) async fn sync_registry(&self) {
        let now = self.clock.monotonic();
        let known = {
            let mut seen = self.seen();
            if seen
                .checked
                .is_some_and(|at| now.saturating_sub(at) < SYNC_EVERY)
            {
                return;
            }
            seen.checked = Some(now);
            seen.generation
        };
        match self.registry.generation().await {
            Ok(current) if Some(current) != known => {
                if let Err(e) = self.load_registry().await {
                    tracing::error!("reloading the server registry failed: {}", e.message());
                }
            }
            Ok(_) => {}
            Err(e) => tracing::error!("{e}"),
        }
    }

    /// The server a URI names, looking for servers registered by another process if unknown.
    pub(crate) async fn upstream_for(&self, name: &ServerName) -> Result<Arc<Upstream>, Error> {
        match self.upstreams.by_name(name) {
            Ok(u) => Ok(u),
            Err(_) => {
                self.sync_registry().await;
                self.upstreams.by_name(name)
            }
        }
    }

    /// Agents change the registry only where the configuration allows it, and register programs
    /// to run only where it allows that too (E004 otherwise).
    pub(crate) fn check_agent_may_register(
        &self,
        requester: Requester,
        endpoint: Option<&Endpoint>,
    ) -> Result<(), Error> {
        if matches!(requester, Requester::Operator | Requester::Governed) {
            return Ok(());
        }
        if !self.options.allow_tool_registration {
            return Err(Error::new(
                ErrorCode::E004,
                "agents may not change the server registry here; an operator can, with `quarry servers add|remove`, \
                 or allow it with registry.allow_tool_registration = true",
            ));
        }
        if matches!(endpoint, Some(Endpoint::Stdio { .. })) && !self.options.allow_tool_commands {
            return Err(Error::new(
                ErrorCode::E004,
                "agents may not register programs to run (stdio servers); an operator can, with \
                 `quarry servers add`, or allow it with registry.allow_tool_commands = true",
            ));
        }
        Ok(())
    }

    /// `add_mcp_server` and `quarry servers add`.
    pub(crate) async fn register(
        &self,
        server: ServerSettings,
        requester: Requester,
        key: Option<IdempotencyKey>,
    ) -> Result<ServerStatus, Error> {
        self.check_agent_may_register(requester, Some(&server.spec.endpoint))?;
        // A stdio server's environment goes into the vault, never into the registry's rows (nor
        // into the idempotency payload, which names the variables only).
        let (server, environment) = without_env(server);
        let payload = Payload::of(&json!({
            "server": server,
            "env": environment.as_ref().map(|e| e.env().into_iter().map(|(k, _)| k).collect::<Vec<_>>()),
        }))?;
        self.idempotency
            .once("add_mcp_server", key, payload, || async {
                self.sync_registry().await;
                let upstream = self.upstreams.insert(server.clone())?;
                if let Some(environment) = &environment
                    && let Err(e) = self.vault.put(&server.spec, environment).await
                {
                    self.upstreams.take(upstream.name());
                    return Err(e);
                }
                match self.registry.save(&server, self.clock.now()).await {
                    Ok(generation) => self.saw(generation),
                    Err(e) => {
                        self.upstreams.take(upstream.name());
                        return Err(store_failed(e));
                    }
                }
                tracing::info!(server = %upstream.name(), endpoint = %upstream.settings.spec.endpoint.display_uri(), "server registered");
                // Connect and list once, so the answer tells whether the server works.
                let _ = self.list_one(&upstream, false).await;
                self.supervise_one(&upstream);
                Ok(upstream.status())
            })
            .await
    }

    /// `remove_mcp_server` and `quarry servers remove`.
    pub(crate) async fn unregister(
        &self,
        name: ServerName,
        requester: Requester,
        key: Option<IdempotencyKey>,
    ) -> Result<RemovedServer, Error> {
        self.check_agent_may_register(requester, None)?;
        let payload = Payload::of(&json!({ "name": name }))?;
        self.idempotency
            .once("remove_mcp_server", key, payload, || async {
                self.sync_registry().await;
                if self.upstreams.is_configured(&name) {
                    return Err(Error::invalid(format!(
                        "server '{name}' comes from the configuration file; remove it there"
                    )));
                }
                self.upstreams.by_name(&name)?;
                if let Some(generation) = self.registry.delete(&name).await.map_err(store_failed)? {
                    self.saw(generation);
                }
                let purged_contents = self.cache.purge(Some(name.clone())).await;
                // Its credential or environment goes with it.
                if let Err(e) = self.vault.remove(&name).await {
                    tracing::error!(server = %name, "its stored credential could not be removed: {}", e.message());
                }
                self.retire(&name).await;
                tracing::info!(server = %name, "server unregistered");
                Ok(RemovedServer {
                    server_name: name.clone(),
                    purged_contents,
                })
            })
            .await
    }

    /// Takes a server out of service: its sessions end (children stop), its cache goes.
    async fn retire(&self, name: &ServerName) {
        if let Some(gone) = self.upstreams.take(name) {
            gone.close(self.options.supervision.drain).await;
        }
        self.invalidator.forget_server(name).await;
    }
}
