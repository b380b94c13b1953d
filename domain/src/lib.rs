//! Quarry's domain: the pure types and rules every other crate speaks.
//!
//! Architecture invariant: this crate does no I/O, spawns nothing, reads no clock and knows no
//! protocol library. Time comes in as an argument ([`Timestamp`]); values that exist are valid
//! (parse, don't validate).

mod classify;
mod content;
mod error;
mod principal;
mod query;
mod range;
mod resource;
mod server;
mod text;
mod uri;
mod version;

pub use classify::{ClassificationRule, Classified, Classifier};
pub use content::{Body, Content};
pub use error::{Error, ErrorCode};
pub use principal::Principal;
pub use query::{ListQuery, Listed, Page, PageLimit, ServerSelector, sort_and_page};
pub use range::{ByteRange, ContentRange, Slice};
pub use resource::{
    ConnectionStatus, ListResourcesResult, Origin, ReadResourceResult, Resource, ResourceType,
    ResourceVersion, ServerStatus, UpstreamFailure,
};
pub use server::{Endpoint, ServerDraft, ServerId, ServerName, ServerSpec};
pub use text::sanitize_label;
pub use uri::{ResourceUri, encode_path, template_to_gateway};
pub use version::{Digest, Retention, VersionSelector, version_name};

/// A point in time, always UTC. The domain never reads a clock: callers pass `now`.
pub type Timestamp = chrono::DateTime<chrono::Utc>;
