//! The flags that connect weir to the world beyond its targets, shared by `weir serve`,
//! `weir run` and `weir operator`: the default Prometheus, the files of metric templates, alert
//! providers and secrets that rollouts refer to by name, and the outbound policy (where rollouts
//! may make weir connect). Also where the adapters are wired into one set of providers for the
//! engine, every one of them connecting under that policy.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Args;
use weir_core::catalog::{Catalog, SharedCatalog};
use weir_core::document::{self, Document};
use weir_engine::Providers;
use weir_http::HttpClient;
use weir_http::policy::{ListenPolicy, OutboundPolicy, Rule};
use weir_local::LocalTargets;
use weir_metrics::MetricsSource;
use weir_prometheus::PrometheusSource;
use weir_webhooks::{AlertNotifier, HttpHookRunner};

/// How a process reaches the world beyond its targets: the documents rollouts refer to by name,
/// and the Prometheus that builtin checks and inline queries go to.
#[derive(Debug, Clone, Default)]
pub struct Integrations {
    /// Metric templates, alert providers and secrets; every provider of
    /// [`Integrations::shared_providers`] reads this one, so a change is seen by all at once.
    pub catalog: SharedCatalog,
    /// The Prometheus for builtin checks and inline queries (Flagger's `-metrics-server`);
    /// `None`: local rollouts read their router's counters directly.
    pub metrics_server: Option<String>,
    /// Where rollouts may make weir connect (webhooks, notifications, Prometheus, versions'
    /// URLs); the process adds its own listening addresses once bound
    /// ([`OutboundPolicy::add_own`]).
    pub outbound: Arc<OutboundPolicy>,
}

impl Integrations {
    /// Local targets connecting under the outbound policy and listening where `listen` allows.
    pub fn local_targets(&self, listen: ListenPolicy) -> LocalTargets {
        LocalTargets::new(weir_router::RouterConfig::default())
            .with_outbound(Arc::clone(&self.outbound))
            .with_listen_policy(listen)
    }

    /// The providers of a process that runs local rollouts: `targets`, Prometheus (for
    /// templates, inline queries, and builtin checks when a metrics server is set), the
    /// targets' own router counters for builtin checks otherwise, HTTP webhooks (signed with
    /// the catalog's secrets), and notifications to the rollouts' alert providers.
    pub fn providers(&self, targets: &LocalTargets) -> Providers {
        targets.add_to(self.shared_providers())
    }

    /// The providers every target kind shares (metrics - Prometheus, then Datadog, New Relic
    /// and Graphite templates -, hooks, notifications), without a target: the caller adds its
    /// own.
    pub fn shared_providers(&self) -> Providers {
        let catalog = &self.catalog;
        // One pool for hooks, notifications and queries, under the outbound policy.
        let client = HttpClient::with_policy(Arc::clone(&self.outbound));
        Providers::new(
            catalog.clone(),
            Arc::new(HttpHookRunner::new(catalog.clone()).with_client(client.clone())),
            Arc::new(AlertNotifier::with_options(
                catalog.clone(),
                client.clone(),
                weir_webhooks::notify::RetryPolicy::default(),
            )),
        )
        // Asked first, so a metrics server takes the builtins over from the router's counters.
        .with_metrics(Arc::new(
            PrometheusSource::new(catalog.clone(), self.metrics_server.clone())
                .with_client(client.clone()),
        ))
        // Templates of Datadog, New Relic and Graphite; it refuses the providers no source
        // queries.
        .with_metrics(Arc::new(
            MetricsSource::new(catalog.clone()).with_client(client),
        ))
    }
}

/// `--prometheus` and `--catalog`.
#[derive(Debug, Clone, Args)]
pub struct IntegrationArgs {
    /// The Prometheus that builtin checks (request-success-rate, request-duration) and inline
    /// queries go to, e.g. http://127.0.0.1:9090 (credentials as http://user:password@host).
    /// It must scrape weir's /metrics for local rollouts. A rollout's `target.metricsServer`
    /// and a template's `provider.address` take precedence. Unset: local rollouts are judged
    /// from their router's counters directly.
    #[arg(long, value_name = "URL", env = "WEIR_PROMETHEUS")]
    pub prometheus: Option<String>,
    /// A YAML or JSON file (or a directory of them) holding MetricTemplates, AlertProviders and
    /// Secrets - weir's or Flagger's - that rollouts refer to by name, e.g. `--catalog
    /// ops/weir/`. Repeatable.
    #[arg(long = "catalog", value_name = "PATH")]
    pub catalog: Vec<PathBuf>,
    /// Let rollouts make weir connect to these addresses: a CIDR block, an IP address or a host
    /// name, e.g. `--allow-connect 169.254.169.254` for a metadata service, or, with
    /// `--deny-connect 0.0.0.0/0`, `--allow-connect 10.0.0.0/8` to allow a network only.
    /// Applies to versions' URLs (the router's upstreams), webhooks, notifications and
    /// Prometheus servers. By default link-local (169.254.0.0/16, fe80::/10) and unspecified
    /// (0.0.0.0, ::) addresses are refused and weir's own listeners always are; the most
    /// specific rule wins, a host name above any CIDR, deny on a tie (docs/SECURITY.md).
    /// Repeatable.
    #[arg(long = "allow-connect", value_name = "CIDR|HOST")]
    pub allow_connect: Vec<Rule>,
    /// Refuse connections to these addresses (CIDR block, IP address or host name), checked on
    /// the address written in a rollout when it is applied and on every address a name
    /// resolves to when connecting, e.g. `--deny-connect 10.0.0.0/8`. Repeatable.
    #[arg(long = "deny-connect", value_name = "CIDR|HOST")]
    pub deny_connect: Vec<Rule>,
}

impl IntegrationArgs {
    /// The integrations: the catalog files' documents plus `extra` (e.g. those beside a
    /// rollout in its own file). Any invalid document is an error naming the file.
    pub fn integrations(&self, extra: Vec<Document>) -> Result<Integrations> {
        if let Some(url) = &self.prometheus
            && !url.starts_with("http://")
            && !url.starts_with("https://")
        {
            bail!("--prometheus {url:?}: give the server's http:// or https:// URL");
        }
        let mut catalog = Catalog::default();
        for path in &self.catalog {
            for document in catalog_documents(path)? {
                if let Some(other) = catalog.add(document) {
                    bail!(
                        "{}: {} is not a catalog document (MetricTemplate, AlertProvider or Secret)",
                        path.display(),
                        other.describe()
                    );
                }
            }
        }
        for document in extra {
            catalog.add(document);
        }
        Ok(Integrations {
            catalog: catalog.into(),
            metrics_server: self.prometheus.clone(),
            outbound: Arc::new(OutboundPolicy::new(
                self.allow_connect.clone(),
                self.deny_connect.clone(),
            )),
        })
    }
}

/// Every document of a file, or of the `.yaml`, `.yml` and `.json` files of a directory.
fn catalog_documents(path: &Path) -> Result<Vec<Document>> {
    let files = if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| format!("cannot read {}", path.display()))?
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|file| {
                matches!(
                    file.extension().and_then(|ext| ext.to_str()),
                    Some("yaml" | "yml" | "json")
                )
            })
            .collect();
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut documents = Vec::new();
    for file in files {
        let bytes =
            std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
        for result in document::load(&bytes) {
            match result {
                Ok(loaded) => {
                    for warning in &loaded.warnings {
                        eprintln!("warning: {}: {warning}", file.display());
                    }
                    documents.push(loaded.document);
                }
                Err(refused) => {
                    let errors: Vec<String> = refused
                        .errors
                        .iter()
                        .map(|error| format!("  - {error}"))
                        .collect();
                    bail!(
                        "{}: {} is invalid:\n{}",
                        file.display(),
                        refused.subject,
                        errors.join("\n")
                    );
                }
            }
        }
    }
    Ok(documents)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    fn load(yaml: &str) -> Document {
        match document::load(yaml.as_bytes()).remove(0) {
            Ok(loaded) => loaded.document,
            Err(refused) => panic!("{refused:?}"),
        }
    }

    #[test]
    fn every_shared_provider_sees_a_change_of_the_catalog_at_once() {
        let integrations = IntegrationArgs {
            prometheus: None,
            catalog: Vec::new(),
            allow_connect: Vec::new(),
            deny_connect: Vec::new(),
        }
        .integrations(Vec::new())
        .unwrap();
        let providers = integrations.shared_providers();
        let Document::Rollout(rollout) = load(
            "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {name: web, namespace: shop}\nspec:\n  target: {kind: flag}\n  plan: {canary: {stepWeight: 10}}\n  analysis:\n    metrics: [{name: errors, templateRef: {name: errors}, thresholdRange: {max: 1}}]\n",
        ) else {
            panic!("not a rollout");
        };
        let metric = &rollout.spec.analysis.metrics[0];
        assert_eq!(
            providers.catalog.snapshot().check_rollout(&rollout).len(),
            1
        );
        assert!(!providers.metrics[0].handles(&rollout, metric));

        let template = load(
            "apiVersion: flagger.app/v1beta1\nkind: MetricTemplate\nmetadata: {name: errors, namespace: shop}\nspec:\n  provider: {type: prometheus, address: \"http://prom:9090\"}\n  query: sum(x)\n",
        );
        integrations.catalog.update(|catalog| {
            catalog.add(template);
        });
        assert!(
            providers
                .catalog
                .snapshot()
                .check_rollout(&rollout)
                .is_empty()
        );
        assert!(providers.metrics[0].handles(&rollout, metric));
        assert!(providers.metrics[0].validate(&rollout).is_empty());
    }

    /// `weir run`, `weir serve` and `weir operator` share these providers: a Datadog template
    /// is evaluated by weir-metrics, a Keptn one refused when the rollout is applied.
    #[test]
    fn templates_of_other_providers_go_to_weir_metrics_or_are_refused() {
        let integrations = IntegrationArgs {
            prometheus: None,
            catalog: Vec::new(),
            allow_connect: Vec::new(),
            deny_connect: Vec::new(),
        }
        .integrations(Vec::new())
        .unwrap();
        let providers = integrations.shared_providers();
        for template in [
            "apiVersion: v1\nkind: Secret\nmetadata: {name: dd, namespace: shop}\nstringData: {datadog_api_key: a, datadog_application_key: b}\n",
            "apiVersion: flagger.app/v1beta1\nkind: MetricTemplate\nmetadata: {name: dd, namespace: shop}\nspec:\n  provider: {type: datadog, secretRef: {name: dd}}\n  query: avg:errors{service:{{ target }}}\n",
            "apiVersion: flagger.app/v1beta1\nkind: MetricTemplate\nmetadata: {name: cw, namespace: shop}\nspec:\n  provider: {type: keptn}\n  query: \"keptnmetric/shop/errors\"\n",
        ] {
            integrations.catalog.update(|catalog| {
                catalog.add(load(template));
            });
        }
        let Document::Rollout(rollout) = load(
            "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {name: web, namespace: shop}\nspec:\n  target: {kind: flag}\n  plan: {canary: {stepWeight: 10}}\n  analysis:\n    metrics:\n      - {name: dd, templateRef: {name: dd}, thresholdRange: {max: 1}}\n      - {name: cw, templateRef: {name: cw}, thresholdRange: {max: 1}}\n",
        ) else {
            panic!("not a rollout");
        };
        let [datadog, cloudwatch] = &rollout.spec.analysis.metrics[..] else {
            panic!("two metrics");
        };
        assert!(!providers.metrics[0].handles(&rollout, datadog));
        assert!(providers.metrics[1].handles(&rollout, datadog));
        assert!(
            !providers
                .metrics
                .iter()
                .any(|source| source.handles(&rollout, cloudwatch))
        );
        let errors: Vec<_> = providers
            .metrics
            .iter()
            .flat_map(|source| source.validate(&rollout))
            .collect();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].path, "spec.analysis.metrics[1].templateRef");
        assert!(errors[0].message.contains("\"keptn\""), "{errors:?}");
    }
}
