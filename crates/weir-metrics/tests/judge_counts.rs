//! `spec.analysis.judgeCounts` read from weir-testkit's Datadog double over loopback: the first
//! call of a run is a baseline that queries nothing, each later read asks the four queries with
//! `{{ interval }}` the time since the previous read, and any failure or missing number gives
//! the judges an empty window. Validation names the field and what is allowed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use jiff::Timestamp;
use weir_analysis::Window;
use weir_engine::MetricSource;
use weir_engine::clock::ManualClock;
use weir_http::retry::Backoff;
use weir_metrics::MetricsSource;
use weir_store::RolloutKey;
use weir_testkit::fixtures::catalog_and_rollout;
use weir_testkit::metric_doubles::{Fault, MetricDouble};

const DD_API: &str = "dd-api-0123456789abcdef";
const DD_APP: &str = "dd-app-fedcba9876543210";

fn documents(provider: &str, address: &str, counts: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Secret
metadata: {{name: creds, namespace: shop}}
stringData: {{datadog_api_key: {DD_API}, datadog_application_key: {DD_APP}}}
---
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {{name: dd, namespace: shop}}
spec:
  provider: {{type: {provider}, address: "{address}", secretRef: {{name: creds}}}}
  query: "not used"
---
apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: web, namespace: shop}}
spec:
  target: {{kind: kubernetes, targetRef: {{apiVersion: apps/v1, kind: Deployment, name: web}}}}
  plan: {{canary: {{stepWeight: 10}}}}
  analysis:
    judges: [sequential]
    judgeCounts:
{counts}
"#
    )
}

const COUNTS: &str = r#"      templateRef: {name: dd}
      templateVariables: {env: prod}
      interval: 2s
      canary:
        requests: "sum:hits{service:{{ target }}-canary,env:{{ variables.env }}}.rollup(sum, {{ intervalSeconds }})"
        errors: "sum:errors{service:{{ target }}-canary}.rollup(sum, {{ intervalSeconds }}) over {{ interval }}"
      primary:
        requests: "sum:hits{service:{{ target }}-primary,env:{{ variables.env }}}.rollup(sum, {{ intervalSeconds }})"
        errors: "sum:errors{service:{{ target }}-primary}.rollup(sum, {{ intervalSeconds }}) over {{ interval }}""#;

fn source(yaml: &str) -> (MetricsSource, weir_core::model::Rollout, ManualClock) {
    let (catalog, rollout) = catalog_and_rollout(yaml);
    let clock = ManualClock::new("2026-11-28T12:00:00Z".parse::<Timestamp>().unwrap());
    let source = MetricsSource::new(catalog)
        .with_clock(clock.shared())
        .with_backoff(Backoff {
            first: Duration::from_millis(10),
            max: Duration::from_millis(50),
        });
    (source, rollout, clock)
}

fn serve(double: &MetricDouble, canary: (f64, f64), primary: (f64, f64)) {
    double.serve_for("hits{service:web-canary", Some(canary.0));
    double.serve_for("errors{service:web-canary", Some(canary.1));
    double.serve_for("hits{service:web-primary", Some(primary.0));
    double.serve_for("errors{service:web-primary", Some(primary.1));
}

#[tokio::test]
async fn reads_give_the_counts_since_the_previous_read_after_a_baseline() {
    let double = MetricDouble::datadog(DD_API, DD_APP);
    let (source, rollout, clock) = source(&documents("datadog", &double.url(), COUNTS));
    assert!(source.reads_judge_counts(&rollout));
    assert!(
        source.validate(&rollout).is_empty(),
        "{:?}",
        source.validate(&rollout)
    );
    let key = RolloutKey::new("shop", "web");
    serve(&double, (300.4, 30.0), (699.6, 1.0));

    // The run's first call marks its start and asks nothing.
    let window = source.judge_window(&key, &rollout, 1).await.unwrap();
    assert_eq!(window, Window::default());
    assert!(double.seen().is_empty(), "{:?}", double.seen());
    // Before the interval (2s) has passed: nothing is asked.
    clock.advance(Duration::from_millis(1500));
    let window = source.judge_window(&key, &rollout, 1).await.unwrap();
    assert_eq!(window, Window::default());
    assert!(double.seen().is_empty());

    // 3.5 s after the start: the last 3 s are read (the half second goes to the next read).
    clock.advance(Duration::from_secs(2));
    let window = source.judge_window(&key, &rollout, 1).await.unwrap();
    assert_eq!(
        (window.canary.requests, window.canary.errors),
        (300, 30),
        "{window:?}"
    );
    assert_eq!((window.primary.requests, window.primary.errors), (700, 1));
    assert!((window.canary_weight - 0.3).abs() < 1e-9, "{window:?}");
    let mut asked: Vec<String> = double
        .seen()
        .iter()
        .map(|seen| {
            assert_eq!(seen.path, "/api/v1/query");
            assert_eq!(seen.status, 200);
            seen.query["query"].clone()
        })
        .collect();
    asked.sort();
    assert_eq!(
        asked,
        [
            "sum:errors{service:web-canary}.rollup(sum, 3) over 3s",
            "sum:errors{service:web-primary}.rollup(sum, 3) over 3s",
            "sum:hits{service:web-canary,env:prod}.rollup(sum, 3)",
            "sum:hits{service:web-primary,env:prod}.rollup(sum, 3)",
        ]
    );

    // The next read covers from where the last one ended: 5.5 s - 3 s = 2 whole seconds.
    clock.advance(Duration::from_secs(2));
    serve(&double, (10.0, 0.0), (20.0, 0.0));
    let window = source.judge_window(&key, &rollout, 1).await.unwrap();
    assert_eq!((window.canary.requests, window.primary.requests), (10, 20));
    let last = double.seen().pop().unwrap();
    assert!(last.query["query"].contains("rollup(sum, 2)"), "{last:?}");

    // A new run starts with a baseline again.
    let before = double.seen().len();
    clock.advance(Duration::from_secs(10));
    let window = source.judge_window(&key, &rollout, 2).await.unwrap();
    assert_eq!(window, Window::default());
    assert_eq!(double.seen().len(), before);
}

#[tokio::test]
async fn a_failed_or_empty_read_is_an_empty_window() {
    let double = MetricDouble::datadog(DD_API, DD_APP);
    let (source, rollout, clock) = source(&documents("datadog", &double.url(), COUNTS));
    let key = RolloutKey::new("shop", "web");
    serve(&double, (100.0, 5.0), (100.0, 0.0));
    source.judge_window(&key, &rollout, 1).await.unwrap();

    // The primary's errors query has no series: no window at all, not half of one.
    double.serve_for("errors{service:web-primary", None);
    clock.advance(Duration::from_secs(2));
    let window = source.judge_window(&key, &rollout, 1).await.unwrap();
    assert_eq!(window, Window::default());
    assert_eq!(double.seen().len(), 4);

    // An unavailable service (503) is asked again within the interval: the read still counts.
    double.serve_for("errors{service:web-primary", Some(0.0));
    double.fail_next(Fault::Unavailable);
    clock.advance(Duration::from_secs(2));
    let window = source.judge_window(&key, &rollout, 1).await.unwrap();
    assert_eq!(
        (window.canary.requests, window.canary.errors),
        (100, 5),
        "{window:?}"
    );

    // A negative count is no count.
    double.serve_for("hits{service:web-canary", Some(-3.0));
    clock.advance(Duration::from_secs(2));
    let window = source.judge_window(&key, &rollout, 1).await.unwrap();
    assert_eq!(window, Window::default());

    // A rollout without judgeCounts is not this source's to count.
    let (plain, plain_rollout, _) = source_without_counts(&double);
    assert!(!plain.reads_judge_counts(&plain_rollout));
    assert_eq!(plain.judge_window(&key, &plain_rollout, 1).await, None);
}

fn source_without_counts(
    double: &MetricDouble,
) -> (MetricsSource, weir_core::model::Rollout, ManualClock) {
    let yaml = documents("datadog", &double.url(), COUNTS);
    let yaml = yaml.split("    judgeCounts:").next().unwrap().to_string() + "    interval: 1m\n";
    source(&yaml)
}

#[test]
fn validation_names_an_unknown_template_and_a_provider_that_cannot_count() {
    let paths = |yaml: &str| {
        let (source, rollout, _) = source(yaml);
        source
            .validate(&rollout)
            .into_iter()
            .map(|error| error.to_string())
            .collect::<Vec<_>>()
    };
    let missing = COUNTS.replace("{name: dd}", "{name: nothing}");
    let errors = paths(&documents("datadog", "http://127.0.0.1:1", &missing));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("spec.analysis.judgeCounts.templateRef.name")
            && errors[0].contains("no MetricTemplate shop/nothing"),
        "{errors:?}"
    );

    let errors = paths(&documents("prometheus", "http://127.0.0.1:1", COUNTS));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("spec.analysis.judgeCounts.templateRef")
            && errors[0].contains("datadog, newrelic, graphite, cloudwatch")
            && errors[0].contains("--prometheus"),
        "{errors:?}"
    );

    // A template whose Secret lacks the provider's keys: said once, for the template.
    let errors = paths(&documents("newrelic", "http://127.0.0.1:1", COUNTS));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("spec.analysis.judgeCounts.templateRef: MetricTemplate dd: Secret creds has no newrelic_account_id"),
        "{errors:?}"
    );

    // A CloudWatch template needs MetricDataQuery lists: each query that is not one is named.
    let errors = paths(
        &documents("cloudwatch", "http://127.0.0.1:1", COUNTS)
            .replace("type: cloudwatch,", "type: cloudwatch, region: eu-west-1,"),
    );
    assert_eq!(errors.len(), 4, "{errors:?}");
    assert!(
        errors[0].contains("spec.analysis.judgeCounts.canary.requests"),
        "{errors:?}"
    );
}

#[test]
fn counts_without_a_judge_to_read_them_are_refused_outside_local_rollouts() {
    let yaml = documents("datadog", "http://127.0.0.1:1", COUNTS)
        .replace("    judges: [sequential]\n", "");
    let refusals: Vec<String> = weir_core::document::load(yaml.as_bytes())
        .into_iter()
        .filter_map(Result::err)
        .map(|refused| format!("{refused:?}"))
        .collect();
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert!(
        refusals[0].contains("spec.analysis.judgeCounts")
            && refusals[0].contains("no judge reads these counts")
            && refusals[0].contains("known: sequential"),
        "{refusals:?}"
    );
}
