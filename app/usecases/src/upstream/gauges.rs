//! One server's state for the metrics: its status, circuit, pool and credential expiry.

use quarry_ports::ServerGauges;

use super::{Upstream, lock};

impl Upstream {
    /// What the metrics show of this server now (no connection is made).
    pub(crate) async fn gauges(&self) -> ServerGauges {
        let status = self.status();
        let circuit_open = self
            .breaker
            .open_until(self.wiring.clock.monotonic())
            .is_some();
        let tokens = lock(&self.tokens).clone();
        ServerGauges {
            server: status.server_name.as_str().to_owned(),
            status: status.status.as_str(),
            circuit_open,
            sessions: self.pool.live().await.len() as u64,
            pool_size: self.pool.size() as u64,
            in_flight: self.pool.in_flight().await as u64,
            credential_expires_at: tokens.and_then(|t| t.expires_at()),
        }
    }
}
