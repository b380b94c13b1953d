//! The traits Quarry's application needs from the outside world (driven ports) and the one it
//! offers to it (the driving port, [`ResourceGateway`]).
//!
//! Architecture invariant: ports depend on `quarry-domain` only; no technology type (rmcp, sqlx,
//! redis, lru) appears in a signature. Every method documents its error contract, and the testkit's
//! contract suites hold every adapter to it.

mod audit;
mod bearer;
mod cache;
mod clock;
mod gateway;
mod hashing;
mod key;
mod listings;
mod metrics;
mod oauth;
mod operations;
mod policy;
mod registry;
mod sessions;
mod trace;
mod upstream;
mod vault;
mod versions;

pub use audit::{AuditLog, AuditSigner, SignError};
pub use bearer::{BearerRefused, BearerVerifier, Grant};
pub use cache::{CacheStats, CachedContent, ContentCache};
pub use clock::Clock;
pub use gateway::{
    AgentGateways, AuditPage, ChangeFeed, GatewayTemplate, PurgeReport, ReadRequest, RemovedServer,
    RequestMeta, Requester, ResourceChange, ResourceGateway,
};
pub use hashing::ContentHasher;
pub use key::ResourceKey;
pub use listings::{CachedListing, InvalidationBus, ListedEntry, ListingCache};
pub use metrics::{EngineHealth, Gauges, Metrics, ServerGauges};
pub use oauth::{AccessTokens, Browser, Challenge, OAuthClient, OAuthFailure};
pub use operations::{Operations, Readiness, ReadinessCheck};
pub use policy::{PolicyEngine, PolicyUnavailable};
pub use registry::{IdempotencyStore, Remembered, Reservation, ServerRegistry};
pub use sessions::{SessionRecord, SessionStore};
pub use trace::TraceContext;
pub use upstream::{
    Fetched, UpstreamConnector, UpstreamError, UpstreamListing, UpstreamObserver, UpstreamResource,
    UpstreamSession, UpstreamTemplate,
};
pub use vault::{
    CipherError, CredentialCipher, CredentialStore, SealIdentity, Sealed, StoredCredential,
};
pub use versions::{Recorded, StoreError, VersionStore, VersionSummary};

#[cfg(feature = "mocks")]
pub use cache::MockContentCache;
#[cfg(feature = "mocks")]
pub use clock::MockClock;
#[cfg(feature = "mocks")]
pub use hashing::MockContentHasher;
#[cfg(feature = "mocks")]
pub use listings::{MockInvalidationBus, MockListingCache};
#[cfg(feature = "mocks")]
pub use oauth::MockAccessTokens;
#[cfg(feature = "mocks")]
pub use policy::MockPolicyEngine;
#[cfg(feature = "mocks")]
pub use registry::{MockIdempotencyStore, MockServerRegistry};
#[cfg(feature = "mocks")]
pub use sessions::MockSessionStore;
#[cfg(feature = "mocks")]
pub use upstream::{MockUpstreamConnector, MockUpstreamObserver, MockUpstreamSession};
#[cfg(feature = "mocks")]
pub use vault::{MockCredentialCipher, MockCredentialStore};
#[cfg(feature = "mocks")]
pub use versions::MockVersionStore;
