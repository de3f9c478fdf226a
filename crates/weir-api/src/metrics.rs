//! `GET /metrics`: weir's own metrics in the OpenMetrics text format, for Prometheus
//! (docs/METRICS.md lists every family).
//!
//! Outside `/api/v1` on purpose: scrapers look for `/metrics` by default, and the exposition
//! format is versioned by its content type, not by the API's version.

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use weir_engine::Telemetry;

/// The content type of the exposition (OpenMetrics 1.0 text, which Prometheus negotiates).
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Renders `telemetry` as a `/metrics` answer.
pub(crate) fn answer(telemetry: &Telemetry) -> Response {
    (
        [(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)],
        telemetry.encode(),
    )
        .into_response()
}

/// A router serving only `GET /metrics` from `telemetry`: what `weir run --metrics-listen`
/// serves, so a Prometheus can scrape a foreground run as it scrapes `weir serve`.
pub fn metrics_router(telemetry: Telemetry) -> Router {
    Router::new()
        .route("/metrics", get(serve_telemetry))
        .with_state(telemetry)
}

async fn serve_telemetry(State(telemetry): State<Telemetry>) -> Response {
    answer(&telemetry)
}
