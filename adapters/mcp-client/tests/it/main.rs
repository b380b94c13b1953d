//! The rmcp upstream adapter against real fixture servers over real transports.

// A test that cannot set up its world should fail on the spot, saying where.
#![allow(clippy::unwrap_used)]

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use async_trait::async_trait;
use quarry_domain::{Body, Endpoint, ServerName, ServerSpec};
use quarry_mcp_client::RmcpConnector;
use quarry_ports::{UpstreamConnector, UpstreamError, UpstreamObserver, UpstreamSession};
use quarry_testkit::fixture::{self, FixtureArgs};
use tokio::sync::mpsc;

mod changes;
mod keepalive;

const MB: u64 = 1024 * 1024;

fn stdio_spec(name: &str, args: &[&str]) -> ServerSpec {
    ServerSpec::new(
        ServerName::parse(name).unwrap(),
        Endpoint::Stdio {
            command: fixture::program().display().to_string(),
            args: args.iter().map(|s| (*s).to_owned()).collect(),
            env: BTreeMap::new(),
            cwd: None,
        },
    )
}

/// Records what upstreams announce.
#[derive(Debug)]
struct Announcements(mpsc::UnboundedSender<String>);

#[async_trait]
impl UpstreamObserver for Announcements {
    async fn resource_updated(&self, server: &ServerName, upstream_uri: &str) {
        let _ = self.0.send(format!("updated {server} {upstream_uri}"));
    }
    async fn resources_changed(&self, server: &ServerName) {
        let _ = self.0.send(format!("list_changed {server}"));
    }
    async fn unheard(&self, server: &ServerName) {
        let _ = self.0.send(format!("unheard {server}"));
    }
}

fn observer() -> (Arc<dyn UpstreamObserver>, mpsc::UnboundedReceiver<String>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (Arc::new(Announcements(tx)), rx)
}

async fn connect(spec: &ServerSpec) -> Arc<dyn UpstreamSession> {
    RmcpConnector::new(50 * MB)
        .unwrap()
        .connect(spec, None, None, observer().0)
        .await
        .unwrap()
}

async fn check_fixture_contents(session: &dyn UpstreamSession) {
    let hello = session
        .read("fixture://text/hello.txt", MB)
        .await
        .unwrap()
        .content;
    assert_eq!(hello.mime_type.as_deref(), Some("text/plain"));
    assert_eq!(hello.body, Body::Text(fixture::hello_text("fixture")));
    let blob = session
        .read("fixture://blob/bytes.bin", MB)
        .await
        .unwrap()
        .content;
    assert_eq!(
        blob.body,
        Body::Blob(fixture::blob_bytes()),
        "binary round-trips byte for byte"
    );
    let snow = session
        .read("fixture://unicode/snow.txt", MB)
        .await
        .unwrap()
        .content;
    assert_eq!(snow.body, Body::Text(fixture::SNOW.into()));
}

#[tokio::test]
async fn stdio_upstream_lists_every_page_and_reads_text_and_blob() {
    let spec = stdio_spec("stdio-fixture", &["--resources", "120", "--page-size", "7"]);
    let session = connect(&spec).await;
    let listing = session.list_resources().await.unwrap();
    assert!(!listing.truncated);
    assert_eq!(
        listing.resources.len(),
        6 + 120,
        "built-ins plus generated, across 18 pages"
    );
    let hello = listing
        .resources
        .iter()
        .find(|r| r.uri == "fixture://text/hello.txt")
        .unwrap();
    assert!(
        hello.last_modified.is_some(),
        "lastModified annotations are parsed"
    );
    check_fixture_contents(session.as_ref()).await;
    let templates = session.list_templates().await.unwrap();
    assert_eq!(templates[0].uri_template, "fixture://item/{n}");
    session.close().await;
    assert!(session.is_closed());
}

#[tokio::test]
async fn http_upstream_lists_and_reads() {
    let server = fixture::serve_http(
        FixtureArgs {
            resources: 30,
            page_size: 10,
            ..FixtureArgs::default()
        },
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let spec = ServerSpec::new(
        ServerName::parse("http-fixture").unwrap(),
        Endpoint::Http {
            url: server.url.clone(),
        },
    );
    let session = connect(&spec).await;
    assert_eq!(session.list_resources().await.unwrap().resources.len(), 36);
    check_fixture_contents(session.as_ref()).await;
    session.close().await;
}

#[tokio::test]
async fn a_server_without_resources_lists_nothing_and_does_not_fail() {
    let session = connect(&stdio_spec("tools-only", &["--no-resources"])).await;
    let listing = session.list_resources().await.unwrap();
    assert!(listing.resources.is_empty());
    assert!(session.list_templates().await.unwrap().is_empty());
    session.close().await;
}

#[tokio::test]
async fn a_repeated_cursor_stops_the_listing_instead_of_hanging_it() {
    let session = connect(&stdio_spec(
        "looping",
        &["--repeat-cursor", "--page-size", "2"],
    ))
    .await;
    let listing = session.list_resources().await.unwrap();
    assert!(listing.truncated);
    session.close().await;
}

#[tokio::test]
async fn the_page_bound_holds() {
    let mut spec = stdio_spec("bounded", &["--resources", "100", "--page-size", "10"]);
    spec.max_pages = 3;
    let session = connect(&spec).await;
    let listing = session.list_resources().await.unwrap();
    assert!(listing.truncated);
    assert_eq!(listing.resources.len(), 30);
    session.close().await;
}

// traces: AV-3 — every upstream call has a timeout.
#[tokio::test]
async fn av_3_a_slow_read_times_out_at_the_servers_deadline() {
    let mut spec = stdio_spec("slow", &["--slow-ms", "5000"]);
    spec.timeout = Duration::from_millis(300);
    let session = connect(&spec).await;
    let started = std::time::Instant::now();
    let err = session.read("fixture://slow", MB).await.unwrap_err();
    assert_eq!(err, UpstreamError::Timeout(300));
    assert!(started.elapsed() < Duration::from_secs(4));
    // The session still serves other requests.
    assert!(session.read("fixture://text/hello.txt", MB).await.is_ok());
    session.close().await;
}

#[tokio::test]
async fn upstream_errors_map_to_the_port_contract() {
    let session = connect(&stdio_spec("errors", &[])).await;
    assert!(matches!(
        session.read("fixture://missing", MB).await,
        Err(UpstreamError::NotFound(_))
    ));
    assert!(matches!(
        session.read("fixture://fail", MB).await,
        Err(UpstreamError::Server { code: -32603, .. })
    ));
    assert_eq!(
        session
            .read("fixture://blob/bytes.bin", 100)
            .await
            .unwrap_err(),
        UpstreamError::TooLarge {
            size: 256,
            limit: 100
        }
    );
    session.close().await;
}

#[tokio::test]
async fn a_missing_program_is_unreachable_not_a_panic() {
    let spec = ServerSpec::new(
        ServerName::parse("missing").unwrap(),
        Endpoint::Stdio {
            command: "/nonexistent/quarry-upstream".into(),
            args: vec![],
            env: BTreeMap::new(),
            cwd: None,
        },
    );
    let err = RmcpConnector::new(MB)
        .unwrap()
        .connect(&spec, None, None, observer().0)
        .await
        .unwrap_err();
    assert!(matches!(err, UpstreamError::Unreachable(_)), "{err:?}");
}

#[tokio::test]
async fn an_unreachable_http_endpoint_fails_within_the_timeout() {
    let mut spec = ServerSpec::new(
        ServerName::parse("down").unwrap(),
        Endpoint::Http {
            url: "http://127.0.0.1:9/mcp".into(),
        },
    );
    spec.timeout = Duration::from_secs(5);
    let err = RmcpConnector::new(MB)
        .unwrap()
        .connect(&spec, None, None, observer().0)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            UpstreamError::Unreachable(_) | UpstreamError::Timeout(_)
        ),
        "{err:?}"
    );
}

// traces: UC-4 — stdio upstreams get a minimal environment, never the gateway's own variables.
#[tokio::test]
async fn uc_4_children_do_not_inherit_the_gateways_environment() {
    // cargo sets CARGO_PKG_NAME for every test process; a child that inherited our environment
    // would have it too.
    assert!(std::env::var_os("CARGO_PKG_NAME").is_some());
    let session = connect(&stdio_spec("env-check", &[])).await;
    let pids = fixture_children();
    assert!(!pids.is_empty(), "the fixture child is running");
    for pid in pids {
        let names = quarry_testkit::procs::environment_names(pid);
        assert!(!names.is_empty(), "a child has at least PATH");
        assert!(!names.iter().any(|n| n == "CARGO_PKG_NAME"), "{names:?}");
        assert!(
            names.iter().all(|k| [
                "PATH",
                "HOME",
                "LANG",
                "LC_ALL",
                "TMPDIR",
                "TZ",
                "SYSTEMROOT"
            ]
            .contains(&k.as_str())),
            "{names:?}"
        );
    }
    session.close().await;
}

/// The pids of this process's children running quarry-fixture.
fn fixture_children() -> Vec<u32> {
    let me = std::process::id();
    let fixtures: Vec<u32> = quarry_testkit::procs::with_cmdline("quarry-fixture")
        .into_iter()
        .map(|(pid, _)| pid)
        .collect();
    quarry_testkit::procs::children_of(me)
        .into_iter()
        .map(|(pid, _)| pid)
        .filter(|pid| fixtures.contains(pid))
        .collect()
}

// traces: RC-4 — content over the limit is refused (E008) long before the request's deadline,
// and the session lives on. Over stdio even a huge message is cut while it arrives; over HTTP a
// message past twice the limit ends the session (rmcp treats it as fatal), so that case is E003.
#[tokio::test]
async fn rc_4_oversized_content_is_refused_while_receiving() {
    let limit = 64 * 1024;
    let mut stdio = stdio_spec("huge-stdio", &[]);
    stdio.timeout = Duration::from_secs(20);
    let server = fixture::serve_http(FixtureArgs::default(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let mut http = ServerSpec::new(
        ServerName::parse("huge-http").unwrap(),
        Endpoint::Http {
            url: server.url.clone(),
        },
    );
    http.timeout = Duration::from_secs(20);
    for (spec, sizes) in [(stdio, &[100_000, 4_000_000][..]), (http, &[100_000][..])] {
        let session = RmcpConnector::new(limit)
            .unwrap()
            .connect(&spec, None, None, observer().0)
            .await
            .unwrap();
        for size in sizes {
            let started = std::time::Instant::now();
            let err = session
                .read(&format!("fixture://sized/{size}"), u64::MAX)
                .await
                .unwrap_err();
            assert!(
                matches!(err, UpstreamError::TooLarge { limit: 65_536, .. }),
                "{} {size}: {err:?}",
                spec.name
            );
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{}: took {:?}",
                spec.name,
                started.elapsed()
            );
            // The session survives and serves the next request.
            assert!(
                session.read("fixture://sized/1000", u64::MAX).await.is_ok(),
                "{}",
                spec.name
            );
        }
        session.close().await;
    }
}

// traces: RC-5 — binary content round-trips byte for byte (see the stdio and HTTP tests above);
// a blob that is not base64 is an error, not garbage.
#[tokio::test]
async fn rc_5_invalid_base64_from_an_upstream_is_an_error() {
    let session = connect(&stdio_spec("broken", &[])).await;
    let err = session
        .read("fixture://broken/base64", MB)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, UpstreamError::Protocol(m) if m.contains("base64")),
        "{err:?}"
    );
    assert!(
        session.read("fixture://blob/bytes.bin", MB).await.is_ok(),
        "the session lives on"
    );
    session.close().await;
}

// An HTTP upstream that restarts forgets its sessions and answers 404: the session re-initialises
// and the request succeeds.
#[tokio::test]
async fn a_restarted_http_upstream_is_reinitialised_after_404() {
    let first = fixture::serve_http(FixtureArgs::default(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = first.addr;
    let spec = ServerSpec::new(
        ServerName::parse("restarting").unwrap(),
        Endpoint::Http {
            url: first.url.clone(),
        },
    );
    let session = RmcpConnector::new(MB)
        .unwrap()
        .connect(&spec, None, None, observer().0)
        .await
        .unwrap();
    assert!(session.read("fixture://counter", MB).await.is_ok());
    first.stop();
    drop(first);
    // Restart on the same port as soon as it is free.
    let started = std::time::Instant::now();
    let _second = loop {
        match fixture::serve_http(FixtureArgs::default(), addr).await {
            Ok(server) => break server,
            Err(e) => {
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "port never freed: {e}"
                );
                tokio::task::yield_now().await;
            }
        }
    };
    let again = session.read("fixture://text/hello.txt", MB).await;
    assert!(again.is_ok(), "{again:?}");
    session.close().await;
}
