//! Graphite: `GET <address>/render?<query>&format=json` (the render API). The template's query
//! is a query string, as in Flagger (`target=summarize(...)&from=-2min`): whitespace runs are
//! collapsed to one space (so a template can spread a target over lines), its parameters are
//! decoded, trimmed (a parameter on a line of its own leaves no space behind) and encoded again, and `format=json` replaces any `format` it gives. A Secret, when
//! named, holds `username` and `password` for basic authentication.
//!
//! The answer is a list of series, `[{"target": ..., "datapoints": [[value, ts], ...]}, ...]`,
//! a value being a number, a numeric string or `null`. As in Flagger, the value is the last
//! non-null one of the whole answer (series in order, later ones win); none is no data.

use base64::Engine as _;
use serde_json::Value;

use crate::{Plan, Reading, Request};

/// The Secret's keys for basic authentication (a Secret is optional).
pub const SECRET_KEYS: [&str; 2] = ["username", "password"];

/// The query of `plan`.
pub fn request(plan: &Plan) -> Request {
    let collapsed = plan.query.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut parameters = form_urlencoded::Serializer::new(String::new());
    for (name, value) in form_urlencoded::parse(collapsed.as_bytes()) {
        let (name, value) = (name.trim(), value.trim());
        if !name.is_empty() && name != "format" {
            parameters.append_pair(name, value);
        }
    }
    parameters.append_pair("format", "json");
    let url = format!("{}/render?{}", plan.address, parameters.finish());
    let mut headers = Vec::new();
    let (user, password) = (
        plan.credentials.get(SECRET_KEYS[0]),
        plan.credentials.get(SECRET_KEYS[1]),
    );
    if !user.is_empty() || !password.is_empty() {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        headers.push(("authorization", format!("Basic {encoded}")));
    }
    Request {
        method: http::Method::GET,
        body: bytes::Bytes::new(),
        shown: url.clone(),
        url,
        headers,
    }
}

/// The number in a `200` answer.
pub fn read(body: &[u8]) -> Result<Reading, String> {
    let json: Value = serde_json::from_slice(body)
        .map_err(|_| "answered 200 without a Graphite JSON body".to_string())?;
    let series = json
        .as_array()
        .ok_or("the answer is not a list of series")?;
    let mut last = None;
    for one in series {
        for point in one
            .get("datapoints")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let value = match point.get(0) {
                Some(Value::Number(number)) => number.as_f64(),
                Some(Value::String(text)) => text.trim().parse::<f64>().ok(),
                _ => None,
            };
            if let Some(value) = value.filter(|value| !value.is_nan()) {
                last = Some(value);
            }
        }
    }
    Ok(match last {
        Some(value) => Reading::Value(value, None),
        None => Reading::NoData(format!("{} series without a non-null value", series.len())),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_last_non_null_value_of_the_whole_answer_is_read() {
        let body = br#"[{"target":"a","datapoints":[[1.5,1700000000],[null,1700000060]]},{"target":"b","datapoints":[["2.5","1700000000"],[null,1700000060]]}]"#;
        assert_eq!(read(body).unwrap(), Reading::Value(2.5, None));
        assert!(matches!(
            read(br#"[{"target":"a","datapoints":[[null,1]]}]"#).unwrap(),
            Reading::NoData(_)
        ));
        assert!(matches!(read(b"[]").unwrap(), Reading::NoData(_)));
    }
}
