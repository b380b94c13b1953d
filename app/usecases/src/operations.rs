//! What the operator's endpoints ask: the metrics with their gauges read now, and readiness
//! (the store answers and, with the audit trail on, can be written; the policy engine answers;
//! at least one upstream is usable).

use std::sync::Arc;

use quarry_ports::{
    AuditLog, Gauges, Metrics, Operations, PolicyEngine, Readiness, ReadinessCheck,
};

use crate::ResourceService;

/// The gateway as the operator's endpoints see it.
#[derive(Debug)]
pub struct GatewayOperations {
    service: Arc<ResourceService>,
    metrics: Arc<dyn Metrics>,
    policy: Option<Arc<dyn PolicyEngine>>,
    audit: Option<Arc<dyn AuditLog>>,
}

impl GatewayOperations {
    /// Operations over `service`, exposing `metrics`; `policy` and `audit` are checked for
    /// readiness when the gateway uses them.
    pub fn new(
        service: Arc<ResourceService>,
        metrics: Arc<dyn Metrics>,
        policy: Option<Arc<dyn PolicyEngine>>,
        audit: Option<Arc<dyn AuditLog>>,
    ) -> Self {
        Self {
            service,
            metrics,
            policy,
            audit,
        }
    }

    async fn store_check(&self) -> ReadinessCheck {
        let read = self.service.registry.generation().await;
        let written = match &self.audit {
            Some(log) => log.writable().await,
            None => Ok(()),
        };
        let (ok, detail) = match (read, written) {
            (Err(e), _) => (false, format!("the store cannot be read: {e}")),
            (Ok(_), Err(e)) => (false, format!("the audit trail cannot be written: {e}")),
            (Ok(_), Ok(())) if self.audit.is_some() => {
                (true, "readable, audit trail writable".to_owned())
            }
            (Ok(_), Ok(())) => (true, "readable".to_owned()),
        };
        ReadinessCheck {
            name: "store",
            ok,
            detail,
        }
    }

    /// A shared cache that cannot be reached slows reads, it fails none: still ready, and said.
    fn cache_check(gauges: &Gauges) -> ReadinessCheck {
        ReadinessCheck {
            name: "cache",
            ok: true,
            detail: if gauges.cache.degraded {
                "the shared cache cannot be reached; reads go to the upstreams".to_owned()
            } else {
                format!(
                    "{} entries, {} of {} bytes",
                    gauges.cache.entries, gauges.cache.bytes, gauges.cache.capacity_bytes
                )
            },
        }
    }

    fn upstreams_check(gauges: &Gauges) -> ReadinessCheck {
        let usable = gauges
            .servers
            .iter()
            .filter(|s| !s.circuit_open && matches!(s.status, "connected" | "disconnected"))
            .count();
        let detail = match gauges.servers.len() {
            0 => "no server is registered".to_owned(),
            n => format!("{usable} of {n} usable"),
        };
        ReadinessCheck {
            name: "upstreams",
            ok: usable > 0,
            detail,
        }
    }
}

impl ResourceService {
    /// The cache's and every server's gauges (no connection is made).
    pub(crate) async fn gauges(&self) -> Gauges {
        let upstreams = self.upstreams.all();
        let servers = futures::future::join_all(upstreams.iter().map(|u| u.gauges())).await;
        Gauges {
            cache: self.cache.stats().await,
            servers,
            policy: None,
        }
    }
}

#[async_trait::async_trait]
impl Operations for GatewayOperations {
    async fn metrics(&self) -> String {
        let mut gauges = self.service.gauges().await;
        if let Some(policy) = &self.policy {
            gauges.policy = Some(policy.health().await);
        }
        self.metrics.render(&gauges)
    }

    async fn readiness(&self) -> Readiness {
        let mut checks = vec![self.store_check().await];
        if let Some(policy) = &self.policy {
            let health = policy.health().await;
            checks.push(ReadinessCheck {
                name: "policy",
                ok: health.ready,
                detail: health
                    .detail
                    .unwrap_or_else(|| "the policy worker answers".to_owned()),
            });
        }
        let gauges = self.service.gauges().await;
        checks.push(Self::cache_check(&gauges));
        checks.push(Self::upstreams_check(&gauges));
        Readiness::of(checks)
    }
}
