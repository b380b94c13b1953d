//! Naming one upstream resource across ports.

use quarry_domain::ServerName;

/// One resource of one upstream server: the key of cached content and of version history.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResourceKey {
    /// The upstream server.
    pub server: ServerName,
    /// The URI the upstream knows the resource by.
    pub upstream_uri: String,
}

impl ResourceKey {
    /// The key of `upstream_uri` on `server`.
    pub fn new(server: ServerName, upstream_uri: impl Into<String>) -> Self {
        Self {
            server,
            upstream_uri: upstream_uri.into(),
        }
    }

    /// Bytes this key accounts for in a byte-bounded cache.
    pub fn weight(&self) -> u64 {
        (self.server.as_str().len() + self.upstream_uri.len()) as u64
    }
}
