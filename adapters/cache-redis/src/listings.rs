//! Every server's listing in Redis: one key per server, expiring with the listing, and a set
//! of the servers that have one, for dropping them all.

use async_trait::async_trait;
use quarry_domain::{ServerName, Timestamp};
use quarry_ports::{CachedListing, ListingCache};
use redis::AsyncCommands;

use crate::{
    RedisLink,
    wire::{decode_listing, encode_listing},
};

/// Listings shared by every replica.
#[derive(Debug, Clone)]
pub struct RedisListingCache {
    link: RedisLink,
}

impl RedisListingCache {
    /// Listings kept through `link`.
    pub fn new(link: RedisLink) -> Self {
        Self { link }
    }

    fn key(&self, server: &ServerName) -> String {
        self.link.key(&format!("l:{server}"))
    }
}

/// How long Redis keeps a listing: until it expires, and at least a second (a listing stamped
/// by another clock still reaches the next reader, who checks it against its own time).
fn keep_ms(listing: &CachedListing) -> u64 {
    let left = (listing.expires_at - chrono::Utc::now()).num_milliseconds();
    u64::try_from(left).unwrap_or(0).max(1_000)
}

#[async_trait]
impl ListingCache for RedisListingCache {
    async fn get(&self, server: &ServerName, now: Timestamp) -> Option<CachedListing> {
        let key = self.key(server);
        let bytes = self
            .link
            .run::<Option<Vec<u8>>, _>("reading a listing", async |conn| conn.get(&key).await)
            .await??;
        match decode_listing(&bytes) {
            Ok(listing) => (now < listing.expires_at).then_some(listing),
            Err(e) => {
                tracing::warn!(server = %server, "a shared listing does not decode ({e}); listed afresh");
                None
            }
        }
    }

    async fn put(&self, server: &ServerName, listing: CachedListing) {
        let (key, all) = (self.key(server), self.link.key("ls"));
        let bytes = encode_listing(&listing);
        let ms = keep_ms(&listing);
        self.link
            .run("storing a listing", async |conn| {
                redis::pipe()
                    .atomic()
                    .cmd("SET")
                    .arg(&key)
                    .arg(bytes)
                    .arg("PX")
                    .arg(ms)
                    .ignore()
                    .sadd(&all, server.as_str())
                    .ignore()
                    .query_async::<()>(conn)
                    .await
            })
            .await;
    }

    async fn drop_listings(&self, server: Option<ServerName>) -> u64 {
        let all = self.link.key("ls");
        let servers: Vec<String> = match server {
            Some(s) => vec![s.as_str().to_owned()],
            None => self
                .link
                .run("listing the shared listings", async |conn| {
                    conn.smembers(&all).await
                })
                .await
                .unwrap_or_default(),
        };
        if servers.is_empty() {
            return 0;
        }
        let keys: Vec<String> = servers
            .iter()
            .map(|s| self.link.key(&format!("l:{s}")))
            .collect();
        self.link
            .run("dropping listings", async |conn| {
                let (dropped, _): (u64, u64) = redis::pipe()
                    .atomic()
                    .del(&keys)
                    .srem(&all, &servers)
                    .query_async(conn)
                    .await?;
                Ok(dropped)
            })
            .await
            .unwrap_or(0)
    }
}
