//! The composition root's agents: one gateway per agent and transport — the service governed
//! by the one policy engine, audited in the one trail, counted in the one set of metrics — and
//! what the operator's endpoints see of them.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use quarry_domain::{Error, Principal};
use quarry_metrics::PrometheusMetrics;
use quarry_ports::{
    AgentGateways, AuditLog, Clock, Metrics, Operations, PolicyEngine, ResourceGateway,
};
use quarry_usecases::{Accounts, GatewayOperations, ResourceService};

use super::{audit_log, hasher, policy};
use crate::{clock::SystemClock, config::Settings};

/// Gateways by agent and transport.
type Made = HashMap<(Principal, &'static str), Arc<dyn ResourceGateway>>;

/// Every agent's gateway, made on first use and kept.
#[derive(Debug)]
pub struct Agents {
    service: Arc<ResourceService>,
    engine: Option<Arc<dyn PolicyEngine>>,
    trail: Option<Arc<dyn AuditLog>>,
    metrics: Arc<dyn Metrics>,
    clock: Arc<dyn Clock>,
    made: Mutex<Made>,
}

/// The agents of `service`: governed by the configured policy (or, with none, the whole
/// gateway), audited unless `logging.audit_enabled` is false (said on stderr), counted and
/// timed in Prometheus metrics either way.
///
/// # Errors
/// As [`super::policy_engine`] and [`audit_log`].
pub async fn agents(
    settings: &Settings,
    service: &Arc<ResourceService>,
) -> Result<Arc<Agents>, Error> {
    let metrics: Arc<dyn Metrics> = Arc::new(PrometheusMetrics::new().map_err(|e| {
        tracing::error!("{e}");
        Error::internal()
    })?);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let engine = policy::engine(settings, &metrics, clock.clone()).await?;
    let trail = if settings.audit_enabled {
        // The service's own trail (exports read it), or one of its own for a service built
        // over other ports.
        match service.audit_log() {
            Some(log) => Some(log),
            None => Some(audit_log(settings).await?),
        }
    } else {
        eprintln!("quarry: logging.audit_enabled is false: agents' requests are not audited");
        None
    };
    Ok(Arc::new(Agents {
        service: service.clone(),
        engine,
        trail,
        metrics,
        clock,
        made: Mutex::new(HashMap::new()),
    }))
}

impl Agents {
    /// The gateway `agent` uses over `transport`.
    pub fn gateway(&self, agent: &Principal, transport: &'static str) -> Arc<dyn ResourceGateway> {
        let mut made = self
            .made
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        made.entry((agent.clone(), transport))
            .or_insert_with(|| {
                let governed: Arc<dyn ResourceGateway> = match &self.engine {
                    Some(engine) => Arc::new(quarry_usecases::Governed::new(
                        self.service.clone(),
                        engine.clone(),
                        agent.clone(),
                        transport,
                    )),
                    None => self.service.clone(),
                };
                Arc::new(quarry_usecases::Audited::new(
                    governed,
                    Accounts {
                        trail: self.trail.clone(),
                        metrics: self.metrics.clone(),
                        hasher: hasher(),
                        clock: self.clock.clone(),
                    },
                    agent.clone(),
                    transport,
                ))
            })
            .clone()
    }

    /// Metrics and readiness over every agent's gateway.
    pub fn operations(&self) -> Arc<dyn Operations> {
        Arc::new(GatewayOperations::new(
            self.service.clone(),
            self.metrics.clone(),
            self.engine.clone(),
            self.trail.clone(),
        ))
    }
}

/// The agents an HTTP transport serves.
#[derive(Debug)]
pub(super) struct OverHttp(pub(super) Arc<Agents>);

#[async_trait::async_trait]
impl AgentGateways for OverHttp {
    async fn for_agent(&self, agent: &Principal) -> Arc<dyn ResourceGateway> {
        self.0.gateway(agent, "http")
    }
}
