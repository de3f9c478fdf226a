//! Metric providers that read Kubernetes APIs, for `weir operator`: MetricTemplates of
//! `spec.provider.type` `externalmetrics` (Flagger 1.43) and `keptn`, queried through the
//! operator's own Kubernetes client (externalmetrics: or `provider.address` and a Secret's
//! `token`).
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
//!
//! **keptn**: Keptn's metrics operator's objects (`metrics.keptn.sh/v1beta1`), read and written
//! through the operator's client (`address` and `secretRef` are not used). The rendered query,
//! trimmed and lowercased as Flagger does (names and arguments too), is
//! `KIND/NAMESPACE/NAME[/DURATION[/K=V;K=V]]`: for `keptnmetric` (or `keptnmetrics`) the value
//! is the KeptnMetric's `status.value` (text read as a number; none is an error); for
//! `analysis` (or `analyses`) weir creates an Analysis `NAME-XXXXXX` of AnalysisDefinition
//! `NAME` over the most recent `DURATION` (default `1m`) with the arguments, waits (checking
//! every second, 10 s at most) for `status.state: Completed`, reads 1 when `status.pass` is true
//! and 0 otherwise, and deletes it (also after a timeout).

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
pub const PROVIDERS: [&str; 2] = ["externalmetrics", "keptn"];

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

    /// The rendered query of `metric`'s template and the template.
    fn rendered<'a>(
        catalog: &'a Catalog,
        rollout: &Rollout,
        metric: &Metric,
    ) -> Result<(&'a MetricTemplate, String), String> {
        let template = Self::template(catalog, rollout, metric)
            .ok_or_else(|| "the MetricTemplate is not loaded".to_string())?;
        let name = &template.metadata.name;
        let query = template
            .spec
            .query
            .as_deref()
            .ok_or_else(|| format!("MetricTemplate {name} has no query"))?;
        let query = weir_core::query::render(query, &weir_core::query::variables(rollout, metric))
            .map_err(|error| format!("MetricTemplate {name}: {error}"))?;
        Ok((template, query))
    }

    fn keptn_plan(
        catalog: &Catalog,
        rollout: &Rollout,
        metric: &Metric,
    ) -> Result<KeptnQuery, String> {
        let (template, query) = Self::rendered(catalog, rollout, metric)?;
        KeptnQuery::parse(&query).map_err(|why| {
            format!(
                "MetricTemplate {}: the query {query:?} is not \
                 keptnmetric|analysis/NAMESPACE/NAME[/DURATION[/K=V;...]]: {why}",
                template.metadata.name
            )
        })
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
            let planned = if template.spec.provider.provider_type == "keptn" {
                Self::keptn_plan(&catalog, rollout, metric).map(|_| ())
            } else {
                Self::plan(&catalog, rollout, metric).map(|_| ())
            };
            if let Err(reason) = planned {
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
            let judged = |value: f64, message: String| {
                let range = metric.threshold_range.unwrap_or_default();
                let outcome = if range.contains(value) {
                    CheckOutcome::Pass
                } else {
                    CheckOutcome::Fail
                };
                result(outcome, Some(value), message)
            };
            let catalog = self.catalog.snapshot();
            if Self::template(&catalog, rollout, metric)
                .is_some_and(|template| template.spec.provider.provider_type == "keptn")
            {
                let query = match Self::keptn_plan(&catalog, rollout, metric) {
                    Ok(query) => query,
                    Err(reason) => return result(CheckOutcome::NoData, None, reason),
                };
                return match query.run(&self.client).await {
                    Ok(value) => judged(value, format!("keptn: {value:.4} ({})", query.describe())),
                    Err(error) => result(CheckOutcome::NoData, None, format!("keptn: {error}")),
                };
            }
            let plan = match Self::plan(&catalog, rollout, metric) {
                Ok(plan) => plan,
                Err(reason) => return result(CheckOutcome::NoData, None, reason),
            };
            match self.run(&plan).await {
                Ok(Some(value)) => judged(
                    value,
                    format!("externalmetrics: {value:.4} ({})", plan.path),
                ),
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

/// Keptn's metrics API group and version, as Flagger reads it.
const KEPTN_API: (&str, &str) = ("metrics.keptn.sh", "v1beta1");

/// How long an Analysis is waited for, and how often it is looked at (Flagger's 10 s and 1 s).
const ANALYSIS_TIMEOUT: Duration = Duration::from_secs(10);
const ANALYSIS_POLL: Duration = Duration::from_secs(1);

/// A Keptn query, parsed.
#[derive(Debug, Clone, PartialEq)]
enum KeptnQuery {
    /// `status.value` of KeptnMetric `name` in `namespace`.
    Metric { namespace: String, name: String },
    /// An Analysis of AnalysisDefinition `name` in `namespace`.
    Analysis {
        namespace: String,
        name: String,
        recent: String,
        args: std::collections::BTreeMap<String, String>,
    },
}

fn keptn_resource(kind: &str, plural: &str) -> kube::api::ApiResource {
    let (group, version) = KEPTN_API;
    kube::api::ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

impl KeptnQuery {
    /// `KIND/NAMESPACE/NAME[/DURATION[/K=V;K=V]]`, lowercased and trimmed first (Flagger's
    /// reading).
    fn parse(query: &str) -> Result<KeptnQuery, String> {
        let query = query.trim().to_lowercase();
        let parts: Vec<&str> = query.split('/').collect();
        if parts.len() < 3 {
            return Err("fewer than 3 parts".into());
        }
        if parts.len() > 5 {
            return Err("more than 5 parts".into());
        }
        let (namespace, name) = (parts[1].to_string(), parts[2].to_string());
        if namespace.is_empty() || name.is_empty() {
            return Err("an empty namespace or name".into());
        }
        match parts[0] {
            "keptnmetric" | "keptnmetrics" => {
                if parts.len() > 3 {
                    return Err("a keptnmetric query has no duration or arguments".into());
                }
                Ok(KeptnQuery::Metric { namespace, name })
            }
            "analysis" | "analyses" => {
                let recent = parts.get(3).map_or("1m", |duration| *duration);
                if recent.is_empty() {
                    return Err("an empty duration".into());
                }
                let mut args = std::collections::BTreeMap::new();
                for pair in parts.get(4).iter().flat_map(|args| args.split(';')) {
                    if pair.is_empty() {
                        continue;
                    }
                    let (key, value) = pair
                        .split_once('=')
                        .ok_or_else(|| format!("the argument {pair:?} is not K=V"))?;
                    args.insert(key.to_string(), value.to_string());
                }
                Ok(KeptnQuery::Analysis {
                    namespace,
                    name,
                    recent: recent.to_string(),
                    args,
                })
            }
            other => Err(format!("{other:?} is neither keptnmetric nor analysis")),
        }
    }

    fn describe(&self) -> String {
        match self {
            KeptnQuery::Metric { namespace, name } => format!("KeptnMetric {namespace}/{name}"),
            KeptnQuery::Analysis {
                namespace, name, ..
            } => format!("Analysis of {namespace}/{name}"),
        }
    }

    async fn run(&self, client: &kube::Client) -> Result<f64, String> {
        use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
        let api_error = |doing: &str, error: kube::Error| match error {
            kube::Error::Api(status) => format!(
                "{doing}: {} {}: {}",
                status.code, status.reason, status.message
            ),
            other => format!("{doing}: {other}"),
        };
        match self {
            KeptnQuery::Metric { namespace, name } => {
                let api: Api<DynamicObject> = Api::namespaced_with(
                    client.clone(),
                    namespace,
                    &keptn_resource("KeptnMetric", "keptnmetrics"),
                );
                let doing = format!("reading KeptnMetric {namespace}/{name}");
                let object = tokio::time::timeout(QUERY_TIMEOUT, api.get(name))
                    .await
                    .map_err(|_| {
                        format!("{doing}: no answer within {} s", QUERY_TIMEOUT.as_secs())
                    })?
                    .map_err(|error| api_error(&doing, error))?;
                let value = object
                    .data
                    .pointer("/status/value")
                    .and_then(Value::as_str)
                    .filter(|value| !value.is_empty())
                    .ok_or_else(|| format!("KeptnMetric {namespace}/{name} has no status.value"))?;
                value
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|value| value.is_finite())
                    .ok_or_else(|| {
                        format!(
                            "KeptnMetric {namespace}/{name}: status.value {value:?} is not a number"
                        )
                    })
            }
            KeptnQuery::Analysis {
                namespace,
                name,
                recent,
                args,
            } => {
                let api: Api<DynamicObject> = Api::namespaced_with(
                    client.clone(),
                    namespace,
                    &keptn_resource("Analysis", "analyses"),
                );
                let analysis_name = format!("{name}-{}", suffix());
                let object: DynamicObject = serde_json::from_value(serde_json::json!({
                    "apiVersion": format!("{}/{}", KEPTN_API.0, KEPTN_API.1),
                    "kind": "Analysis",
                    "metadata": {"name": analysis_name, "namespace": namespace},
                    "spec": {
                        "analysisDefinition": {"name": name},
                        "timeframe": {"recent": recent},
                        "args": args,
                    },
                }))
                .map_err(|error| format!("building the Analysis: {error}"))?;
                let doing = format!("creating Analysis {namespace}/{analysis_name}");
                api.create(&PostParams::default(), &object)
                    .await
                    .map_err(|error| api_error(&doing, error))?;
                let outcome = wait_for_analysis(&api, &analysis_name).await;
                // Deleted whatever the outcome; a failure to delete is said, not hidden.
                let deleted = api
                    .delete(&analysis_name, &DeleteParams::default())
                    .await
                    .map_err(|error| {
                        api_error(
                            &format!("deleting Analysis {namespace}/{analysis_name}"),
                            error,
                        )
                    });
                match (outcome, deleted) {
                    (Ok(pass), _) => Ok(if pass { 1.0 } else { 0.0 }),
                    (Err(error), Ok(_)) => {
                        Err(format!("Analysis {namespace}/{analysis_name}: {error}"))
                    }
                    (Err(error), Err(also)) => Err(format!(
                        "Analysis {namespace}/{analysis_name}: {error}; {also}"
                    )),
                }
            }
        }
    }
}

/// Waits for Analysis `name` to complete; whether it passed.
async fn wait_for_analysis(
    api: &kube::api::Api<kube::api::DynamicObject>,
    name: &str,
) -> Result<bool, String> {
    let started = tokio::time::Instant::now();
    loop {
        match api.get(name).await {
            Ok(object) => {
                let status = object.data.get("status");
                let state = status
                    .and_then(|status| status.get("state"))
                    .and_then(Value::as_str);
                if state == Some("Completed") {
                    return Ok(status
                        .and_then(|status| status.get("pass"))
                        .and_then(Value::as_bool)
                        .unwrap_or(false));
                }
            }
            Err(kube::Error::Api(status)) => {
                return Err(format!(
                    "{} {}: {}",
                    status.code, status.reason, status.message
                ));
            }
            // Another error (the connection): looked at again at the next poll.
            Err(_) => {}
        }
        if started.elapsed() + ANALYSIS_POLL > ANALYSIS_TIMEOUT {
            return Err(format!(
                "not completed within {} s",
                ANALYSIS_TIMEOUT.as_secs()
            ));
        }
        tokio::time::sleep(ANALYSIS_POLL).await;
    }
}

/// Six lowercase hex characters, different for each Analysis this process creates.
fn suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.subsec_nanos());
    // A SplitMix64 step mixes the time and the count, so names do not run in sequence.
    let mut mixed = (u64::from(nanos) << 20 ^ count).wrapping_add(0x9e37_79b9_7f4a_7c15);
    mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    mixed ^= mixed >> 31;
    format!("{:06x}", mixed & 0xff_ffff)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn keptn_queries_are_lowercased_and_read_as_flagger_reads_them() {
        assert_eq!(
            KeptnQuery::parse(" KeptnMetric/Shop/Error-Rate \n").unwrap(),
            KeptnQuery::Metric {
                namespace: "shop".into(),
                name: "error-rate".into()
            }
        );
        assert_eq!(
            KeptnQuery::parse("analyses/shop/slo/5m/Service=PodInfo;tier=web").unwrap(),
            KeptnQuery::Analysis {
                namespace: "shop".into(),
                name: "slo".into(),
                recent: "5m".into(),
                args: [("service", "podinfo"), ("tier", "web")]
                    .iter()
                    .map(|(key, value)| (key.to_string(), value.to_string()))
                    .collect(),
            }
        );
        assert!(matches!(
            KeptnQuery::parse("analysis/shop/slo").unwrap(),
            KeptnQuery::Analysis { recent, args, .. } if recent == "1m" && args.is_empty()
        ));
        for bad in [
            "keptnmetric/shop",
            "metric/shop/x",
            "keptnmetric/shop/x/1m",
            "analysis//x",
            "analysis/shop/x/1m/novalue",
            "analysis/shop/x/1m/a=b/extra",
        ] {
            assert!(KeptnQuery::parse(bad).is_err(), "{bad}");
        }
        assert_ne!(suffix(), suffix());
        assert_eq!(suffix().len(), 6);
    }

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
