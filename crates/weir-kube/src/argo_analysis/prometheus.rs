//! Argo's `prometheus` metric provider (`metricproviders/prometheus`): an instant query,
//! `GET {address}/api/v1/query?query=...`, with `headers[{key, value}]` and `timeout` (seconds,
//! 30 unless set).
//!
//! As in Argo, `result` is a number for a scalar answer and an array of numbers for a vector
//! (one per sample, hence `result[0]` and `len(result) == 0` in conditions) or a matrix (every
//! point of every series); NaN and ±Inf are kept as numbers. The measurement's value is the
//! sample as Prometheus wrote it (`0.95`), or the samples in brackets (`[0.95,0.2]`). An error
//! answer (`status: error`), no answer within the timeout, or another result type is an Error.
//!
//! `authentication` (SigV4, OAuth2) and `rangeQuery` are not run: such a metric is an
//! Error saying so, never a query sent without what it asked for. `insecure` is not honoured:
//! weir verifies every server's certificate.

use serde_json::Value;
use weir_core::argo::analysis::Outcome;
use weir_core::argo::expr::Val;

use super::{headers, seconds};

/// The timeout of a query when `timeout` is not set.
const DEFAULT_TIMEOUT_SECONDS: u64 = 30;

/// Measures once.
pub(super) async fn measure(http: &weir_http::HttpClient, prometheus: &Value) -> Outcome {
    for refused in ["authentication", "rangeQuery"] {
        if prometheus
            .get(refused)
            .is_some_and(|value| !value.is_null())
        {
            return Outcome::Error(format!(
                "prometheus: {refused} is not supported by weir's Argo analysis"
            ));
        }
    }
    let Some(address) = prometheus
        .get("address")
        .and_then(Value::as_str)
        .filter(|address| !address.is_empty())
    else {
        return Outcome::Error("prometheus: address is missing".into());
    };
    let Some(query) = prometheus.get("query").and_then(Value::as_str) else {
        return Outcome::Error("prometheus: query is missing".into());
    };
    let url = format!(
        "{}/api/v1/query?query={}",
        address.trim_end_matches('/'),
        encode(query)
    );
    let timeout = seconds(prometheus.get("timeout"), DEFAULT_TIMEOUT_SECONDS);
    let answer = match http
        .request(
            http::Method::GET,
            &url,
            headers(prometheus),
            bytes::Bytes::new(),
            timeout,
        )
        .await
    {
        Ok(answer) => answer,
        Err(error) => return Outcome::Error(error.to_string()),
    };
    let document: Value = match serde_json::from_slice(&answer.body) {
        Ok(document) => document,
        Err(error) => {
            return Outcome::Error(format!(
                "prometheus answered {} with a body that is not JSON: {error}",
                answer.status.as_u16()
            ));
        }
    };
    parse(&document)
}

/// The query's result as Argo hands it to the conditions.
pub(super) fn parse(document: &Value) -> Outcome {
    if document.get("status").and_then(Value::as_str) != Some("success") {
        let kind = document
            .get("errorType")
            .and_then(Value::as_str)
            .unwrap_or("error");
        let error = document
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("no error message");
        return Outcome::Error(format!("prometheus: {kind}: {error}"));
    }
    let data = document.get("data").unwrap_or(&Value::Null);
    let result = data.get("result").unwrap_or(&Value::Null);
    match data.get("resultType").and_then(Value::as_str) {
        Some("scalar") => match sample(result) {
            Some((number, text)) => Outcome::Value {
                result: Val::Num(number),
                shown: text,
            },
            None => Outcome::Error(format!("prometheus: a scalar without a value: {result}")),
        },
        Some("vector") => list(
            result
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|series| series.get("value"))
                .collect(),
        ),
        Some("matrix") => list(
            result
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|series| series.get("values").and_then(Value::as_array))
                .flatten()
                .collect(),
        ),
        other => Outcome::Error(format!(
            "prometheus: result type {} is not supported",
            other.unwrap_or("(none)")
        )),
    }
}

fn list(samples: Vec<&Value>) -> Outcome {
    let mut numbers = Vec::with_capacity(samples.len());
    let mut texts = Vec::with_capacity(samples.len());
    for item in samples {
        match sample(item) {
            Some((number, text)) => {
                numbers.push(Val::Num(number));
                texts.push(text);
            }
            None => return Outcome::Error(format!("prometheus: a sample without a value: {item}")),
        }
    }
    Outcome::Value {
        result: Val::List(numbers),
        shown: format!("[{}]", texts.join(",")),
    }
}

/// `[time, "value"]`: the value as a number (NaN, +Inf, -Inf included) and as written.
fn sample(item: &Value) -> Option<(f64, String)> {
    let text = item.get(1)?.as_str()?;
    let number = match text {
        "NaN" => f64::NAN,
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        other => other.parse().ok()?,
    };
    Some((number, text.to_string()))
}

/// A query parameter's value, percent-encoded (everything but RFC 3986's unreserved bytes).
fn encode(text: &str) -> String {
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
    use serde_json::json;

    use super::*;

    #[test]
    fn vectors_are_arrays_and_scalars_numbers() {
        let vector = json!({"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {"a": "1"}, "value": [1.0, "0.95"]},
            {"metric": {"a": "2"}, "value": [1.0, "NaN"]}
        ]}});
        let Outcome::Value { result, shown } = parse(&vector) else {
            panic!("not a value");
        };
        assert_eq!(shown, "[0.95,NaN]");
        let Val::List(items) = result else {
            panic!("not a list")
        };
        assert_eq!(items[0], Val::Num(0.95));
        assert!(matches!(items[1], Val::Num(number) if number.is_nan()));

        let empty = json!({"status": "success", "data": {"resultType": "vector", "result": []}});
        assert_eq!(
            parse(&empty),
            Outcome::Value {
                result: Val::List(Vec::new()),
                shown: "[]".into()
            }
        );
        let scalar =
            json!({"status": "success", "data": {"resultType": "scalar", "result": [1.0, "3"]}});
        assert_eq!(
            parse(&scalar),
            Outcome::Value {
                result: Val::Num(3.0),
                shown: "3".into()
            }
        );
        let error = json!({"status": "error", "errorType": "bad_data", "error": "parse error"});
        assert_eq!(
            parse(&error),
            Outcome::Error("prometheus: bad_data: parse error".into())
        );
        assert_eq!(
            encode("rate(x{a=\"b\"}[5m])"),
            "rate%28x%7Ba%3D%22b%22%7D%5B5m%5D%29"
        );
    }
}
