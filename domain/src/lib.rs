//! Quarry's domain: the pure types and rules every other crate speaks.
//!
//! Architecture invariant: this crate does no I/O, spawns nothing, reads no clock and knows no
//! protocol library. Time comes in as an argument ([`Timestamp`]); values that exist are valid
//! (parse, don't validate).

mod audit;
mod backoff;
mod cache_hint;
mod circuit;
mod classify;
mod content;
mod credential;
mod error;
mod idempotency;
mod policy;
mod principal;
mod protection;
mod query;
mod range;
mod resource;
mod server;
mod settings;
mod text;
mod uri;
mod version;

pub use audit::{
    AuditCheckpoint, AuditEntry, AuditFilter, AuditRecord, ChainBreak, GENESIS_HASH,
    canonical_entry, canonical_json, chain_material, chain_material_of, verify_chain,
};
pub use backoff::{Backoff, RetryPolicy};
pub use cache_hint::{CacheHint, CacheScope};
pub use circuit::Circuit;
pub use classify::{ClassificationRule, Classified, Classifier};
pub use content::{Body, Content};
pub use credential::{
    AuthResult, AuthType, DEFAULT_API_KEY_HEADER, MAX_HEADER_NAME_LEN, MAX_SECRET_LEN,
    OAuthCredential, OAuthGrant, Secret, TokenAuthMethod, UpstreamAuth, check_url,
};
pub use error::{Error, ErrorCode};
pub use idempotency::{IdempotencyKey, Payload};
pub use policy::{AgentFacts, Decision, PolicyRequest};
pub use principal::Principal;
pub use protection::{MAX_PATTERNS, Protection};
pub use query::{ListQuery, Listed, Page, PageLimit, ServerSelector, sort_and_page};
pub use range::{ByteRange, ContentRange, Slice};
pub use resource::{
    ConnectionStatus, ListResourcesResult, Origin, ReadResourceResult, Resource, ResourceType,
    ResourceVersion, ServerStatus, UpstreamFailure,
};
pub use server::{Endpoint, ServerId, ServerName, ServerSpec, TlsPolicy};
pub use settings::{ServerDraft, ServerSettings, seconds};
pub use text::{MAX_MIME_TYPE_LEN, sanitize_label, sanitize_mime_type};
pub use uri::{ResourceUri, encode_path, has_dot_segment, template_to_gateway};
pub use version::{Digest, Retention, VersionNumber, VersionSelector, hex_lower};

/// A point in time, always UTC. The domain never reads a clock: callers pass `now`.
pub type Timestamp = chrono::DateTime<chrono::Utc>;
