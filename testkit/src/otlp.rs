//! A trace collector for tests: an OTLP/HTTP endpoint (`POST /v1/traces`, protobuf) that
//! decodes what it receives with the OpenTelemetry protocol's own message types and keeps the
//! spans.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use opentelemetry_proto::tonic::{
    collector::trace::v1::ExportTraceServiceRequest, common::v1::any_value::Value,
};
use prost::Message;
use quarry_domain::hex_lower as hex;

/// One span as the collector received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectedSpan {
    /// The span's name.
    pub name: String,
    /// Its trace id (hex).
    pub trace_id: String,
    /// Its own id (hex).
    pub span_id: String,
    /// Its parent's id (hex; empty for a root).
    pub parent_span_id: String,
    /// Its attributes, string-valued or rendered.
    pub attributes: BTreeMap<String, String>,
    /// The exporting service's name.
    pub service: String,
}

/// The collector, listening.
#[derive(Debug)]
pub struct Collector {
    /// Its traces endpoint, `http://127.0.0.1:PORT/v1/traces`.
    pub url: String,
    spans: Arc<Mutex<Vec<CollectedSpan>>>,
    stop: tokio_util::sync::CancellationToken,
}

fn text(value: Option<&Value>) -> String {
    match value {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(n)) => n.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn spans_of(request: ExportTraceServiceRequest) -> Vec<CollectedSpan> {
    let mut out = Vec::new();
    for resource in request.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .map(|kv| text(kv.value.as_ref().and_then(|v| v.value.as_ref())))
            .unwrap_or_default();
        for scope in resource.scope_spans {
            for span in scope.spans {
                out.push(CollectedSpan {
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| {
                            (
                                kv.key.clone(),
                                text(kv.value.as_ref().and_then(|v| v.value.as_ref())),
                            )
                        })
                        .collect(),
                    service: service.clone(),
                });
            }
        }
    }
    out
}

impl Collector {
    /// A collector on a free loopback port.
    ///
    /// # Panics
    /// When no port can be bound.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port for the collector");
        let addr: SocketAddr = listener.local_addr().expect("the collector's address");
        let spans = Arc::new(Mutex::new(Vec::new()));
        let kept = spans.clone();
        let router = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let kept = kept.clone();
                async move {
                    match ExportTraceServiceRequest::decode(body.as_ref()) {
                        Ok(request) => {
                            kept.lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .extend(spans_of(request));
                            (axum::http::StatusCode::OK, Vec::new())
                        }
                        Err(_) => (axum::http::StatusCode::BAD_REQUEST, Vec::new()),
                    }
                }
            }),
        );
        let stop = tokio_util::sync::CancellationToken::new();
        let until = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async move { until.cancelled().await })
                .await;
        });
        Self {
            url: format!("http://{addr}/v1/traces"),
            spans,
            stop,
        }
    }

    /// The spans received so far.
    pub fn spans(&self) -> Vec<CollectedSpan> {
        self.spans.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
