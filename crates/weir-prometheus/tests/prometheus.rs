//! The Prometheus metric source against a real Prometheus server (the `prometheus` binary, which
//! `.ci/run` installs): Prometheus scrapes a small exposition endpoint served by this test, and
//! checks run templates, inline queries and credentials through its HTTP API.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weir_core::document::{Document, load};
use weir_core::model::CheckOutcome;
use weir_engine::MetricSource;
use weir_prometheus::{Endpoint, PrometheusClient, PrometheusSource};
use weir_store::RolloutKey;
use weir_testkit::fixtures::catalog_and_rollout;
use weir_testkit::prometheus::{self, PrometheusOptions, PrometheusServer};
use weir_testkit::wait::wait_for;

/// `s3cret`, hashed with bcrypt at cost 4 (Python: `crypt.crypt("s3cret",
/// crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))`); cost 4 keeps each request cheap.
const BCRYPT_S3CRET: &str = "$2b$04$/apybiVreLWZmDINC.M3ju5ecwGJvIEWUN/T.tzhWbfmimQHz.BYu";

const EXPOSITION: &str = "\
# TYPE demo_requests_total counter
demo_requests_total{namespace=\"shop\",deployment=\"web-canary\",code=\"200\"} 990
demo_requests_total{namespace=\"shop\",deployment=\"web-canary\",code=\"500\"} 10
demo_requests_total{namespace=\"shop\",deployment=\"web-primary\",code=\"200\"} 5000
";

/// Serves `EXPOSITION` at any path, over plain HTTP/1.1.
async fn exposition_server() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buffer = [0u8; 4096];
                let _ = stream.read(&mut buffer).await;
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{EXPOSITION}",
                    EXPOSITION.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    address
}

/// Waits until Prometheus has scraped the endpoint (the series is queryable).
async fn wait_for_series(server: &PrometheusServer, endpoint: &Endpoint) {
    let client = PrometheusClient::default();
    let what = format!("{} to scrape the test endpoint", server.url());
    wait_for(&what, || async {
        let samples = client
            .query(endpoint, "demo_requests_total", Duration::from_secs(2))
            .await
            .ok()?;
        (samples.len() == 3).then_some(())
    })
    .await;
}

fn documents(address: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Secret
metadata: {{name: prom-auth, namespace: shop}}
stringData: {{username: weir, password: s3cret}}
---
apiVersion: v1
kind: Secret
metadata: {{name: wrong-auth, namespace: shop}}
stringData: {{username: weir, password: guess}}
---
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {{name: error-rate, namespace: shop}}
spec:
  provider: {{type: prometheus, address: "{address}", secretRef: {{name: prom-auth}}}}
  query: |
    100 * sum(demo_requests_total{{namespace="{{{{ namespace }}}}",deployment="{{{{ target }}}}-canary",code=~"{{{{ variables.failing }}}}"}})
      / sum(demo_requests_total{{namespace="{{{{ namespace }}}}",deployment="{{{{ target }}}}-canary"}})
---
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {{name: unauthorised, namespace: shop}}
spec:
  provider: {{type: prometheus, address: "{address}", secretRef: {{name: wrong-auth}}}}
  query: sum(demo_requests_total)
---
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {{name: nothing, namespace: shop}}
spec:
  provider: {{type: prometheus, address: "{address}", secretRef: {{name: prom-auth}}}}
  query: sum(demo_requests_total{{deployment="{{{{ service }}}}-gone"}})
---
apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: web, namespace: shop}}
spec:
  target:
    kind: kubernetes
    targetRef: {{apiVersion: apps/v1, kind: Deployment, name: web}}
  plan: {{canary: {{stepWeight: 10}}}}
  analysis:
    metrics:
      - name: error-rate
        templateRef: {{name: error-rate}}
        templateVariables: {{failing: "5.."}}
        thresholdRange: {{max: 2}}
      - name: strict-error-rate
        templateRef: {{name: error-rate}}
        templateVariables: {{failing: "5.."}}
        thresholdRange: {{max: 0.5}}
      - name: unauthorised
        templateRef: {{name: unauthorised}}
        thresholdRange: {{min: 0}}
      - name: nothing
        templateRef: {{name: nothing}}
        thresholdRange: {{min: 0}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn templates_credentials_and_no_data_against_a_real_prometheus() {
    if !prometheus::required() {
        return;
    }
    let target = exposition_server().await;
    let server = PrometheusServer::start(&PrometheusOptions {
        targets: vec![target],
        basic_auth_users: vec![("weir".into(), BCRYPT_S3CRET.into())],
    })
    .unwrap();
    let authorised = Endpoint::from_url(&format!("http://weir:s3cret@{}", server.address()));
    wait_for_series(&server, &authorised).await;

    let (catalog, rollout) = catalog_and_rollout(&documents(&server.url()));
    let source = PrometheusSource::new(catalog, None);
    assert!(
        source.validate(&rollout).is_empty(),
        "{:?}",
        source.validate(&rollout)
    );
    let key = RolloutKey::new("shop", "web");
    let metric = |name: &str| {
        rollout
            .spec
            .analysis
            .metrics
            .iter()
            .find(|metric| metric.name == name)
            .unwrap()
    };

    // 10 of 1,000 canary requests failed: 1%, within max 2, outside max 0.5.
    let passed = source.check(&key, &rollout, metric("error-rate")).await;
    assert_eq!(passed.outcome, CheckOutcome::Pass, "{passed:?}");
    assert!((passed.value.unwrap() - 1.0).abs() < 1e-9, "{passed:?}");
    let failed = source
        .check(&key, &rollout, metric("strict-error-rate"))
        .await;
    assert_eq!(failed.outcome, CheckOutcome::Fail, "{failed:?}");
    assert!(failed.message.contains("<= 0.5"), "{failed:?}");

    // Wrong credentials: Prometheus answers 401, which is no data, said as such.
    let refused = source.check(&key, &rollout, metric("unauthorised")).await;
    assert_eq!(refused.outcome, CheckOutcome::NoData, "{refused:?}");
    assert!(refused.message.contains("401"), "{refused:?}");

    // A query that matches nothing is no data too.
    let empty = source.check(&key, &rollout, metric("nothing")).await;
    assert_eq!(empty.outcome, CheckOutcome::NoData, "{empty:?}");
    assert!(empty.message.contains("no series"), "{empty:?}");

    // Prometheus's own refusal of bad PromQL reaches the message.
    let client = PrometheusClient::default();
    let error = client
        .value(&authorised, "sum(", Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("400"), "{error}");

    // A server that accepts and never answers is cut off at the timeout.
    let silent = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let silent_endpoint = Endpoint::from_url(&format!("http://{}", silent.local_addr().unwrap()));
    // The error itself says the timeout cut it off (no wall-clock bound: machines are noisy).
    let error = client
        .value(&silent_endpoint, "up", Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("no answer within"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_queries_go_to_the_default_server_and_unknown_variables_are_refused() {
    if !prometheus::required() {
        return;
    }
    let target = exposition_server().await;
    let server = PrometheusServer::start(&PrometheusOptions {
        targets: vec![target],
        basic_auth_users: Vec::new(),
    })
    .unwrap();
    wait_for_series(&server, &Endpoint::from_url(&server.url())).await;
    let yaml = r#"
apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {name: web, namespace: shop}
spec:
  target:
    kind: kubernetes
    targetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  plan: {canary: {stepWeight: 10}}
  analysis:
    metrics:
      - name: primary-requests
        query: sum(demo_requests_total{namespace="{{ namespace }}",deployment="{{ target }}-primary"})
        thresholdRange: {min: 4000}
      - name: typo
        query: sum(demo_requests_total{namespace="{{ namespce }}"})
        thresholdRange: {min: 0}
"#;
    let (catalog, rollout) = catalog_and_rollout(yaml);
    let without_server = PrometheusSource::new(Arc::clone(&catalog), None);
    let errors = without_server.validate(&rollout);
    assert!(
        errors[0].to_string().contains("no metrics server"),
        "{errors:?}"
    );

    let source = PrometheusSource::new(catalog, Some(server.url()));
    let errors = source.validate(&rollout);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].path, "spec.analysis.metrics[1].query");
    assert!(
        errors[0]
            .to_string()
            .contains("unknown variable `namespce`"),
        "{errors:?}"
    );
    let key = RolloutKey::new("shop", "web");
    let result = source
        .check(&key, &rollout, &rollout.spec.analysis.metrics[0])
        .await;
    assert_eq!(result.outcome, CheckOutcome::Pass, "{result:?}");
    assert_eq!(result.value, Some(5000.0));
}

/// Every MetricTemplate of Flagger's documentation and tests (the compat corpus beside the
/// project, present in CI) renders with weir's placeholders, given the template variables its
/// query names.
#[test]
fn every_flagger_metric_template_renders() {
    let dir = std::env::var("WEIR_COMPAT_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/compat/flagger")
        })
        .join("metric-templates");
    if !dir.is_dir() {
        println!("compat corpus not found: skipped");
        return;
    }
    let (_, rollout) = catalog_and_rollout(&documents("http://127.0.0.1:9"));
    let mut rendered = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        for result in load(&std::fs::read(&path).unwrap()) {
            let Ok(loaded) = result else { continue };
            let Document::MetricTemplate(template) = loaded.document else {
                continue;
            };
            let Some(query) = &template.spec.query else {
                continue;
            };
            let mut metric = rollout.spec.analysis.metrics[0].clone();
            metric.template_variables.clear();
            for (index, _) in query.match_indices("variables.") {
                let key: String = query[index + "variables.".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                metric.template_variables.insert(key, "x".into());
            }
            let variables = weir_prometheus::variables(&rollout, &metric);
            let text = weir_core::query::render(query, &variables)
                .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            assert!(!text.contains("{{"), "{}: {text}", path.display());
            rendered += 1;
        }
    }
    // 27 templates, of which 24 have a query (the other three show only a provider).
    assert_eq!(rendered, 24, "templates with a query");
    println!("{rendered} Flagger metric templates rendered");
}

#[test]
fn a_local_target_metrics_server_must_be_a_url() {
    let yaml = r#"
apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {name: web}
spec:
  target:
    kind: local
    listen: 127.0.0.1:8080
    primary: {url: "http://127.0.0.1:9001"}
    canary: {url: "http://127.0.0.1:9002"}
    metricsServer: prometheus:9090
  plan: {canary: {stepWeight: 50}}
"#;
    let refused = weir_core::document::load(yaml.as_bytes())
        .remove(0)
        .expect_err("refused");
    let errors = refused.errors;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].path, "spec.target.metricsServer");
    assert!(errors[0].to_string().contains("http://"), "{errors:?}");
}
