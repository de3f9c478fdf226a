//! Argo's `newRelic` metric provider (`metricproviders/newrelic`): `{query, profile, timeout}`,
//! an NRQL query run through New Relic's NerdGraph API, as Argo's client (newrelic-client-go's
//! `nrdb.Query`) runs it: `POST {nerdgraph}` with the header `Api-Key: <personal API key>` and
//! the GraphQL query `actor { account(id: <account>) { nrql(query: ..., timeout: ...) { results } } }`
//! (the NRQL and the account as variables). `timeout` is NRQL's, in seconds (5 unless set); the
//! HTTP request may take 10 seconds more.
//!
//! weir-metrics' New Relic request is not used: it is the Insights query API, authenticated by
//! an Insights query key, which the personal API key of Argo's Secret does not open.
//!
//! **Credentials**, as in Argo: the Secret named by `profile` (`newrelic` unless set) with
//! `personal-api-key`, `account-id` (a number), and optionally `region` (`US` unless set; `EU`
//! uses `https://api.eu.newrelic.com/graphql`) and `base-url-nerdgraph` (a NerdGraph endpoint
//! of its own, which wins over the region; `base-url-rest` is for New Relic's REST API, which
//! an NRQL query does not use). Argo reads it from the controller's namespace; weir reads it
//! from `POD_NAMESPACE` when that variable is set, else from the run's namespace (see
//! [`super::provider_secret`]). A missing Secret or key is a measurement Error naming it.
//!
//! **Result**, as in Argo: one result row is `result` itself (an object: `result.successRate`),
//! several are an array of them; none is an Error ("no results returned from NRQL query"), as
//! are GraphQL errors (their messages) and non-2xx answers (with New Relic's text). The value
//! shown is the compact JSON.

use std::time::Duration;

use serde_json::{Value, json};
use weir_core::argo::analysis::Outcome;

use super::{RunContext, provider_secret, scrub_outcome, seconds};

/// Argo's Secret name when `profile` is not set.
const DEFAULT_SECRET: &str = "newrelic";

/// NerdGraph in the US region.
const US_NERDGRAPH: &str = "https://api.newrelic.com/graphql";

/// NerdGraph in the EU region.
const EU_NERDGRAPH: &str = "https://api.eu.newrelic.com/graphql";

/// NRQL's timeout when `timeout` is not set.
const DEFAULT_TIMEOUT_SECONDS: u64 = 5;

/// How much longer than the NRQL timeout the HTTP request may take.
const HTTP_SLACK: Duration = Duration::from_secs(10);

/// The GraphQL query Argo's client sends.
const GRAPHQL: &str = "query($accountId: Int!, $query: Nrql!, $timeout: Seconds) { actor { account(id: $accountId) { nrql(query: $query, timeout: $timeout) { results } } } }";

/// Measures once.
pub(super) async fn measure(context: &RunContext, newrelic: &Value) -> Outcome {
    let Some(query) = newrelic
        .get("query")
        .and_then(Value::as_str)
        .filter(|query| !query.trim().is_empty())
    else {
        return Outcome::Error("newRelic: query is missing".into());
    };
    let timeout = seconds(newrelic.get("timeout"), DEFAULT_TIMEOUT_SECONDS);
    let name = newrelic
        .get("profile")
        .and_then(Value::as_str)
        .filter(|name| !name.is_empty())
        .unwrap_or(DEFAULT_SECRET);
    let secret = match provider_secret(context, name, false).await {
        Ok(secret) => secret,
        Err(error) => return Outcome::Error(format!("newRelic: {error}")),
    };
    let outcome = query_once(context, &secret, name, query, timeout).await;
    scrub_outcome(outcome, &secret, &["personal-api-key"])
}

async fn query_once(
    context: &RunContext,
    secret: &std::collections::BTreeMap<String, String>,
    name: &str,
    query: &str,
    timeout: Duration,
) -> Outcome {
    let Some(key) = secret.get("personal-api-key").filter(|key| !key.is_empty()) else {
        return Outcome::Error(format!("newRelic: Secret {name:?} has no personal-api-key"));
    };
    let Some(account) = secret.get("account-id").filter(|id| !id.is_empty()) else {
        return Outcome::Error(format!("newRelic: Secret {name:?} has no account-id"));
    };
    let Ok(account) = account.trim().parse::<i64>() else {
        return Outcome::Error(format!(
            "newRelic: the account-id of Secret {name:?} is not a number"
        ));
    };
    let endpoint = match secret
        .get("base-url-nerdgraph")
        .map(|url| url.trim())
        .filter(|url| !url.is_empty())
    {
        Some(url) => url.to_string(),
        None => match secret
            .get("region")
            .map(|region| region.trim().to_ascii_uppercase())
        {
            Some(region) if region == "EU" => EU_NERDGRAPH.to_string(),
            _ => US_NERDGRAPH.to_string(),
        },
    };
    let body = json!({
        "query": GRAPHQL,
        "variables": {"accountId": account, "query": query, "timeout": timeout.as_secs()},
    });
    let headers = vec![
        ("Api-Key", key.clone()),
        ("Content-Type", "application/json".to_string()),
    ];
    let answer = match context
        .http
        .request(
            http::Method::POST,
            &endpoint,
            headers,
            bytes::Bytes::from(body.to_string()),
            timeout + HTTP_SLACK,
        )
        .await
    {
        Ok(answer) => answer,
        Err(error) => return Outcome::Error(format!("newRelic: {error}")),
    };
    if !answer.status.is_success() {
        return Outcome::Error(format!(
            "newRelic: received non 2xx response code: {} {}",
            answer.status.as_u16(),
            String::from_utf8_lossy(&answer.body).trim()
        ));
    }
    parse(&answer.body)
}

/// The NRQL results as Argo hands them to the conditions.
pub(super) fn parse(body: &[u8]) -> Outcome {
    let document: Value = match serde_json::from_slice(body) {
        Ok(document) => document,
        Err(error) => return Outcome::Error(format!("newRelic: the answer is not JSON: {error}")),
    };
    if let Some(errors) = document
        .get("errors")
        .and_then(Value::as_array)
        .filter(|errors| !errors.is_empty())
    {
        let messages: Vec<String> = errors
            .iter()
            .map(|error| {
                error
                    .get("message")
                    .and_then(Value::as_str)
                    .map_or_else(|| error.to_string(), str::to_string)
            })
            .collect();
        return Outcome::Error(format!("newRelic: {}", messages.join("; ")));
    }
    let results = document
        .pointer("/data/actor/account/nrql/results")
        .and_then(Value::as_array);
    match results.map(Vec::as_slice) {
        Some([one]) if one.as_object().is_some_and(|row| !row.is_empty()) => Outcome::json(one),
        Some(many @ [_, _, ..]) => Outcome::json(&Value::Array(many.to_vec())),
        _ => Outcome::Error("newRelic: no results returned from NRQL query".into()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn one_row_is_the_result_and_several_an_array() {
        let one = br#"{"data":{"actor":{"account":{"nrql":{"results":[{"successRate":0.99}]}}}}}"#;
        assert_eq!(parse(one), Outcome::json(&json!({"successRate": 0.99})));
        let two = br#"{"data":{"actor":{"account":{"nrql":{"results":[{"a":1},{"a":2}]}}}}}"#;
        assert_eq!(parse(two), Outcome::json(&json!([{"a": 1}, {"a": 2}])));
        let none = br#"{"data":{"actor":{"account":{"nrql":{"results":[]}}}}}"#;
        assert_eq!(
            parse(none),
            Outcome::Error("newRelic: no results returned from NRQL query".into())
        );
        let error = br#"{"errors":[{"message":"NRQL Syntax Error"}],"data":null}"#;
        assert_eq!(
            parse(error),
            Outcome::Error("newRelic: NRQL Syntax Error".into())
        );
    }
}
