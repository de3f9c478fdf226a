//! Local rollouts judged by a Datadog, New Relic, CloudWatch, InfluxDB, Stackdriver, Dynatrace
//! or Splunk MetricTemplate through `weir run`: the
//! template and its Secret sit beside the rollout in its file, the template's address is
//! weir-testkit's double of the service (which refuses any request the service would refuse). A
//! healthy value promotes the canary; a bad one, or no data under `noData: fail`, rolls it back
//! with the value or the reason in the history; the credentials appear in no output.
//! Graphite's template reads a real graphite-api (weir-testkit's `graphite`) instead of a double.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use weir_testkit::fixtures::{local_rollout_judged_by_template, runtime, sample_apps};
use weir_testkit::graphite::{self, GraphiteServer};
use weir_testkit::metric_doubles::MetricDouble;
use weir_testkit::metric_doubles_cloud::CloudDouble;
use weir_testkit::process::run_rollout_file;

const API_KEY: &str = "dd-api-e2e-0123456789";
const APP_KEY: &str = "dd-app-e2e-9876543210";
const NR_ACCOUNT: &str = "2345678";
const NR_KEY: &str = "NRIQ-e2e-query-key";
const AWS_KEY_ID: &str = "AKIAE2EWEIR000000000";
const AWS_SECRET: &str = "e2e/aws/secret/access/key/0000000000000";

const INFLUX_ORG: &str = "e2e-org";
const INFLUX_TOKEN: &str = "influx-e2e-token-0123456789";

fn influxdb_template(address: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Secret
metadata: {{name: influx}}
stringData: {{token: {INFLUX_TOKEN}, org: {INFLUX_ORG}}}
---
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {{name: error-percentage}}
spec:
  provider: {{type: influxdb, address: "{address}", secretRef: {{name: influx}}}}
  query: |
    from(bucket: "shop")
      |> range(start: -{{{{ interval }}}})
      |> filter(fn: (r) => r._measurement == "http" and r.app == "{{{{ target }}}}" and r._field == "error_percentage")
      |> mean()
"#
    )
}

fn cloudwatch_template(address: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Secret
metadata: {{name: aws}}
stringData: {{AWS_ACCESS_KEY_ID: {AWS_KEY_ID}, AWS_SECRET_ACCESS_KEY: "{AWS_SECRET}"}}
---
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {{name: error-percentage}}
spec:
  provider: {{type: cloudwatch, region: eu-central-1, address: "{address}", secretRef: {{name: aws}}}}
  query: |
    [{{"Id": "e1", "Expression": "100 * m1 / m2", "Label": "ErrorPercentage"}},
     {{"Id": "m1", "ReturnData": false, "MetricStat": {{"Metric": {{"Namespace": "Shop", "MetricName": "Errors",
       "Dimensions": [{{"Name": "app", "Value": "{{{{ target }}}}"}}]}}, "Period": 60, "Stat": "Sum"}}}},
     {{"Id": "m2", "ReturnData": false, "MetricStat": {{"Metric": {{"Namespace": "Shop", "MetricName": "Requests",
       "Dimensions": [{{"Name": "app", "Value": "{{{{ target }}}}"}}]}}, "Period": 60, "Stat": "Sum"}}}}]
"#
    )
}

fn datadog_template(address: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Secret
metadata: {{name: datadog}}
stringData: {{datadog_api_key: {API_KEY}, datadog_application_key: {APP_KEY}}}
---
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {{name: error-percentage}}
spec:
  provider: {{type: datadog, address: "{address}", secretRef: {{name: datadog}}}}
  query: |
    100 * sum:trace.http.request.errors{{service:{{{{ target }}}},version:canary}}.as_count()
      / sum:trace.http.request.hits{{service:{{{{ target }}}},version:canary}}.as_count()
"#
    )
}

fn newrelic_template(address: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Secret
metadata: {{name: newrelic}}
stringData: {{newrelic_account_id: "{NR_ACCOUNT}", newrelic_query_key: {NR_KEY}}}
---
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {{name: error-percentage}}
spec:
  provider: {{type: newrelic, address: "{address}", secretRef: {{name: newrelic}}}}
  query: |
    SELECT filter(count(*), WHERE error IS true) / count(*) * 100
    FROM Transaction WHERE appName = '{{{{ target }}}}'
"#
    )
}

/// The template's documents and a local rollout judged by it alone.
fn documents(template: &str, primary: &str, canary: &str) -> String {
    documents_judged_by(
        template,
        primary,
        canary,
        "{name: error-percentage}",
        "{max: 1}",
    )
}

/// [`documents`] with the metric's `templateRef` and `thresholdRange` given (YAML flow maps).
fn documents_judged_by(
    template: &str,
    primary: &str,
    canary: &str,
    template_ref: &str,
    threshold_range: &str,
) -> String {
    local_rollout_judged_by_template(
        "shop-metrics",
        template,
        primary,
        canary,
        template_ref,
        threshold_range,
    )
}

/// Runs the rollout to its end; its exit code, its events and everything it printed.
fn run(yaml: &str) -> (Option<i32>, Vec<Value>, String) {
    run_with_env(yaml, &[])
}

/// [`run`] with these variables in weir's environment.
fn run_with_env(yaml: &str, env: &[(&str, &str)]) -> (Option<i32>, Vec<Value>, String) {
    let outcome = run_rollout_file(env!("CARGO_BIN_EXE_weir"), yaml, env);
    (outcome.code, outcome.events, outcome.printed)
}

fn messages(events: &[Value], reason: &str) -> Vec<String> {
    events
        .iter()
        .filter(|event| event["reason"] == reason)
        .filter_map(|event| event["message"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn a_datadog_template_promotes_a_healthy_canary_and_rolls_back_a_bad_one() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let datadog = MetricDouble::datadog(API_KEY, APP_KEY);
    let yaml = documents(
        &datadog_template(&datadog.url()),
        &versions[0].to_string(),
        &versions[1].to_string(),
    );

    datadog.serve(Some(0.2));
    let (code, events, printed) = run(&yaml);
    println!("{:#?}", messages(&events, "Advanced"));
    assert_eq!(code, Some(0), "{events:#?}");
    assert!(!messages(&events, "Succeeded").is_empty(), "{events:#?}");
    let request = datadog.seen().pop().unwrap();
    println!("Datadog received: {request:?}");
    assert_eq!(request.path, "/api/v1/query");
    assert_eq!(request.status, 200);
    assert!(
        request.query["query"].contains("service:shop-metrics,version:canary"),
        "{request:?}"
    );
    assert!(!printed.contains(API_KEY) && !printed.contains(APP_KEY));

    datadog.serve(Some(12.5));
    let (code, events, printed) = run(&yaml);
    println!("{events:#?}");
    assert_eq!(code, Some(1), "{events:#?}");
    let all = serde_json::to_string(&events).unwrap();
    assert!(all.contains("datadog: 12.5000 (accepted <= 1)"), "{all}");
    assert!(!printed.contains(API_KEY) && !printed.contains(APP_KEY));
}

#[test]
fn a_newrelic_template_rolls_back_a_canary_on_its_value_and_on_no_data() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let newrelic = MetricDouble::newrelic(NR_ACCOUNT, NR_KEY);
    let yaml = documents(
        &newrelic_template(&newrelic.url()),
        &versions[0].to_string(),
        &versions[1].to_string(),
    );

    newrelic.serve(Some(4.0));
    let (code, events, printed) = run(&yaml);
    assert_eq!(code, Some(1), "{events:#?}");
    let all = serde_json::to_string(&events).unwrap();
    assert!(all.contains("newrelic: 4.0000 (accepted <= 1)"), "{all}");
    let request = newrelic.seen().pop().unwrap();
    println!("New Relic received: {request:?}");
    assert_eq!(request.path, format!("/v1/accounts/{NR_ACCOUNT}/query"));
    assert!(
        request.query["nrql"].ends_with("appName = 'shop-metrics' SINCE 60 seconds ago"),
        "{request:?}"
    );

    // `noData: fail`: a null result counts as a failed check.
    newrelic.serve(None);
    let (code, events, printed_too) = run(&yaml);
    println!("{:#?}", messages(&events, "ChecksFailed"));
    assert_eq!(code, Some(1), "{events:#?}");
    let all = serde_json::to_string(&events).unwrap();
    assert!(all.contains("newrelic: no values found"), "{all}");
    for text in [printed, printed_too] {
        assert!(
            !text.contains(NR_KEY) && !text.contains(NR_ACCOUNT),
            "{text}"
        );
    }
}

#[test]
fn a_cloudwatch_template_promotes_a_healthy_canary_and_rolls_back_a_bad_one() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let cloudwatch = CloudDouble::cloudwatch("eu-central-1", AWS_KEY_ID, AWS_SECRET, None);
    let yaml = documents(
        &cloudwatch_template(&cloudwatch.url()),
        &versions[0].to_string(),
        &versions[1].to_string(),
    );

    cloudwatch.serve(Some(0.3));
    let (code, events, printed) = run(&yaml);
    println!("{:#?}", messages(&events, "Advanced"));
    assert_eq!(code, Some(0), "{events:#?}");
    assert!(!messages(&events, "Succeeded").is_empty(), "{events:#?}");
    let request = cloudwatch.seen().pop().unwrap();
    println!(
        "CloudWatch received: {} {} {:?}\n{}",
        request.method, request.path, request.headers, request.body
    );
    // The double checked the signature: a 200 is a signature that matched.
    assert_eq!((request.path.as_str(), request.status), ("/", 200));
    assert!(
        request
            .body
            .contains("MetricStat.Metric.Dimensions.member.1.Value=shop-metrics"),
        "{}",
        request.body
    );

    cloudwatch.serve(Some(7.5));
    let (code, events, printed_too) = run(&yaml);
    println!("{:#?}", messages(&events, "ChecksFailed"));
    assert_eq!(code, Some(1), "{events:#?}");
    let all = serde_json::to_string(&events).unwrap();
    assert!(all.contains("cloudwatch: 7.5000 (accepted <= 1)"), "{all}");
    for text in [printed, printed_too] {
        assert!(
            !text.contains(AWS_SECRET) && !text.contains(AWS_KEY_ID),
            "{text}"
        );
    }
}

#[test]
fn an_influxdb_template_promotes_a_healthy_canary_and_rolls_back_on_no_records() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let influx = CloudDouble::influxdb(INFLUX_ORG, INFLUX_TOKEN);
    let yaml = documents(
        &influxdb_template(&influx.url()),
        &versions[0].to_string(),
        &versions[1].to_string(),
    );

    influx.serve(Some(0.4));
    let (code, events, printed) = run(&yaml);
    println!("{:#?}", messages(&events, "Advanced"));
    assert_eq!(code, Some(0), "{events:#?}");
    assert!(!messages(&events, "Succeeded").is_empty(), "{events:#?}");
    let request = influx.seen().pop().unwrap();
    println!(
        "InfluxDB received: {} {} {:?}\n{}",
        request.method, request.path, request.query, request.body
    );
    assert_eq!(
        (request.path.as_str(), request.status),
        ("/api/v2/query", 200)
    );
    assert!(
        request.body.contains(r#"r.app == \"shop-metrics\""#),
        "{}",
        request.body
    );

    // No records: no data, which `noData: fail` fails (Flagger would read 0 and promote).
    influx.serve(None);
    let (code, events, printed_too) = run(&yaml);
    println!("{:#?}", messages(&events, "ChecksFailed"));
    assert_eq!(code, Some(1), "{events:#?}");
    let all = serde_json::to_string(&events).unwrap();
    assert!(
        all.contains("influxdb: no values found: the query returned no records"),
        "{all}"
    );
    for text in [printed, printed_too] {
        assert!(
            !text.contains(INFLUX_TOKEN) && !text.contains(INFLUX_ORG),
            "{text}"
        );
    }
}

/// A template of `provider` at `address` with its Secret `stringData`.
fn template(provider: &str, address: &str, secret: &str, query: &str) -> String {
    let query = query
        .lines()
        .map(|line| format!("    {line}"))
        .collect::<Vec<_>>()
        .join("\n");
    format!(
        r#"apiVersion: v1
kind: Secret
metadata: {{name: creds}}
stringData: {secret}
---
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {{name: error-percentage}}
spec:
  provider: {{type: {provider}, address: "{address}", secretRef: {{name: creds}}}}
  query: |
{query}
"#
    )
}

#[test]
fn stackdriver_dynatrace_and_splunk_templates_judge_canaries() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let google = CloudDouble::stackdriver("shop-project");
    let key = google.service_account_key().replace('\'', "''");
    let dynatrace = CloudDouble::dynatrace("dt0c01.E2E.secret-token");
    let splunk = CloudDouble::splunk("sf-e2e-secret-token");
    let cases = [
        (
            "stackdriver",
            &google,
            template(
                "stackdriver",
                &google.url(),
                &format!("{{project: shop-project, serviceAccountKey: '{key}'}}"),
                "fetch k8s_container\n| metric 'istio.io/service/server/request_count'\n| filter metric.destination_workload_name == '{{ target }}'",
            ),
            ["shop-project", "PRIVATE KEY"],
        ),
        (
            "dynatrace",
            &dynatrace,
            template(
                "dynatrace",
                &dynatrace.url(),
                "{dynatrace_token: dt0c01.E2E.secret-token}",
                "builtin:service.errors.total.rate:filter(eq(\"dt.entity.service.name\",\"{{ target }}\")):merge(\"dt.entity.service\"):avg",
            ),
            ["dt0c01.E2E.secret-token", "dt0c01.E2E.secret-token"],
        ),
        (
            "splunk",
            &splunk,
            template(
                "splunk",
                &splunk.url(),
                "{sf_token_key: sf-e2e-secret-token}",
                "data('errors', filter=filter('app', '{{ target }}')).sum().publish()",
            ),
            ["sf-e2e-secret-token", "sf-e2e-secret-token"],
        ),
    ];
    for (provider, double, text, secrets) in &cases {
        let yaml = documents(text, &versions[0].to_string(), &versions[1].to_string());
        double.serve(Some(0.2));
        let (code, events, printed) = run(&yaml);
        println!("{provider}: {:#?}", messages(&events, "Advanced"));
        assert_eq!(code, Some(0), "{provider}: {events:#?}");
        let request = double.seen().pop().unwrap();
        println!(
            "{provider} received: {} {} {:?}\n{}",
            request.method, request.path, request.query, request.body
        );
        assert_eq!(request.status, 200, "{provider}");

        double.serve(Some(6.0));
        let (code, events, printed_too) = run(&yaml);
        println!("{provider}: {:#?}", messages(&events, "ChecksFailed"));
        assert_eq!(code, Some(1), "{provider}: {events:#?}");
        let all = serde_json::to_string(&events).unwrap();
        assert!(
            all.contains(&format!("{provider}: 6.0000 (accepted <= 1)")),
            "{all}"
        );
        for text in [printed, printed_too] {
            for secret in secrets {
                assert!(!text.contains(secret), "{provider}: {text}");
            }
        }
    }
}

/// Without a `secretRef`, as Flagger's SDK does, weir signs CloudWatch requests with the
/// credentials in its environment.
#[test]
fn a_cloudwatch_template_without_a_secret_signs_with_weirs_environment() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let cloudwatch = CloudDouble::cloudwatch(
        "eu-central-1",
        AWS_KEY_ID,
        AWS_SECRET,
        Some("env-session-token-0001"),
    );
    let template = cloudwatch_template(&cloudwatch.url());
    let template = template
        .split("---\n")
        .nth(1)
        .unwrap()
        .replace(", secretRef: {name: aws}", "");
    assert!(!template.contains("secretRef"), "{template}");
    let yaml = documents(
        &template,
        &versions[0].to_string(),
        &versions[1].to_string(),
    );
    cloudwatch.serve(Some(0.3));
    let (code, events, printed) = run_with_env(
        &yaml,
        &[
            ("AWS_ACCESS_KEY_ID", AWS_KEY_ID),
            ("AWS_SECRET_ACCESS_KEY", AWS_SECRET),
            ("AWS_SESSION_TOKEN", "env-session-token-0001"),
        ],
    );
    assert_eq!(code, Some(0), "{events:#?}");
    let request = cloudwatch.seen().pop().unwrap();
    println!("CloudWatch received: {:?}", request.header("authorization"));
    assert_eq!(request.status, 200);
    assert_eq!(
        request.header("x-amz-security-token"),
        Some("env-session-token-0001")
    );
    assert!(
        !printed.contains(AWS_SECRET) && !printed.contains("env-session-token-0001"),
        "{printed}"
    );
}

/// A Graphite template read by weir from a real graphite-api (served by gunicorn over whisper
/// files the test writes): the series of the canary at 0.25 promotes it; at 7.5 rolls it back,
/// the value in the history; a target without a series is no data under `noData: fail`.
#[test]
fn a_graphite_template_against_graphite_api_promotes_a_healthy_canary_and_rolls_back_a_bad_one() {
    if !graphite::required() {
        return;
    }
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let server = GraphiteServer::start().unwrap();
    let template = |series: &str| {
        format!(
            r#"apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {{name: error-percentage}}
spec:
  provider: {{type: graphite, address: "{address}"}}
  query: |
    target=summarize(
      {series},
      '1min',
      'avg'
    )
    &from=-2min
"#,
            address = server.url()
        )
    };
    let yaml = |series: &str| {
        documents(
            &template(series),
            &versions[0].to_string(),
            &versions[1].to_string(),
        )
    };
    // A point a second over the last 30 s: whatever minute the query's summary falls in, its
    // average is the value fed.
    let recent = |value: f64| -> Vec<(i64, f64)> {
        let now = graphite::now();
        (1..=30).map(|ago| (now - ago, value)).collect()
    };
    server.feed("shop.shop-metrics.canary.errors", &recent(0.25));
    server.feed("shop.bad.canary.errors", &recent(7.5));

    let (code, events, _) = run(&yaml("shop.{{ target }}.canary.errors"));
    println!("healthy: {:#?}", checks(&events));
    assert_eq!(code, Some(0), "{events:#?}");
    assert!(!messages(&events, "Succeeded").is_empty(), "{events:#?}");
    let all = serde_json::to_string(&events).unwrap();
    assert!(
        all.contains("0.2500"),
        "the value read is in the history: {all}"
    );

    let (code, events, _) = run(&yaml("shop.bad.canary.errors"));
    println!("bad: {:#?}", checks(&events));
    assert_eq!(code, Some(1), "{events:#?}");
    let all = serde_json::to_string(&events).unwrap();
    assert!(all.contains("7.5000 (accepted <= 1)"), "{all}");

    let (code, events, _) = run(&yaml("shop.unknown.canary.errors"));
    println!("no series: {:#?}", checks(&events));
    assert_eq!(code, Some(1), "{events:#?}");
    assert!(
        checks(&events)
            .iter()
            .any(|check| check.starts_with("graphite: no values found")),
        "{events:#?}"
    );
}

/// The messages of the checks in the events' evidence, in order.
fn checks(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| event["evidence"]["checks"].as_array())
        .flatten()
        .filter_map(|check| check["message"].as_str().map(str::to_string))
        .collect()
}

/// A corpus template's text with its provider's `address` set to `address` (replaced, or added
/// under `type:` where the template relies on the service's default).
fn with_address(template: &str, address: &str) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut set = false;
    for line in template.lines() {
        if line.trim_start().starts_with("address:") {
            lines.push(format!("    address: \"{address}\""));
            set = true;
        } else {
            lines.push(line.to_string());
            if line.trim_start().starts_with("type:") && !template.contains("address:") {
                lines.push(format!("    address: \"{address}\""));
                set = true;
            }
        }
    }
    assert!(set, "no provider in {template}");
    lines.join("\n") + "\n"
}

/// Flagger's own non-Prometheus MetricTemplates (the corpus at `../shared/compat/flagger`, when
/// present), unchanged but for the address of the service, each judge a local rollout through
/// `weir run`: a healthy value promotes, a bad one rolls back with the value in the history. Their
/// services are weir-testkit's doubles; the CloudWatch template names no Secret, so weir signs
/// with the AWS credentials of its environment, as Flagger does. The Graphite snippet without a
/// query is refused, naming the field.
#[test]
fn flaggers_corpus_templates_promote_a_healthy_canary_and_roll_back_a_bad_one() {
    let Some(dir) = weir_testkit::fixtures::compat_dir() else {
        eprintln!("SKIPPED: no Flagger corpus (../shared/compat/flagger)");
        return;
    };
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let (primary, canary) = (versions[0].to_string(), versions[1].to_string());
    let aws = [
        ("AWS_ACCESS_KEY_ID", AWS_KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", AWS_SECRET),
    ];
    let mut files: Vec<_> = std::fs::read_dir(dir.join("metric-templates"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    let (mut judged, mut refused) = (Vec::new(), Vec::new());
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let field = |key: &str| {
            text.lines()
                .find_map(|line| line.trim().strip_prefix(key))
                .map(|value| value.split('#').next().unwrap().trim().to_string())
        };
        let provider = field("type: ").unwrap_or_default();
        // Per provider: its double, the Secret the template names (in its namespace), the
        // rollout's threshold on what the query measures, and a healthy and a bad value.
        let namespace = field("namespace: ").unwrap_or_else(|| "default".into());
        let secret_name = text
            .split("secretRef:")
            .nth(1)
            .and_then(|rest| {
                rest.lines()
                    .find_map(|line| line.trim().strip_prefix("name: "))
            })
            .unwrap_or_default()
            .to_string();
        let secret = |keys: &str| {
            format!(
                "apiVersion: v1\nkind: Secret\nmetadata: {{name: {secret_name}, namespace: {namespace}}}\nstringData: {keys}\n---\n"
            )
        };
        enum Double {
            Plain(MetricDouble),
            Cloud(CloudDouble),
        }
        let (double, secret, threshold, healthy, bad) = match provider.as_str() {
            "datadog" => (
                Double::Plain(MetricDouble::datadog(API_KEY, APP_KEY)),
                secret(&format!(
                    "{{datadog_api_key: {API_KEY}, datadog_application_key: {APP_KEY}}}"
                )),
                "{max: 5}",
                0.5,
                42.0,
            ),
            "newrelic" => (
                Double::Plain(MetricDouble::newrelic(NR_ACCOUNT, NR_KEY)),
                secret(&format!(
                    "{{newrelic_account_id: \"{NR_ACCOUNT}\", newrelic_query_key: {NR_KEY}}}"
                )),
                "{max: 1}",
                0.2,
                12.5,
            ),
            "cloudwatch" => (
                Double::Cloud(CloudDouble::cloudwatch(
                    &field("region: ").unwrap(),
                    AWS_KEY_ID,
                    AWS_SECRET,
                    None,
                )),
                String::new(),
                "{max: 0.01}",
                0.001,
                0.2,
            ),
            "graphite" if text.contains("secretRef") => (
                Double::Plain(MetricDouble::graphite(Some(("corpus", "corpus-password")))),
                secret("{username: corpus, password: corpus-password}"),
                "{max: 1}",
                0.5,
                5.0,
            ),
            "graphite" => (
                Double::Plain(MetricDouble::graphite(None)),
                String::new(),
                "{min: 99}",
                99.9,
                80.0,
            ),
            _ => continue,
        };
        let (url, serve): (String, Box<dyn Fn(f64)>) = match &double {
            Double::Plain(double) => (double.url(), Box::new(|value| double.serve(Some(value)))),
            Double::Cloud(double) => (double.url(), Box::new(|value| double.serve(Some(value)))),
        };
        let template_ref = format!(
            "{{name: {}, namespace: {namespace}}}",
            field("name: ").unwrap()
        );
        let yaml = documents_judged_by(
            &format!("{secret}{}", with_address(&text, &url)),
            &primary,
            &canary,
            &template_ref,
            threshold,
        );
        serve(healthy);
        let (code, events, printed) = run_with_env(&yaml, &aws);
        if !text.contains("query:") {
            println!("{name} ({provider}): refused: {printed}");
            assert_eq!(code, Some(2), "{name}: {printed}");
            assert!(printed.contains("query"), "{name}: {printed}");
            refused.push(name);
            continue;
        }
        assert_eq!(code, Some(0), "{name}: {events:#?}");
        let healthy_checks = checks(&events);
        serve(bad);
        let (code, events, printed) = run_with_env(&yaml, &aws);
        assert_eq!(code, Some(1), "{name}: {events:#?}");
        let bad_checks = checks(&events);
        let request = match &double {
            Double::Plain(double) => double.seen().pop().unwrap(),
            Double::Cloud(double) => double.seen().pop().unwrap(),
        };
        println!(
            "{name} ({provider}): {} {} {:?}\n  healthy: {:?}\n  bad: {:?}",
            request.method,
            request.path,
            request.query,
            healthy_checks.last(),
            bad_checks.last()
        );
        assert_eq!(request.status, 200, "{name}: {request:?}");
        assert!(
            bad_checks
                .iter()
                .any(|check| check.contains(&format!("{bad:.4}"))),
            "{name}: the bad value is in the history: {bad_checks:?}"
        );
        for credential in [API_KEY, APP_KEY, NR_KEY, AWS_SECRET, "corpus-password"] {
            assert!(!printed.contains(credential), "{name}: {printed}");
        }
        judged.push(name);
    }
    println!("promoted and rolled back: {judged:?}\nrefused: {refused:?}");
    assert_eq!(
        (judged.len(), refused.len()),
        (4, 1),
        "{judged:?} {refused:?}"
    );
}
