//! Quarry's use cases: the spec's service layer, behind the driving port [`ResourceGateway`].
//!
//! One file per use case — [`read`](crate::read) (through the cache, with versions and degraded
//! mode), [`list`](crate::list) (across servers, each under its deadline), `versions`,
//! `registry` (servers added at runtime), `auth` (credentials, sealed into the `vault`), `purge`,
//! `idempotency` — and the upstream supervision
//! they share: `upstream` (one server's pool, circuit breaker and supervisor, reached through a
//! single `call`) and `upstreams` (every registered server). `flights` lets concurrent misses
//! share one upstream call. Two decorators wrap the gateway an agent uses: `governed` (the
//! access policy, its engine timed by `metered`) and, outside it, `audited` (the audit trail
//! and the request metrics), whose trail is wrapped in `group_commit` (appends made at the same
//! moment written together). `operations` answers the operator's metrics and readiness; `retention` verifies the
//! audit trail and prunes it behind a signed checkpoint.
//!
//! Architecture invariant: this crate depends on `quarry-domain` and `quarry-ports` only among
//! workspace crates; it names no adapter, reads no clock (the [`Clock`](quarry_ports::Clock) port
//! tells the time), and hashes only through [`ContentHasher`](quarry_ports::ContentHasher).
//!
//! [`ResourceGateway`]: quarry_ports::ResourceGateway

mod audited;
mod auth;
mod decisions;
mod excerpt;
mod export;
mod flights;
mod governed;
mod group_commit;
mod idempotency;
mod invalidation;
mod list;
mod metered;
mod oauth;
mod operations;
mod purge;
mod read;
mod registry;
mod retention;
mod service;
mod tokens;
mod upstream;
mod upstreams;
mod vault;
mod versions;
mod watch;

pub use audited::{Accounts, Audited};
pub use export::{MAX_EXPORT_PAGE, select_records};
pub use governed::Governed;
pub use group_commit::GroupCommit;
pub use metered::MeteredPolicy;
pub use oauth::SignIn;
pub use operations::GatewayOperations;
pub use retention::{AuditTrail, Pruned, Verified};
pub use service::{Ports, ResourceService, ServiceOptions, Supervision};
pub use tokens::ServerTokens;
pub use vault::VaultRotation;

/// A store failure as callers see it: E012, the detail in the log only.
pub(crate) fn store_failed(e: impl std::fmt::Display) -> quarry_domain::Error {
    tracing::error!("{e}");
    quarry_domain::Error::internal()
}
