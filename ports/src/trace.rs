//! The trace a request belongs to, so that calls made for it continue it (W3C Trace Context).

/// The trace context of the code running now.
pub trait TraceContext: Send + Sync + std::fmt::Debug {
    /// The W3C `traceparent` of the current span (`00-{trace id}-{span id}-{flags}`), when
    /// traces are exported and a span is current.
    fn traceparent(&self) -> Option<String>;
}
