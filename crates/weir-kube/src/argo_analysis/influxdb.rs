//! Argo's `influxdb` metric provider (`metricproviders/influxdb`): `{profile, query}`, a Flux
//! query sent as InfluxDB v2's client sends it, `POST {address}/api/v2/query?org=<org>` with
//! `Authorization: Token <authToken>` and the JSON body weir-metrics' InfluxDB request builds
//! (`query`, `type: flux`, the annotated-CSV dialect). No answer within 30 seconds is an Error.
//!
//! **Credentials**, as in Argo: the Secret named by `profile` (`influxdb` unless set) with
//! `address`, `authToken` and `org`. Argo reads it from the controller's namespace; weir reads
//! it from `POD_NAMESPACE` when that variable is set, else from the run's namespace (see
//! [`super::provider_secret`]). A missing Secret or key is a measurement Error naming it.
//!
//! **Result**, as in Argo: the array of every record's `_value` (every table, in order), hence
//! `result[0]` in conditions: `double`, `long` and `unsignedLong` are numbers, `boolean` a
//! boolean, an empty value `nil`, anything else its text. The measurement's value shows them as
//! Go prints the array (`[0.01 0.03]`). No record is an Error ("no results returned from flux
//! query"), as are InfluxDB's in-band error tables and non-2xx answers (with its
//! `code: message`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use weir_core::argo::analysis::Outcome;
use weir_core::argo::expr::Val;
use weir_metrics::{Credentials, Plan, Provider};

use super::datadog::encode;
use super::{RunContext, provider_secret, scrub_outcome};

/// Argo's Secret name when `profile` is not set.
const DEFAULT_SECRET: &str = "influxdb";

/// How long a query may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Measures once.
pub(super) async fn measure(context: &RunContext, influxdb: &Value) -> Outcome {
    let Some(query) = influxdb
        .get("query")
        .and_then(Value::as_str)
        .filter(|query| !query.trim().is_empty())
    else {
        return Outcome::Error("influxdb: query is missing".into());
    };
    let name = influxdb
        .get("profile")
        .and_then(Value::as_str)
        .filter(|name| !name.is_empty())
        .unwrap_or(DEFAULT_SECRET);
    let secret = match provider_secret(context, name, false).await {
        Ok(secret) => secret,
        Err(error) => return Outcome::Error(format!("influxdb: {error}")),
    };
    let outcome = query_once(context, &secret, name, query).await;
    scrub_outcome(outcome, &secret, &["authToken"])
}

async fn query_once(
    context: &RunContext,
    secret: &BTreeMap<String, String>,
    name: &str,
    query: &str,
) -> Outcome {
    let mut values = Vec::new();
    for key in ["address", "authToken", "org"] {
        match secret.get(key).map(|value| value.trim()) {
            Some(value) if !value.is_empty() => values.push(value.to_string()),
            _ => return Outcome::Error(format!("influxdb: Secret {name:?} has no {key}")),
        }
    }
    let plan = Plan {
        provider: Provider::InfluxDb,
        address: values[0].trim_end_matches('/').to_string(),
        query: query.to_string(),
        credentials: Credentials::default(),
        interval: Duration::from_secs(60),
        region: None,
    };
    // Built without credentials (their keys are weir-metrics' own): the organization and the
    // token are added here.
    let request = weir_metrics::influxdb::request(&plan);
    let url = format!("{}?org={}", request.url, encode(&values[2]));
    let mut headers: Vec<(&str, String)> = request.headers;
    headers.push(("authorization", format!("Token {}", values[1])));
    let answer = match context
        .http
        .request(request.method, &url, headers, request.body, TIMEOUT)
        .await
    {
        Ok(answer) => answer,
        Err(error) => return Outcome::Error(format!("influxdb: {error}")),
    };
    if !answer.status.is_success() {
        let text = serde_json::from_slice::<Value>(&answer.body)
            .ok()
            .and_then(|json| weir_metrics::influxdb::error_message(&json))
            .unwrap_or_else(|| String::from_utf8_lossy(&answer.body).trim().to_string());
        return Outcome::Error(format!(
            "influxdb: received non 2xx response code: {} {text}",
            answer.status.as_u16()
        ));
    }
    parse(&answer.body)
}

/// Every record's `_value`, as Argo hands them to the conditions.
pub(super) fn parse(body: &[u8]) -> Outcome {
    let Ok(text) = std::str::from_utf8(body) else {
        return Outcome::Error("influxdb: the answer is not annotated CSV".into());
    };
    let mut datatypes: Vec<String> = Vec::new();
    let mut header: Option<Vec<String>> = None;
    let mut values = Vec::new();
    let mut shown = Vec::new();
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.is_empty() {
            datatypes.clear();
            header = None;
            continue;
        }
        let row = weir_metrics::influxdb::fields(line);
        if row.first().is_some_and(|first| first.starts_with('#')) {
            if row.first().map(String::as_str) == Some("#datatype") {
                datatypes = row;
            }
            continue;
        }
        let Some(columns) = &header else {
            header = Some(row);
            continue;
        };
        let column = |name: &str| columns.iter().position(|column| column == name);
        if let Some(error) = column("error") {
            return Outcome::Error(format!(
                "influxdb: {}",
                row.get(error).map_or("", String::as_str)
            ));
        }
        let Some(index) = column("_value") else {
            continue;
        };
        let value = row.get(index).map_or("", String::as_str);
        let datatype = datatypes.get(index).map_or("string", String::as_str);
        let (result, text) = if value.is_empty() {
            (Val::Nil, "<nil>".to_string())
        } else {
            match datatype {
                "double" | "long" | "unsignedLong" => match value.parse::<f64>() {
                    Ok(number) => (Val::Num(number), value.to_string()),
                    Err(_) => (Val::Str(value.to_string()), value.to_string()),
                },
                "boolean" => (Val::Bool(value == "true"), value.to_string()),
                _ => (Val::Str(value.to_string()), value.to_string()),
            }
        };
        values.push(result);
        shown.push(text);
    }
    if values.is_empty() {
        return Outcome::Error("influxdb: no results returned from flux query".into());
    }
    Outcome::Value {
        result: Val::List(values),
        shown: format!("[{}]", shown.join(" ")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_records_value_is_in_the_array() {
        let body = b"#datatype,string,long,double\r\n#group,false,false,false\r\n#default,_result,,\r\n,result,table,_value\r\n,,0,0.01\r\n,,0,0.03\r\n\r\n#datatype,string,long,long\r\n#group,false,false,false\r\n#default,_result,,\r\n,result,table,_value\r\n,,1,4\r\n\r\n";
        assert_eq!(
            parse(body),
            Outcome::Value {
                result: Val::List(vec![Val::Num(0.01), Val::Num(0.03), Val::Num(4.0)]),
                shown: "[0.01 0.03 4]".into()
            }
        );
        assert_eq!(
            parse(b"\r\n"),
            Outcome::Error("influxdb: no results returned from flux query".into())
        );
    }
}
