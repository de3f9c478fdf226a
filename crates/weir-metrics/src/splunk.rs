//! Splunk Observability (SignalFx SignalFlow): `POST <stream address>/v2/signalflow/execute
//! ?start=<ms>&stop=<ms>&immediate=true` with the program as `text/plain` and `X-SF-Token` from
//! the Secret's `sf_token_key`, answered as a stream of Server-Sent Events that ends with the
//! computation.
//!
//! Flagger runs the same program over SignalFlow's WebSocket API (`/v2/signalflow/connect`,
//! binary data frames); weir uses the same service's HTTP form of it, which takes the same
//! program, window and token and streams the same messages (`control-message`, `metadata`,
//! `data` with `[{tsId, value}]`) as JSON in SSE. The address is Flagger's: `provider.address`
//! (required), e.g. `https://api.us1.signalfx.com`, whose host `api.` becomes `stream.` as in
//! Flagger.
//!
//! The window, as in Flagger: from ten intervals ago to now, in milliseconds. The value, as in
//! Flagger: points without a value are dropped; points of **more than one time series** are an
//! error (publish one); otherwise the **last** value. None: no data.

use std::collections::BTreeSet;

use jiff::Timestamp;
use serde_json::Value;

use crate::{Plan, Reading, Request};

/// The Secret's key: an access token with the API scope.
pub const SECRET_KEYS: [&str; 1] = ["sf_token_key"];

/// How many intervals back the window starts (Flagger's).
const WINDOW_INTERVALS: i64 = 10;

/// The streaming host of an API address: `https://api.us1.signalfx.com` ->
/// `https://stream.us1.signalfx.com`, as Flagger rewrites it; other addresses are kept.
pub fn stream_address(address: &str) -> String {
    address.replacen("://api.", "://stream.", 1)
}

/// The execution of `plan` at `now`.
pub fn request(plan: &Plan, now: Timestamp) -> Request {
    let stop = now.as_millisecond();
    let interval = i64::try_from(plan.interval.as_millis())
        .unwrap_or(i64::MAX)
        .max(1);
    let start = stop.saturating_sub(interval.saturating_mul(WINDOW_INTERVALS));
    let parameters = form_urlencoded::Serializer::new(String::new())
        .append_pair("start", &start.to_string())
        .append_pair("stop", &stop.to_string())
        .append_pair("immediate", "true")
        .finish();
    let url = format!(
        "{}/v2/signalflow/execute?{parameters}",
        stream_address(&plan.address)
    );
    Request {
        method: http::Method::POST,
        shown: url.clone(),
        url,
        headers: vec![
            ("content-type", "text/plain".to_string()),
            (
                "x-sf-token",
                plan.credentials.get(SECRET_KEYS[0]).to_string(),
            ),
        ],
        body: bytes::Bytes::from(plan.query.trim().to_string()),
    }
}

/// The messages of an SSE stream: each event's `data:` lines joined, read as JSON.
fn messages(text: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut data = String::new();
    for line in text.lines().chain(std::iter::once("")) {
        let line = line.trim_end_matches('\r');
        if line.is_empty() {
            if !data.trim().is_empty()
                && let Ok(message) = serde_json::from_str::<Value>(&data)
            {
                out.push(message);
            }
            data.clear();
        } else if let Some(rest) = line.strip_prefix("data:") {
            data.push_str(rest.strip_prefix(' ').unwrap_or(rest));
            data.push('\n');
        }
    }
    out
}

/// The number in a `200` answer.
pub fn read(body: &[u8]) -> Result<Reading, String> {
    let text = std::str::from_utf8(body)
        .map_err(|_| "answered 200 without a SignalFlow event stream".to_string())?;
    let mut series = BTreeSet::new();
    let mut last = None;
    for message in messages(text) {
        match message.get("type").and_then(Value::as_str) {
            Some("error") => {
                return Err(format!(
                    "the program failed: {}",
                    error_message(&message).unwrap_or_else(|| message.to_string())
                ));
            }
            Some("data") => {
                for point in message
                    .get("data")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let Some(value) = point.get("value").and_then(Value::as_f64) else {
                        continue;
                    };
                    if let Some(id) = point.get("tsId").and_then(Value::as_str) {
                        series.insert(id.to_string());
                    }
                    last = Some(value);
                }
            }
            _ => {}
        }
    }
    if series.len() > 1 {
        return Err(format!(
            "the program published {} time series; publish one (e.g. with .sum() or .mean())",
            series.len()
        ));
    }
    Ok(match last {
        Some(value) => Reading::Value(value, None),
        None => Reading::NoData("the program published no values".into()),
    })
}

/// SignalFx's error answers: `{"message": "..."}` (with `code`), or an `error` message's
/// `message`.
pub fn error_message(json: &Value) -> Option<String> {
    json.get("message")
        .and_then(Value::as_str)
        .map(str::to_string)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_last_value_of_the_one_series_is_read() {
        let body = "event: control-message\ndata: {\ndata:   \"event\" : \"STREAM_START\",\ndata:   \"timestampMs\" : 1461353198000,\ndata:   \"type\" : \"control-message\"\ndata: }\n\nevent: metadata\ndata: {\"type\": \"metadata\", \"tsId\": \"AAAAAKzGpQg\", \"properties\": {\"sf_metric\": \"errors\"}}\n\nevent: data\ndata: {\"type\": \"data\", \"data\": [{\"tsId\": \"AAAAAKzGpQg\", \"value\": 3}], \"logicalTimestampMs\": 1461353198000}\n\nevent: data\ndata: {\"type\": \"data\", \"data\": [{\"tsId\": \"AAAAAKzGpQg\", \"value\": 0.5}, {\"tsId\": \"AAAAAKzGpQg\", \"value\": null}], \"logicalTimestampMs\": 1461353258000}\n\nevent: control-message\ndata: {\"type\": \"control-message\", \"event\": \"END_OF_CHANNEL\"}\n\n";
        assert_eq!(read(body.as_bytes()).unwrap(), Reading::Value(0.5, None));
        let two = "data: {\"type\": \"data\", \"data\": [{\"tsId\": \"A\", \"value\": 1}, {\"tsId\": \"B\", \"value\": 2}]}\n\n";
        assert!(read(two.as_bytes()).unwrap_err().contains("2 time series"));
        let none = "event: control-message\ndata: {\"type\": \"control-message\", \"event\": \"END_OF_CHANNEL\"}\n\n";
        assert!(matches!(read(none.as_bytes()).unwrap(), Reading::NoData(_)));
        let error = "event: error\ndata: {\"type\": \"error\", \"message\": \"Unable to compile program\"}\n\n";
        assert!(
            read(error.as_bytes())
                .unwrap_err()
                .contains("Unable to compile program")
        );
        assert_eq!(
            stream_address("https://api.us1.signalfx.com"),
            "https://stream.us1.signalfx.com"
        );
    }
}
