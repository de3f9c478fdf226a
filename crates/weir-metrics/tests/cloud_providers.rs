//! CloudWatch checks against weir-testkit's double of GetMetricData, which recomputes every
//! request's AWS Signature Version 4 and refuses a wrong one as CloudWatch does: a healthy
//! value passes, a bad one fails, no values is no data, a refused key's error text reaches the
//! message without the key, throttling and an outage are waited out within the interval, and
//! a service that does not answer in time is no data.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use weir_core::model::{CheckOutcome, CheckResult};
use weir_engine::MetricSource;
use weir_http::retry::Backoff;
use weir_metrics::MetricsSource;
use weir_store::RolloutKey;
use weir_testkit::fixtures::catalog_and_rollout;
use weir_testkit::metric_doubles_cloud::{CloudDouble, Fault};

const REGION: &str = "eu-west-1";
const ACCESS_KEY: &str = "AKIAWEIRTEST0EXAMPLE";
const SECRET_KEY: &str = "wEiRsEcReT/K7MDENG+bPxRfiCYEXAMPLEKEY00";

/// The documents of a rollout `web` in `shop` with one check `errors` (`max: 1`, interval
/// 1s) on a CloudWatch template at `address` in `region`, with its Secret holding `secret`.
fn documents(address: &str, region: &str, secret: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Secret
metadata: {{name: aws, namespace: shop}}
stringData: {secret}
---
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {{name: errors, namespace: shop}}
spec:
  provider: {{type: cloudwatch, region: {region}, address: "{address}", secretRef: {{name: aws}}}}
  query: |
    [
      {{"Id": "e1", "Expression": "m1 / m2 * 100", "Label": "ErrorRate"}},
      {{"Id": "m1", "ReturnData": false, "MetricStat": {{"Metric": {{"Namespace": "App",
        "MetricName": "ErrorCount", "Dimensions": [{{"Name": "appName", "Value": "{{{{ target }}}}.{{{{ namespace }}}}"}}]}},
        "Period": 60, "Stat": "Sum", "Unit": "Count"}}}},
      {{"Id": "m2", "ReturnData": false, "MetricStat": {{"Metric": {{"Namespace": "App",
        "MetricName": "RequestCount", "Dimensions": [{{"Name": "appName", "Value": "{{{{ target }}}}.{{{{ namespace }}}}"}}]}},
        "Period": 60, "Stat": "Sum", "Unit": "Count"}}}}
    ]
---
apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: web, namespace: shop}}
spec:
  target: {{kind: kubernetes, targetRef: {{apiVersion: apps/v1, kind: Deployment, name: web}}}}
  plan: {{canary: {{stepWeight: 10}}}}
  analysis:
    metrics: [{{name: errors, interval: 1s, templateRef: {{name: errors}}, thresholdRange: {{max: 1}}}}]
"#
    )
}

fn cloudwatch(double: &CloudDouble, secret_key: &str) -> String {
    documents(
        &double.url(),
        REGION,
        &format!("{{AWS_ACCESS_KEY_ID: {ACCESS_KEY}, AWS_SECRET_ACCESS_KEY: \"{secret_key}\"}}"),
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
async fn cloudwatch_signed_requests_read_the_newest_value() {
    let double = CloudDouble::cloudwatch(REGION, ACCESS_KEY, SECRET_KEY, None);
    double.serve(Some(0.5));
    let healthy = check(&cloudwatch(&double, SECRET_KEY), plain).await;
    println!("{healthy:?}");
    // The double's older point is three times the newest: the newest is read.
    assert_eq!(
        (healthy.outcome, healthy.value),
        (CheckOutcome::Pass, Some(0.5))
    );

    double.serve(Some(4.0));
    let bad = check(&cloudwatch(&double, SECRET_KEY), plain).await;
    println!("{bad:?}");
    assert_eq!((bad.outcome, bad.value), (CheckOutcome::Fail, Some(4.0)));

    let request = double.seen().pop().unwrap();
    println!("{} {} {:?}", request.method, request.path, request.headers);
    println!("{}", request.body);
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", "/")
    );
    assert_eq!(request.status, 200);
    let authorization = request.header("authorization").unwrap();
    assert!(
        authorization.starts_with(&format!("AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/"))
            && authorization.contains(&format!("/{REGION}/monitoring/aws4_request, "))
            && authorization.contains("SignedHeaders=content-type;host;x-amz-date, "),
        "{authorization}"
    );
    let form: std::collections::BTreeMap<String, String> =
        form_urlencoded::parse(request.body.as_bytes())
            .into_owned()
            .collect();
    assert_eq!(form["Action"], "GetMetricData");
    assert_eq!(form["Version"], "2010-08-01");
    assert_eq!(form["MaxDatapoints"], "20");
    assert_eq!(
        form["MetricDataQueries.member.2.MetricStat.Metric.Dimensions.member.1.Value"],
        "web.shop"
    );
    assert_eq!(form["MetricDataQueries.member.3.ReturnData"], "false");
    let start: jiff::Timestamp = form["StartTime"].parse().unwrap();
    let end: jiff::Timestamp = form["EndTime"].parse().unwrap();
    // Ten intervals of 1s, as Flagger asks.
    assert_eq!(end.as_second() - start.as_second(), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloudwatch_without_values_is_no_data() {
    let double = CloudDouble::cloudwatch(REGION, ACCESS_KEY, SECRET_KEY, None);
    double.serve(None);
    let result = check(&cloudwatch(&double, SECRET_KEY), plain).await;
    println!("{result:?}");
    assert_eq!(result.outcome, CheckOutcome::NoData);
    assert!(
        result.message.contains("e1 has no values"),
        "{}",
        result.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_secret_key_is_refused_by_the_signature_check_without_the_key_in_the_message() {
    let double = CloudDouble::cloudwatch(REGION, ACCESS_KEY, SECRET_KEY, None);
    double.serve(Some(0.5));
    let wrong = "wrongSecretKey/0000000000000000000000000";
    let result = check(&cloudwatch(&double, wrong), plain).await;
    println!("{result:?}");
    assert_eq!(result.outcome, CheckOutcome::NoData);
    assert!(
        result.message.contains(
            "403 Forbidden: SignatureDoesNotMatch: The request signature we calculated does not match"
        ),
        "{}",
        result.message
    );
    for secret in [wrong, SECRET_KEY, ACCESS_KEY] {
        assert!(!result.message.contains(secret), "{}", result.message);
    }
    // A refusal is final: one request, not retried.
    assert_eq!(double.seen().len(), 1);

    // A template for another region is signed for it, and CloudWatch there refuses it.
    let other = documents(
        &double.url(),
        "us-east-1",
        &format!("{{AWS_ACCESS_KEY_ID: {ACCESS_KEY}, AWS_SECRET_ACCESS_KEY: \"{SECRET_KEY}\"}}"),
    );
    let result = check(&other, plain).await;
    println!("{result:?}");
    assert!(
        result
            .message
            .contains("Credential should be scoped to a valid region, not 'us-east-1'"),
        "{}",
        result.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloudwatch_throttling_and_an_outage_are_waited_out() {
    let double = CloudDouble::cloudwatch(REGION, ACCESS_KEY, SECRET_KEY, None);
    double.serve(Some(0.25));
    double.fail_next(Fault::RateLimited(1));
    double.fail_next(Fault::Unavailable);
    let result = check(&cloudwatch(&double, SECRET_KEY), |source| {
        source.with_timeout(Duration::from_secs(30))
    })
    .await;
    println!("{result:?}");
    assert_eq!(
        (result.outcome, result.value),
        (CheckOutcome::Pass, Some(0.25))
    );
    let statuses: Vec<u16> = double.seen().iter().map(|seen| seen.status).collect();
    // CloudWatch throttles with 400 Throttling.
    assert_eq!(statuses, [400, 503, 200]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_cloudwatch_is_no_data_after_the_timeout() {
    let double = CloudDouble::cloudwatch(REGION, ACCESS_KEY, SECRET_KEY, None);
    double.serve(Some(0.5));
    for _ in 0..100 {
        double.fail_next(Fault::Slow(Duration::from_secs(30)));
    }
    let result = check(&cloudwatch(&double, SECRET_KEY), |source| {
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
async fn a_session_token_is_signed_and_sent() {
    let double =
        CloudDouble::cloudwatch(REGION, ACCESS_KEY, SECRET_KEY, Some("session-token-0001"));
    double.serve(Some(0.5));
    let with_token = documents(
        &double.url(),
        REGION,
        &format!(
            "{{AWS_ACCESS_KEY_ID: {ACCESS_KEY}, AWS_SECRET_ACCESS_KEY: \"{SECRET_KEY}\", AWS_SESSION_TOKEN: session-token-0001}}"
        ),
    );
    let result = check(&with_token, plain).await;
    println!("{result:?}");
    assert_eq!(
        (result.outcome, result.value),
        (CheckOutcome::Pass, Some(0.5))
    );
    let request = double.seen().pop().unwrap();
    assert!(
        request
            .header("authorization")
            .unwrap()
            .contains("SignedHeaders=content-type;host;x-amz-date;x-amz-security-token,"),
    );
    // Without it, refused.
    let without = check(&cloudwatch(&double, SECRET_KEY), plain).await;
    println!("{without:?}");
    assert!(
        without
            .message
            .contains("403 Forbidden: InvalidClientTokenId"),
        "{}",
        without.message
    );
}

#[test]
fn cloudwatch_templates_without_region_credentials_or_a_query_list_are_refused() {
    let secret = format!("{{AWS_ACCESS_KEY_ID: {ACCESS_KEY}}}");
    let (catalog, rollout) = catalog_and_rollout(&documents("http://127.0.0.1:9", REGION, &secret));
    let errors = MetricsSource::new(catalog).validate(&rollout);
    println!("{errors:?}");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].message.contains("has no AWS_SECRET_ACCESS_KEY"),
        "{errors:?}"
    );
    assert!(!errors[0].message.contains(ACCESS_KEY), "{errors:?}");

    let yaml = documents(
        "http://127.0.0.1:9",
        "Not A Region",
        &format!("{{AWS_ACCESS_KEY_ID: {ACCESS_KEY}, AWS_SECRET_ACCESS_KEY: x}}"),
    );
    let (catalog, rollout) = catalog_and_rollout(&yaml);
    let errors = MetricsSource::new(catalog).validate(&rollout);
    println!("{errors:?}");
    assert!(
        errors[0].message.contains("is not an AWS region"),
        "{errors:?}"
    );

    let yaml = documents(
        "http://127.0.0.1:9",
        REGION,
        &format!("{{AWS_ACCESS_KEY_ID: {ACCESS_KEY}, AWS_SECRET_ACCESS_KEY: x}}"),
    )
    .replace("\"Id\": \"e1\",", "");
    let (catalog, rollout) = catalog_and_rollout(&yaml);
    let errors = MetricsSource::new(catalog).validate(&rollout);
    println!("{errors:?}");
    assert!(errors[0].message.contains("with a string Id"), "{errors:?}");
}

const INFLUX_ORG: &str = "weir-org";
const INFLUX_TOKEN: &str = "influx-token-0123456789==";
const FLUX: &str = r#"from(bucket: "metrics")
  |> range(start: -{{ interval }})
  |> filter(fn: (r) => r._measurement == "http" and r.app == "{{ target }}" and r._field == "errors")
  |> mean()"#;

fn influxdb(double: &CloudDouble, token: &str, query: &str) -> String {
    let query = query
        .lines()
        .map(|line| format!("    {line}"))
        .collect::<Vec<_>>()
        .join("\n");
    format!(
        r#"
apiVersion: v1
kind: Secret
metadata: {{name: influx, namespace: shop}}
stringData: {{token: "{token}", org: {INFLUX_ORG}}}
---
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {{name: errors, namespace: shop}}
spec:
  provider: {{type: influxdb, address: "{}", secretRef: {{name: influx}}}}
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
        double.url()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn influxdb_reads_the_first_records_value_and_empty_results_are_no_data() {
    let double = CloudDouble::influxdb(INFLUX_ORG, INFLUX_TOKEN);
    double.serve(Some(0.5));
    let healthy = check(&influxdb(&double, INFLUX_TOKEN, FLUX), plain).await;
    println!("{healthy:?}");
    // The double's second record is three times the first: the first is read, as in Flagger.
    assert_eq!(
        (healthy.outcome, healthy.value),
        (CheckOutcome::Pass, Some(0.5))
    );
    let request = double.seen().pop().unwrap();
    println!(
        "{} {} {:?} {:?}\n{}",
        request.method, request.path, request.query, request.headers, request.body
    );
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", "/api/v2/query")
    );
    assert_eq!(request.query["org"], INFLUX_ORG);
    assert_eq!(
        request.header("authorization"),
        Some(format!("Token {INFLUX_TOKEN}").as_str())
    );
    let body: serde_json::Value = serde_json::from_str(&request.body).unwrap();
    assert_eq!(body["type"], "flux");
    assert_eq!(
        body["dialect"]["annotations"],
        serde_json::json!(["datatype", "group", "default"])
    );
    let flux = body["query"].as_str().unwrap();
    assert!(
        flux.contains("range(start: -1s)") && flux.contains(r#"r.app == "web""#),
        "{flux}"
    );

    double.serve(Some(3.0));
    let bad = check(&influxdb(&double, INFLUX_TOKEN, FLUX), plain).await;
    assert_eq!((bad.outcome, bad.value), (CheckOutcome::Fail, Some(3.0)));

    // count() answers a long, which Flagger refuses and weir reads.
    double.serve(Some(7.0));
    let counted = check(
        &influxdb(&double, INFLUX_TOKEN, &FLUX.replace("mean()", "count()")),
        plain,
    )
    .await;
    println!("{counted:?}");
    assert_eq!(
        (counted.outcome, counted.value),
        (CheckOutcome::Fail, Some(7.0))
    );

    // No records: no data (Flagger reads 0 and passes).
    double.serve(None);
    let none = check(&influxdb(&double, INFLUX_TOKEN, FLUX), plain).await;
    println!("{none:?}");
    assert_eq!(none.outcome, CheckOutcome::NoData);
    assert!(none.message.contains("no records"), "{}", none.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_influxdb_token_is_in_the_message_without_the_token_or_org() {
    let double = CloudDouble::influxdb(INFLUX_ORG, INFLUX_TOKEN);
    double.serve(Some(0.5));
    let wrong = "influx-wrong-token-000000";
    let result = check(&influxdb(&double, wrong, FLUX), plain).await;
    println!("{result:?}");
    assert_eq!(result.outcome, CheckOutcome::NoData);
    assert!(
        result
            .message
            .contains("401 Unauthorized: unauthorized: unauthorized access"),
        "{}",
        result.message
    );
    assert!(result.message.contains("org=<org>"), "{}", result.message);
    for secret in [wrong, INFLUX_TOKEN, INFLUX_ORG] {
        assert!(!result.message.contains(secret), "{}", result.message);
    }
    assert_eq!(double.seen().len(), 1);

    // A query that is not Flux: InfluxDB's own words.
    let result = check(&influxdb(&double, INFLUX_TOKEN, "SELECT 1"), plain).await;
    println!("{result:?}");
    assert!(
        result
            .message
            .contains("400 Bad Request: invalid: error in query specification"),
        "{}",
        result.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn influxdb_rate_limits_and_outages_are_waited_out_and_slowness_is_no_data() {
    let double = CloudDouble::influxdb(INFLUX_ORG, INFLUX_TOKEN);
    double.serve(Some(0.25));
    double.fail_next(Fault::RateLimited(1));
    double.fail_next(Fault::Unavailable);
    let result = check(&influxdb(&double, INFLUX_TOKEN, FLUX), |source| {
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

    for _ in 0..100 {
        double.fail_next(Fault::Slow(Duration::from_secs(30)));
    }
    let slow = check(&influxdb(&double, INFLUX_TOKEN, FLUX), |source| {
        source.with_timeout(Duration::from_millis(200))
    })
    .await;
    println!("{slow:?}");
    assert_eq!(slow.outcome, CheckOutcome::NoData);
    assert!(
        slow.message.contains("no answer within"),
        "{}",
        slow.message
    );
}

const DT_TOKEN: &str = "dt0c01.WEIRTEST.0123456789abcdef";
const DT_SELECTOR: &str = "builtin:service.errors.total.rate:filter(eq(\"dt.entity.service.name\",\"{{ target }}\")):merge(\"dt.entity.service\"):avg";

fn dynatrace(double: &CloudDouble, token: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Secret
metadata: {{name: dynatrace, namespace: shop}}
stringData: {{dynatrace_token: "{token}"}}
---
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {{name: errors, namespace: shop}}
spec:
  provider: {{type: dynatrace, address: "{}", secretRef: {{name: dynatrace}}}}
  query: |
    {DT_SELECTOR}
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
        double.url()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynatrace_values_pass_fail_and_no_series_is_no_data() {
    let double = CloudDouble::dynatrace(DT_TOKEN);
    double.serve(Some(0.5));
    let healthy = check(&dynatrace(&double, DT_TOKEN), plain).await;
    println!("{healthy:?}");
    assert_eq!(
        (healthy.outcome, healthy.value),
        (CheckOutcome::Pass, Some(0.5))
    );
    let request = double.seen().pop().unwrap();
    println!("{} {} {:?}", request.method, request.path, request.query);
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("GET", "/api/v2/metrics/query")
    );
    assert_eq!(
        request.header("authorization"),
        Some(format!("Api-Token {DT_TOKEN}").as_str())
    );
    assert_eq!(
        request.query["metricSelector"],
        DT_SELECTOR.replace("{{ target }}", "web")
    );
    assert_eq!(request.query["resolution"], "Inf");
    let from: i64 = request.query["from"].parse().unwrap();
    let to: i64 = request.query["to"].parse().unwrap();
    // Ten intervals of 1s, in milliseconds, as Flagger asks.
    assert_eq!(to - from, 10_000);

    double.serve(Some(2.5));
    let bad = check(&dynatrace(&double, DT_TOKEN), plain).await;
    assert_eq!((bad.outcome, bad.value), (CheckOutcome::Fail, Some(2.5)));

    double.serve(None);
    let none = check(&dynatrace(&double, DT_TOKEN), plain).await;
    println!("{none:?}");
    assert_eq!(none.outcome, CheckOutcome::NoData);
    assert!(none.message.contains("no series"), "{}", none.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_dynatrace_token_is_in_the_message_without_the_token_and_limits_are_waited_out() {
    let double = CloudDouble::dynatrace(DT_TOKEN);
    double.serve(Some(0.5));
    let wrong = "dt0c01.WRONG.000000000000000";
    let refused = check(&dynatrace(&double, wrong), plain).await;
    println!("{refused:?}");
    assert_eq!(refused.outcome, CheckOutcome::NoData);
    assert!(
        refused
            .message
            .contains("401 Unauthorized: Token Authentication failed"),
        "{}",
        refused.message
    );
    for secret in [wrong, DT_TOKEN] {
        assert!(!refused.message.contains(secret), "{}", refused.message);
    }
    assert_eq!(double.seen().len(), 1);

    double.fail_next(Fault::RateLimited(1));
    double.fail_next(Fault::Unavailable);
    let result = check(&dynatrace(&double, DT_TOKEN), |source| {
        source.with_timeout(Duration::from_secs(30))
    })
    .await;
    println!("{result:?}");
    assert_eq!(
        (result.outcome, result.value),
        (CheckOutcome::Pass, Some(0.5))
    );
    let statuses: Vec<u16> = double.seen().iter().map(|seen| seen.status).collect();
    assert_eq!(statuses, [401, 429, 503, 200]);

    for _ in 0..100 {
        double.fail_next(Fault::Slow(Duration::from_secs(30)));
    }
    let slow = check(&dynatrace(&double, DT_TOKEN), |source| {
        source.with_timeout(Duration::from_millis(200))
    })
    .await;
    println!("{slow:?}");
    assert_eq!(slow.outcome, CheckOutcome::NoData);
    assert!(
        slow.message.contains("no answer within"),
        "{}",
        slow.message
    );
}

const GCP_PROJECT: &str = "weir-shop-prod";
const MQL: &str = "fetch k8s_container\n| metric 'istio.io/service/server/request_count'\n| filter resource.namespace_name == '{{ namespace }}' && metric.destination_workload_name == '{{ target }}'\n| align delta(1m) | every 1m | group_by [], [value: sum(value.request_count)]";

fn stackdriver(double: &CloudDouble, key: &str, project: &str) -> String {
    let query = MQL
        .lines()
        .map(|line| format!("    {line}"))
        .collect::<Vec<_>>()
        .join("\n");
    format!(
        r#"
apiVersion: v1
kind: Secret
metadata: {{name: gcp, namespace: shop}}
stringData:
  project: {project}
  serviceAccountKey: '{}'
---
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {{name: errors, namespace: shop}}
spec:
  provider: {{type: stackdriver, address: "{}", secretRef: {{name: gcp}}}}
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
        key.replace('\'', "''"),
        double.url()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stackdriver_exchanges_the_key_for_a_token_and_reads_the_first_point() {
    let double = CloudDouble::stackdriver(GCP_PROJECT);
    let key = double.service_account_key();
    double.serve(Some(0.5));
    let healthy = check(&stackdriver(&double, &key, GCP_PROJECT), plain).await;
    println!("{healthy:?}");
    assert_eq!(
        (healthy.outcome, healthy.value),
        (CheckOutcome::Pass, Some(0.5))
    );
    let seen = double.seen();
    for request in &seen {
        println!("{} {} -> {}", request.method, request.path, request.status);
    }
    assert_eq!(
        seen.iter()
            .map(|seen| (seen.path.as_str(), seen.status))
            .collect::<Vec<_>>(),
        [
            ("/token", 200),
            (
                format!("/v3/projects/{GCP_PROJECT}/timeSeries:query").as_str(),
                200
            )
        ]
    );
    let token_form: std::collections::BTreeMap<String, String> =
        form_urlencoded::parse(seen[0].body.as_bytes())
            .into_owned()
            .collect();
    assert_eq!(
        token_form["grant_type"],
        "urn:ietf:params:oauth:grant-type:jwt-bearer"
    );
    assert!(
        seen[1]
            .header("authorization")
            .unwrap()
            .starts_with("Bearer ya29.")
    );
    let body: serde_json::Value = serde_json::from_str(&seen[1].body).unwrap();
    let query = body["query"].as_str().unwrap();
    assert!(
        query.contains(
            "resource.namespace_name == 'shop' && metric.destination_workload_name == 'web'"
        ),
        "{query}"
    );

    double.serve(Some(5.0));
    let bad = check(&stackdriver(&double, &key, GCP_PROJECT), plain).await;
    assert_eq!((bad.outcome, bad.value), (CheckOutcome::Fail, Some(5.0)));

    double.serve(None);
    let none = check(&stackdriver(&double, &key, GCP_PROJECT), plain).await;
    println!("{none:?}");
    assert_eq!(none.outcome, CheckOutcome::NoData);
    assert!(none.message.contains("no time series"), "{}", none.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stackdriver_refusals_name_googles_error_without_credentials_and_quotas_are_waited_out() {
    let double = CloudDouble::stackdriver(GCP_PROJECT);
    let key = double.service_account_key();
    double.serve(Some(0.5));
    // Another project: the token is good, the project refused.
    let other = check(&stackdriver(&double, &key, "someone-elses-project"), plain).await;
    println!("{other:?}");
    assert!(
        other.message.contains("403 Forbidden: PERMISSION_DENIED"),
        "{}",
        other.message
    );
    assert!(
        !other.message.contains("someone-elses-project"),
        "{}",
        other.message
    );

    // A key of an account Google does not know: the grant is refused.
    let elsewhere = key.replace(
        weir_testkit::metric_doubles_cloud::TEST_SERVICE_ACCOUNT,
        "intruder@elsewhere.iam.gserviceaccount.com",
    );
    let refused = check(&stackdriver(&double, &elsewhere, GCP_PROJECT), plain).await;
    println!("{refused:?}");
    assert_eq!(refused.outcome, CheckOutcome::NoData);
    assert!(
        refused.message.contains("token exchange") && refused.message.contains("invalid_grant"),
        "{}",
        refused.message
    );
    assert!(
        !refused.message.contains("PRIVATE KEY"),
        "{}",
        refused.message
    );

    double.fail_next(Fault::RateLimited(1));
    double.fail_next(Fault::Unavailable);
    let result = check(&stackdriver(&double, &key, GCP_PROJECT), |source| {
        source.with_timeout(Duration::from_secs(30))
    })
    .await;
    println!("{result:?}");
    assert_eq!(
        (result.outcome, result.value),
        (CheckOutcome::Pass, Some(0.5))
    );
    let statuses: Vec<u16> = double
        .seen()
        .iter()
        .filter(|seen| seen.path.ends_with("timeSeries:query"))
        .map(|seen| seen.status)
        .collect();
    assert_eq!(statuses, [403, 429, 503, 200]);

    for _ in 0..100 {
        double.fail_next(Fault::Slow(Duration::from_secs(30)));
    }
    let slow = check(&stackdriver(&double, &key, GCP_PROJECT), |source| {
        source.with_timeout(Duration::from_millis(200))
    })
    .await;
    println!("{slow:?}");
    assert_eq!(slow.outcome, CheckOutcome::NoData);
    assert!(
        slow.message.contains("no answer within"),
        "{}",
        slow.message
    );
}

#[test]
fn a_stackdriver_template_without_a_usable_key_is_refused_when_applied() {
    let double = CloudDouble::stackdriver(GCP_PROJECT);
    let yaml = stackdriver(&double, "{\"type\": \"service_account\"}", GCP_PROJECT);
    let (catalog, rollout) = catalog_and_rollout(&yaml);
    let errors = MetricsSource::new(catalog).validate(&rollout);
    println!("{errors:?}");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].message.contains("no client_email"), "{errors:?}");
}

const SF_TOKEN: &str = "sf-access-token-0123456789";
const SIGNALFLOW: &str = "A = data('requests.errors', filter=filter('app', '{{ target }}')).sum()\nB = data('requests.count', filter=filter('app', '{{ target }}')).sum()\n(A / B * 100).publish('error_rate')";

fn splunk(double: &CloudDouble, token: &str, program: &str) -> String {
    let program = program
        .lines()
        .map(|line| format!("    {line}"))
        .collect::<Vec<_>>()
        .join("\n");
    format!(
        r#"
apiVersion: v1
kind: Secret
metadata: {{name: splunk, namespace: shop}}
stringData: {{sf_token_key: "{token}"}}
---
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {{name: errors, namespace: shop}}
spec:
  provider: {{type: splunk, address: "{}", secretRef: {{name: splunk}}}}
  query: |
{program}
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
        double.url()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn splunk_reads_the_last_value_of_the_stream() {
    let double = CloudDouble::splunk(SF_TOKEN);
    double.serve(Some(0.5));
    let healthy = check(&splunk(&double, SF_TOKEN, SIGNALFLOW), plain).await;
    println!("{healthy:?}");
    // The older point is three times the newest: the last is read, as in Flagger.
    assert_eq!(
        (healthy.outcome, healthy.value),
        (CheckOutcome::Pass, Some(0.5))
    );
    let request = double.seen().pop().unwrap();
    println!(
        "{} {} {:?}\n{}",
        request.method, request.path, request.query, request.body
    );
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", "/v2/signalflow/execute")
    );
    assert_eq!(request.header("x-sf-token"), Some(SF_TOKEN));
    assert_eq!(request.query["immediate"], "true");
    let start: i64 = request.query["start"].parse().unwrap();
    let stop: i64 = request.query["stop"].parse().unwrap();
    assert_eq!(stop - start, 10_000);
    assert!(
        request.body.contains("filter('app', 'web')"),
        "{}",
        request.body
    );

    double.serve(Some(9.0));
    let bad = check(&splunk(&double, SF_TOKEN, SIGNALFLOW), plain).await;
    assert_eq!((bad.outcome, bad.value), (CheckOutcome::Fail, Some(9.0)));

    double.serve(None);
    let none = check(&splunk(&double, SF_TOKEN, SIGNALFLOW), plain).await;
    println!("{none:?}");
    assert_eq!(none.outcome, CheckOutcome::NoData);
    assert!(none.message.contains("no values"), "{}", none.message);

    let unpublished = check(&splunk(&double, SF_TOKEN, "data('x').sum()"), plain).await;
    println!("{unpublished:?}");
    assert!(
        unpublished.message.contains("Unable to compile program"),
        "{}",
        unpublished.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_splunk_token_is_in_the_message_without_it_and_limits_are_waited_out() {
    let double = CloudDouble::splunk(SF_TOKEN);
    double.serve(Some(0.5));
    let wrong = "sf-wrong-token-00000000";
    let refused = check(&splunk(&double, wrong, SIGNALFLOW), plain).await;
    println!("{refused:?}");
    assert!(
        refused.message.contains("401 Unauthorized: Unauthorized"),
        "{}",
        refused.message
    );
    for secret in [wrong, SF_TOKEN] {
        assert!(!refused.message.contains(secret), "{}", refused.message);
    }

    double.fail_next(Fault::RateLimited(1));
    double.fail_next(Fault::Unavailable);
    let result = check(&splunk(&double, SF_TOKEN, SIGNALFLOW), |source| {
        source.with_timeout(Duration::from_secs(30))
    })
    .await;
    println!("{result:?}");
    assert_eq!(
        (result.outcome, result.value),
        (CheckOutcome::Pass, Some(0.5))
    );
    let statuses: Vec<u16> = double.seen().iter().map(|seen| seen.status).collect();
    assert_eq!(statuses, [401, 429, 503, 200]);

    for _ in 0..100 {
        double.fail_next(Fault::Slow(Duration::from_secs(30)));
    }
    let slow = check(&splunk(&double, SF_TOKEN, SIGNALFLOW), |source| {
        source.with_timeout(Duration::from_millis(200))
    })
    .await;
    println!("{slow:?}");
    assert_eq!(slow.outcome, CheckOutcome::NoData);
    assert!(
        slow.message.contains("no answer within"),
        "{}",
        slow.message
    );
}

/// A key Google never issued (made for this test): its JWT's signature does not verify against
/// the account's public key.
const FORGED_KEY_PEM: &str = "-----BEGIN PRIVATE KEY-----\nMIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkAgEAAoIBAQC48aTBocQXOX3Q\nDagTQ+Ea2THDViUcji/tecsTaQh5nmUVnj8HtTdCGiKYfQWEDxED0DmT9i94xm0F\nDc8nFWba8mwMrKJCA1dUsdkazPsAVCmNdz94aPgefJAuRamBADg38sBb5r++fweH\n9Xj/QEhk+Zbo99SaMKB5giyx607Uv0enmcz0cM0Y1nKJuXfp1SpFlBhY5b/YM9tJ\nAvBpFqUbR6YRxcflY982tm0ttLwoBKUXUt5PUa1pbly4F2pYSbCMDkdBvo/bO00R\nI9JgQehKIxO18EPOtnPsV6T7Ir9IpmwXTXBsiccGHrG4oigTonYtF632vBQA9lY5\nQnS5po5tAgMBAAECggEAHrvxgEgsuRtRwCB03Pa70uVjMq3/LtamOlWyHMCoquVa\nsRQCL3q6+x4yv5qPLxn93t9coi0YSH7ZISzhTwJsfFgrApQxxrydZ7LCfISx9aUG\n3r6BarYu/Yn/v+DNwWVS8mFB/EPFe5fKnZp6iBibr0QXAxIkX5dTI74xRUPwbsQu\neCr6noHJ8dlrRShBQrp/wplzvIQEFOTAfUvVcSL8VuOSAHlEfuBqcdTtFGEprHhC\nl8yA4/rAWt27Or09+BhnkeWN/N02XFHEgdwqoH5ifCgI0epKGPCFNf6vMLccxoUp\nltj0fYLn97U7NopEa6GH0Md884SBKgAZcnmgMCpy4QKBgQDik129iAcYWCvaeS3Z\nlkUcV4f8Uy0Gxby9vdDOUCJwaoGgD7QBNjV+RpqT5HHBaIFd8eyreTzv0gCpqyVZ\nF+An+/ZPz0aCWH20dAy5IsxLGCGjn7mcmXd9V34/xfzVXTwB6Q/6txlZU5M24JVn\nbyWCi++op5i//OkJXjL9a5tPaQKBgQDQ9jUVhgZEPVTvxi9HSQ+zvIQTC0BQHx2A\nvIbOgxhqtZ4pE9VYBC3+ubtEIrrtc9mExslmU2Xl0ZRXJ+tB8od8zY7WXWc3qtaW\nM4i2pFHizmxpn7gNK4wO5c4buDVechrAZiu0gT9QXxhZ3vL9wnV9aY7vTsZS5jGP\nFMPbNXEqZQKBgQDGlufY0bt2SQHW8dOQHTfiCY51SOn0P6iYniDAVFh7M7797gWV\n8k+cqIGgEuDp5pFNKFiKSy9v/B78l7eaiWS9ZwiTF1fzs2AqpHTqaGergjEp2zuy\n2Ih04hUUDJL46ElKW17YH1gmhSxJMzuAd1jnPYQHzS4DSMdwoJIMsR5l0QKBgGP0\ncd4S1yqLP/bWEUWDIFy0n2TQq/nneGBdTgq40NQyfi5eC15n2WyQgZCNIGd3VCRc\nRniJCiQNxWyPbsyD6+V6GopV8YrCUJVWn13majkYzukTeqHqI7v4l0fRLM45vKwt\n81gLvzJ92pMav5c9DqBn/vRf9SQwcqJjp3BTNwe1AoGBAKggrXuvGUQmAUFi9PG2\nNOC7bUYIjF122c7RVrtKFcRvSVdi6ios0mzi1qVPMAg2EvAINL3fvQqDV1pghaLH\nEDV5TaNQk8efP1feSGPA7TF7P2gm7anZb1bA+DWc4O+En3r9lJETrq/RSGFhlEM6\nGl8GKwnjoe5nqmAHm6aaKi3c\n-----END PRIVATE KEY-----\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwt_signed_with_another_key_is_refused_by_the_token_endpoint() {
    let double = CloudDouble::stackdriver(GCP_PROJECT);
    double.serve(Some(0.5));
    let mut key: serde_json::Value = serde_json::from_str(&double.service_account_key()).unwrap();
    key["private_key"] = FORGED_KEY_PEM.into();
    let result = check(&stackdriver(&double, &key.to_string(), GCP_PROJECT), plain).await;
    println!("{result:?}");
    assert_eq!(result.outcome, CheckOutcome::NoData);
    assert!(
        result
            .message
            .contains("400 Bad Request: invalid_grant: Invalid JWT Signature."),
        "{}",
        result.message
    );
    // No query was sent without a token.
    assert!(
        double
            .seen()
            .iter()
            .all(|seen| seen.path == "/token" && seen.status == 400)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stackdriver_token_is_kept_until_the_api_refuses_it() {
    let double = CloudDouble::stackdriver(GCP_PROJECT);
    double.serve(Some(0.5));
    let (catalog, rollout) = catalog_and_rollout(&stackdriver(
        &double,
        &double.service_account_key(),
        GCP_PROJECT,
    ));
    let source = MetricsSource::new(catalog);
    let metric = &rollout.spec.analysis.metrics[0];
    let key = RolloutKey::new("shop", "web");
    let paths = || {
        double
            .seen()
            .iter()
            .map(|seen| {
                (
                    seen.path.rsplit('/').next().unwrap_or_default().to_string(),
                    seen.status,
                )
            })
            .collect::<Vec<_>>()
    };
    for _ in 0..2 {
        let result = source.check(&key, &rollout, metric).await;
        assert_eq!(result.outcome, CheckOutcome::Pass, "{result:?}");
    }
    // One exchange for two queries.
    let query = "timeSeries:query".to_string();
    assert_eq!(
        paths(),
        [
            ("token".to_string(), 200),
            (query.clone(), 200),
            (query.clone(), 200)
        ]
    );

    double.revoke_tokens();
    let refused = source.check(&key, &rollout, metric).await;
    println!("{refused:?}");
    assert!(
        refused
            .message
            .contains("401 Unauthorized: UNAUTHENTICATED"),
        "{}",
        refused.message
    );
    let again = source.check(&key, &rollout, metric).await;
    assert_eq!(again.outcome, CheckOutcome::Pass, "{again:?}");
    // The refused token was dropped: a new exchange, then the query.
    assert_eq!(
        paths()[3..],
        [
            (query.clone(), 401),
            ("token".to_string(), 200),
            (query, 200)
        ]
    );
}
