//! Invalidation epochs in this process's memory: one counter per server.

use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard},
};

use async_trait::async_trait;
use quarry_domain::ServerName;
use quarry_ports::InvalidationBus;

/// Per-server epochs, held in this process.
#[derive(Debug, Default)]
pub struct InMemoryInvalidationBus {
    epochs: Mutex<HashMap<ServerName, u64>>,
}

impl InMemoryInvalidationBus {
    /// Every epoch at 0.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<ServerName, u64>> {
        self.epochs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl InvalidationBus for InMemoryInvalidationBus {
    async fn epoch(&self, server: &ServerName) -> Option<u64> {
        Some(self.lock().get(server).copied().unwrap_or(0))
    }

    async fn advance(&self, server: &ServerName) -> Option<u64> {
        let mut epochs = self.lock();
        let epoch = epochs.entry(server.clone()).or_insert(0);
        *epoch += 1;
        Some(*epoch)
    }
}
