//! `POST /api/v1/flags/{namespace}/{key}/outcomes`: what each variation of a flag served,
//! reported by the applications that evaluate it (or an OpenFeature hook), for the judges of a
//! guarded flag rollout (docs/FLAGS.md, "Guarded flags").
//!
//! The body counts what happened since the reporter's previous report, per variant:
//!
//! ```json
//! {"variants": {
//!   "on":  {"requests": 120, "errors": 3, "latencyMs": [12.5, 40, ...]},
//!   "off": {"requests": 480, "errors": 5, "slow": 2}
//! }}
//! ```
//!
//! `requests` is required; `errors` and `slow` default to 0 and count among the requests;
//! `latencyMs` lists every request's duration (one per request) instead of `slow`. The answer
//! is 204 once everything is counted; nothing is counted when anything is wrong: 400 (the body
//! on its own: not JSON, a field of the wrong type, an unknown field, more errors than
//! requests), 404 (no such flag), 422 (a variant the flag does not have, naming those it has).

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};
use weir_core::FieldError;
use weir_flags::{Flags, Outcome, Report, ReportError};
use weir_store::{FlagKey, FlagStore};

use crate::error::ApiError;
use crate::input::{self, Params};

/// The fields of one variant's outcome.
const OUTCOME_FIELDS: [&str; 4] = ["requests", "errors", "slow", "latencyMs"];

impl From<ReportError> for ApiError {
    fn from(error: ReportError) -> ApiError {
        match error {
            ReportError::NotFound(key) => ApiError::NotFound(format!("flag {key} not found")),
            ReportError::Invalid(errors) => ApiError::invalid(errors),
            ReportError::UnknownVariations(errors) => {
                let message = match errors.as_slice() {
                    [one] => one.to_string(),
                    many => format!("{} unknown variants; see errors", many.len()),
                };
                ApiError::Unprocessable { message, errors }
            }
        }
    }
}

/// `POST /api/v1/flags/{namespace}/{key}/outcomes`
pub(crate) async fn report<F: FlagStore>(
    State(flags): State<Flags<F>>,
    Path((namespace, key)): Path<(String, String)>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    Params::parse(query, &[])?;
    input::format(&headers, false, Some(input::Format::Json))?;
    let bytes = input::body(body)?;
    let report = report_of(&bytes)?;
    flags.report(&FlagKey::new(namespace, key), &report)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The report a body holds, or every problem of its shape with its path. The rules between
/// the counts (errors at most the requests, ...) are `weir_flags::Outcome::check`'s.
pub(crate) fn report_of(bytes: &[u8]) -> Result<Report, ApiError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|error| {
        ApiError::field(FieldError::new(
            "(body)",
            format!("is not valid JSON: {error}"),
        ))
    })?;
    let Value::Object(mut body) = value else {
        return Err(ApiError::field(FieldError::new(
            "(body)",
            "must be a JSON object: {\"variants\": {\"VARIANT\": {\"requests\": N, \"errors\": N}}}",
        )));
    };
    let mut errors = Vec::new();
    let variants = body.remove("variants");
    for (field, _) in body {
        errors.push(FieldError::new(
            field,
            "unknown field: the body has only `variants`",
        ));
    }
    let variants = match variants {
        Some(Value::Object(variants)) if !variants.is_empty() => variants,
        Some(Value::Object(_)) => {
            errors.push(FieldError::new(
                "variants",
                "must name at least one variant",
            ));
            Map::new()
        }
        Some(other) => {
            errors.push(FieldError::with_value(
                "variants",
                other,
                "an object: variant name -> {requests, errors, slow or latencyMs}",
            ));
            Map::new()
        }
        None => {
            errors.push(FieldError::new(
                "variants",
                "is required: variant name -> {requests, errors, slow or latencyMs}",
            ));
            Map::new()
        }
    };
    let mut report = BTreeMap::new();
    for (name, value) in variants {
        match outcome_of(&format!("variants.{name}"), value) {
            Ok(outcome) => {
                report.insert(name, outcome);
            }
            Err(problems) => errors.extend(problems),
        }
    }
    if errors.is_empty() {
        Ok(report)
    } else {
        Err(ApiError::invalid(errors))
    }
}

/// A count: a whole number >= 0. JSON does not tell 2 from 2.0, and neither does JSON Schema's
/// `integer` (which the OpenAPI document declares), so an integral float counts too, up to
/// 2^53 where every whole number is exact.
fn whole(value: &Value) -> Option<u64> {
    const EXACT: f64 = 9_007_199_254_740_992.0;
    value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|number| number.fract() == 0.0 && (0.0..=EXACT).contains(number))
            // In range and integral (checked above), so the conversion is exact.
            .map(|number| number as u64)
    })
}

/// One variant's outcome at `path`.
fn outcome_of(path: &str, value: Value) -> Result<Outcome, Vec<FieldError>> {
    let Value::Object(fields) = value else {
        return Err(vec![FieldError::with_value(
            path,
            value,
            "an object: {\"requests\": N, \"errors\": N} with slow or latencyMs optional",
        )]);
    };
    let mut errors = Vec::new();
    let mut outcome = Outcome::default();
    let mut requests_given = false;
    for (field, value) in fields {
        let at = format!("{path}.{field}");
        requests_given |= field == "requests";
        match field.as_str() {
            "requests" | "errors" | "slow" => match whole(&value) {
                Some(count) => match field.as_str() {
                    "requests" => outcome.requests = count,
                    "errors" => outcome.errors = count,
                    _ => outcome.slow = count,
                },
                None => errors.push(FieldError::with_value(at, value, "a whole number >= 0")),
            },
            "latencyMs" => match value {
                Value::Array(items) => {
                    for (index, item) in items.into_iter().enumerate() {
                        match item.as_f64() {
                            Some(latency) => outcome.latencies_ms.push(latency),
                            None => errors.push(FieldError::with_value(
                                format!("{at}[{index}]"),
                                item,
                                "a duration in milliseconds (a number >= 0)",
                            )),
                        }
                    }
                }
                other => errors.push(FieldError::with_value(
                    at,
                    other,
                    "a list of durations in milliseconds, one per request",
                )),
            },
            _ => errors.push(FieldError::new(
                at,
                format!(
                    "unknown field: an outcome has {}",
                    OUTCOME_FIELDS.join(", ")
                ),
            )),
        }
    }
    if !requests_given {
        errors.push(FieldError::new(
            format!("{path}.requests"),
            "is required: how many requests this variant served since the previous report",
        ));
    }
    if errors.is_empty() {
        Ok(outcome)
    } else {
        Err(errors)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests;
