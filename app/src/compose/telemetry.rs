//! The composition root's trace export: OpenTelemetry over OTLP/HTTP when `[telemetry]` asks.

use quarry_domain::Error;

use crate::config::Settings;

/// Traces exported over OTLP while the process runs (`[telemetry]`).
#[derive(Debug)]
pub struct TraceExport(quarry_telemetry_otlp::OtlpTracing);

impl TraceExport {
    /// The `tracing` layer that exports spans.
    pub fn layer<S>(&self) -> Box<dyn tracing_subscriber::Layer<S> + Send + Sync>
    where
        S: tracing::Subscriber
            + for<'span> tracing_subscriber::registry::LookupSpan<'span>
            + Send
            + Sync,
    {
        self.0.layer()
    }

    /// Sends what is still buffered.
    pub fn shutdown(&self) {
        self.0.shutdown();
    }
}

/// The trace export `[telemetry]` asks for, if any.
///
/// # Errors
/// E001 when the exporter cannot be built.
pub fn trace_export(settings: &Settings) -> Result<Option<TraceExport>, Error> {
    settings
        .telemetry
        .as_ref()
        .map(|t| {
            quarry_telemetry_otlp::OtlpTracing::start(&t.otlp_endpoint, &t.service_name)
                .map(TraceExport)
                .map_err(|e| Error::invalid(format!("telemetry.otlp_endpoint: {e}")))
        })
        .transpose()
}
