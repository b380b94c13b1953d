//! The operator's endpoints: `GET /metrics` (Prometheus text exposition), `GET /healthz` (the
//! process answers) and `GET /readyz` (200 when every readiness check passes, 503 when one
//! fails; the checks as JSON either way). Nothing here needs a credential, so the gateway
//! binds it to loopback only.

use std::{net::SocketAddr, sync::Arc};

use axum::{
    Router,
    extract::State,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use quarry_ports::Operations;
use tokio_util::sync::CancellationToken;

/// The content type of the text exposition format.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The endpoints, listening.
#[derive(Debug)]
pub struct OperatorHttp {
    /// Where they listen (the port chosen when 0 was asked).
    pub addr: SocketAddr,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// The three endpoints as routes, for a listener that serves more.
pub fn router(ops: Arc<dyn Operations>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(ops)
}

async fn metrics(State(ops): State<Arc<dyn Operations>>) -> Response {
    (
        [(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)],
        ops.metrics().await,
    )
        .into_response()
}

async fn readyz(State(ops): State<Arc<dyn Operations>>) -> Response {
    let readiness = ops.readiness().await;
    let status = if readiness.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = serde_json::to_string(&readiness).unwrap_or_else(|_| "{}".to_owned());
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

impl OperatorHttp {
    /// Binds `addr` and serves the endpoints over `ops` until [`Self::stop`].
    ///
    /// # Errors
    /// When `addr` cannot be bound.
    pub async fn start(addr: SocketAddr, ops: Arc<dyn Operations>) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let until = stop.clone();
        let task = tokio::spawn(async move {
            axum::serve(listener, router(ops))
                .with_graceful_shutdown(async move { until.cancelled().await })
                .await
        });
        tracing::info!(%addr, "metrics and health endpoints listening");
        Ok(Self { addr, stop, task })
    }

    /// Stops listening; a scrape in progress is answered first.
    pub async fn stop(self) {
        self.stop.cancel();
        match self.task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("the metrics endpoint failed: {e}"),
            Err(e) => tracing::warn!("the metrics endpoint ended abnormally: {e}"),
        }
    }
}

#[cfg(test)]
mod tests;
