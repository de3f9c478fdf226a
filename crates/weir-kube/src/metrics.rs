//! Metric providers that read Kubernetes APIs, for `weir operator`: MetricTemplates of
//! `spec.provider.type` `externalmetrics` (Flagger 1.43), queried through the operator's own
//! Kubernetes client (or `provider.address` and a Secret's `token`).
//!
//! **externalmetrics**: the External Metrics API that a metrics adapter (KEDA's,
//! prometheus-adapter, a cloud's) registers with the API server. The rendered query is
//! `[NAMESPACE/]METRIC[?labelSelector=SELECTOR]` (the namespace defaults to `default`; the
//! selector URL-encoded, passed on as written); weir sends
//! `GET /apis/external.metrics.k8s.io/v1beta1/namespaces/NAMESPACE/METRIC[?labelSelector=...]`
//! and reads the first item's `value`, a Quantity (`1500m` is 1.5). An empty list is no data;
//! an error answer is a failed query with the server's message. Without `provider.address` the
//! request goes to the operator's API server with its credentials; with one, to that address,
//! with the Secret's `token` (if `secretRef` names one) as a Bearer token, `insecureSkipVerify`
//! honoured. Each query has 5 s, as in Flagger.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use weir_core::FieldError;
use weir_core::catalog::{Catalog, SharedCatalog};
use weir_core::model::{CheckOutcome, CheckResult, Metric, MetricTemplate, Rollout};
use weir_engine::providers::Providers;
use weir_engine::{BoxFuture, MetricSource};
use weir_store::RolloutKey;

/// The provider types this module queries.
pub const PROVIDERS: [&str; 1] = ["externalmetrics"];

/// How long one query may take (Flagger's 5 s).
const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// The External Metrics API's group and version.
const EXTERNAL_METRICS: &str = "external.metrics.k8s.io/v1beta1";

/// A metric source for the Kubernetes-backed providers ([`PROVIDERS`]).
#[derive(Clone)]
pub struct KubeMetrics {
    client: kube::Client,
    catalog: SharedCatalog,
}

/// One query, ready to send.
#[derive(Debug, Clone, PartialEq)]
struct Plan {
    /// `/apis/external.metrics.k8s.io/v1beta1/namespaces/NS/METRIC[?labelSelector=...]`.
    path: String,
    /// `provider.address`, when the query goes elsewhere than the operator's API server.
    address: Option<String>,
    /// The Secret's `token`, if any.
    token: Option<String>,
    insecure_skip_verify: bool,
}

impl KubeMetrics {
    /// A source querying through `client`, reading templates and Secrets from `catalog`.
    pub fn new(client: kube::Client, catalog: SharedCatalog) -> KubeMetrics {
        KubeMetrics { client, catalog }
    }

    /// `providers` with this source asked first; the sources already there no longer report
    /// the metrics this one evaluates (weir-metrics refuses the provider types it does not
    /// query itself, these among them).
    pub fn add_to(self, providers: Providers) -> Providers {
        providers.with_metrics_first(Arc::new(self))
    }

    fn template<'a>(
        catalog: &'a Catalog,
        rollout: &Rollout,
        metric: &Metric,
    ) -> Option<&'a MetricTemplate> {
        let reference = metric.template_ref.as_ref()?;
        catalog.metric_template(reference, rollout.metadata.namespace_or_default())
    }

    fn plan(catalog: &Catalog, rollout: &Rollout, metric: &Metric) -> Result<Plan, String> {
        let template = Self::template(catalog, rollout, metric)
            .ok_or_else(|| "the MetricTemplate is not loaded".to_string())?;
        let name = &template.metadata.name;
        let spec = &template.spec;
        let query = spec
            .query
            .as_deref()
            .ok_or_else(|| format!("MetricTemplate {name} has no query"))?;
        let query = weir_core::query::render(query, &weir_core::query::variables(rollout, metric))
            .map_err(|error| format!("MetricTemplate {name}: {error}"))?;
        let path = external_metric_path(&query).map_err(|why| {
            format!("MetricTemplate {name}: the query {query:?} is not [NAMESPACE/]METRIC[?labelSelector=...]: {why}")
        })?;
        let token = match &spec.provider.secret_ref {
            None => None,
            Some(reference) => {
                let secret = catalog
                    .secret(reference, template.metadata.namespace_or_default())
                    .ok_or_else(|| format!("Secret {} is not loaded", reference.name))?;
                secret.get("token").map(str::to_string)
            }
        };
        if let Some(address) = &spec.provider.address
            && !address.starts_with("http://")
            && !address.starts_with("https://")
        {
            return Err(format!(
                "MetricTemplate {name}: provider.address {address:?} is not an http:// or https:// URL"
            ));
        }
        Ok(Plan {
            path,
            address: spec.provider.address.clone(),
            token,
            insecure_skip_verify: spec.provider.insecure_skip_verify,
        })
    }

    /// The client for `plan`: the operator's, or one for its address and token.
    async fn client_for(&self, plan: &Plan) -> Result<kube::Client, String> {
        if plan.address.is_none() && plan.token.is_none() {
            return Ok(self.client.clone());
        }
        let mut config = match &plan.address {
            Some(address) => kube::Config::new(
                address
                    .trim_end_matches('/')
                    .parse::<http::Uri>()
                    .map_err(|error| format!("provider.address: {error}"))?,
            ),
            None => {
                // A token for the operator's own API server: its address, not its credentials.
                let inferred = kube::Config::infer()
                    .await
                    .map_err(|error| format!("cannot find the API server: {error}"))?;
                let mut config = kube::Config::new(inferred.cluster_url);
                config.root_cert = inferred.root_cert;
                config
            }
        };
        config.accept_invalid_certs = plan.insecure_skip_verify;
        config.connect_timeout = Some(QUERY_TIMEOUT);
        config.read_timeout = Some(QUERY_TIMEOUT);
        if let Some(token) = &plan.token {
            let mut value = http::HeaderValue::from_str(&format!("Bearer {token}"))
                // The value is not shown: it holds the token.
                .map_err(|_| "the Secret's token is not a valid header value".to_string())?;
            value.set_sensitive(true);
            config.headers.push((http::header::AUTHORIZATION, value));
        }
        kube::Client::try_from(config).map_err(|error| format!("cannot build a client: {error}"))
    }

    async fn run(&self, plan: &Plan) -> Result<Option<f64>, String> {
        let client = self.client_for(plan).await?;
        let request = http::Request::get(&plan.path)
            .header(http::header::ACCEPT, "application/json")
            .body(Vec::new())
            .map_err(|error| format!("GET {}: {error}", plan.path))?;
        let answer = tokio::time::timeout(QUERY_TIMEOUT, client.request::<Value>(request))
            .await
            .map_err(|_| {
                format!(
                    "GET {} got no answer within {} s",
                    plan.path,
                    QUERY_TIMEOUT.as_secs()
                )
            })?
            .map_err(|error| match error {
                kube::Error::Api(status) => format!(
                    "GET {} answered {} {}: {}",
                    plan.path, status.code, status.reason, status.message
                ),
                other => format!("GET {}: {other}", plan.path),
            })?;
        read_value_list(&answer)
    }
}

/// The API path of an External Metrics query `[NAMESPACE/]METRIC[?labelSelector=...]`.
fn external_metric_path(query: &str) -> Result<String, String> {
    let query = query.trim();
    let (name, selector) = match query.split_once('?') {
        Some((name, parameters)) => {
            let selector = parameters
                .strip_prefix("labelSelector=")
                .ok_or("the only parameter is labelSelector")?;
            if selector.contains('&') {
                return Err("the only parameter is labelSelector".into());
            }
            (name, Some(selector))
        }
        None => (query, None),
    };
    let (namespace, metric) = match name.split('/').collect::<Vec<_>>().as_slice() {
        [metric] => ("default", *metric),
        [namespace, metric] => (*namespace, *metric),
        _ => return Err("more than one /".into()),
    };
    let valid = |part: &str| {
        !part.is_empty()
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ':'))
    };
    if !valid(namespace) || !valid(metric) {
        return Err("a namespace or metric name that is empty or not a name".into());
    }
    if let Some(selector) = selector
        && selector
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '#')
    {
        return Err("the selector must be URL-encoded".into());
    }
    let mut path = format!("/apis/{EXTERNAL_METRICS}/namespaces/{namespace}/{metric}");
    if let Some(selector) = selector {
        path.push_str("?labelSelector=");
        path.push_str(selector);
    }
    Ok(path)
}

/// The first item's value of an `ExternalMetricValueList`; `None` when it has no item.
fn read_value_list(answer: &Value) -> Result<Option<f64>, String> {
    if answer.get("kind").and_then(Value::as_str) != Some("ExternalMetricValueList") {
        return Err("the answer is not an ExternalMetricValueList".into());
    }
    let Some(first) = answer
        .get("items")
        .and_then(Value::as_array)
        .and_then(|items| items.first())
    else {
        return Ok(None);
    };
    let value = first
        .get("value")
        .and_then(Value::as_str)
        .ok_or("the first item has no value")?;
    parse_quantity(value)
        .map(Some)
        .ok_or_else(|| format!("the value {value:?} is not a Quantity"))
}

/// A Kubernetes Quantity (`1500m`, `2k`, `1Gi`, `1e3`, `-0.5`) as a number.
fn parse_quantity(text: &str) -> Option<f64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '+' | '-' | '.')))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    if number.is_empty() || number.matches(['+', '-']).count() > 1 {
        return None;
    }
    let number: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exponent => {
            let digits = exponent
                .strip_prefix('e')
                .or_else(|| exponent.strip_prefix('E'))?;
            10f64.powi(digits.parse::<i32>().ok()?)
        }
    };
    let value = number * factor;
    value.is_finite().then_some(value)
}

impl MetricSource for KubeMetrics {
    fn handles(&self, rollout: &Rollout, metric: &Metric) -> bool {
        Self::template(&self.catalog.snapshot(), rollout, metric).is_some_and(|template| {
            PROVIDERS.contains(&template.spec.provider.provider_type.as_str())
        })
    }

    fn validate(&self, rollout: &Rollout) -> Vec<FieldError> {
        let catalog = self.catalog.snapshot();
        let mut errors = Vec::new();
        for (index, metric) in rollout.spec.analysis.metrics.iter().enumerate() {
            let Some(template) = Self::template(&catalog, rollout, metric) else {
                continue;
            };
            if !PROVIDERS.contains(&template.spec.provider.provider_type.as_str()) {
                continue;
            }
            if let Some(reference) = &template.spec.provider.secret_ref
                && catalog
                    .secret(reference, template.metadata.namespace_or_default())
                    .is_none()
            {
                // A missing Secret is the catalog's check's to report.
                continue;
            }
            if let Err(reason) = Self::plan(&catalog, rollout, metric) {
                errors.push(FieldError::new(
                    format!("spec.analysis.metrics[{index}].templateRef"),
                    reason,
                ));
            }
        }
        errors
    }

    fn check<'a>(
        &'a self,
        _key: &'a RolloutKey,
        rollout: &'a Rollout,
        metric: &'a Metric,
    ) -> BoxFuture<'a, CheckResult> {
        Box::pin(async move {
            let result = |outcome, value, message| CheckResult {
                name: metric.name.clone(),
                outcome,
                value,
                message,
            };
            let plan = match Self::plan(&self.catalog.snapshot(), rollout, metric) {
                Ok(plan) => plan,
                Err(reason) => return result(CheckOutcome::NoData, None, reason),
            };
            match self.run(&plan).await {
                Ok(Some(value)) => {
                    let range = metric.threshold_range.unwrap_or_default();
                    let outcome = if range.contains(value) {
                        CheckOutcome::Pass
                    } else {
                        CheckOutcome::Fail
                    };
                    result(
                        outcome,
                        Some(value),
                        format!("externalmetrics: {value:.4} ({})", plan.path),
                    )
                }
                Ok(None) => result(
                    CheckOutcome::NoData,
                    None,
                    format!(
                        "externalmetrics: no values found: {} listed no item",
                        plan.path
                    ),
                ),
                Err(error) => result(
                    CheckOutcome::NoData,
                    None,
                    format!("externalmetrics: {error}"),
                ),
            }
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_kubernetes_writes_them() {
        for (text, value) in [
            ("42", 42.0),
            ("1500m", 1.5),
            ("-0.5", -0.5),
            ("2k", 2000.0),
            ("3M", 3e6),
            ("1Ki", 1024.0),
            ("1Gi", 1024.0 * 1024.0 * 1024.0),
            ("250u", 250e-6),
            ("7n", 7e-9),
            ("1e3", 1000.0),
            ("2E-2", 0.02),
            ("+12", 12.0),
        ] {
            let read = parse_quantity(text).unwrap();
            assert!(
                (read - value).abs() <= value.abs() * 1e-12,
                "{text}: {read}"
            );
        }
        for text in ["", "m", "12x", "1..2", "--1", "1Kb", "1e", "NaN", "inf"] {
            assert_eq!(parse_quantity(text), None, "{text}");
        }
    }

    #[test]
    fn queries_name_a_metric_its_namespace_and_a_selector() {
        assert_eq!(
            external_metric_path("queue_depth").unwrap(),
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/queue_depth"
        );
        assert_eq!(
            external_metric_path(
                " shop/s0-rabbitmq-orders?labelSelector=app%3Dpodinfo%2Ctier%3Dweb\n"
            )
            .unwrap(),
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/shop/s0-rabbitmq-orders?labelSelector=app%3Dpodinfo%2Ctier%3Dweb"
        );
        for bad in [
            "",
            "a/b/c",
            "/metric",
            "shop/",
            "shop/m?selector=x",
            "shop/m?labelSelector=a&b=c",
            "shop/m?labelSelector=app = web",
        ] {
            assert!(external_metric_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_first_items_value_is_read_and_an_empty_list_is_no_data() {
        let list = |items: Value| serde_json::json!({"kind": "ExternalMetricValueList", "apiVersion": EXTERNAL_METRICS, "metadata": {}, "items": items});
        let item = |value: &str| serde_json::json!({"metricName": "m", "metricLabels": {}, "timestamp": "2026-01-01T00:00:00Z", "value": value});
        assert_eq!(
            read_value_list(&list(serde_json::json!([item("1500m"), item("9")]))).unwrap(),
            Some(1.5)
        );
        assert_eq!(read_value_list(&list(serde_json::json!([]))).unwrap(), None);
        assert!(read_value_list(&list(serde_json::json!([item("lots")]))).is_err());
        assert!(read_value_list(&serde_json::json!({"kind": "Status"})).is_err());
    }
}
