//! OpenTelemetry traces: [`OtlpTracing`] exports the gateway's `tracing` spans (each request's
//! `request` span, with its correlation id, and what runs inside it) over OTLP/HTTP in batches,
//! and [`W3cTraceContext`] gives the `traceparent` of the current span, so that upstream calls
//! carry the request's trace.
//!
//! Export runs on the batch processor's own thread with a blocking HTTP client, so it never
//! holds up a request; spans are dropped, not queued without end, when the collector cannot
//! keep up.

use opentelemetry::trace::{TraceContextExt, TracerProvider};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::{Resource, trace::SdkTracerProvider};
use quarry_ports::TraceContext;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::{Layer, registry::LookupSpan};

/// Spans exported to a collector.
#[derive(Debug)]
pub struct OtlpTracing {
    provider: SdkTracerProvider,
}

impl OtlpTracing {
    /// Exports to `endpoint` (the collector's OTLP/HTTP traces URL, such as
    /// `http://127.0.0.1:4318/v1/traces`) as service `service_name`.
    ///
    /// # Errors
    /// When the exporter cannot be built (the message says why).
    pub fn start(endpoint: &str, service_name: &str) -> Result<Self, String> {
        // The exporter's client needs a TLS provider even for plain HTTP; ring is Quarry's.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(endpoint)
            .with_timeout(std::time::Duration::from_secs(5))
            .build()
            .map_err(|e| format!("cannot export traces to {endpoint}: {e}"))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(
                Resource::builder()
                    .with_service_name(service_name.to_owned())
                    .build(),
            )
            .build();
        Ok(Self { provider })
    }

    /// The `tracing` layer that turns spans into exported ones.
    pub fn layer<S>(&self) -> Box<dyn Layer<S> + Send + Sync>
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span> + Send + Sync,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("quarry"))
            .boxed()
    }

    /// Sends what is still buffered and stops.
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            eprintln!("quarry: traces could not all be exported: {e}");
        }
    }
}

/// The current `tracing` span's trace, as W3C Trace Context.
#[derive(Debug, Clone, Copy, Default)]
pub struct W3cTraceContext;

impl TraceContext for W3cTraceContext {
    fn traceparent(&self) -> Option<String> {
        let context = tracing::Span::current().context();
        let span = context.span();
        let sc = span.span_context();
        sc.is_valid().then(|| {
            format!(
                "00-{}-{}-{:02x}",
                sc.trace_id(),
                sc.span_id(),
                sc.trace_flags().to_u8()
            )
        })
    }
}
