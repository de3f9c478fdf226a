//! Dynatrace: `GET <address>/api/v2/metrics/query?metricSelector=<query>&resolution=Inf&from=<ms>&to=<ms>`
//! (the Metrics API v2), authenticated with `Authorization: Api-Token <token>` from the
//! Secret's `dynatrace_token`. The address is required (an environment's URL, e.g.
//! `https://abc12345.live.dynatrace.com`).
//!
//! The window, as in Flagger: from ten intervals ago to now, in milliseconds, with
//! `resolution=Inf` (one point per series).
//!
//! The value, as in Flagger: the **last** series of the first result (`result[0].data[last]`),
//! its first value (**kept**: a template whose selector aggregates to one series reads the same
//! number; with several, the message says so). No result, no series or no values: no data.
//! A `null` value (Dynatrace's way of saying a data gap) is no data; Flagger decodes it as 0,
//! which would pass an error-rate check on no traffic (**fixed**).

use jiff::Timestamp;
use serde_json::Value;

use crate::{Plan, Reading, Request};

/// The Secret's key: the API token (scope `metrics.read`).
pub const SECRET_KEYS: [&str; 1] = ["dynatrace_token"];

/// How many intervals back the window starts (Flagger's).
const WINDOW_INTERVALS: i64 = 10;

/// The query of `plan` at `now`.
pub fn request(plan: &Plan, now: Timestamp) -> Request {
    let to = now.as_millisecond();
    let interval = i64::try_from(plan.interval.as_millis())
        .unwrap_or(i64::MAX)
        .max(1);
    let from = to.saturating_sub(interval.saturating_mul(WINDOW_INTERVALS));
    // As Flagger sends it, but for the line end a block scalar leaves.
    let selector = plan.query.trim();
    let parameters = form_urlencoded::Serializer::new(String::new())
        .append_pair("metricSelector", selector)
        .append_pair("resolution", "Inf")
        .append_pair("from", &from.to_string())
        .append_pair("to", &to.to_string())
        .finish();
    let url = format!("{}/api/v2/metrics/query?{parameters}", plan.address);
    Request {
        method: http::Method::GET,
        body: bytes::Bytes::new(),
        shown: url.clone(),
        url,
        headers: vec![(
            "authorization",
            format!("Api-Token {}", plan.credentials.get(SECRET_KEYS[0])),
        )],
    }
}

/// The number in a `200` answer.
pub fn read(body: &[u8]) -> Result<Reading, String> {
    let json: Value = serde_json::from_slice(body)
        .map_err(|_| "answered 200 without a Dynatrace JSON body".to_string())?;
    let results = json
        .get("result")
        .and_then(Value::as_array)
        .ok_or("the answer has no result list")?;
    let Some(first) = results.first() else {
        return Ok(Reading::NoData("the query returned no result".into()));
    };
    let series = first
        .get("data")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let Some(last) = series.last() else {
        return Ok(Reading::NoData("the first result has no series".into()));
    };
    let value = last
        .get("values")
        .and_then(Value::as_array)
        .and_then(|values| values.first());
    let value = match value {
        None => return Ok(Reading::NoData("the series has no values".into())),
        Some(Value::Null) => {
            return Ok(Reading::NoData(
                "the series' value is null (a data gap)".into(),
            ));
        }
        Some(value) => value
            .as_f64()
            .ok_or_else(|| format!("the value is not a number: {value}"))?,
    };
    let remark = (series.len() > 1).then(|| {
        format!(
            "last of {} series, as Flagger; aggregate the selector to one",
            series.len()
        )
    });
    Ok(Reading::Value(value, remark))
}

/// Dynatrace's error answers: `{"error": {"code": 401, "message": "..."}}`.
pub fn error_message(json: &Value) -> Option<String> {
    let error = json.get("error")?;
    let message = error.get("message").and_then(Value::as_str)?.to_string();
    let violations: Vec<String> = error
        .get("constraintViolations")
        .and_then(Value::as_array)
        .map(|violations| {
            violations
                .iter()
                .filter_map(|violation| violation.get("message").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    Some(if violations.is_empty() {
        message
    } else {
        format!("{message} ({})", violations.join("; "))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_last_series_first_value_is_read_and_null_is_no_data() {
        let body = br#"{"totalCount":1,"nextPageKey":null,"resolution":"Inf","result":[{"metricId":"builtin:service.response.time:percentile(95)","data":[{"dimensions":["SERVICE-ABC"],"dimensionMap":{"dt.entity.service":"SERVICE-ABC"},"timestamps":[1589455320000],"values":[123.4]}]}]}"#;
        assert_eq!(read(body).unwrap(), Reading::Value(123.4, None));
        let two = br#"{"result":[{"data":[{"values":[1.0]},{"values":[2.0]}]}]}"#;
        assert!(matches!(read(two).unwrap(), Reading::Value(value, Some(_)) if value == 2.0));
        for body in [
            &br#"{"result":[]}"#[..],
            br#"{"result":[{"data":[]}]}"#,
            br#"{"result":[{"data":[{"values":[]}]}]}"#,
            br#"{"result":[{"data":[{"values":[null]}]}]}"#,
        ] {
            assert!(
                matches!(read(body).unwrap(), Reading::NoData(_)),
                "{body:?}"
            );
        }
        assert_eq!(
            error_message(&serde_json::json!({"error":{"code":400,"message":"Constraints violated.","constraintViolations":[{"path":"metricSelector","message":"must not be empty"}]}})).as_deref(),
            Some("Constraints violated. (must not be empty)")
        );
    }
}
