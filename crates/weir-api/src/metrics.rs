//! `GET /metrics`: weir's own metrics in the OpenMetrics text format, for Prometheus
//! (docs/METRICS.md lists every family).
//!
//! Outside `/api/v1` on purpose: scrapers look for `/metrics` by default, and the exposition
//! format is versioned by its content type, not by the API's version.
//!
//! A caller whose token is limited to namespaces (`weir serve --metrics-auth read`) gets only
//! the series it may see ([`visible_in`]): every series labelled with another namespace is left
//! out, and so is any series that names a rollout or a flag without saying its namespace (none
//! does today; a future one is left out rather than shown). Process-wide series (the engine's,
//! the cluster's) have no namespace and stay.

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use weir_engine::Telemetry;

/// The content type of the exposition (OpenMetrics 1.0 text, which Prometheus negotiates).
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Renders `telemetry` as a `/metrics` answer: every series, or with `namespaces` (a caller
/// limited to them) only those it may see ([`visible_in`]).
pub(crate) fn answer(telemetry: &Telemetry, namespaces: Option<&[String]>) -> Response {
    let text = telemetry.encode();
    let text = match namespaces {
        None => text,
        Some(namespaces) => visible_in(&text, namespaces),
    };
    ([(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], text).into_response()
}

/// Labels that name an object living in a namespace: a series carrying one without a
/// `namespace` label cannot be placed, so a limited caller does not get it.
const OBJECT_LABELS: [&str; 2] = ["rollout", "flag"];

/// The exposition `text` (OpenMetrics) with only what a caller limited to `namespaces` may
/// see: comment lines (`# HELP`, `# TYPE`, `# UNIT`, `# EOF`) and series without a namespace
/// stay; a series whose `namespace` label is not one of `namespaces`, one that carries a
/// `rollout` or `flag` label without a `namespace` label, and a line that cannot be read are
/// left out.
pub(crate) fn visible_in(text: &str, namespaces: &[String]) -> String {
    let mut visible = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let sample = line.trim_end_matches(['\n', '\r']);
        let keep = sample.is_empty()
            || sample.starts_with('#')
            || labels_of(sample).is_some_and(|labels| {
                let mut placed = false;
                for (name, value) in &labels {
                    if *name == "namespace" {
                        if !namespaces.iter().any(|seen| seen == value) {
                            return false;
                        }
                        placed = true;
                    }
                }
                placed || !labels.iter().any(|(name, _)| OBJECT_LABELS.contains(name))
            });
        if keep {
            visible.push_str(line);
        }
    }
    visible
}

/// The labels of a sample line (`name{a="x",b="y"} 1`), values unescaped; `None` when the
/// line is not a sample this reader understands.
fn labels_of(sample: &str) -> Option<Vec<(&str, String)>> {
    let name_end = sample.find(['{', ' '])?;
    let Some(mut rest) = sample[name_end..].strip_prefix('{') else {
        return Some(Vec::new());
    };
    let mut labels = Vec::new();
    loop {
        rest = rest.trim_start();
        if rest.starts_with('}') {
            return Some(labels);
        }
        let (name, after) = rest.split_once('=')?;
        let name = name.trim();
        if name.is_empty() {
            return None;
        }
        let quoted = after.trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = quoted.char_indices();
        let end = loop {
            let (at, character) = chars.next()?;
            match character {
                '\\' => match chars.next()? {
                    (_, 'n') => value.push('\n'),
                    (_, escaped) => value.push(escaped),
                },
                '"' => break at,
                other => value.push(other),
            }
        };
        labels.push((name, value));
        rest = quoted[end + 1..].trim_start();
        if let Some(after_comma) = rest.strip_prefix(',') {
            rest = after_comma;
        } else if !rest.starts_with('}') {
            return None;
        }
    }
}

/// A router serving only `GET /metrics` from `telemetry`: what `weir run --metrics-listen`
/// serves, so a Prometheus can scrape a foreground run as it scrapes `weir serve`.
pub fn metrics_router(telemetry: Telemetry) -> Router {
    Router::new()
        .route("/metrics", get(serve_telemetry))
        .with_state(telemetry)
}

async fn serve_telemetry(State(telemetry): State<Telemetry>) -> Response {
    answer(&telemetry, None)
}

#[cfg(test)]
mod tests;
