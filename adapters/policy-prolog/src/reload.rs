//! Policies replaced while the gateway serves: a new policy is checked in a throw-away worker
//! and started before it replaces the old one, in one swap; a policy that does not load leaves
//! the old one deciding (PO-5).

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use quarry_domain::{Decision, PolicyRequest};
use quarry_ports::{EngineHealth, PolicyEngine, PolicyUnavailable};

use crate::{PrologPolicy, WorkerCommand};

/// A policy engine whose policy can be replaced.
#[derive(Debug)]
pub struct ReloadablePolicy {
    current: tokio::sync::RwLock<Arc<PrologPolicy>>,
    version: AtomicU64,
    command: WorkerCommand,
    budget: Duration,
    recycle_after: u32,
    /// Replacements made by the policies this one replaced (restarts, recycled).
    retired: std::sync::Mutex<(u64, u64)>,
}

impl ReloadablePolicy {
    /// Starts with `program` (see [`PrologPolicy::start`]).
    ///
    /// # Errors
    /// Why the policy cannot be used.
    pub async fn start(
        command: WorkerCommand,
        program: String,
        budget: Duration,
        recycle_after: u32,
    ) -> Result<Self, String> {
        let first = PrologPolicy::start(command.clone(), program, budget, recycle_after).await?;
        Ok(Self {
            current: tokio::sync::RwLock::new(Arc::new(first)),
            version: AtomicU64::new(1),
            command,
            budget,
            recycle_after,
            retired: std::sync::Mutex::new((0, 0)),
        })
    }

    /// Replaces the policy with `program` once it has loaded and decided; returns the new
    /// version.
    ///
    /// # Errors
    /// Why `program` cannot be used; the current policy then keeps deciding.
    pub async fn reload(&self, program: String) -> Result<u64, String> {
        let next = PrologPolicy::start(
            self.command.clone(),
            program,
            self.budget,
            self.recycle_after,
        )
        .await?;
        let mut current = self.current.write().await;
        let old = std::mem::replace(&mut *current, Arc::new(next));
        let (restarts, recycled) = old.replacements();
        let mut retired = self
            .retired
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        retired.0 += restarts;
        retired.1 += recycled;
        Ok(self.version.fetch_add(1, Ordering::SeqCst) + 1)
    }

    async fn now(&self) -> Arc<PrologPolicy> {
        self.current.read().await.clone()
    }
}

#[async_trait]
impl PolicyEngine for ReloadablePolicy {
    async fn decide(
        &self,
        request: &PolicyRequest,
        context: &[(String, String)],
    ) -> Result<Decision, PolicyUnavailable> {
        self.now().await.decide(request, context).await
    }

    async fn allowed(
        &self,
        requests: &[(PolicyRequest, Vec<(String, String)>)],
    ) -> Result<Vec<Option<bool>>, PolicyUnavailable> {
        self.now().await.allowed(requests).await
    }

    async fn health(&self) -> EngineHealth {
        let mut health = self.now().await.health().await;
        let (restarts, recycled) = *self
            .retired
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        health.restarts += restarts;
        health.recycled += recycled;
        health
    }

    fn version(&self) -> u64 {
        self.version.load(Ordering::SeqCst)
    }
}
