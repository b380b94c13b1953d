//! Tool arguments, parsed totally: unknown fields, wrong types, out-of-range numbers and malformed
//! URIs are E001 with a message saying which argument and why. Never a panic.

use quarry_domain::{
    AuditFilter, ByteRange, Error, IdempotencyKey, ListQuery, PageLimit, Principal, ResourceType,
    ResourceUri, ServerDraft, ServerName, ServerSelector, ServerSettings, UpstreamAuth,
    VersionSelector,
};
use quarry_ports::ReadRequest;
use rmcp::model::JsonObject;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    #[serde(default)]
    server: Option<String>,
    #[serde(default)]
    filter_type: Option<String>,
    #[serde(default)]
    include_metadata: Option<bool>,
    #[serde(default)]
    limit: Option<i64>,
    #[serde(default)]
    offset: Option<i64>,
    #[serde(default)]
    use_cache: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VersionsArgs {
    resource_uri: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TemplatesArgs {
    server: Option<String>,
}

/// A parsed `list_mcp_resource_templates` call: the server to keep, if one is named.
pub(crate) fn templates(args: Option<JsonObject>) -> Result<Option<ServerName>, Error> {
    let a: TemplatesArgs = decode("list_mcp_resource_templates", args)?;
    a.server
        .as_deref()
        .map(|s| {
            ServerName::parse(s).map_err(|e| Error::invalid(format!("server: {}", e.message())))
        })
        .transpose()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PurgeArgs {
    #[serde(default)]
    server: Option<String>,
    #[serde(default)]
    resource_uri: Option<String>,
    #[serde(default)]
    idempotency_key: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AddServerArgs {
    name: String,
    #[serde(default)]
    endpoint: Option<String>,
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    timeout: Option<f64>,
    #[serde(default)]
    retry_attempts: Option<u32>,
    #[serde(default)]
    retry_delay: Option<f64>,
    #[serde(default)]
    pool_size: Option<u32>,
    #[serde(default)]
    idempotency_key: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RemoveServerArgs {
    name: String,
    #[serde(default)]
    idempotency_key: Option<String>,
}

fn idempotency(key: Option<String>) -> Result<Option<IdempotencyKey>, Error> {
    key.as_deref().map(IdempotencyKey::parse).transpose()
}

/// A parsed `purge_mcp_cache` call: the server, the resource, the idempotency key.
pub(crate) type PurgeCall = (
    Option<ServerName>,
    Option<ResourceUri>,
    Option<IdempotencyKey>,
);

/// `mcp_audit_export` arguments.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditExportArgs {
    since: Option<String>,
    until: Option<String>,
    agent: Option<String>,
    server: Option<String>,
    decision: Option<String>,
    #[serde(default)]
    after: u64,
    limit: Option<u64>,
}

/// A parsed `mcp_audit_export` call: the filter, where to start, how many.
pub(crate) fn audit_export(args: Option<JsonObject>) -> Result<(AuditFilter, u64, usize), Error> {
    let a: AuditExportArgs = decode("mcp_audit_export", args)?;
    let time = |what: &str, t: Option<String>| t.map(|t| AuditFilter::time(what, &t)).transpose();
    let limit = match a.limit {
        None => 100,
        Some(n @ 1..=1000) => usize::try_from(n).unwrap_or(1000),
        Some(n) => {
            return Err(Error::invalid(format!(
                "limit must be between 1 and 1000, got {n}"
            )));
        }
    };
    let filter = AuditFilter {
        since: time("since", a.since)?,
        until: time("until", a.until)?,
        agent: a.agent,
        server: a.server,
        decision: a
            .decision
            .as_deref()
            .map(AuditFilter::decision)
            .transpose()?,
    };
    Ok((filter, a.after, limit))
}

/// A parsed `add_mcp_server` call.
pub(crate) fn add_server(
    args: Option<JsonObject>,
) -> Result<(ServerSettings, Option<IdempotencyKey>), Error> {
    let a: AddServerArgs = decode("add_mcp_server", args)?;
    if a.args.len() > 64 || a.env.len() > 64 {
        return Err(Error::invalid("args and env take at most 64 entries each"));
    }
    let server = ServerDraft {
        name: a.name,
        id: None,
        endpoint: a.endpoint,
        command: a.command,
        args: a.args,
        env: a.env,
        cwd: a.cwd,
        timeout_secs: a.timeout,
        max_pages: None,
        retry_attempts: a.retry_attempts,
        retry_delay_secs: a.retry_delay,
        pool_size: a.pool_size,
        ..ServerDraft::default()
    }
    .into_settings(&|field: &str| field.to_owned())?;
    Ok((server, idempotency(a.idempotency_key)?))
}

/// A parsed `remove_mcp_server` call.
pub(crate) fn remove_server(
    args: Option<JsonObject>,
) -> Result<(ServerName, Option<IdempotencyKey>), Error> {
    let a: RemoveServerArgs = decode("remove_mcp_server", args)?;
    let name =
        ServerName::parse(&a.name).map_err(|e| Error::invalid(format!("name: {}", e.message())))?;
    Ok((name, idempotency(a.idempotency_key)?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    resource_uri: String,
    #[serde(default)]
    offset: Option<i64>,
    #[serde(default)]
    limit: Option<i64>,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    use_cache: Option<bool>,
    #[serde(default)]
    validate_checksum: Option<bool>,
}

fn decode<T: serde::de::DeserializeOwned>(
    tool: &str,
    args: Option<JsonObject>,
) -> Result<T, Error> {
    let value = serde_json::Value::Object(args.unwrap_or_default());
    serde_json::from_value(value).map_err(|e| Error::invalid(format!("{tool} arguments: {e}")))
}

/// A parsed `list_mcp_resources` call.
#[derive(Debug)]
pub(crate) struct ListCall {
    pub(crate) query: ListQuery,
    pub(crate) include_metadata: bool,
}

pub(crate) fn list(args: Option<JsonObject>) -> Result<ListCall, Error> {
    let a: ListArgs = decode("list_mcp_resources", args)?;
    Ok(ListCall {
        query: ListQuery {
            server: a.server.as_deref().map(ServerSelector::new).transpose()?,
            filter_type: a
                .filter_type
                .as_deref()
                .map(str::parse::<ResourceType>)
                .transpose()?,
            limit: a
                .limit
                .map(PageLimit::new)
                .transpose()?
                .unwrap_or(PageLimit::DEFAULT),
            offset: a
                .offset
                .map(ListQuery::parse_offset)
                .transpose()?
                .unwrap_or(0),
            use_cache: a.use_cache.unwrap_or(true),
        },
        include_metadata: a.include_metadata.unwrap_or(true),
    })
}

pub(crate) fn read(
    args: Option<JsonObject>,
    inline_limit: u64,
    principal: Principal,
) -> Result<ReadRequest, Error> {
    let a: ReadArgs = decode("read_mcp_resource", args)?;
    Ok(ReadRequest {
        uri: ResourceUri::parse(&a.resource_uri)?,
        range: ByteRange::new(a.offset.unwrap_or(0), a.limit)?,
        use_cache: a.use_cache.unwrap_or(true),
        version: a
            .version
            .as_deref()
            .map(VersionSelector::parse)
            .transpose()?,
        validate_checksum: a.validate_checksum.unwrap_or(true),
        inline_limit: Some(inline_limit),
        principal,
    })
}

pub(crate) fn versions(args: Option<JsonObject>) -> Result<ResourceUri, Error> {
    let a: VersionsArgs = decode("list_mcp_resource_versions", args)?;
    ResourceUri::parse(&a.resource_uri)
}

pub(crate) fn purge(args: Option<JsonObject>) -> Result<PurgeCall, Error> {
    let a: PurgeArgs = decode("purge_mcp_cache", args)?;
    let server = a
        .server
        .as_deref()
        .map(|s| {
            ServerName::parse(s).map_err(|e| Error::invalid(format!("server: {}", e.message())))
        })
        .transpose()?;
    let uri = a
        .resource_uri
        .as_deref()
        .map(ResourceUri::parse)
        .transpose()?;
    Ok((server, uri, idempotency(a.idempotency_key)?))
}

/// The gateway URI a read asked for, when it can be told even though the arguments failed: the
/// error response echoes it.
pub(crate) fn requested_uri(args: Option<&JsonObject>) -> Option<String> {
    args?
        .get("resource_uri")?
        .as_str()
        .map(|s| s.chars().take(256).collect())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigureAuthArgs {
    server: serde_json::Value,
    auth_type: serde_json::Value,
    credentials: serde_json::Value,
    #[serde(default)]
    test_connection: Option<serde_json::Value>,
    #[serde(default)]
    idempotency_key: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerArgs {
    server: serde_json::Value,
    #[serde(default)]
    force: Option<serde_json::Value>,
    #[serde(default)]
    idempotency_key: Option<serde_json::Value>,
}

/// Decodes the arguments of a tool that carries secrets: every field arrives as a JSON value
/// and is checked here, so no error message ever repeats a value (serde's would).
fn decode_secretly<T: serde::de::DeserializeOwned>(
    tool: &str,
    args: Option<JsonObject>,
) -> Result<T, Error> {
    let value = serde_json::Value::Object(args.unwrap_or_default());
    serde_json::from_value(value).map_err(|e| {
        let e = e.to_string();
        let what = if e.starts_with("unknown field") || e.starts_with("missing field") {
            e.split(", expected").next().unwrap_or(&e).to_owned()
        } else {
            "they do not match the tool's input schema".to_owned()
        };
        Error::invalid(format!("{tool} arguments: {what}"))
    })
}

fn text_arg(tool: &str, field: &str, value: serde_json::Value) -> Result<String, Error> {
    match value {
        serde_json::Value::String(s) => Ok(s),
        _ => Err(Error::invalid(format!(
            "{tool} arguments: {field} must be a string"
        ))),
    }
}

fn flag_arg(
    tool: &str,
    field: &str,
    value: Option<serde_json::Value>,
    default: bool,
) -> Result<bool, Error> {
    match value {
        None | Some(serde_json::Value::Null) => Ok(default),
        Some(serde_json::Value::Bool(b)) => Ok(b),
        Some(_) => Err(Error::invalid(format!(
            "{tool} arguments: {field} must be true or false"
        ))),
    }
}

fn server_arg(tool: &str, value: serde_json::Value) -> Result<ServerName, Error> {
    ServerName::parse(&text_arg(tool, "server", value)?)
        .map_err(|e| Error::invalid(format!("server: {}", e.message())))
}

fn key_arg(tool: &str, value: Option<serde_json::Value>) -> Result<Option<IdempotencyKey>, Error> {
    match value {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => idempotency(Some(text_arg(tool, "idempotency_key", v)?)),
    }
}

/// A parsed `mcp_auth_configure` call.
#[derive(Debug)]
pub(crate) struct ConfigureAuthCall {
    pub(crate) server: ServerName,
    pub(crate) auth: UpstreamAuth,
    pub(crate) test_connection: bool,
    pub(crate) key: Option<IdempotencyKey>,
}

pub(crate) fn configure_auth(args: Option<JsonObject>) -> Result<ConfigureAuthCall, Error> {
    const TOOL: &str = "mcp_auth_configure";
    let a: ConfigureAuthArgs = decode_secretly(TOOL, args)?;
    let auth_type = text_arg(TOOL, "auth_type", a.auth_type)?;
    let serde_json::Value::Object(credentials) = a.credentials else {
        return Err(Error::invalid(format!(
            "{TOOL} arguments: credentials must be an object"
        )));
    };
    Ok(ConfigureAuthCall {
        server: server_arg(TOOL, a.server)?,
        auth: UpstreamAuth::parse(&auth_type, &credentials)?,
        test_connection: flag_arg(TOOL, "test_connection", a.test_connection, true)?,
        key: key_arg(TOOL, a.idempotency_key)?,
    })
}

/// A parsed `mcp_auth_test` or `mcp_auth_remove` call: the server, `force`, the key.
pub(crate) fn auth_server(
    tool: &str,
    args: Option<JsonObject>,
) -> Result<(ServerName, bool, Option<IdempotencyKey>), Error> {
    let a: ServerArgs = decode_secretly(tool, args)?;
    Ok((
        server_arg(tool, a.server)?,
        flag_arg(tool, "force", a.force, false)?,
        key_arg(tool, a.idempotency_key)?,
    ))
}
