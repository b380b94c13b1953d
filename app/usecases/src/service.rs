//! `ResourceService`: the use cases wired to their ports, and the driving port it implements.
//!
//! The methods of [`ResourceGateway`] are one line each here; each use case lives in its own file
//! as an `impl ResourceService` block.

use std::{
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use quarry_domain::{
    AuthResult, Classifier, Error, IdempotencyKey, ListQuery, ListResourcesResult, Principal,
    ReadResourceResult, ResourceUri, ResourceVersion, ServerName, ServerSettings, ServerStatus,
    UpstreamAuth,
};
use quarry_ports::{
    Clock, ContentCache, ContentHasher, CredentialCipher, CredentialStore, GatewayTemplate,
    IdempotencyStore, InvalidationBus, ListingCache, PurgeReport, ReadRequest, RemovedServer,
    Requester, ResourceGateway, ResourceKey, ServerRegistry, UpstreamConnector, UpstreamError,
    VersionStore,
};
use tokio_util::sync::CancellationToken;

use crate::{
    flights::Flights,
    idempotency::Idempotency,
    invalidation::Invalidator,
    list::ServerListing,
    read::Kept,
    registry::RegistrySeen,
    upstream::{Upstream, Wiring},
    upstreams::Upstreams,
    vault::{Vault, VaultRotation},
};

/// How upstreams are supervised while serving.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Supervision {
    /// How often live sessions are pinged.
    pub health_interval: Duration,
    /// Consecutive failures after which the circuit opens.
    pub circuit_threshold: u32,
    /// Random spread of each backoff delay, as a fraction of it (0.2: ±20 %).
    pub jitter: f64,
    /// How long shutdown waits for requests in flight.
    pub drain: Duration,
}

impl Default for Supervision {
    fn default() -> Self {
        Self {
            health_interval: Duration::from_secs(60),
            circuit_threshold: 5,
            jitter: 0.2,
            drain: Duration::from_secs(10),
        }
    }
}

/// How the service caches and bounds content.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// Whether content and listings are cached at all.
    pub cache_enabled: bool,
    /// How long cached content and listings stay fresh (an upstream's `ttlMs` can shorten it).
    pub cache_ttl: Duration,
    /// The largest content accepted from an upstream.
    pub max_resource_bytes: u64,
    /// Resource type rules.
    pub classifier: Classifier,
    /// Pools, circuit breakers and supervision of the upstreams.
    pub supervision: Supervision,
    /// Whether agents may add and remove servers through the tools. Off by default: until a
    /// policy decides who may configure the gateway, only operators do.
    pub allow_tool_registration: bool,
    /// Whether agents may also register stdio commands (arbitrary programs) that way.
    pub allow_tool_commands: bool,
    /// Whether protected resources need a credential for their server to be read.
    pub require_auth_for_protected: bool,
}

/// Every driven port the use cases need, one implementation each (chosen by the composition
/// root).
#[derive(Debug, Clone)]
pub struct Ports {
    /// Sessions with upstream servers.
    pub connector: Arc<dyn UpstreamConnector>,
    /// Fetched content.
    pub cache: Arc<dyn ContentCache>,
    /// Each server's listing.
    pub listings: Arc<dyn ListingCache>,
    /// Invalidation epochs.
    pub bus: Arc<dyn InvalidationBus>,
    /// Version history.
    pub versions: Arc<dyn VersionStore>,
    /// Servers registered at runtime.
    pub registry: Arc<dyn ServerRegistry>,
    /// Mutation results by idempotency key.
    pub idempotency: Arc<dyn IdempotencyStore>,
    /// SHA-256.
    pub hasher: Arc<dyn ContentHasher>,
    /// Wall and monotonic time.
    pub clock: Arc<dyn Clock>,
    /// Sealed upstream credentials.
    pub credentials: Arc<dyn CredentialStore>,
    /// Seals and opens them.
    pub cipher: Arc<dyn CredentialCipher>,
    /// OAuth 2 toward upstreams (token renewal, sign-in).
    pub oauth: Arc<dyn quarry_ports::OAuthClient>,
    /// The audit trail, when requests are audited: the audit decorator appends to it, exports
    /// read it.
    pub audit: Option<Arc<dyn quarry_ports::AuditLog>>,
}

/// Lists and reads resources across the registered upstream servers.
#[derive(Debug)]
pub struct ResourceService {
    pub(crate) upstreams: Upstreams,
    pub(crate) cache: Arc<dyn ContentCache>,
    pub(crate) listings: Arc<dyn ListingCache>,
    pub(crate) versions: Arc<dyn VersionStore>,
    pub(crate) registry: Arc<dyn ServerRegistry>,
    pub(crate) hasher: Arc<dyn ContentHasher>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) options: ServiceOptions,
    pub(crate) vault: Vault,
    pub(crate) audit: Option<Arc<dyn quarry_ports::AuditLog>>,
    pub(crate) invalidator: Arc<Invalidator>,
    pub(crate) idempotency: Idempotency,
    pub(crate) registry_seen: Mutex<RegistrySeen>,
    /// Concurrent misses of one content (per principal) share one upstream read.
    pub(crate) content_flights: Flights<(ResourceKey, Principal), Result<Arc<Kept>, Error>>,
    /// Concurrent misses of one server's listing share one listing.
    pub(crate) listing_flights: Flights<ServerName, Result<ServerListing, UpstreamError>>,
    /// This service, for the calls it shares among callers (they run as tasks of their own).
    me: Weak<ResourceService>,
    supervising: AtomicBool,
    stop: CancellationToken,
}

impl ResourceService {
    /// A service over the configured `servers`, reaching the world through `ports`.
    pub fn new(servers: Vec<ServerSettings>, ports: Ports, options: ServiceOptions) -> Arc<Self> {
        let invalidator = Arc::new(Invalidator::new(
            ports.cache.clone(),
            ports.listings.clone(),
            ports.bus.clone(),
        ));
        let vault = Vault {
            store: ports.credentials,
            cipher: ports.cipher,
            clock: ports.clock.clone(),
        };
        let wiring = Wiring {
            connector: ports.connector,
            oauth: ports.oauth,
            vault: vault.clone(),
            invalidator: invalidator.clone(),
            clock: ports.clock.clone(),
            supervision: options.supervision,
        };
        Arc::new_cyclic(|me| Self {
            upstreams: Upstreams::new(servers, wiring),
            cache: ports.cache,
            listings: ports.listings,
            versions: ports.versions,
            registry: ports.registry,
            hasher: ports.hasher.clone(),
            idempotency: Idempotency {
                store: ports.idempotency,
                hasher: ports.hasher,
                clock: ports.clock.clone(),
            },
            clock: ports.clock,
            vault,
            audit: ports.audit,
            options,
            invalidator,
            registry_seen: Mutex::new(RegistrySeen::default()),
            content_flights: Flights::default(),
            listing_flights: Flights::default(),
            me: me.clone(),
            supervising: AtomicBool::new(false),
            stop: CancellationToken::new(),
        })
    }

    /// This service, owned: for work that must outlive the caller that started it.
    pub(crate) fn owned(&self) -> Option<Arc<Self>> {
        self.me.upgrade()
    }

    /// Starts supervising every upstream: connect now, reconnect on the backoff schedule after a
    /// failure, check health. For a long-running gateway; one-shot commands connect on demand.
    pub fn start_supervision(&self) {
        self.supervising.store(true, Ordering::SeqCst);
        for upstream in self.upstreams.all() {
            self.supervise_one(&upstream);
        }
    }

    pub(crate) fn supervise_one(&self, upstream: &Arc<Upstream>) {
        if self.supervising.load(Ordering::SeqCst) {
            tokio::spawn(upstream.clone().supervise(self.stop.child_token()));
        }
    }

    /// Checks that every stored credential opens under the configured vault keys (a gateway
    /// refuses to start otherwise); returns how many there are.
    ///
    /// # Errors
    /// E005 naming the credentials that do not open; E012 when the store fails.
    pub async fn check_vault(&self) -> Result<usize, Error> {
        self.vault.check().await
    }

    /// `quarry vault rotate`: every stored credential re-wrapped under a new key.
    ///
    /// # Errors
    /// As the vault's rotation: E005 when it cannot be done, E012 when the store fails.
    pub async fn rotate_vault_key(
        &self,
        progress: &(dyn Fn(usize, usize) + Send + Sync),
    ) -> Result<VaultRotation, Error> {
        self.vault.rotate(progress).await
    }

    /// Every server's status as last seen, without contacting any.
    pub fn servers_status(&self) -> Vec<ServerStatus> {
        self.upstreams.all().iter().map(|u| u.status()).collect()
    }

    /// Stops supervision, lets requests in flight finish (up to the configured drain time), then
    /// ends every upstream session and stops their child processes.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        self.upstreams
            .close_all(self.options.supervision.drain)
            .await;
    }
}

#[async_trait]
impl ResourceGateway for ResourceService {
    fn for_request(self: Arc<Self>, _meta: quarry_ports::RequestMeta) -> Arc<dyn ResourceGateway> {
        self
    }

    async fn list_resources(&self, query: ListQuery) -> Result<ListResourcesResult, Error> {
        self.list(query, None).await
    }

    async fn read_resource(&self, request: ReadRequest) -> Result<ReadResourceResult, Error> {
        self.read(request).await
    }

    async fn watch(&self, uri: &ResourceUri) -> Result<(), Error> {
        self.watch_resource(uri).await
    }

    fn changes(&self) -> Box<dyn quarry_ports::ChangeFeed> {
        self.invalidator.feed()
    }

    async fn list_templates(&self) -> Result<Vec<GatewayTemplate>, Error> {
        Ok(self.templates().await)
    }

    async fn servers(&self) -> Vec<ServerStatus> {
        self.probe_servers().await
    }

    async fn versions(&self, uri: &ResourceUri) -> Result<Vec<ResourceVersion>, Error> {
        self.history(uri).await
    }

    async fn purge(
        &self,
        server: Option<ServerName>,
        uri: Option<ResourceUri>,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<PurgeReport, Error> {
        self.purge_cache(server, uri, idempotency_key).await
    }

    async fn add_server(
        &self,
        server: ServerSettings,
        requester: Requester,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<ServerStatus, Error> {
        self.register(server, requester, idempotency_key).await
    }

    async fn remove_server(
        &self,
        name: ServerName,
        requester: Requester,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<RemovedServer, Error> {
        self.unregister(name, requester, idempotency_key).await
    }

    async fn configure_auth(
        &self,
        server: ServerName,
        auth: UpstreamAuth,
        test_connection: bool,
        requester: Requester,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<AuthResult, Error> {
        self.configure_credential(server, auth, test_connection, requester, idempotency_key)
            .await
    }

    async fn test_auth(&self, server: ServerName) -> Result<AuthResult, Error> {
        self.test_connection(server).await
    }

    async fn remove_auth(
        &self,
        server: ServerName,
        force: bool,
        requester: Requester,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<AuthResult, Error> {
        self.remove_credential(server, force, requester, idempotency_key)
            .await
    }

    async fn refresh_auth(
        &self,
        server: ServerName,
        requester: Requester,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<AuthResult, Error> {
        self.refresh_credential(server, requester, idempotency_key)
            .await
    }

    async fn export_audit(
        &self,
        filter: quarry_domain::AuditFilter,
        after: u64,
        limit: usize,
    ) -> Result<quarry_ports::AuditPage, Error> {
        self.export(&filter, after, limit).await
    }
}
