//! The non-Prometheus MetricTemplates of Flagger's documentation and tests (the corpus at
//! `../shared/compat/flagger/metric-templates`, when present) as a user would bring them: each
//! Datadog, New Relic, Graphite and CloudWatch template with a query is run against
//! weir-testkit's double of its service (only its address swapped for the double's, and for
//! CloudWatch, which Flagger gives credentials from its environment, a Secret named) and reads
//! the value served; the others are refused when a rollout using them is applied, saying why.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use weir_core::catalog::Catalog;
use weir_core::document::{Document, load};
use weir_core::model::{CheckOutcome, MetricTemplate};
use weir_engine::MetricSource;
use weir_metrics::{MetricsSource, Provider};
use weir_store::RolloutKey;
use weir_testkit::fixtures::compat_dir;
use weir_testkit::metric_doubles::MetricDouble;
use weir_testkit::metric_doubles_cloud::CloudDouble;

/// A double of either kind.
enum Double {
    Plain(MetricDouble),
    Cloud(CloudDouble),
}

impl Double {
    fn url(&self) -> String {
        match self {
            Double::Plain(double) => double.url(),
            Double::Cloud(double) => double.url(),
        }
    }

    fn serve(&self, value: Option<f64>) {
        match self {
            Double::Plain(double) => double.serve(value),
            Double::Cloud(double) => double.serve(value),
        }
    }

    fn seen(&self) -> Vec<weir_testkit::metric_doubles::Seen> {
        match self {
            Double::Plain(double) => double.seen(),
            Double::Cloud(double) => double.seen(),
        }
    }
}

fn rollout_yaml(template: &MetricTemplate) -> String {
    format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: podinfo, namespace: test}}
spec:
  target:
    kind: kubernetes
    targetRef: {{apiVersion: apps/v1, kind: Deployment, name: podinfo}}
    ingressRef: {{apiVersion: networking.k8s.io/v1, kind: Ingress, name: podinfo}}
  plan: {{canary: {{stepWeight: 10}}}}
  analysis:
    metrics:
      - name: corpus
        templateRef: {{name: {}, namespace: {}}}
        thresholdRange: {{max: 5}}
"#,
        template.metadata.name,
        template.metadata.namespace_or_default()
    )
}

fn secret_yaml(template: &MetricTemplate, keys: &str) -> Option<String> {
    let reference = template.spec.provider.secret_ref.as_ref()?;
    Some(format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {}, namespace: {}}}\nstringData: {keys}\n",
        reference.name,
        template.metadata.namespace_or_default()
    ))
}

fn add(catalog: &mut Catalog, yaml: &str) -> Option<Document> {
    let mut left = None;
    for result in load(yaml.as_bytes()) {
        left = left.or(catalog.add(result.unwrap().document));
    }
    left
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_corpus_templates_of_datadog_newrelic_graphite_and_cloudwatch_read_their_double() {
    let Some(dir) = compat_dir() else {
        eprintln!("SKIPPED: no Flagger corpus (../shared/compat/flagger)");
        return;
    };
    let mut files: Vec<_> = std::fs::read_dir(dir.join("metric-templates"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    let (mut read, mut refused) = (Vec::new(), Vec::new());
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        for result in load(&bytes) {
            let Ok(loaded) = result else { continue };
            let Document::MetricTemplate(mut template) = loaded.document else {
                continue;
            };
            let provider_type = template.spec.provider.provider_type.clone();
            if provider_type == "prometheus" || provider_type.is_empty() {
                continue;
            }
            let name = file.file_name().unwrap().to_string_lossy().to_string();
            let (double, keys) = match Provider::of(&provider_type) {
                Some(Provider::CloudWatch) => {
                    let region = template.spec.provider.region.clone().unwrap_or_default();
                    template.spec.provider.secret_ref = Some(weir_core::model::TemplateRef {
                        name: "aws".into(),
                        namespace: None,
                    });
                    (
                        Some(Double::Cloud(CloudDouble::cloudwatch(
                            &region,
                            "AKIACORPUS0000000000",
                            "corpus/secret/key",
                            None,
                        ))),
                        "{AWS_ACCESS_KEY_ID: AKIACORPUS0000000000, AWS_SECRET_ACCESS_KEY: corpus/secret/key}",
                    )
                }
                Some(Provider::Datadog) => (
                    Some(Double::Plain(MetricDouble::datadog(
                        "corpus-api-key",
                        "corpus-app-key",
                    ))),
                    "{datadog_api_key: corpus-api-key, datadog_application_key: corpus-app-key}",
                ),
                Some(Provider::NewRelic) => (
                    Some(Double::Plain(MetricDouble::newrelic(
                        "7654321",
                        "corpus-query-key",
                    ))),
                    "{newrelic_account_id: \"7654321\", newrelic_query_key: corpus-query-key}",
                ),
                Some(Provider::Graphite) => {
                    let basic = template.spec.provider.secret_ref.is_some();
                    (
                        Some(Double::Plain(MetricDouble::graphite(
                            basic.then_some(("corpus", "corpus-password")),
                        ))),
                        "{username: corpus, password: corpus-password}",
                    )
                }
                // Flagger's corpus holds none; one would read its double like the others.
                Some(Provider::InfluxDb) => (
                    Some(Double::Cloud(CloudDouble::influxdb(
                        "corpus-org",
                        "corpus-token",
                    ))),
                    "{token: corpus-token, org: corpus-org}",
                ),
                Some(Provider::Dynatrace) => (
                    Some(Double::Cloud(CloudDouble::dynatrace("corpus-token"))),
                    "{dynatrace_token: corpus-token}",
                ),
                // Flagger's corpus holds none (its key would name the double's token endpoint,
                // see cloud_providers.rs).
                Some(Provider::Stackdriver) => (None, "{}"),
                Some(Provider::Splunk) => (
                    Some(Double::Cloud(CloudDouble::splunk("corpus-token"))),
                    "{sf_token_key: corpus-token}",
                ),
                None => (None, "{}"),
            };
            if let Some(double) = &double {
                template.spec.provider.address = Some(double.url());
                double.serve(Some(1.25));
            }
            let mut catalog = Catalog::default();
            if let Some(secret) = secret_yaml(&template, keys) {
                add(&mut catalog, &secret);
            }
            let rollout_text = rollout_yaml(&template);
            catalog.add(Document::MetricTemplate(template));
            let Some(Document::Rollout(rollout)) = add(&mut catalog, &rollout_text) else {
                panic!("no rollout");
            };
            assert!(catalog.check_rollout(&rollout).is_empty());
            let source = MetricsSource::new(catalog);
            let errors = source.validate(&rollout);
            let Some(double) = double.filter(|_| errors.is_empty()) else {
                println!("{name} ({provider_type}): refused: {errors:?}");
                assert!(!errors.is_empty(), "{name}");
                refused.push(name);
                continue;
            };
            let metric = &rollout.spec.analysis.metrics[0];
            let result = source
                .check(&RolloutKey::new("test", "podinfo"), &rollout, metric)
                .await;
            let request = double.seen().pop().unwrap();
            println!(
                "{name} ({provider_type}): {} {} {:?} -> {}",
                request.method, request.path, request.query, result.message
            );
            assert_eq!(
                (result.outcome, result.value),
                (CheckOutcome::Pass, Some(1.25)),
                "{name}: {result:?}"
            );
            read.push(name);
        }
    }
    println!("read: {read:?}\nrefused: {refused:?}");
    // datadog, newrelic, cloudwatch, one graphite template with a query; the graphite snippet
    // without a query is refused.
    assert_eq!((read.len(), refused.len()), (4, 1), "{read:?} {refused:?}");
}
