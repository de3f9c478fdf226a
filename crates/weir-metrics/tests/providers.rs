//! Datadog, New Relic and Graphite checks against the test doubles of weir-testkit, which follow
//! each service's documented API and refuse what the service refuses: a healthy value passes, a
//! bad one fails, no data is no data, a refused key's error text reaches the message without
//! the key, a rate limit and an unavailable service are waited out within the interval, and a
//! service that does not answer in time is no data.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use weir_core::model::{CheckOutcome, CheckResult};
use weir_engine::MetricSource;
use weir_http::retry::Backoff;
use weir_metrics::MetricsSource;
use weir_store::RolloutKey;
use weir_testkit::fixtures::catalog_and_rollout;
use weir_testkit::metric_doubles::{Fault, MetricDouble};

const DD_API: &str = "dd-api-0123456789abcdef";
const DD_APP: &str = "dd-app-fedcba9876543210";
const NR_ACCOUNT: &str = "1234567";
const NR_KEY: &str = "NRIQ-query-key-secret";

/// The documents of a rollout `web` in `shop` with one check `errors` (`max: 1`, interval
/// 1s) on a template of `provider` at `address`, with its Secret holding `secret`.
fn documents(provider: &str, address: &str, secret: &str, query: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Secret
metadata: {{name: creds, namespace: shop}}
stringData: {secret}
---
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {{name: errors, namespace: shop}}
spec:
  provider: {{type: {provider}, address: "{address}", secretRef: {{name: creds}}}}
  query: |
{query}
---
apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: web, namespace: shop}}
spec:
  target: {{kind: kubernetes, targetRef: {{apiVersion: apps/v1, kind: Deployment, name: web}}}}
  plan: {{canary: {{stepWeight: 10}}}}
  analysis:
    metrics: [{{name: errors, interval: 1s, templateRef: {{name: errors}}, thresholdRange: {{max: 1}}}}]
"#,
        query = query
            .lines()
            .map(|line| format!("    {line}"))
            .collect::<Vec<_>>()
            .join("\n")
    )
}

const DATADOG_QUERY: &str = "100 - (sum:istio.mesh.request.count{destination_workload_namespace:{{ namespace }},destination_workload:{{ target }},!response_code:404}.as_count()\n  / sum:istio.mesh.request.count{destination_workload_namespace:{{ namespace }},destination_workload:{{ target }}}.as_count()) * 100";
const NEWRELIC_QUERY: &str = "SELECT filter(sum(nginx_ingress_controller_requests), WHERE status >= '500') /\n  sum(nginx_ingress_controller_requests) * 100\nFROM Metric WHERE namespace = '{{ namespace }}'";
const GRAPHITE_QUERY: &str = "target=summarize(\n  asPercent(sumSeries(app.{{ target }}.errors), sumSeries(app.{{ target }}.requests)),\n  '{{ interval }}', 'avg')\n&from=-10min";

fn datadog(double: &MetricDouble, api_key: &str) -> String {
    documents(
        "datadog",
        &double.url(),
        &format!("{{datadog_api_key: {api_key}, datadog_application_key: {DD_APP}}}"),
        DATADOG_QUERY,
    )
}

fn newrelic(double: &MetricDouble, key: &str) -> String {
    documents(
        "newrelic",
        &double.url(),
        &format!("{{newrelic_account_id: \"{NR_ACCOUNT}\", newrelic_query_key: {key}}}"),
        NEWRELIC_QUERY,
    )
}

fn graphite(double: &MetricDouble, password: &str) -> String {
    documents(
        "graphite",
        &double.url(),
        &format!("{{username: weir, password: {password}}}"),
        GRAPHITE_QUERY,
    )
}

/// Runs the rollout's one check with fast retries.
async fn check(yaml: &str, tune: impl FnOnce(MetricsSource) -> MetricsSource) -> CheckResult {
    let (catalog, rollout) = catalog_and_rollout(yaml);
    let source = tune(MetricsSource::new(catalog).with_backoff(Backoff {
        first: Duration::from_millis(10),
        max: Duration::from_millis(50),
    }));
    let metric = &rollout.spec.analysis.metrics[0];
    assert!(source.handles(&rollout, metric));
    assert!(
        source.validate(&rollout).is_empty(),
        "{:?}",
        source.validate(&rollout)
    );
    source
        .check(&RolloutKey::new("shop", "web"), &rollout, metric)
        .await
}

fn plain(source: MetricsSource) -> MetricsSource {
    source
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datadog_values_pass_and_fail_from_the_newest_complete_point() {
    let double = MetricDouble::datadog(DD_API, DD_APP);
    double.serve(Some(0.5));
    let healthy = check(&datadog(&double, DD_API), plain).await;
    println!("{healthy:?}");
    // The double's newest bucket is still filling and holds half the value: it is not read.
    assert_eq!(
        (healthy.outcome, healthy.value),
        (CheckOutcome::Pass, Some(0.5))
    );

    double.serve(Some(7.0));
    let bad = check(&datadog(&double, DD_API), plain).await;
    assert_eq!((bad.outcome, bad.value), (CheckOutcome::Fail, Some(7.0)));

    let request = double.seen().pop().unwrap();
    println!("{request:?}");
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("GET", "/api/v1/query")
    );
    assert_eq!(request.header("dd-api-key"), Some(DD_API));
    assert_eq!(request.header("dd-application-key"), Some(DD_APP));
    let query = &request.query["query"];
    assert!(
        query.contains("destination_workload_namespace:shop,destination_workload:web,"),
        "{query}"
    );
    let from: i64 = request.query["from"].parse().unwrap();
    let to: i64 = request.query["to"].parse().unwrap();
    // Ten intervals of 1s, as Flagger asks.
    assert_eq!(to - from, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datadog_without_series_is_no_data() {
    let double = MetricDouble::datadog(DD_API, DD_APP);
    double.serve(None);
    let result = check(&datadog(&double, DD_API), plain).await;
    println!("{result:?}");
    assert_eq!(result.outcome, CheckOutcome::NoData);
    assert!(result.message.contains("no series"), "{}", result.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_datadog_key_is_in_the_message_without_the_key() {
    let double = MetricDouble::datadog(DD_API, DD_APP);
    double.serve(Some(0.5));
    let wrong = "dd-api-wrong-key-000000";
    let result = check(&datadog(&double, wrong), plain).await;
    println!("{result:?}");
    assert_eq!(result.outcome, CheckOutcome::NoData);
    assert!(
        result.message.contains("403 Forbidden: Forbidden"),
        "{}",
        result.message
    );
    for secret in [wrong, DD_API, DD_APP] {
        assert!(!result.message.contains(secret), "{}", result.message);
    }
    // A refusal is final: one request, not retried.
    assert_eq!(double.seen().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_datadog_rate_limit_is_waited_out_then_the_value_read() {
    let double = MetricDouble::datadog(DD_API, DD_APP);
    double.serve(Some(0.25));
    double.fail_next(Fault::RateLimited(1));
    double.fail_next(Fault::Unavailable);
    // The time for retries is the longer of the interval (1s here) and the timeout: a long
    // timeout leaves room for X-RateLimit-Reset's 1s wait however loaded the machine is.
    let result = check(&datadog(&double, DD_API), |source| {
        source.with_timeout(Duration::from_secs(30))
    })
    .await;
    println!("{result:?}");
    assert_eq!(
        (result.outcome, result.value),
        (CheckOutcome::Pass, Some(0.25))
    );
    let statuses: Vec<u16> = double.seen().iter().map(|seen| seen.status).collect();
    assert_eq!(statuses, [429, 503, 200]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_service_is_no_data_after_the_timeout() {
    let double = MetricDouble::datadog(DD_API, DD_APP);
    double.serve(Some(0.5));
    for _ in 0..100 {
        double.fail_next(Fault::Slow(Duration::from_secs(30)));
    }
    let result = check(&datadog(&double, DD_API), |source| {
        source.with_timeout(Duration::from_millis(200))
    })
    .await;
    println!("{result:?}");
    assert_eq!(result.outcome, CheckOutcome::NoData);
    assert!(
        result.message.contains("no answer within"),
        "{}",
        result.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newrelic_reads_result_and_keeps_the_account_out_of_messages() {
    let double = MetricDouble::newrelic(NR_ACCOUNT, NR_KEY);
    double.serve(Some(0.4));
    let healthy = check(&newrelic(&double, NR_KEY), plain).await;
    println!("{healthy:?}");
    assert_eq!(
        (healthy.outcome, healthy.value),
        (CheckOutcome::Pass, Some(0.4))
    );
    let request = double.seen().pop().unwrap();
    println!("{request:?}");
    assert_eq!(request.path, format!("/v1/accounts/{NR_ACCOUNT}/query"));
    assert_eq!(request.header("x-query-key"), Some(NR_KEY));
    let nrql = &request.query["nrql"];
    assert!(nrql.contains("namespace = 'shop'"), "{nrql}");
    assert!(nrql.ends_with(" SINCE 1 seconds ago"), "{nrql}");

    double.serve(Some(3.0));
    let bad = check(&newrelic(&double, NR_KEY), plain).await;
    assert_eq!((bad.outcome, bad.value), (CheckOutcome::Fail, Some(3.0)));

    double.serve(None);
    let none = check(&newrelic(&double, NR_KEY), plain).await;
    println!("{none:?}");
    assert_eq!(none.outcome, CheckOutcome::NoData);
    assert!(none.message.contains("null"), "{}", none.message);

    let wrong = "NRIQ-wrong-key-0000000";
    let refused = check(&newrelic(&double, wrong), plain).await;
    println!("{refused:?}");
    assert_eq!(refused.outcome, CheckOutcome::NoData);
    assert!(
        refused
            .message
            .contains("401 Unauthorized: Invalid query key"),
        "{}",
        refused.message
    );
    for secret in [wrong, NR_KEY, NR_ACCOUNT] {
        assert!(!refused.message.contains(secret), "{}", refused.message);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newrelic_retries_after_retry_after() {
    let double = MetricDouble::newrelic(NR_ACCOUNT, NR_KEY);
    double.serve(Some(0.1));
    double.fail_next(Fault::RateLimited(1));
    let result = check(&newrelic(&double, NR_KEY), |source| {
        source.with_timeout(Duration::from_secs(30))
    })
    .await;
    println!("{result:?}");
    assert_eq!(
        (result.outcome, result.value),
        (CheckOutcome::Pass, Some(0.1))
    );
    let statuses: Vec<u16> = double.seen().iter().map(|seen| seen.status).collect();
    assert_eq!(statuses, [429, 200]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_longer_than_the_interval_is_not_waited_for() {
    let double = MetricDouble::newrelic(NR_ACCOUNT, NR_KEY);
    double.serve(Some(0.1));
    double.fail_next(Fault::RateLimited(3600));
    let result = check(&newrelic(&double, NR_KEY), plain).await;
    println!("{result:?}");
    assert_eq!(result.outcome, CheckOutcome::NoData);
    assert!(
        result.message.contains("429 Too Many Requests"),
        "{}",
        result.message
    );
    assert_eq!(double.seen().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graphite_reads_the_last_non_null_value_with_basic_auth() {
    let double = MetricDouble::graphite(Some(("weir", "graphite-pass")));
    double.serve(Some(0.75));
    let healthy = check(&graphite(&double, "graphite-pass"), plain).await;
    println!("{healthy:?}");
    assert_eq!(
        (healthy.outcome, healthy.value),
        (CheckOutcome::Pass, Some(0.75))
    );
    let request = double.seen().pop().unwrap();
    println!("{request:?}");
    assert_eq!(request.path, "/render");
    assert_eq!(request.query["format"], "json");
    assert_eq!(request.query["from"], "-10min");
    assert_eq!(
        request.query["target"],
        "summarize( asPercent(sumSeries(app.web.errors), sumSeries(app.web.requests)), '1s', 'avg')"
    );

    double.serve(Some(12.0));
    let bad = check(&graphite(&double, "graphite-pass"), plain).await;
    assert_eq!((bad.outcome, bad.value), (CheckOutcome::Fail, Some(12.0)));

    double.serve(None);
    let none = check(&graphite(&double, "graphite-pass"), plain).await;
    assert_eq!(none.outcome, CheckOutcome::NoData);

    let refused = check(&graphite(&double, "wrong-password"), plain).await;
    println!("{refused:?}");
    assert!(
        refused.message.contains("401 Unauthorized"),
        "{}",
        refused.message
    );
    assert!(
        !refused.message.contains("wrong-password"),
        "{}",
        refused.message
    );
}

#[test]
fn unsupported_providers_and_missing_secret_keys_are_refused_when_applied() {
    let yaml = documents("keptn", "https://keptn.example", "{x: \"z\"}", "[]");
    let (catalog, rollout) = catalog_and_rollout(&yaml);
    let source = MetricsSource::new(catalog);
    assert!(!source.handles(&rollout, &rollout.spec.analysis.metrics[0]));
    let errors = source.validate(&rollout);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].path, "spec.analysis.metrics[0].templateRef");
    assert!(errors[0].message.contains("\"keptn\""), "{errors:?}");

    let yaml = documents(
        "datadog",
        "https://api.datadoghq.com",
        &format!("{{datadog_api_key: {DD_API}}}"),
        "avg:x{*}",
    );
    let (catalog, rollout) = catalog_and_rollout(&yaml);
    let errors = MetricsSource::new(catalog).validate(&rollout);
    println!("{errors:?}");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].message.contains("has no datadog_application_key"),
        "{errors:?}"
    );
    assert!(!errors[0].message.contains(DD_API), "{errors:?}");
}
