//! Argo's `graphite` metric provider (`metricproviders/graphite`): `{address, query}`, the query
//! being a render API query string (`target=summarize(...)&from=-5min`), sent as
//! `GET {address}/render?{query}&format=json` (weir-metrics' Graphite request: whitespace in the
//! query is collapsed, so a template may spread its target over lines).
//!
//! As in Argo, `result` is the array of the first series' non-null datapoint values (hence
//! `result[0]` in conditions), and the measurement's value shows them with six decimals
//! (`[97.500000]`). An answer without a series, or whose first series has only null points, is an
//! Error ("no values found"), as is a non-2xx answer (with Graphite's text) or no answer within
//! 30 seconds.

use std::time::Duration;

use serde_json::Value;
use weir_core::argo::analysis::Outcome;
use weir_core::argo::expr::Val;
use weir_metrics::{Credentials, Plan, Provider};

/// How long a render request may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Measures once.
pub(super) async fn measure(http: &weir_http::HttpClient, graphite: &Value) -> Outcome {
    let Some(address) = graphite
        .get("address")
        .and_then(Value::as_str)
        .filter(|address| !address.is_empty())
    else {
        return Outcome::Error("graphite: address is missing".into());
    };
    let Some(query) = graphite.get("query").and_then(Value::as_str) else {
        return Outcome::Error("graphite: query is missing".into());
    };
    let plan = Plan {
        provider: Provider::Graphite,
        address: address.trim_end_matches('/').to_string(),
        query: query.to_string(),
        credentials: Credentials::default(),
        interval: Duration::from_secs(60),
        region: None,
    };
    let request = weir_metrics::graphite::request(&plan);
    let answer = match http
        .request(
            request.method,
            &request.url,
            request.headers,
            request.body,
            TIMEOUT,
        )
        .await
    {
        Ok(answer) => answer,
        Err(error) => return Outcome::Error(format!("graphite: {error}")),
    };
    if !answer.status.is_success() {
        return Outcome::Error(format!(
            "graphite: received non 2xx response code: {}: {}",
            answer.status.as_u16(),
            String::from_utf8_lossy(&answer.body).trim()
        ));
    }
    parse(&answer.body)
}

/// The first series' non-null values, as Argo hands them to the conditions.
pub(super) fn parse(body: &[u8]) -> Outcome {
    let document: Value = match serde_json::from_slice(body) {
        Ok(document) => document,
        Err(error) => return Outcome::Error(format!("graphite: the answer is not JSON: {error}")),
    };
    let Some(series) = document.as_array() else {
        return Outcome::Error("graphite: the answer is not a list of series".into());
    };
    let values: Vec<f64> = series
        .first()
        .and_then(|first| first.get("datapoints"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|point| match point.get(0) {
            Some(Value::Number(number)) => number.as_f64(),
            Some(Value::String(text)) => text.trim().parse::<f64>().ok(),
            _ => None,
        })
        .collect();
    if values.is_empty() {
        return Outcome::Error("graphite: no values found".into());
    }
    let shown: Vec<String> = values.iter().map(|value| format!("{value:.6}")).collect();
    Outcome::Value {
        result: Val::List(values.into_iter().map(Val::Num).collect()),
        shown: format!("[{}]", shown.join(",")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_first_series_values_are_an_array() {
        let body = br#"[{"target":"a","datapoints":[[97.5,1700000000],[null,1700000060],["98",1700000120]]},{"target":"b","datapoints":[[1,1700000000]]}]"#;
        assert_eq!(
            parse(body),
            Outcome::Value {
                result: Val::List(vec![Val::Num(97.5), Val::Num(98.0)]),
                shown: "[97.500000,98.000000]".into()
            }
        );
        assert_eq!(
            parse(br#"[{"target":"a","datapoints":[[null,1]]}]"#),
            Outcome::Error("graphite: no values found".into())
        );
        assert_eq!(
            parse(b"[]"),
            Outcome::Error("graphite: no values found".into())
        );
    }
}
