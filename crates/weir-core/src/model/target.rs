//! Where a rollout acts: `spec.target`, one typed set of settings per kind.
//!
//! Unknown settings are refused with their path, so a misspelt field is found when the document
//! is read, not by a provider at run time. Adapters read these types; none looks a setting up by
//! name.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::FieldError;
use crate::document::{deserialize_collecting, json_type_name};
use crate::model::local::LocalTarget;

/// The target of a rollout, by kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Target {
    /// Traffic through weir's embedded router to versions weir reaches or starts.
    Local(Box<LocalTarget>),
    /// Kubernetes workloads behind a traffic provider (Flagger's Canary fields).
    Kubernetes(Box<KubernetesTarget>),
    /// A feature flag's audience, moved from one variation to another.
    Flag(FlagTarget),
}

/// The kinds of target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum TargetKind {
    /// Traffic through weir's embedded router.
    Local,
    /// Kubernetes workloads behind a traffic provider.
    Kubernetes,
    /// A feature flag's variation weights.
    Flag,
}

/// The kinds as written in documents, for error messages.
const KIND_NAMES: [&str; 3] = ["local", "kubernetes", "flag"];

/// A Kubernetes target: the fields of a Flagger Canary that say what to roll out and how traffic
/// reaches it. Fields are in alphabetical order so that a document's serialized form is stable.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubernetesTarget {
    /// The HorizontalPodAutoscaler (or KEDA ScaledObject) of the workload, Flagger's shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaler_ref: Option<AutoscalerReference>,
    /// Percentage of the canary's pods that must be ready (Flagger's default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_ready_threshold: Option<u32>,
    /// The Ingress whose canary annotations carry the traffic (NGINX).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_ref: Option<ObjectReference>,
    /// `mode: revisions`: the component whose revisions are rolled out. Its Deployments are found
    /// by the label `app.oam.dev/component=COMPONENT` (OAM's) unless `selector` says otherwise;
    /// it also names the apex Service and the route objects. Default: the rollout's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    /// The Prometheus that judges this rollout (overrides the process's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_server: Option<String>,
    /// How the workload is rolled out: `copy` (Flagger's way, the default), `revisions` (two
    /// Deployments of a component, the newest the canary) or `managed` (the rollout carries the
    /// pod template and weir owns the Deployment, Service and route).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<KubernetesMode>,
    /// Percentage of the primary's pods that must be ready (Flagger's default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_ready_threshold: Option<u32>,
    /// `mode: managed`: the primary's replica count (default 1); changing it scales in place,
    /// with no run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
    /// `mode: revisions`: the value of the revision label of the revision to roll out (pins the
    /// canary; default: the newest revision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// `mode: revisions`: the label that tells a component's revisions apart, on the
    /// Deployments and their pods. Default `app.oam.dev/revision`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_label: Option<String>,
    /// The traffic provider (`istio`, `linkerd`, `nginx`, `gatewayapi:v1`, ...); Istio when
    /// unset, as in Flagger.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The HTTPRoute or Ingress route the provider edits (Gateway API, Traefik, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_ref: Option<ObjectReference>,
    /// `mode: revisions`: the labels that select the component's Deployments (instead of
    /// `app.oam.dev/component=COMPONENT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<BTreeMap<String, String>>,
    /// The Services and routing settings, Flagger's `spec.service` shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<KubernetesService>,
    /// `mode: managed`: the next pod template goes live at once, without a canary or analysis;
    /// weir clears the flag itself once that is done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_canary: Option<bool>,
    /// `mode: revisions`: an object (e.g. a KubeVela Application) that also gets the rollout's
    /// status, as a `WeirRollout` condition and `weir.dev/rollout-*` annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_to: Option<ObjectReference>,
    /// The workload rolled out (a Deployment or DaemonSet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_ref: Option<ObjectReference>,
    /// `mode: managed`: the pod template of the workload (a Kubernetes PodTemplateSpec). A new
    /// template is a new revision; weir runs it as Deployment `NAME-canary` and, once promoted,
    /// in Deployment `NAME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<Value>,
    /// The upstream of an API gateway (Gloo, APISIX).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_ref: Option<ObjectReference>,
}

/// How a Kubernetes target's workload is rolled out (`spec.target.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum KubernetesMode {
    /// Flagger's way: the target Deployment is the canary, weir keeps a `-primary` copy.
    #[default]
    Copy,
    /// Two revisions of a component (OAM): the newest revision's Deployment is the canary, the
    /// revision users are on is the primary; nothing is copied or renamed.
    Revisions,
    /// The rollout carries the pod template; weir owns the Deployment, Service and route.
    Managed,
}

impl KubernetesMode {
    /// The modes as written in documents, for error messages.
    pub const NAMES: &'static str = "copy, revisions, managed";

    /// The name as written in documents.
    pub fn as_str(self) -> &'static str {
        match self {
            KubernetesMode::Copy => "copy",
            KubernetesMode::Revisions => "revisions",
            KubernetesMode::Managed => "managed",
        }
    }
}

impl KubernetesTarget {
    /// The mode, `copy` when unset.
    pub fn mode(&self) -> KubernetesMode {
        self.mode.unwrap_or_default()
    }
}

/// The Services and routes of a Kubernetes target: Flagger's `spec.service`. Nested routing
/// settings stay JSON until a traffic provider reads them. Fields are in alphabetical order so
/// that a document's serialized form is stable.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubernetesService {
    /// Metadata of the apex Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apex: Option<ObjectMetadata>,
    /// The port's application protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,
    /// The backend timeout (Gateway API).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_timeout: Option<String>,
    /// App Mesh backends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backends: Option<Value>,
    /// Metadata of the canary Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<ObjectMetadata>,
    /// The routes' CORS policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cors_policy: Option<Value>,
    /// Whether the VirtualService is a delegate (Istio).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegation: Option<bool>,
    /// The Gateway API gateways the routes attach to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_refs: Option<Value>,
    /// The Istio gateways the routes attach to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateways: Option<Value>,
    /// Header operations on requests and responses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<Value>,
    /// Whether the Services are headless.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headless: Option<bool>,
    /// The hosts the routes answer for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Value>,
    /// Istio HTTP match conditions.
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub match_rules: Option<Value>,
    /// The App Mesh mesh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mesh_name: Option<String>,
    /// Mirror destinations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<Value>,
    /// The Service's name (default: the target's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The port the Services expose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
    /// Whether the workload's other container ports are exposed too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_discovery: Option<bool>,
    /// The name of that port (default `http`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_name: Option<String>,
    /// Metadata of the primary Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<ObjectMetadata>,
    /// The routes' retry policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<Value>,
    /// The routes' URI rewrite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<Value>,
    /// The container port, a number or a name (default: `port`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_port: Option<Value>,
    /// The HTTP request timeout of the routes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// The Services' traffic distribution preference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_distribution: Option<String>,
    /// The destination rules' traffic policy (Istio).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_policy: Option<Value>,
    /// Metadata weir leaves alone on the objects it manages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unmanaged_metadata: Option<Value>,
}

/// Labels and annotations weir puts on an object it creates (Flagger's `CustomMetadata`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ObjectMetadata {
    /// Labels to add.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations to add.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The autoscaler of a Kubernetes target's workload: Flagger's `spec.autoscalerRef`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AutoscalerReference {
    /// The autoscaler's API group and version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `HorizontalPodAutoscaler` or `ScaledObject`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The autoscaler's name.
    pub name: String,
    /// KEDA queries for the primary's scaler, by trigger name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_scaler_queries: Option<Value>,
    /// Replica bounds for the primary's scaler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_scaler_replicas: Option<Value>,
}

/// A reference to a Kubernetes object by kind and name.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ObjectReference {
    /// The object's API group and version, e.g. `apps/v1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// The object's kind, e.g. `Deployment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The object's name.
    pub name: String,
    /// The object's namespace, where a reference may cross namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// A flag target: the audience of `flag` moves from the `control` variation to `variation`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FlagTarget {
    /// The flag's key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flag: Option<String>,
    /// The variation users have today.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<String>,
    /// The variation users move to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variation: Option<String>,
    /// Names the content being rolled out: a new value starts a new run. Unset: a hash of the
    /// other settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
}

impl Target {
    /// The target's kind.
    pub fn kind(&self) -> TargetKind {
        match self {
            Target::Local(_) => TargetKind::Local,
            Target::Kubernetes(_) => TargetKind::Kubernetes,
            Target::Flag(_) => TargetKind::Flag,
        }
    }

    /// The local target's settings, if this is one.
    pub fn local(&self) -> Option<&LocalTarget> {
        match self {
            Target::Local(local) => Some(local),
            _ => None,
        }
    }

    /// The Kubernetes target's settings, if this is one.
    pub fn kubernetes(&self) -> Option<&KubernetesTarget> {
        match self {
            Target::Kubernetes(kubernetes) => Some(kubernetes),
            _ => None,
        }
    }

    /// The Prometheus this rollout names for its checks, if any.
    pub fn metrics_server(&self) -> Option<&str> {
        match self {
            Target::Local(local) => local.metrics_server.as_deref(),
            Target::Kubernetes(kubernetes) => kubernetes.metrics_server.as_deref(),
            Target::Flag(_) => None,
        }
    }

    /// The flag target's settings, if this is one.
    pub fn flag(&self) -> Option<&FlagTarget> {
        match self {
            Target::Flag(flag) => Some(flag),
            _ => None,
        }
    }

    /// Reads `spec.target` from a document, reporting every problem with its path under
    /// `spec.target` (serde's own tagged-enum errors would name only `spec.target`).
    pub fn parse(value: &Value) -> Result<Target, Vec<FieldError>> {
        const PATH: &str = "spec.target";
        let Some(map) = value.as_object() else {
            return Err(vec![FieldError::new(
                PATH,
                format!(
                    "expected a map with a kind ({}), found {}",
                    KIND_NAMES.join(", "),
                    json_type_name(value)
                ),
            )]);
        };
        let kind = match map.get("kind") {
            None => {
                return Err(vec![FieldError::missing(
                    format!("{PATH}.kind"),
                    format!("one of {}", KIND_NAMES.join(", ")),
                )]);
            }
            Some(Value::String(kind)) if KIND_NAMES.contains(&kind.as_str()) => kind.as_str(),
            Some(other) => {
                return Err(vec![FieldError::with_value(
                    format!("{PATH}.kind"),
                    other.to_string(),
                    format!("one of {}", KIND_NAMES.join(", ")),
                )]);
            }
        };
        // Every missing setting at once (serde would stop at the first).
        let missing: Vec<FieldError> = required_settings(kind)
            .iter()
            .filter(|name| !map.contains_key(**name))
            .map(|name| FieldError::new(format!("{PATH}.{name}"), "is required but missing"))
            .collect();
        if !missing.is_empty() {
            return Err(missing);
        }
        let mut settings = map.clone();
        settings.remove("kind");
        let settings = Value::Object(settings);
        let prefixed = |errors: Vec<FieldError>| {
            errors
                .into_iter()
                .map(|error| error.under(PATH))
                .collect::<Vec<_>>()
        };
        match kind {
            "local" => {
                deserialize_collecting(&settings).map(|local| Target::Local(Box::new(local)))
            }
            "kubernetes" => deserialize_collecting(&settings)
                .map(|kubernetes| Target::Kubernetes(Box::new(kubernetes))),
            _ => deserialize_collecting(&settings).map(Target::Flag),
        }
        .map_err(prefixed)
    }
}

/// The settings a target of `kind` cannot do without.
fn required_settings(kind: &str) -> &'static [&'static str] {
    match kind {
        "local" => &["listen", "primary", "canary"],
        _ => &[],
    }
}
