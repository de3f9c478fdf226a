//! Datadog: `GET <address>/api/v1/query?query=<query>&from=<s>&to=<s>` (the v1 "Query
//! timeseries points" API), authenticated with the headers `DD-API-KEY` and
//! `DD-APPLICATION-KEY` from the Secret's `datadog_api_key` and `datadog_application_key`.
//! The address defaults to `https://api.datadoghq.com` (another site: set `provider.address`,
//! e.g. `https://api.datadoghq.eu`).
//!
//! The window, as in Flagger: from ten intervals ago to now (a template's `.as_count()` and
//! rollups depend on the window's length, so it is kept).
//!
//! The value is taken from the first series' `pointlist` (`[[ms, value], ...]`). Flagger reads
//! the *oldest* point, to stay clear of the newest bucket, which is still filling; but the oldest
//! point of a ten-interval window describes the service ten intervals ago, before the canary
//! may have had any traffic. weir reads the **newest point whose bucket is complete** (its
//! timestamp plus the series' `interval` at or before `to`), and the newest point with a value
//! when none is. A `null` value (a bucket without data) is skipped; Flagger reads it as 0,
//! which would pass an error-rate check on no traffic. No series, no points, or only nulls:
//! no data.

use jiff::Timestamp;
use serde_json::Value;

use crate::{Plan, Reading, Request};

/// Datadog's US1 site.
pub const DEFAULT_ADDRESS: &str = "https://api.datadoghq.com";

/// The Secret's keys: the API key and the application key.
pub const SECRET_KEYS: [&str; 2] = ["datadog_api_key", "datadog_application_key"];

/// How many intervals back the window starts (Flagger's).
const WINDOW_INTERVALS: i64 = 10;

/// The query of `plan` at `now`.
pub fn request(plan: &Plan, now: Timestamp) -> Request {
    let to = now.as_second();
    let interval = i64::try_from(plan.interval.as_secs())
        .unwrap_or(i64::MAX)
        .max(1);
    let from = to.saturating_sub(interval.saturating_mul(WINDOW_INTERVALS));
    let parameters = form_urlencoded::Serializer::new(String::new())
        .append_pair("query", &plan.query)
        .append_pair("from", &from.to_string())
        .append_pair("to", &to.to_string())
        .finish();
    let url = format!("{}/api/v1/query?{parameters}", plan.address);
    Request {
        method: http::Method::GET,
        body: bytes::Bytes::new(),
        shown: url.clone(),
        url,
        headers: vec![
            (
                "dd-api-key",
                plan.credentials.get(SECRET_KEYS[0]).to_string(),
            ),
            (
                "dd-application-key",
                plan.credentials.get(SECRET_KEYS[1]).to_string(),
            ),
        ],
    }
}

/// The number in a `200` answer to a query sent at `now` (`to`).
pub fn read(body: &[u8], now: Timestamp) -> Result<Reading, String> {
    let json: Value = serde_json::from_slice(body)
        .map_err(|_| "answered 200 without a Datadog JSON body".to_string())?;
    if json.get("status").and_then(Value::as_str) == Some("error") {
        return Err(format!(
            "the query failed: {}",
            error_message(&json).unwrap_or_else(|| "no error message".into())
        ));
    }
    let series = json
        .get("series")
        .and_then(Value::as_array)
        .ok_or("the answer has no series list")?;
    let Some(first) = series.first() else {
        return Ok(Reading::NoData("the query returned no series".into()));
    };
    let bucket_ms = first.get("interval").and_then(Value::as_i64).unwrap_or(0);
    let to_ms = now.as_millisecond();
    let points: Vec<(i64, f64)> = first
        .get("pointlist")
        .and_then(Value::as_array)
        .map(|points| {
            points
                .iter()
                .filter_map(|point| {
                    let timestamp = point.get(0).and_then(Value::as_f64)?;
                    let value = point.get(1).and_then(Value::as_f64)?;
                    Some((timestamp as i64, value))
                })
                .collect()
        })
        .unwrap_or_default();
    let complete = points
        .iter()
        .rev()
        .find(|(timestamp, _)| timestamp.saturating_add(bucket_ms) <= to_ms);
    let Some(&(_, value)) = complete.or(points.last()) else {
        return Ok(Reading::NoData(
            "the first series has no point with a value in the window".into(),
        ));
    };
    let remark = (series.len() > 1).then(|| {
        format!(
            "first of {} series; aggregate the query to one",
            series.len()
        )
    });
    Ok(Reading::Value(value, remark))
}

/// Datadog's error answers: `{"errors": ["..."]}`, or `{"status": "error", "error": "..."}`.
pub fn error_message(json: &Value) -> Option<String> {
    if let Some(errors) = json.get("errors").and_then(Value::as_array) {
        let messages: Vec<&str> = errors.iter().filter_map(Value::as_str).collect();
        if !messages.is_empty() {
            return Some(messages.join("; "));
        }
    }
    json.get("error")
        .and_then(Value::as_str)
        .map(str::to_string)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap()
    }

    #[test]
    fn the_newest_complete_point_is_read_and_nulls_are_skipped() {
        // Buckets of 60 s; `to` is 1_710_000_150 s: the bucket at 120 s is still filling.
        let body = br#"{"status":"ok","series":[{"interval":60000,"pointlist":[[1710000000000,7.0],[1710000060000,null],[1710000120000,2.5]]},{"pointlist":[[1,1]]}]}"#;
        assert_eq!(
            read(body, at(1_710_000_150)).unwrap(),
            Reading::Value(
                7.0,
                Some("first of 2 series; aggregate the query to one".into())
            )
        );
        // Once complete, the newest is read.
        assert_eq!(
            read(body, at(1_710_000_180)).unwrap(),
            Reading::Value(
                2.5,
                Some("first of 2 series; aggregate the query to one".into())
            )
        );
        // Only an incomplete bucket: it is read rather than nothing.
        let only_new =
            br#"{"series":[{"interval":60000,"pointlist":[[1710000120000,4],[1710000060000,null]]}]}"#;
        assert!(matches!(
            read(only_new, at(1_710_000_130)).unwrap(),
            Reading::Value(value, None) if value == 4.0
        ));
    }

    #[test]
    fn no_series_no_points_and_only_nulls_are_no_data() {
        for body in [
            &br#"{"status":"ok","series":[]}"#[..],
            br#"{"series":[{"pointlist":[]}]}"#,
            br#"{"series":[{"pointlist":[[1710000000000,null],[]]}]}"#,
        ] {
            assert!(matches!(
                read(body, at(1_710_000_000)).unwrap(),
                Reading::NoData(_)
            ));
        }
        assert!(
            read(
                br#"{"status":"error","error":"Rule 'x' is invalid"}"#,
                at(0)
            )
            .unwrap_err()
            .contains("Rule 'x' is invalid")
        );
    }
}
