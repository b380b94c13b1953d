//! OpenTelemetry end to end: with `[telemetry] otlp_endpoint`, `quarry serve` exports its spans
//! to a collector (the test's, decoding OTLP/HTTP protobuf), each request's span carrying its
//! correlation id, and the upstream read it makes carries the same trace: as `traceparent` in
//! the MCP request's `_meta` and, over HTTP, as the `traceparent` header.

use std::time::Duration;

use quarry_testkit::otlp::{CollectedSpan, Collector};
use serde_json::json;

use crate::{
    observe::observed,
    support::{call, http_fixture, http_server},
};

/// The trace id of a `traceparent` (`00-{trace}-{span}-{flags}`).
fn trace_of(traceparent: &str) -> &str {
    traceparent.split('-').nth(1).unwrap_or_default()
}

// traces: SR-005.1 — distributed tracing with context propagated to HTTP upstreams.
#[tokio::test(flavor = "multi_thread")]
async fn spans_are_exported_and_the_upstream_read_continues_the_trace() {
    let collector = Collector::start().await;
    let notes = http_fixture("notes", 3).await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}[telemetry]\notlp_endpoint = {:?}\nservice_name = \"quarry-test\"\n",
        http_server("notes", &notes.url),
        collector.url
    );
    // The batch exporter sends every 100 ms instead of every 5 s.
    let gw = observed(
        dir.path(),
        &config,
        &dir.path().join("quarry.db"),
        &["env", "OTEL_BSP_SCHEDULE_DELAY=100"],
    )
    .await;
    let read = call(
        &gw.client,
        "read_mcp_resource",
        json!({"resource_uri": "mcp://notes/fixture_3A//item/1"}),
    )
    .await;
    assert_eq!(read["cached"], false);
    let mut request: Option<CollectedSpan> = None;
    for _ in 0..100 {
        request = collector.spans().into_iter().find(|s| {
            s.name == "request" && s.attributes.get("action").map(String::as_str) == Some("read")
        });
        if request.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let request = request.unwrap_or_else(|| panic!("no request span: {:?}", collector.spans()));
    assert_eq!(request.service, "quarry-test");
    assert!(
        request.attributes.contains_key("correlation_id"),
        "{request:?}"
    );
    assert_eq!(request.attributes["agent"], "local");
    let traces = notes.server.traces();
    assert!(
        !traces.reads.is_empty(),
        "the read carried no _meta.traceparent: {traces:?}"
    );
    assert!(
        !traces.headers.is_empty(),
        "no traceparent header reached the upstream"
    );
    assert!(
        traces.reads.iter().any(|t| trace_of(t) == request.trace_id),
        "the upstream read is not in the request's trace: {traces:?} vs {request:?}"
    );
    assert!(
        traces
            .headers
            .iter()
            .any(|t| trace_of(t) == request.trace_id)
    );
    gw.client.cancel().await.unwrap();
}
