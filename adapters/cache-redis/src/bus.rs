//! Invalidation epochs in Redis: one counter per server, shared by every replica, so a fetch
//! on one replica that a change heard on another overtook is not cached.

use async_trait::async_trait;
use quarry_domain::ServerName;
use quarry_ports::InvalidationBus;
use redis::AsyncCommands;

use crate::RedisLink;

/// Per-server epochs shared by every replica.
#[derive(Debug, Clone)]
pub struct RedisInvalidationBus {
    link: RedisLink,
}

impl RedisInvalidationBus {
    /// Epochs kept through `link`.
    pub fn new(link: RedisLink) -> Self {
        Self { link }
    }

    fn key(&self, server: &ServerName) -> String {
        self.link.key(&format!("e:{server}"))
    }
}

#[async_trait]
impl InvalidationBus for RedisInvalidationBus {
    async fn epoch(&self, server: &ServerName) -> Option<u64> {
        let key = self.key(server);
        self.link
            .run("reading an epoch", async |conn| {
                let epoch: Option<u64> = conn.get(&key).await?;
                Ok(epoch.unwrap_or(0))
            })
            .await
    }

    async fn advance(&self, server: &ServerName) -> Option<u64> {
        let key = self.key(server);
        self.link
            .run("advancing an epoch", async |conn| {
                conn.incr(&key, 1u64).await
            })
            .await
    }
}
