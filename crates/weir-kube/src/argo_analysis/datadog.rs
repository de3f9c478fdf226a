//! Argo's `datadog` metric provider (`metricproviders/datadog`), with the headers `DD-API-KEY`
//! and `DD-APPLICATION-KEY`, over the window from `interval` (a Go duration, `5m` unless set)
//! before now to now:
//!
//! - `apiVersion: v1` (the default): `GET {address}/api/v1/query?query=...&from=...&to=...`
//!   (seconds), with `query`.
//! - `apiVersion: v2`: `POST {address}/api/v2/query/scalar` (times in milliseconds), a
//!   `scalar_request` of the `queries` (name to query; `query` alone is the query named
//!   `query`), each with the `aggregator` (`last` unless set), and the `formula` (the single
//!   query's name when not set).
//!
//! **Credentials**, as in Argo: the Secret `datadog` (or `secretRef.name`) with the keys
//! `api-key`, `app-key` and, optionally, `address` (the site, `https://api.datadoghq.com` unless
//! set). Argo reads it from the controller's namespace, or from the AnalysisRun's namespace
//! when `secretRef.namespaced` is true; weir reads it from `POD_NAMESPACE` when that variable is
//! set, else from the run's namespace (see [`super::provider_secret`]). A missing Secret or key
//! is a measurement Error naming it; the keys' values never reach a message.
//!
//! **Result**, as in Argo: in v1 the value of the *last* point of the *first* series, in v2
//! the first value of the first column; a number, or `nil` when there is no series, no point or
//! a null value (so conditions guard with `default(result, 0)`), shown as `null`. A 401/403 is an Error "received authentication error
//! response code", another non-2xx one "received non 2xx response code", each with Datadog's
//! answer; no answer within `requestTimeout` (10s) is an Error too.

use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};
use weir_core::argo::analysis::Outcome;
use weir_core::argo::expr::Val;

use super::{RunContext, provider_secret, scrub_outcome};

/// Argo's Secret name when `secretRef.name` is not set.
const DEFAULT_SECRET: &str = "datadog";

/// Datadog's US1 site, when the Secret has no `address`.
const DEFAULT_ADDRESS: &str = "https://api.datadoghq.com";

/// The window when `interval` is not set.
const DEFAULT_INTERVAL: Duration = Duration::from_secs(300);

/// `requestTimeout` when not set.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Measures once.
pub(super) async fn measure(context: &RunContext, datadog: &Value) -> Outcome {
    let version = datadog
        .get("apiVersion")
        .and_then(Value::as_str)
        .filter(|version| !version.is_empty())
        .unwrap_or("v1");
    if version != "v1" && version != "v2" {
        return Outcome::Error(format!("datadog: apiVersion {version} is not v1 or v2"));
    }
    let query = datadog
        .get("query")
        .and_then(Value::as_str)
        .filter(|query| !query.trim().is_empty());
    let queries: Vec<(String, String)> = datadog
        .get("queries")
        .and_then(Value::as_object)
        .map(|queries| {
            queries
                .iter()
                .filter_map(|(name, query)| Some((name.clone(), query.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    if version == "v1" && query.is_none() {
        return Outcome::Error("datadog: query is missing (apiVersion v1 needs one)".into());
    }
    if query.is_none() && queries.is_empty() {
        return Outcome::Error("datadog: query or queries is missing".into());
    }
    let interval = match datadog.get("interval").and_then(Value::as_str) {
        None | Some("") => DEFAULT_INTERVAL,
        Some(text) => match go_duration(text) {
            Some(interval) => interval,
            None => {
                return Outcome::Error(format!("datadog: interval {text:?} is not a duration"));
            }
        },
    };
    let timeout = datadog
        .get("requestTimeout")
        .and_then(Value::as_str)
        .and_then(go_duration)
        .filter(|timeout| !timeout.is_zero())
        .unwrap_or(DEFAULT_TIMEOUT);
    let reference = datadog.get("secretRef");
    let name = reference
        .and_then(|reference| reference.get("name"))
        .and_then(Value::as_str)
        .filter(|name| !name.is_empty())
        .unwrap_or(DEFAULT_SECRET);
    let namespaced = reference
        .and_then(|reference| reference.get("namespaced"))
        .and_then(Value::as_bool)
        == Some(true);
    let secret = match provider_secret(context, name, namespaced).await {
        Ok(secret) => secret,
        Err(error) => return Outcome::Error(format!("datadog: {error}")),
    };
    let mut keys = Vec::new();
    for key in ["api-key", "app-key"] {
        match secret.get(key).filter(|value| !value.is_empty()) {
            Some(value) => keys.push(value.clone()),
            None => {
                return Outcome::Error(format!("datadog: Secret {name:?} has no {key}"));
            }
        }
    }
    let address = secret
        .get("address")
        .map(|address| address.trim())
        .filter(|address| !address.is_empty())
        .unwrap_or(DEFAULT_ADDRESS)
        .trim_end_matches('/');
    let mut headers = vec![
        ("DD-API-KEY", keys[0].clone()),
        ("DD-APPLICATION-KEY", keys[1].clone()),
    ];
    let now = Timestamp::now();
    let (method, url, body) = match query {
        Some(query) if version == "v1" => {
            let to = now.as_second();
            let from = to.saturating_sub(i64::try_from(interval.as_secs()).unwrap_or(i64::MAX));
            let url = format!(
                "{address}/api/v1/query?query={}&from={from}&to={to}",
                encode(query)
            );
            (http::Method::GET, url, bytes::Bytes::new())
        }
        _ => {
            let queries = match query {
                Some(query) => vec![("query".to_string(), query.to_string())],
                None => queries,
            };
            let aggregator = datadog
                .get("aggregator")
                .and_then(Value::as_str)
                .filter(|aggregator| !aggregator.is_empty())
                .unwrap_or("last");
            let formula = match datadog
                .get("formula")
                .and_then(Value::as_str)
                .filter(|formula| !formula.is_empty())
            {
                Some(formula) => formula.to_string(),
                None if queries.len() == 1 => queries[0].0.clone(),
                None => {
                    return Outcome::Error(
                        "datadog: formula is missing (several queries need one)".into(),
                    );
                }
            };
            headers.push(("Content-Type", "application/json".to_string()));
            let body = v2_body(&queries, &formula, aggregator, interval, now);
            (
                http::Method::POST,
                format!("{address}/api/v2/query/scalar"),
                bytes::Bytes::from(body.to_string()),
            )
        }
    };
    let outcome = match context
        .http
        .request(method.clone(), &url, headers, body, timeout)
        .await
    {
        Err(error) => Outcome::Error(format!("datadog: {error}")),
        Ok(answer) if matches!(answer.status.as_u16(), 401 | 403) => Outcome::Error(format!(
            "datadog: received authentication error response code: {} {}",
            answer.status.as_u16(),
            String::from_utf8_lossy(&answer.body).trim()
        )),
        Ok(answer) if !answer.status.is_success() => Outcome::Error(format!(
            "datadog: received non 2xx response code: {} {}",
            answer.status.as_u16(),
            String::from_utf8_lossy(&answer.body).trim()
        )),
        Ok(answer) if method == http::Method::POST => parse_v2(&answer.body),
        Ok(answer) => parse(&answer.body),
    };
    scrub_outcome(outcome, &secret, &["api-key", "app-key"])
}

/// The last point of the first series, as Argo's v1 hands it to the conditions.
pub(super) fn parse(body: &[u8]) -> Outcome {
    let document: Value = match serde_json::from_slice(body) {
        Ok(document) => document,
        Err(error) => {
            return Outcome::Error(format!("datadog: the answer is not JSON: {error}"));
        }
    };
    if document.get("status").and_then(Value::as_str) == Some("error") {
        return Outcome::Error(format!(
            "datadog: the query failed: {}",
            weir_metrics::datadog::error_message(&document)
                .unwrap_or_else(|| "no error message".into())
        ));
    }
    let value = document
        .get("series")
        .and_then(Value::as_array)
        .and_then(|series| series.first())
        .and_then(|first| first.get("pointlist"))
        .and_then(Value::as_array)
        .and_then(|points| points.last())
        .and_then(|point| point.get(1))
        .and_then(Value::as_f64);
    number_or_nil(value)
}

/// The `scalar_request` of v2.
fn v2_body(
    queries: &[(String, String)],
    formula: &str,
    aggregator: &str,
    interval: Duration,
    now: Timestamp,
) -> Value {
    let to = now.as_millisecond();
    let from = to.saturating_sub(i64::try_from(interval.as_millis()).unwrap_or(i64::MAX));
    let queries: Vec<Value> = queries
        .iter()
        .map(|(name, query)| {
            json!({"data_source": "metrics", "name": name, "query": query,
                "aggregator": aggregator})
        })
        .collect();
    json!({"data": {"type": "scalar_request", "attributes": {
        "formulas": [{"formula": formula}],
        "queries": queries,
        "from": from,
        "to": to,
    }}})
}

/// The first value of the first column, as Argo's v2 hands it to the conditions.
pub(super) fn parse_v2(body: &[u8]) -> Outcome {
    let document: Value = match serde_json::from_slice(body) {
        Ok(document) => document,
        Err(error) => {
            return Outcome::Error(format!("datadog: the answer is not JSON: {error}"));
        }
    };
    if let Some(errors) = document
        .get("errors")
        .and_then(Value::as_str)
        .filter(|errors| !errors.is_empty())
    {
        return Outcome::Error(format!("datadog: the query failed: {errors}"));
    }
    let value = document
        .pointer("/data/attributes/columns/0/values/0")
        .and_then(Value::as_f64);
    number_or_nil(value)
}

fn number_or_nil(value: Option<f64>) -> Outcome {
    match value {
        Some(number) => Outcome::Value {
            result: Val::Num(number),
            shown: number.to_string(),
        },
        None => Outcome::Value {
            result: Val::Nil,
            shown: "null".into(),
        },
    }
}

/// A Go duration (`5m`, `1h30m`, `90s`, `500ms`); `None` if it is not one.
pub(super) fn go_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text;
    let mut total = 0.0_f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            "us" | "µs" => 0.000_001,
            "ns" => 0.000_000_001,
            _ => return None,
        };
        total += number * seconds;
        rest = &rest[unit..];
    }
    Duration::try_from_secs_f64(total).ok()
}

/// A query parameter's value, percent-encoded (everything but RFC 3986's unreserved bytes).
pub(super) fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_last_point_of_the_first_series_is_the_result() {
        let body = br#"{"status":"ok","series":[{"pointlist":[[1700000000000,0.5],[1700000060000,0.01]]},{"pointlist":[[1,9]]}]}"#;
        assert_eq!(
            parse(body),
            Outcome::Value {
                result: Val::Num(0.01),
                shown: "0.01".into()
            }
        );
        let nothing = br#"{"status":"ok","series":[]}"#;
        assert_eq!(
            parse(nothing),
            Outcome::Value {
                result: Val::Nil,
                shown: "null".into()
            }
        );
        let v2 = br#"{"data":{"type":"scalar_response","attributes":{"columns":[{"name":"query","type":"number","values":[0.25]}]}}}"#;
        assert_eq!(
            parse_v2(v2),
            Outcome::Value {
                result: Val::Num(0.25),
                shown: "0.25".into()
            }
        );
        let body = v2_body(
            &[("a".into(), "sum:x{*}".into())],
            "a",
            "avg",
            Duration::from_secs(300),
            Timestamp::from_second(1_700_000_000).unwrap(),
        );
        assert_eq!(
            body["data"]["attributes"]["from"],
            json!(1_699_999_700_000_i64)
        );
        assert_eq!(
            body["data"]["attributes"]["queries"][0]["aggregator"],
            json!("avg")
        );
        assert_eq!(go_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(go_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(go_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(go_duration("5 minutes"), None);
    }
}
