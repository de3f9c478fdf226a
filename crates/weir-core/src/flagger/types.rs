//! Serde types for the parts of Flagger's documents that weir reads into its typed model.
//!
//! These types are lenient on purpose: they accept nulls and omitted fields the way Flagger's Go
//! structs do (a zero value means "unset"), and they do not deny unknown fields. Unknown fields
//! are found separately by walking the raw document (see `kept.rs`), so that every one of them is
//! kept and reported instead of refused. Structural errors (a string where a number belongs) are
//! still reported, all at once, through `crate::document::deserialize_collecting`.

use std::collections::BTreeMap;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::units::{GoDuration, Weight};

/// A Flagger Canary, as far as weir types it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CanaryDocument {
    #[serde(default)]
    pub metadata: Option<Metadata>,
    #[serde(default)]
    pub spec: Option<CanarySpec>,
}

/// Object metadata; other metadata keys are carried from the raw document.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Metadata {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// The typed part of a Canary's spec. The Kubernetes side (targetRef, service, provider ...) is
/// carried from the raw document as data.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CanarySpec {
    #[serde(default)]
    pub analysis: Option<AnalysisSpec>,
    #[serde(default)]
    pub canary_analysis: Option<AnalysisSpec>,
    #[serde(default)]
    pub progress_deadline_seconds: Option<i64>,
    #[serde(default)]
    pub skip_analysis: Option<bool>,
    #[serde(default)]
    pub suspend: Option<bool>,
    #[serde(default)]
    pub revert_on_deletion: Option<bool>,
}

/// `spec.analysis` (or the deprecated `spec.canaryAnalysis`).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct AnalysisSpec {
    #[serde(default)]
    pub interval: OptionalDuration,
    #[serde(default)]
    pub threshold: Option<i64>,
    #[serde(default)]
    pub max_weight: Option<Weight>,
    #[serde(default)]
    pub step_weight: Option<Weight>,
    #[serde(default)]
    pub step_weights: Option<Vec<Weight>>,
    #[serde(default)]
    pub step_weight_promotion: Option<Weight>,
    #[serde(default)]
    pub iterations: Option<i64>,
    #[serde(default, rename = "match")]
    pub match_rules: Option<Vec<MatchRuleSpec>>,
    #[serde(default)]
    pub mirror: Option<bool>,
    #[serde(default)]
    pub mirror_weight: Option<Weight>,
    #[serde(default)]
    pub session_affinity: Option<SessionAffinitySpec>,
    #[serde(default)]
    pub metrics: Option<Vec<MetricSpec>>,
    #[serde(default)]
    pub webhooks: Option<Vec<WebhookSpec>>,
    #[serde(default)]
    pub alerts: Option<Vec<AlertSpec>>,
}

/// An Istio-shaped HTTPMatchRequest, as far as weir has equivalents.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct MatchRuleSpec {
    #[serde(default)]
    pub headers: Option<BTreeMap<String, StringMatchSpec>>,
    #[serde(default)]
    pub query_params: Option<BTreeMap<String, StringMatchSpec>>,
    #[serde(default)]
    pub uri: Option<StringMatchSpec>,
    #[serde(default)]
    pub method: Option<StringMatchSpec>,
}

/// An Istio StringMatch.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct StringMatchSpec {
    #[serde(default)]
    pub exact: Option<String>,
    #[serde(default)]
    pub prefix: Option<String>,
    #[serde(default)]
    pub suffix: Option<String>,
    #[serde(default)]
    pub regex: Option<String>,
}

/// `analysis.sessionAffinity`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SessionAffinitySpec {
    pub cookie_name: String,
    #[serde(default)]
    pub primary_cookie_name: Option<String>,
    #[serde(default)]
    pub max_age: Option<i64>,
}

/// One entry of `analysis.metrics`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct MetricSpec {
    pub name: String,
    #[serde(default)]
    pub interval: OptionalDuration,
    #[serde(default)]
    pub threshold: Option<f64>,
    #[serde(default)]
    pub threshold_range: Option<ThresholdRangeSpec>,
    #[serde(default)]
    pub query: Option<String>,
    #[serde(default)]
    pub template_ref: Option<ReferenceSpec>,
    #[serde(default)]
    pub template_variables: Option<BTreeMap<String, Value>>,
}

/// `thresholdRange`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ThresholdRangeSpec {
    #[serde(default)]
    pub min: Option<f64>,
    #[serde(default)]
    pub max: Option<f64>,
}

/// `templateRef`, `providerRef`, `secretRef`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ReferenceSpec {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
}

/// One entry of `analysis.webhooks`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct WebhookSpec {
    pub name: String,
    #[serde(default, rename = "type")]
    pub hook_type: Option<String>,
    pub url: String,
    #[serde(default)]
    pub timeout: OptionalDuration,
    #[serde(default)]
    pub retries: Option<i64>,
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, Value>>,
    #[serde(default)]
    pub mute_alert: Option<bool>,
}

/// One entry of `analysis.alerts`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct AlertSpec {
    pub name: String,
    #[serde(default)]
    pub severity: Option<String>,
    pub provider_ref: ReferenceSpec,
}

/// A Flagger MetricTemplate, as far as weir types it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TemplateDocument {
    #[serde(default)]
    pub metadata: Option<Metadata>,
    #[serde(default)]
    pub spec: Option<TemplateSpec>,
}

/// A MetricTemplate's spec.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TemplateSpec {
    #[serde(default)]
    pub provider: Option<ProviderSpec>,
    #[serde(default)]
    pub query: Option<String>,
}

/// A MetricTemplate's provider.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ProviderSpec {
    #[serde(default, rename = "type")]
    pub provider_type: Option<String>,
    #[serde(default)]
    pub address: Option<String>,
    #[serde(default)]
    pub secret_ref: Option<ReferenceSpec>,
    /// Go's `http.Header`: each name has a list of values (a single string is accepted too).
    #[serde(default)]
    pub headers: Option<BTreeMap<String, HeaderValues>>,
    #[serde(default)]
    pub insecure_skip_verify: Option<bool>,
    #[serde(default)]
    pub region: Option<String>,
}

/// The values of one provider header.
#[derive(Debug, Default)]
pub(super) struct HeaderValues(pub Vec<String>);

impl<'de> Deserialize<'de> for HeaderValues {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::Null => Ok(HeaderValues(Vec::new())),
            Value::String(text) => Ok(HeaderValues(vec![text])),
            Value::Array(items) => items
                .into_iter()
                .map(|item| match item {
                    Value::String(text) => Ok(text),
                    other => Err(D::Error::custom(format!(
                        "a header value is a string, not a {}",
                        crate::document::json_type_name(&other)
                    ))),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(HeaderValues),
            other => Err(D::Error::custom(format!(
                "a header is a list of strings, not a {}",
                crate::document::json_type_name(&other)
            ))),
        }
    }
}

/// A Go duration where an empty string or null means "unset", as in Flagger.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct OptionalDuration(pub Option<GoDuration>);

impl<'de> Deserialize<'de> for OptionalDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::Null => Ok(OptionalDuration(None)),
            Value::String(text) if text.trim().is_empty() => Ok(OptionalDuration(None)),
            other => GoDuration::deserialize(other)
                .map(|duration| OptionalDuration(Some(duration)))
                .map_err(|error| D::Error::custom(error.to_string())),
        }
    }
}
