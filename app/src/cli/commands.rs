//! What each command does: build the gateway, ask it, render the answer.

use std::{io::Write, sync::Arc};

use quarry_domain::{
    ByteRange, Error, ListQuery, PageLimit, Principal, ResourceType, ResourceUri, ServerDraft,
    ServerName, ServerSelector, VersionSelector,
};
use quarry_ports::{ReadRequest, Requester, ResourceGateway};
use quarry_usecases::ResourceService;

use super::{AddServerArgs, ListArgs, ReadArgs, VersionsArgs};
use crate::{compose, config::Settings, failure::Failure, render};

pub(super) async fn with_service<F, Fut>(settings: &Settings, f: F) -> Result<(), Failure>
where
    F: FnOnce(Arc<ResourceService>) -> Fut,
    Fut: std::future::Future<Output = Result<(), Failure>>,
{
    let service = compose::build(settings).await?;
    let result = f(service.clone()).await;
    service.shutdown().await;
    result
}

/// Builds the list query the CLI flags describe.
fn list_query(args: &ListArgs) -> Result<ListQuery, Error> {
    Ok(ListQuery {
        server: args
            .server
            .as_deref()
            .map(ServerSelector::new)
            .transpose()?,
        filter_type: args
            .filter_type
            .as_deref()
            .map(str::parse::<ResourceType>)
            .transpose()?,
        limit: PageLimit::new(args.limit)?,
        offset: ListQuery::parse_offset(args.offset)?,
        use_cache: true,
    })
}

pub(super) async fn list(service: Arc<ResourceService>, args: ListArgs) -> Result<(), Failure> {
    let query = list_query(&args)?;
    let result = service.list_resources(query.clone()).await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        render::json(&mut out, &result)?;
    } else {
        render::resources(&mut out, &result, query.offset)?;
        render::server_warnings(&mut std::io::stderr().lock(), &result.servers)?;
    }
    Ok(())
}

pub(super) async fn read(service: Arc<ResourceService>, args: ReadArgs) -> Result<(), Failure> {
    let request = ReadRequest {
        uri: ResourceUri::parse(&args.uri)?,
        range: ByteRange::new(args.offset, args.limit)?,
        use_cache: !args.no_cache,
        version: args
            .version
            .as_deref()
            .map(VersionSelector::parse)
            .transpose()?,
        validate_checksum: true,
        inline_limit: None,
        principal: Principal::local(),
    };
    let result = service.read_resource(request).await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        render::json(&mut out, &result)?;
    } else {
        render::content(&mut out, &result)?;
        render::read_summary(&mut std::io::stderr().lock(), &result)?;
    }
    out.flush()?;
    Ok(())
}

pub(super) async fn add_server(
    service: Arc<ResourceService>,
    args: AddServerArgs,
    json: bool,
) -> Result<(), Failure> {
    let mut env = std::collections::BTreeMap::new();
    for pair in &args.env {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| Error::invalid(format!("--env takes KEY=VALUE, got {pair:?}")))?;
        env.insert(k.to_owned(), v.to_owned());
    }
    let server = ServerDraft {
        name: args.name,
        id: None,
        endpoint: args.endpoint,
        command: args.command,
        args: args.args,
        env,
        cwd: args.cwd,
        timeout_secs: args.timeout,
        max_pages: None,
        retry_attempts: args.retry_attempts,
        retry_delay_secs: args.retry_delay,
        pool_size: args.pool_size,
        ..ServerDraft::default()
    }
    .into_settings(&|field: &str| match field {
        "name" => "NAME".to_owned(),
        other => format!("--{}", other.replace('_', "-")),
    })?;
    let status = service
        .add_server(server, Requester::Operator, None)
        .await?;
    let mut out = std::io::stdout().lock();
    if json {
        render::json(&mut out, &status)?;
    } else {
        writeln!(
            out,
            "registered '{}' ({})",
            status.server_name, status.endpoint
        )?;
        render::servers(&mut out, std::slice::from_ref(&status))?;
    }
    Ok(())
}

pub(super) async fn remove_server(
    service: Arc<ResourceService>,
    name: String,
    json: bool,
) -> Result<(), Failure> {
    let name = ServerName::parse(&name)?;
    let removed = service
        .remove_server(name, Requester::Operator, None)
        .await?;
    let mut out = std::io::stdout().lock();
    if json {
        render::json(&mut out, &removed)?;
    } else {
        writeln!(out, "removed '{}'", removed.server_name)?;
    }
    Ok(())
}

pub(super) async fn servers(service: Arc<ResourceService>, json: bool) -> Result<(), Failure> {
    let statuses = service.servers().await;
    let mut out = std::io::stdout().lock();
    if json {
        render::json(&mut out, &statuses)?;
    } else {
        render::servers(&mut out, &statuses)?;
    }
    Ok(())
}

pub(super) async fn versions(
    service: Arc<ResourceService>,
    args: VersionsArgs,
) -> Result<(), Failure> {
    let uri = ResourceUri::parse(&args.uri)?;
    let versions = service.versions(&uri).await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        render::json(&mut out, &versions)?;
    } else {
        render::versions(&mut out, &versions)?;
    }
    Ok(())
}

#[cfg(feature = "demo")]
pub(super) async fn fixture(f: super::FixtureCommand) -> Result<(), Failure> {
    let outcome = match f.http {
        None => quarry_testkit::fixture::serve_stdio(f.fixture).await,
        Some(addr) => match quarry_testkit::fixture::serve_http(f.fixture, addr).await {
            Ok(server) => {
                println!("{}", server.url);
                super::shutdown_signal().await;
                Ok(())
            }
            Err(e) => Err(e),
        },
    };
    outcome.map_err(|e| {
        tracing::error!("fixture: {e:#}");
        Error::internal().into()
    })
}
