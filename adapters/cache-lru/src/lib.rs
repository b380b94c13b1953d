//! In-memory adapters for the state a gateway keeps between requests: content (an LRU bounded
//! by bytes, with TTL), listings, and invalidation epochs. One process only: a scale-out
//! deployment puts the same three ports on a shared cache.

mod bus;
mod content;
mod listings;

pub use bus::InMemoryInvalidationBus;
pub use content::LruContentCache;
pub use listings::InMemoryListingCache;
