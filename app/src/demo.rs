//! `quarry demo`: the whole path end to end with nothing to set up.
//!
//! It starts two fixture upstreams — one a child process over stdio (this same binary, running
//! its hidden `fixture` command), one over streamable HTTP on loopback — lists across both, and
//! reads one resource twice: the first read goes upstream, the second is served from cache.

use std::{collections::BTreeMap, io::Write, time::Instant};

use quarry_domain::{
    Endpoint, Error, ListQuery, ResourceUri, ServerName, ServerSettings, ServerSpec,
};
use quarry_ports::{ReadRequest, ResourceGateway};
use quarry_testkit::fixture::{FixtureArgs, serve_http};
use serde_json::json;

use crate::{compose, config::Settings, failure::Failure, render};

fn server(name: &str, endpoint: Endpoint) -> Result<ServerSettings, Error> {
    Ok(ServerSettings::new(ServerSpec::new(
        ServerName::parse(name)?,
        endpoint,
    )))
}

pub(crate) async fn run(as_json: bool) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    let say = |out: &mut std::io::StdoutLock<'_>, text: &str| -> std::io::Result<()> {
        if !as_json {
            writeln!(out, "{text}")?;
        }
        Ok(())
    };

    say(
        &mut out,
        "Starting two fixture MCP servers: 'files' (stdio child process) and 'notes' (streamable HTTP)...",
    )?;
    let http = serve_http(
        FixtureArgs {
            name: "notes".into(),
            resources: 3,
            ..FixtureArgs::default()
        },
        ([127, 0, 0, 1], 0).into(),
    )
    .await
    .map_err(|e| {
        tracing::error!("demo: cannot start the HTTP fixture: {e:#}");
        Error::internal()
    })?;
    let me = std::env::current_exe()?;
    let mut settings = Settings::defaults();
    settings.servers = vec![
        server(
            "files",
            Endpoint::Stdio {
                command: me.display().to_string(),
                args: ["fixture", "--name", "files", "--resources", "4"]
                    .map(String::from)
                    .to_vec(),
                env: BTreeMap::new(),
                cwd: None,
            },
        )?,
        server(
            "notes",
            Endpoint::Http {
                url: http.url.clone(),
            },
        )?,
    ];
    let service = compose::build(&settings).await?;

    let outcome = async {
        say(&mut out, "\n1. list_mcp_resources across both servers:\n")?;
        let listing = service.list_resources(ListQuery::default()).await?;
        if !as_json {
            render::resources(&mut out, &listing, 0)?;
        }

        let uri = ResourceUri::parse("mcp://files/fixture_3A//text/hello.txt")?;
        let mut reads = Vec::new();
        for (step, label) in [(2, "first read"), (3, "second read")] {
            let started = Instant::now();
            let result = service.read_resource(ReadRequest::whole(uri.clone())).await?;
            let elapsed = started.elapsed();
            if !as_json {
                writeln!(
                    out,
                    "\n{step}. read_mcp_resource {uri} ({label}): {} in {:.3} ms",
                    if result.cached { "served from cache" } else { "fetched from the upstream" },
                    elapsed.as_secs_f64() * 1000.0
                )?;
                write!(out, "   content: ")?;
                render::content(&mut out, &result)?;
                writeln!(out, "   {} · cached: {} · cached_at: {}", result.content_range.as_str(), result.cached,
                    result.cached_at.map_or("null".into(), |t| t.to_rfc3339()))?;
            }
            reads.push(json!({"result": result, "elapsed_ms": elapsed.as_secs_f64() * 1000.0}));
        }
        if as_json {
            render::json(&mut out, &json!({"listing": listing, "reads": reads}))?;
        } else {
            writeln!(out, "\nDone. Point an agent at `quarry serve` with your own quarry.toml to do the same with real servers.")?;
        }
        Ok::<(), Failure>(())
    }
    .await;
    service.shutdown().await;
    http.stop();
    outcome
}
