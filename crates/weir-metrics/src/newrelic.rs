//! New Relic: `GET <address>/v1/accounts/<account>/query?nrql=<query> SINCE <n> seconds ago`
//! (the Insights query API), authenticated with the header `X-Query-Key`. The Secret holds
//! `newrelic_account_id` and `newrelic_query_key`; the address defaults to
//! `https://insights-api.newrelic.com` (EU accounts: `https://insights-api.eu.newrelic.com`).
//!
//! As in Flagger, the window is appended to the query: ` SINCE <interval in seconds> seconds
//! ago`, so a template has no `SINCE` of its own.
//!
//! The answer's `results` must hold exactly one object. Flagger reads only its key `result`,
//! which NRQL gives to an unnamed expression (`filter(...) / sum(...) * 100`) and to nothing
//! else: `SELECT average(duration)` answers `{"average": ...}` and is no data in Flagger. weir
//! reads `result` when it is there (so every template that works with Flagger reads the same
//! number) and otherwise the object's only value when it has exactly one (so a single function
//! works too). A `null` is no data, as in Flagger.

use serde_json::Value;

use crate::{Plan, Reading, Request};

/// New Relic's US Insights API.
pub const DEFAULT_ADDRESS: &str = "https://insights-api.newrelic.com";

/// The Secret's keys: the account and the Insights query key.
pub const SECRET_KEYS: [&str; 2] = ["newrelic_account_id", "newrelic_query_key"];

/// The query of `plan`.
pub fn request(plan: &Plan) -> Request {
    let nrql = format!(
        "{} SINCE {} seconds ago",
        plan.query.trim_end(),
        plan.interval.as_secs().max(1)
    );
    let parameters = form_urlencoded::Serializer::new(String::new())
        .append_pair("nrql", &nrql)
        .finish();
    let account = plan.credentials.get(SECRET_KEYS[0]);
    let path = |account: &str| format!("{}/v1/accounts/{account}/query", plan.address);
    Request {
        method: http::Method::GET,
        body: bytes::Bytes::new(),
        url: format!("{}?{parameters}", path(account)),
        // The account id comes from the Secret: messages show its place only.
        shown: format!("{}?{parameters}", path("<newrelic_account_id>")),
        headers: vec![(
            "x-query-key",
            plan.credentials.get(SECRET_KEYS[1]).to_string(),
        )],
    }
}

/// The number in a `200` answer.
pub fn read(body: &[u8]) -> Result<Reading, String> {
    let json: Value = serde_json::from_slice(body)
        .map_err(|_| "answered 200 without a New Relic JSON body".to_string())?;
    if let Some(message) = error_message(&json) {
        return Err(format!("the query failed: {message}"));
    }
    let results = json
        .get("results")
        .and_then(Value::as_array)
        .ok_or("the answer has no results list")?;
    let [result] = results.as_slice() else {
        return Ok(Reading::NoData(format!(
            "the query returned {} results; weir reads one (no FACET or TIMESERIES)",
            results.len()
        )));
    };
    let Some(object) = result.as_object() else {
        return Err("a result is not an object".into());
    };
    let value = match object.get("result") {
        Some(value) => value,
        None => match object.values().collect::<Vec<_>>().as_slice() {
            [only] => *only,
            _ => {
                return Ok(Reading::NoData(format!(
                    "the result has {} values ({}); select one expression",
                    object.len(),
                    object.keys().cloned().collect::<Vec<_>>().join(", ")
                )));
            }
        },
    };
    match value {
        Value::Null => Ok(Reading::NoData("the query's value is null".into())),
        Value::Number(number) => number
            .as_f64()
            .map(|value| Reading::Value(value, None))
            .ok_or_else(|| "the value is not a number".into()),
        other => Err(format!("the value is not a number: {other}")),
    }
}

/// New Relic's error answers: `{"error": "..."}`.
pub fn error_message(json: &Value) -> Option<String> {
    json.get("error")
        .and_then(Value::as_str)
        .map(str::to_string)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_key_result_or_the_only_value_is_read() {
        assert_eq!(
            read(br#"{"results":[{"result":1.11111}]}"#).unwrap(),
            Reading::Value(1.11111, None)
        );
        assert_eq!(
            read(br#"{"results":[{"average":250.5}],"performanceStats":{},"metadata":{}}"#)
                .unwrap(),
            Reading::Value(250.5, None)
        );
        for body in [
            &br#"{"results":[{"average":null}]}"#[..],
            br#"{"results":[]}"#,
            br#"{"results":[{"result":1},{"result":2}]}"#,
            br#"{"results":[{"min":1,"max":2}]}"#,
        ] {
            assert!(
                matches!(read(body).unwrap(), Reading::NoData(_)),
                "{body:?}"
            );
        }
        assert!(
            read(br#"{"error":"NRQL Syntax Error"}"#)
                .unwrap_err()
                .contains("NRQL Syntax Error")
        );
    }
}
