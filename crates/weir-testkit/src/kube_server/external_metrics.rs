//! The Kubernetes External Metrics API (`external.metrics.k8s.io/v1beta1`) as a metrics adapter
//! registered as an aggregated API server (KEDA's, prometheus-adapter) serves it through
//! kube-apiserver, with the values a test sets ([`super::KubeServer::set_external_metric`]):
//!
//! - discovery: the group in `/apis` (legacy `APIGroupList` and aggregated
//!   `APIGroupDiscoveryList`), `/apis/external.metrics.k8s.io` (`APIGroup`) and
//!   `/apis/external.metrics.k8s.io/v1beta1` (`APIResourceList` with the one resource
//!   `externalmetrics`, kind `ExternalMetricValueList`, namespaced, verb `get`);
//! - `GET /apis/external.metrics.k8s.io/v1beta1/namespaces/NS/METRIC[?labelSelector=...]`: an
//!   `ExternalMetricValueList` of the series of `METRIC` in `NS` whose labels match, each
//!   `{metricName, metricLabels, timestamp, value}` with the value a Quantity (`"1500m"`); a
//!   metric the adapter does not know is a 404 NotFound Status, one whose series all fail the
//!   selector an empty list; a malformed selector 400 BadRequest; any other verb 405.
//!
//! Nothing is served under the group until a test enables it
//! ([`super::KubeServer::serve_external_metrics`]), as on a cluster without an adapter.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::table::LabelSelector;

/// The group and version.
pub(crate) const GROUP: &str = "external.metrics.k8s.io";
pub(crate) const VERSION: &str = "v1beta1";

/// One series of a metric: its labels and its value (a Quantity as text).
#[derive(Debug, Clone)]
struct Series {
    labels: BTreeMap<String, String>,
    value: String,
}

/// What the adapter serves, and what it was asked.
#[derive(Debug, Default)]
pub(crate) struct ExternalMetrics {
    /// Series by `(namespace, metric name)`.
    metrics: BTreeMap<(String, String), Vec<Series>>,
    /// Every metric request, as `PATH?QUERY`.
    pub(crate) requests: Vec<String>,
}

impl ExternalMetrics {
    /// Sets the series of `name` in `namespace` with `labels` to `value` (adding it if new).
    pub(crate) fn set(
        &mut self,
        namespace: &str,
        name: &str,
        labels: BTreeMap<String, String>,
        value: &str,
    ) {
        let series = self
            .metrics
            .entry((namespace.to_string(), name.to_string()))
            .or_default();
        match series.iter_mut().find(|series| series.labels == labels) {
            Some(existing) => existing.value = value.to_string(),
            None => series.push(Series {
                labels,
                value: value.to_string(),
            }),
        }
    }

    /// Forgets metric `name` in `namespace` (then a 404, as for a metric never known).
    pub(crate) fn remove(&mut self, namespace: &str, name: &str) {
        self.metrics
            .remove(&(namespace.to_string(), name.to_string()));
    }

    /// The answer to `GET .../namespaces/NAMESPACE/NAME` with `label_selector`: status and body.
    pub(crate) fn get(
        &self,
        namespace: &str,
        name: &str,
        label_selector: Option<&str>,
    ) -> (u16, Value) {
        let selector = match LabelSelector::parse(label_selector.unwrap_or("")) {
            Ok(selector) => selector,
            Err(message) => {
                return (
                    400,
                    status(
                        400,
                        "BadRequest",
                        &format!("unable to parse requirement: {message}"),
                    ),
                );
            }
        };
        let Some(series) = self.metrics.get(&(namespace.to_string(), name.to_string())) else {
            return (
                404,
                status(
                    404,
                    "NotFound",
                    &format!(
                        "the server could not find the metric {name} for namespace {namespace}"
                    ),
                ),
            );
        };
        let timestamp = super::now();
        let items: Vec<Value> = series
            .iter()
            .filter(|series| selector.matches(&json!({"metadata": {"labels": series.labels}})))
            .map(|series| {
                json!({
                    "metricName": name,
                    "metricLabels": series.labels,
                    "timestamp": timestamp,
                    "value": series.value,
                })
            })
            .collect();
        (
            200,
            json!({
                "kind": "ExternalMetricValueList",
                "apiVersion": format!("{GROUP}/{VERSION}"),
                "metadata": {},
                "items": items,
            }),
        )
    }
}

/// A `Status` failure.
pub(crate) fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

/// The group's entry in the legacy `/apis` list, and `/apis/external.metrics.k8s.io`.
pub(crate) fn api_group() -> Value {
    let version = json!({"groupVersion": format!("{GROUP}/{VERSION}"), "version": VERSION});
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": [version],
        "preferredVersion": version,
    })
}

/// The group's entry in an aggregated `APIGroupDiscoveryList`.
pub(crate) fn aggregated() -> Value {
    json!({
        "metadata": {"name": GROUP, "creationTimestamp": null},
        "versions": [{
            "version": VERSION,
            "resources": [{
                "resource": "externalmetrics",
                "responseKind": {"group": GROUP, "version": VERSION, "kind": "ExternalMetricValueList"},
                "scope": "Namespaced",
                "singularResource": "",
                "verbs": ["get"],
            }],
            "freshness": "Current",
        }],
    })
}

/// `/apis/external.metrics.k8s.io/v1beta1`.
pub(crate) fn resource_list() -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": format!("{GROUP}/{VERSION}"),
        "resources": [{
            "name": "externalmetrics",
            "singularName": "",
            "namespaced": true,
            "kind": "ExternalMetricValueList",
            "verbs": ["get"],
        }],
    })
}
