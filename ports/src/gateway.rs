//! The driving port: what the MCP server and the CLI ask of the application.

use async_trait::async_trait;

use quarry_domain::{
    AuditFilter, AuditRecord, AuthResult, ByteRange, Error, IdempotencyKey, ListQuery,
    ListResourcesResult, Principal, ReadResourceResult, ResourceUri, ResourceVersion, ServerName,
    ServerSettings, ServerStatus, UpstreamAuth, VersionSelector,
};

/// A validated read request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRequest {
    /// The gateway URI.
    pub uri: ResourceUri,
    /// The byte range wanted.
    pub range: ByteRange,
    /// False bypasses the cache and refreshes it.
    pub use_cache: bool,
    /// A specific version (`v3` or an etag), or the latest when none.
    pub version: Option<VersionSelector>,
    /// Re-hash cached bytes before returning them; a mismatch is E006 and the entry is refetched.
    pub validate_checksum: bool,
    /// The most bytes one result may carry (an agent host's output cap); a larger answer returns
    /// its first part with `next_offset`. `None`: no cap beyond the range asked for.
    pub inline_limit: Option<u64>,
    /// Who the read is for.
    pub principal: Principal,
}

impl ReadRequest {
    /// A whole-content read through the cache.
    pub fn whole(uri: ResourceUri) -> Self {
        Self {
            uri,
            range: ByteRange::WHOLE,
            use_cache: true,
            version: None,
            validate_checksum: true,
            inline_limit: None,
            principal: Principal::local(),
        }
    }
}

/// What the transport knows of one request, for its audit record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestMeta {
    /// The MCP request's JSON-RPC id.
    pub mcp_request_id: Option<String>,
    /// The id the agent's host gave its own operation, when it passes one
    /// (`_meta["io.quarry/host_request_id"]`).
    pub host_request_id: Option<String>,
    /// Where the request came from, on a network transport.
    pub client_address: Option<String>,
    /// How long the transport still waits for the answer (its time bound, less what the request
    /// took before it got here). A request that takes longer is recorded as what its client got:
    /// cut at the bound, E009.
    pub answer_within: Option<std::time::Duration>,
}

/// The resource gateway as its driving adapters (MCP server, CLI) see it.
///
/// Errors carry the catalogue's codes: E001 for invalid input, E002 for a missing resource,
/// E003 for an unknown or unreachable server (or an answer that does not parse), E006 for a stored
/// version failing its checksum, E007 for an unsatisfiable range, E008 for content over the limit,
/// E009 for an upstream timeout, E013 for an upstream's own error answer, E012 for anything
/// internal.
#[async_trait]
pub trait ResourceGateway: Send + Sync + std::fmt::Debug {
    /// This gateway for one request that `meta` describes: a decorator that records requests
    /// keeps `meta` for the request's record; the rest return themselves.
    fn for_request(
        self: std::sync::Arc<Self>,
        meta: RequestMeta,
    ) -> std::sync::Arc<dyn ResourceGateway>;

    /// Lists resources across servers: filtered, sorted by `modified_at` descending, paginated.
    ///
    /// # Errors
    /// E003 when the query selects a server that is not registered. A registered server that fails
    /// does not fail the listing: its status says why and the result is marked partial.
    async fn list_resources(&self, query: ListQuery) -> Result<ListResourcesResult, Error>;

    /// Reads one resource by gateway URI.
    ///
    /// # Errors
    /// See the trait's error list.
    async fn read_resource(&self, request: ReadRequest) -> Result<ReadResourceResult, Error>;

    /// Makes sure changes to `uri` are announced: the upstream is subscribed to it (and again on
    /// every new session), so its updates reach [`Self::changes`]. Idempotent.
    ///
    /// # Errors
    /// E003 for an unregistered server, E004 when the caller may not read `uri`; an upstream that
    /// offers no subscriptions is no error (its changes are simply never announced).
    async fn watch(&self, uri: &ResourceUri) -> Result<(), Error>;

    /// The changes upstreams announce from now on, as gateway URIs.
    fn changes(&self) -> Box<dyn ChangeFeed>;

    /// Lists the resource templates of every server as gateway templates.
    ///
    /// # Errors
    /// None today: a failing server contributes no templates.
    async fn list_templates(&self) -> Result<Vec<GatewayTemplate>, Error>;

    /// The status of every registered server, connecting to each to find out.
    async fn servers(&self) -> Vec<ServerStatus>;

    /// Every recorded version of a resource, oldest first.
    ///
    /// # Errors
    /// E003 for an unregistered server, E012 when the store fails.
    async fn versions(&self, uri: &ResourceUri) -> Result<Vec<ResourceVersion>, Error>;

    /// Drops cached content and listings: everything, one server's, or one resource's. With an
    /// idempotency key, a repeat of the same request returns the first result.
    ///
    /// # Errors
    /// E003 for an unregistered server; E010 when the key was used with another request.
    async fn purge(
        &self,
        server: Option<ServerName>,
        uri: Option<ResourceUri>,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<PurgeReport, Error>;

    /// Registers a server at runtime (persisted, supervised at once when serving).
    ///
    /// # Errors
    /// E001 when the name (or, ignoring case, a near twin) is taken or the registration is
    /// invalid; E004 when an agent asks and the configuration does not allow agents to (or not
    /// for a stdio command); E010 on an idempotency conflict; E012 when the store fails.
    async fn add_server(
        &self,
        server: ServerSettings,
        requester: Requester,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<ServerStatus, Error>;

    /// Unregisters a server registered at runtime: its sessions end (children stop), its cache
    /// goes. Servers from the configuration file are removed by editing it.
    ///
    /// # Errors
    /// E003 for an unknown server; E001 for a server from the configuration file; E004 when an
    /// agent asks and the configuration does not allow it; E010 on an idempotency conflict; E012
    /// when the store fails.
    async fn remove_server(
        &self,
        name: ServerName,
        requester: Requester,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<RemovedServer, Error>;

    /// Stores `auth` (sealed) as the server's credential; new sessions carry it, and sessions
    /// opened before are replaced. With `test_connection`, tries it at once ([`Self::test_auth`])
    /// and the result says how that went.
    ///
    /// # Errors
    /// E003 for an unknown server; E004 when an agent asks and the configuration does not allow
    /// it; E005 when the credential cannot be sealed (no usable vault key); E010 on an
    /// idempotency conflict; E012 when the store fails.
    async fn configure_auth(
        &self,
        server: ServerName,
        auth: UpstreamAuth,
        test_connection: bool,
        requester: Requester,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<AuthResult, Error>;

    /// Connects to the server afresh with its stored credential (if any), initialises and lists
    /// once, and says whether that worked and how long it took. Read-only: the sessions in use
    /// are left alone.
    ///
    /// # Errors
    /// E003 for an unknown server. A failed connection is a result with `success: false`.
    async fn test_auth(&self, server: ServerName) -> Result<AuthResult, Error>;

    /// Removes the server's credential; new sessions carry none, and sessions opened with it
    /// end. Refused while requests to the server are in flight, unless `force`.
    ///
    /// # Errors
    /// E003 for an unknown server; E001 while requests are in flight (without `force`) or when
    /// the server has no credential; E004 when an agent asks and the configuration does not
    /// allow it; E010 on an idempotency conflict; E012 when the store fails.
    async fn remove_auth(
        &self,
        server: ServerName,
        force: bool,
        requester: Requester,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<AuthResult, Error>;

    /// Renews the server's OAuth 2 token now (refresh token or client credentials), stores the
    /// result sealed, and tries a connection with it. Needs no person: when only a new sign-in
    /// helps, the result says so (E005, naming `quarry auth login`).
    ///
    /// # Errors
    /// E003 for an unknown server; E001 when its credential is not an OAuth 2 one (or it has
    /// none); E004 when an agent asks and the configuration does not allow it; E010 on an
    /// idempotency conflict; E012 when the store fails.
    async fn refresh_auth(
        &self,
        server: ServerName,
        requester: Requester,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<AuthResult, Error>;

    /// A page of the audit trail: the records after `after` that `filter` selects, oldest
    /// first, at most `limit` of them, reading a bounded number of records per call; the page
    /// says where the next one starts (none at the end). Read-only.
    ///
    /// # Errors
    /// E011 when the gateway keeps no audit trail (`logging.audit_enabled = false`); E004 when
    /// the policy does not allow it (`may_configure_mcp`); E012 when the store fails.
    async fn export_audit(
        &self,
        filter: AuditFilter,
        after: u64,
        limit: usize,
    ) -> Result<AuditPage, Error>;
}

/// The gateway each agent uses (for that agent: governed, audited), for a transport that
/// serves many agents.
#[async_trait]
pub trait AgentGateways: Send + Sync + std::fmt::Debug {
    /// The gateway `agent` uses over `transport`.
    async fn for_agent(&self, agent: &Principal) -> std::sync::Arc<dyn ResourceGateway>;
}

/// A page of an audit export.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AuditPage {
    /// The records selected, oldest first.
    pub records: Vec<AuditRecord>,
    /// Pass as `after` for the next page; none when the trail was read to its end.
    pub next_after: Option<u64>,
}

/// A change an upstream announced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceChange {
    /// One resource changed (`notifications/resources/updated`).
    Updated(ResourceUri),
    /// A server's list of resources changed (`notifications/resources/list_changed`).
    ListChanged(ServerName),
}

/// A stream of [`ResourceChange`]s, from the moment it was asked for.
#[async_trait]
pub trait ChangeFeed: Send {
    /// The next change; `None` once the gateway has stopped. A reader too slow to keep up
    /// misses changes rather than holding the gateway back (they are logged).
    async fn next(&mut self) -> Option<ResourceChange>;
}

/// A resource template as Quarry publishes it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GatewayTemplate {
    /// The server whose template it is.
    pub server: ServerName,
    /// `mcp://{server}/...{expr}...`
    pub uri_template: String,
    /// The template as the server gives it (how it is published in transparent mode).
    #[serde(skip)]
    pub upstream_template: String,
    /// Its name.
    pub name: String,
    /// Its description.
    pub description: Option<String>,
    /// Its MIME type, if uniform.
    pub mime_type: Option<String>,
}

/// What a purge dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PurgeReport {
    /// Cached contents dropped.
    pub contents: u64,
    /// Cached listings dropped.
    pub listings: u64,
}

/// Who asks for a change to the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requester {
    /// An agent, through the MCP tools.
    Agent,
    /// An operator, at the command line.
    Operator,
    /// An agent the access policy allowed: the policy's rules (and the registry flags as its
    /// facts) have decided, so the flags are not checked again.
    Governed,
}

/// What removing a server did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RemovedServer {
    /// The server removed.
    pub server_name: ServerName,
    /// Cached contents dropped with it.
    pub purged_contents: u64,
}
