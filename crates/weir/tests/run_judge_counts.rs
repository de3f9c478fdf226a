//! `spec.analysis.judgeCounts` through `weir run`: a local rollout whose sequential judge reads
//! both versions' request and error counts from a Datadog template's backend (weir-testkit's
//! double, which serves a value per query), not from weir's router. Counts showing the canary
//! failing far more often than the primary roll it back with the judge's verdict, naming the
//! counts, in the history; healthy counts promote it once they show the canary healthy
//! (`evidence: {promoteOn: health}`). The double received the four queries with
//! `{{ interval }}` rendered as the time since the previous read.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::Value;
use weir_testkit::fixtures::{runtime, sample_apps};
use weir_testkit::metric_doubles::MetricDouble;
use weir_testkit::process::run_rollout_file;

const API_KEY: &str = "dd-api-counts-0123456789";
const APP_KEY: &str = "dd-app-counts-9876543210";

/// The Secret, the template and a local rollout judged by the sequential judge on counts from
/// the template's Datadog.
fn documents(address: &str, primary: &str, canary: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Secret
metadata: {{name: datadog}}
stringData: {{datadog_api_key: {API_KEY}, datadog_application_key: {APP_KEY}}}
---
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {{name: datadog}}
spec:
  provider: {{type: datadog, address: "{address}", secretRef: {{name: datadog}}}}
  query: "unused: judgeCounts brings its own queries"
---
apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: shop-counts}}
spec:
  target:
    kind: local
    listen: "127.0.0.1:0"
    primary: {{url: "http://{primary}", healthCheck: /healthz}}
    canary: {{url: "http://{canary}", healthCheck: /healthz}}
  plan: {{canary: {{stepWeights: [50]}}}}
  analysis:
    interval: 1s
    progressDeadline: 1m
    judges: [sequential]
    # Only the judge's evidence of health promotes; without it the run rolls back at 1m.
    evidence: {{promoteOn: health, marginPercent: 2, deadline: 1m, onDeadline: rollback}}
    judgeCounts:
      templateRef: {{name: datadog}}
      templateVariables: {{env: e2e}}
      interval: 1s
      canary:
        requests: "sum:trace.http.request.hits{{service:{{{{ target }}}},version:canary,env:{{{{ variables.env }}}}}}.as_count().rollup(sum, {{{{ intervalSeconds }}}}) last {{{{ interval }}}}"
        errors: "sum:trace.http.request.errors{{service:{{{{ target }}}},version:canary,env:{{{{ variables.env }}}}}}.as_count().rollup(sum, {{{{ intervalSeconds }}}}) last {{{{ interval }}}}"
      primary:
        requests: "sum:trace.http.request.hits{{service:{{{{ target }}}},version:primary,env:{{{{ variables.env }}}}}}.as_count().rollup(sum, {{{{ intervalSeconds }}}}) last {{{{ interval }}}}"
        errors: "sum:trace.http.request.errors{{service:{{{{ target }}}},version:primary,env:{{{{ variables.env }}}}}}.as_count().rollup(sum, {{{{ intervalSeconds }}}}) last {{{{ interval }}}}"
"#
    )
}

/// What the double serves per read: requests and errors of the canary, then of the primary.
fn serve(double: &MetricDouble, canary: (f64, f64), primary: (f64, f64)) {
    double.serve_for("hits{service:shop-counts,version:canary", Some(canary.0));
    double.serve_for("errors{service:shop-counts,version:canary", Some(canary.1));
    double.serve_for("hits{service:shop-counts,version:primary", Some(primary.0));
    double.serve_for(
        "errors{service:shop-counts,version:primary",
        Some(primary.1),
    );
}

/// Runs the rollout to its end; its exit code, its events and everything it printed.
fn run(yaml: &str) -> (Option<i32>, Vec<Value>, String) {
    let outcome = run_rollout_file(env!("CARGO_BIN_EXE_weir"), yaml, &[]);
    (outcome.code, outcome.events, outcome.printed)
}

/// Every query the double answered: each of the four, `{{ interval }}` and
/// `{{ intervalSeconds }}` rendered alike as whole seconds of at least 1.
fn check_queries(double: &MetricDouble) {
    let seen = double.seen();
    assert!(seen.len() >= 4, "{seen:#?}");
    let mut kinds = std::collections::BTreeSet::new();
    for request in &seen {
        assert_eq!(request.path, "/api/v1/query", "{request:?}");
        assert_eq!(request.status, 200, "{request:?}");
        let query = &request.query["query"];
        assert!(!query.contains("{{"), "{query}");
        let (metric, rest) = query
            .split_once(",env:e2e}.as_count().rollup(sum, ")
            .unwrap();
        let (seconds, interval) = rest.split_once(") last ").unwrap();
        let seconds: u64 = seconds.parse().unwrap();
        assert!(seconds >= 1, "{query}");
        assert_eq!(interval, format!("{seconds}s"), "{query}");
        kinds.insert(metric.to_string());
    }
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        [
            "sum:trace.http.request.errors{service:shop-counts,version:canary",
            "sum:trace.http.request.errors{service:shop-counts,version:primary",
            "sum:trace.http.request.hits{service:shop-counts,version:canary",
            "sum:trace.http.request.hits{service:shop-counts,version:primary",
        ]
    );
}

#[test]
fn counts_from_datadog_roll_back_a_failing_canary_with_the_judges_verdict() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let datadog = MetricDouble::datadog(API_KEY, APP_KEY);
    let yaml = documents(
        &datadog.url(),
        &versions[0].to_string(),
        &versions[1].to_string(),
    );
    // Per read: the canary fails 30 of 100 requests, the primary none of 100. No request goes
    // through weir's router, so only the backend's counts can show it.
    serve(&datadog, (100.0, 30.0), (100.0, 0.0));
    let (code, events, printed) = run(&yaml);
    assert_eq!(code, Some(1), "{events:#?}\n{printed}");
    let rolled_back = events
        .iter()
        .find(|event| event["reason"] == "RolledBack")
        .unwrap_or_else(|| panic!("no RolledBack event: {events:#?}"));
    let verdict = &rolled_back["evidence"]["verdict"];
    assert_eq!(verdict["judge"], "sequential", "{rolled_back:#}");
    let evidence = &verdict["evidence"];
    let count = |field: &str| {
        evidence[field]
            .as_u64()
            .unwrap_or_else(|| panic!("no {field}: {verdict:#}"))
    };
    // The counts are the backend's: whole reads of 100 requests, 30 canary errors each.
    assert!(count("canaryRequests") >= 100, "{verdict:#}");
    assert_eq!(count("canaryRequests") % 100, 0, "{verdict:#}");
    assert_eq!(
        count("canaryErrors") * 10,
        count("canaryRequests") * 3,
        "{verdict:#}"
    );
    assert_eq!(
        count("primaryRequests"),
        count("canaryRequests"),
        "{verdict:#}"
    );
    assert_eq!(count("primaryErrors"), 0, "{verdict:#}");
    check_queries(&datadog);
    assert!(!printed.contains(API_KEY) && !printed.contains(APP_KEY));
}

#[test]
fn healthy_counts_from_datadog_show_health_and_promote() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let datadog = MetricDouble::datadog(API_KEY, APP_KEY);
    let yaml = documents(
        &datadog.url(),
        &versions[0].to_string(),
        &versions[1].to_string(),
    );
    // Per read: 400 requests each, no errors: health is shown within a few reads.
    serve(&datadog, (400.0, 0.0), (400.0, 0.0));
    let (code, events, printed) = run(&yaml);
    assert_eq!(code, Some(0), "{events:#?}\n{printed}");
    let reasons: Vec<&str> = events
        .iter()
        .filter_map(|event| event["reason"].as_str())
        .collect();
    assert!(reasons.contains(&"Succeeded"), "{reasons:?}");
    assert!(!reasons.contains(&"RolledBack"), "{reasons:?}");
    // The promotion was let through by the judge's evidence of health, from the backend's
    // counts (the router served nothing, so it could have come from nowhere else).
    let shown = events
        .iter()
        .filter(|event| event["evidence"]["verdict"]["judge"] == "evidence-rule")
        .find(|event| event["evidence"]["verdict"]["evidence"]["healthy"] == true)
        .unwrap_or_else(|| panic!("no evidence of health in the history: {events:#?}"));
    assert_eq!(shown["evidence"]["verdict"]["outcome"], "pass", "{shown:#}");
    check_queries(&datadog);
    assert!(!printed.contains(API_KEY) && !printed.contains(APP_KEY));
}
