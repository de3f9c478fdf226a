//! Typed models of Argo Rollouts' `argoproj.io/v1alpha1` objects, as the CRDs define them.
//!
//! Every object the CRD schema closes refuses unknown fields (`deny_unknown_fields`), so a
//! misspelt field is an error naming its path. Subtrees that are another API's (a pod template, a
//! label selector, a Job spec) or that the CRD leaves open (`x-kubernetes-preserve-unknown-fields`:
//! plugin configurations) are kept as JSON values. Runtime state (`status`) is read as a value and
//! never acted on.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

/// Kubernetes object metadata: name, namespace, labels and annotations typed, the rest kept.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    /// The object's name (absent when `generateName` is used).
    #[serde(default)]
    pub name: Option<String>,
    /// A prefix the API server completes into a name.
    #[serde(default)]
    pub generate_name: Option<String>,
    /// The namespace (default `default`).
    #[serde(default)]
    pub namespace: Option<String>,
    /// Labels.
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations.
    #[serde(default)]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Any other metadata (uid, generation, ...), untouched.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// An integer or a string (`intstr.IntOrString`): a count, a percentage or an argument
/// placeholder such as `"{{args.count}}"`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum IntOrString {
    /// A number as written.
    Int(i64),
    /// A string as written.
    String(String),
}

impl IntOrString {
    /// The value as written, for messages.
    pub fn text(&self) -> String {
        match self {
            IntOrString::Int(number) => number.to_string(),
            IntOrString::String(text) => format!("{text:?}"),
        }
    }
}

// === Rollout ===

/// An Argo `Rollout`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rollout {
    /// `argoproj.io/v1alpha1`.
    pub api_version: String,
    /// `Rollout`.
    pub kind: String,
    /// Name, namespace, labels, annotations.
    #[serde(default)]
    pub metadata: Metadata,
    /// What is rolled out and how.
    pub spec: RolloutSpec,
    /// Argo's runtime state, read and not acted on.
    #[serde(default)]
    pub status: Option<Value>,
}

/// `spec` of a Rollout.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutSpec {
    /// Desired pods (default 1).
    #[serde(default)]
    pub replicas: Option<i64>,
    /// The label selector of the pods (`matchLabels`, `matchExpressions`).
    #[serde(default)]
    pub selector: Option<Value>,
    /// The pod template (PodTemplateSpec), or
    #[serde(default)]
    pub template: Option<Value>,
    /// a Deployment whose pod template is used.
    #[serde(default)]
    pub workload_ref: Option<WorkloadRef>,
    /// `canary` or `blueGreen`.
    #[serde(default)]
    pub strategy: Option<Strategy>,
    /// Seconds a new pod must be ready to count as available.
    #[serde(default)]
    pub min_ready_seconds: Option<i64>,
    /// Old ReplicaSets kept.
    #[serde(default)]
    pub revision_history_limit: Option<i64>,
    /// A user pause.
    #[serde(default)]
    pub paused: Option<bool>,
    /// Seconds without progress before the rollout is degraded (default 600).
    #[serde(default)]
    pub progress_deadline_seconds: Option<i64>,
    /// Abort when the progress deadline passes.
    #[serde(default)]
    pub progress_deadline_abort: Option<bool>,
    /// Pods created before this time are restarted.
    #[serde(default)]
    pub restart_at: Option<String>,
    /// Fast-track rollbacks to recent revisions.
    #[serde(default)]
    pub rollback_window: Option<RollbackWindow>,
    /// How many AnalysisRuns and Experiments are kept.
    #[serde(default)]
    pub analysis: Option<RunHistory>,
}

/// `spec.workloadRef`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkloadRef {
    /// `apps/v1`.
    #[serde(default)]
    pub api_version: Option<String>,
    /// `Deployment`.
    #[serde(default)]
    pub kind: Option<String>,
    /// The Deployment's name.
    #[serde(default)]
    pub name: Option<String>,
    /// `never`, `onsuccess` or `progressively`.
    #[serde(default)]
    pub scale_down: Option<String>,
}

/// `spec.rollbackWindow`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RollbackWindow {
    /// Revisions within the window.
    #[serde(default)]
    pub revisions: Option<i64>,
}

/// `spec.analysis`: history limits.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunHistory {
    /// Successful runs kept.
    #[serde(default)]
    pub successful_run_history_limit: Option<i64>,
    /// Unsuccessful runs kept.
    #[serde(default)]
    pub unsuccessful_run_history_limit: Option<i64>,
}

/// `spec.strategy`: exactly one of `canary` or `blueGreen`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Strategy {
    /// The canary strategy.
    #[serde(default)]
    pub canary: Option<Box<CanaryStrategy>>,
    /// The blue-green strategy.
    #[serde(default)]
    pub blue_green: Option<Box<BlueGreenStrategy>>,
}

/// `spec.strategy.canary`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CanaryStrategy {
    /// The steps.
    #[serde(default)]
    pub steps: Option<Vec<CanaryStep>>,
    /// The Service selecting canary pods.
    #[serde(default)]
    pub canary_service: Option<String>,
    /// The Service selecting stable pods.
    #[serde(default)]
    pub stable_service: Option<String>,
    /// Alternating stable Services (ALB, Istio).
    #[serde(default)]
    pub ping_pong: Option<PingPong>,
    /// How traffic is split.
    #[serde(default)]
    pub traffic_routing: Option<TrafficRouting>,
    /// Pods above the desired count during an update.
    #[serde(default)]
    pub max_surge: Option<IntOrString>,
    /// Pods that may be unavailable during an update.
    #[serde(default)]
    pub max_unavailable: Option<IntOrString>,
    /// Background analysis.
    #[serde(default)]
    pub analysis: Option<RolloutAnalysis>,
    /// Labels and annotations of canary pods.
    #[serde(default)]
    pub canary_metadata: Option<PodMetadata>,
    /// Labels and annotations of stable pods.
    #[serde(default)]
    pub stable_metadata: Option<PodMetadata>,
    /// Seconds before the old ReplicaSet is scaled down.
    #[serde(default)]
    pub scale_down_delay_seconds: Option<i64>,
    /// Old ReplicaSets left running during their delay.
    #[serde(default)]
    pub scale_down_delay_revision_limit: Option<i64>,
    /// Seconds before the canary is scaled down after an abort.
    #[serde(default)]
    pub abort_scale_down_delay_seconds: Option<i64>,
    /// Scale the stable ReplicaSet down as traffic leaves it.
    #[serde(default)]
    pub dynamic_stable_scale: Option<bool>,
    /// The least pods per ReplicaSet with traffic routing.
    #[serde(default)]
    pub min_pods_per_replica_set: Option<i64>,
    /// How many canary pods must be available before a step counts as done.
    #[serde(default)]
    pub replica_progress_threshold: Option<ReplicaProgressThreshold>,
    /// Scheduling away from the old ReplicaSet's nodes.
    #[serde(default)]
    pub anti_affinity: Option<AntiAffinity>,
}

/// `replicaProgressThreshold`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReplicaProgressThreshold {
    /// `Percent` or `Pods`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The percentage or the count.
    pub value: i64,
}

/// `antiAffinity`: exactly one of preferred (with a weight) or required.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AntiAffinity {
    /// Preferred, with a weight from 1 to 100.
    #[serde(default)]
    pub preferred_during_scheduling_ignored_during_execution: Option<PreferredAntiAffinity>,
    /// Required.
    #[serde(default)]
    pub required_during_scheduling_ignored_during_execution: Option<RequiredAntiAffinity>,
}

/// Preferred anti-affinity.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreferredAntiAffinity {
    /// 1 to 100.
    pub weight: i64,
}

/// Required anti-affinity (no settings).
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequiredAntiAffinity {}

/// `pingPong`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PingPong {
    /// The ping Service.
    pub ping_service: String,
    /// The pong Service.
    pub pong_service: String,
}

/// Labels and annotations given to pods in a role.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodMetadata {
    /// Labels.
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations.
    #[serde(default)]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// One canary step: exactly one action.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CanaryStep {
    /// Route this percentage to the canary.
    #[serde(default)]
    pub set_weight: Option<i64>,
    /// Wait, for a duration or until promoted.
    #[serde(default)]
    pub pause: Option<StepPause>,
    /// Run an analysis and wait for it.
    #[serde(default)]
    pub analysis: Option<RolloutAnalysis>,
    /// Run an experiment and wait for it.
    #[serde(default)]
    pub experiment: Option<StepExperiment>,
    /// Scale the canary independently of its weight.
    #[serde(default)]
    pub set_canary_scale: Option<SetCanaryScale>,
    /// Route requests with these headers to the canary.
    #[serde(default)]
    pub set_header_route: Option<SetHeaderRoute>,
    /// Mirror matching requests to the canary.
    #[serde(default)]
    pub set_mirror_route: Option<SetMirrorRoute>,
    /// A step plugin.
    #[serde(default)]
    pub plugin: Option<StepPlugin>,
}

/// `pause`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StepPause {
    /// Seconds (a number) or a duration with a unit (`30s`, `1h`); absent: until promoted.
    #[serde(default)]
    pub duration: Option<IntOrString>,
}

/// `setCanaryScale`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetCanaryScale {
    /// An absolute count.
    #[serde(default)]
    pub replicas: Option<i64>,
    /// A percentage of `spec.replicas`.
    #[serde(default)]
    pub weight: Option<i64>,
    /// Scale with the traffic weight again.
    #[serde(default)]
    pub match_traffic_weight: Option<bool>,
}

/// `setHeaderRoute`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetHeaderRoute {
    /// A managed route's name.
    #[serde(default)]
    pub name: Option<String>,
    /// Header conditions; none removes the route.
    #[serde(default, rename = "match")]
    pub match_rules: Option<Vec<HeaderRouteMatch>>,
}

/// One header condition of `setHeaderRoute`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeaderRouteMatch {
    /// The header.
    pub header_name: String,
    /// How its value is matched.
    pub header_value: StringMatch,
}

/// `exact`, `prefix` or `regex`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StringMatch {
    /// The whole value.
    #[serde(default)]
    pub exact: Option<String>,
    /// A prefix.
    #[serde(default)]
    pub prefix: Option<String>,
    /// A regular expression.
    #[serde(default)]
    pub regex: Option<String>,
}

/// `setMirrorRoute`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetMirrorRoute {
    /// A managed route's name.
    pub name: String,
    /// Request conditions; none removes the route.
    #[serde(default, rename = "match")]
    pub match_rules: Option<Vec<MirrorRouteMatch>>,
    /// The share mirrored (default 100).
    #[serde(default)]
    pub percentage: Option<i64>,
}

/// One condition of `setMirrorRoute`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MirrorRouteMatch {
    /// The method.
    #[serde(default)]
    pub method: Option<StringMatch>,
    /// The path.
    #[serde(default)]
    pub path: Option<StringMatch>,
    /// Headers by name.
    #[serde(default)]
    pub headers: Option<BTreeMap<String, StringMatch>>,
}

/// A step plugin.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StepPlugin {
    /// The plugin's name.
    pub name: String,
    /// Its configuration.
    #[serde(default)]
    pub config: Option<Value>,
}

/// An analysis a Rollout runs (background, step, pre- or post-promotion).
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutAnalysis {
    /// The templates whose metrics are run.
    #[serde(default)]
    pub templates: Option<Vec<TemplateRef>>,
    /// Arguments.
    #[serde(default)]
    pub args: Option<Vec<AnalysisArg>>,
    /// Metrics whose results do not count (regexes).
    #[serde(default)]
    pub dry_run: Option<Vec<DryRun>>,
    /// Measurements kept per metric.
    #[serde(default)]
    pub measurement_retention: Option<Vec<MeasurementRetention>>,
    /// Labels and annotations of the AnalysisRuns.
    #[serde(default)]
    pub analysis_run_metadata: Option<PodMetadata>,
    /// The step from which a background analysis runs.
    #[serde(default)]
    pub starting_step: Option<i64>,
}

/// A template reference.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TemplateRef {
    /// The template's name.
    #[serde(default)]
    pub template_name: Option<String>,
    /// A ClusterAnalysisTemplate rather than an AnalysisTemplate.
    #[serde(default)]
    pub cluster_scope: Option<bool>,
}

/// An argument: a value, or where the value comes from.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnalysisArg {
    /// The name, used as `{{args.NAME}}`.
    pub name: String,
    /// The value.
    #[serde(default)]
    pub value: Option<String>,
    /// Where the value comes from.
    #[serde(default)]
    pub value_from: Option<ValueFrom>,
}

/// `valueFrom`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ValueFrom {
    /// A key of a Secret.
    #[serde(default)]
    pub secret_key_ref: Option<SecretKeyRef>,
    /// `Stable` or `Latest`: the pod-template hash of that ReplicaSet.
    #[serde(default)]
    pub pod_template_hash_value: Option<String>,
    /// A field of the Rollout.
    #[serde(default)]
    pub field_ref: Option<FieldRef>,
}

/// `secretKeyRef`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretKeyRef {
    /// The Secret.
    pub name: String,
    /// The key.
    pub key: String,
}

/// `fieldRef`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FieldRef {
    /// The path, e.g. `metadata.labels['env']`.
    pub field_path: String,
}

/// `dryRun[]`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DryRun {
    /// A metric name or a regex.
    pub metric_name: String,
}

/// `measurementRetention[]`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MeasurementRetention {
    /// A metric name or a regex.
    pub metric_name: String,
    /// Measurements kept.
    pub limit: i64,
}

/// The experiment of a canary step.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StepExperiment {
    /// How long the experiment runs.
    #[serde(default)]
    pub duration: Option<String>,
    /// The ReplicaSets it runs.
    pub templates: Vec<StepExperimentTemplate>,
    /// The analyses it runs.
    #[serde(default)]
    pub analyses: Option<Vec<ExperimentAnalysis>>,
    /// Metrics whose results do not count.
    #[serde(default)]
    pub dry_run: Option<Vec<DryRun>>,
    /// Measurements kept per metric.
    #[serde(default)]
    pub measurement_retention: Option<Vec<MeasurementRetention>>,
    /// Labels and annotations of its AnalysisRuns.
    #[serde(default)]
    pub analysis_run_metadata: Option<PodMetadata>,
    /// Seconds before its ReplicaSets are scaled down.
    #[serde(default)]
    pub scale_down_delay_seconds: Option<i64>,
}

/// A ReplicaSet of a step's experiment.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StepExperimentTemplate {
    /// Its name.
    pub name: String,
    /// `stable` or `canary`: whose pod template it runs.
    pub spec_ref: String,
    /// Pods.
    #[serde(default)]
    pub replicas: Option<i64>,
    /// Traffic routed to it (traffic routing only).
    #[serde(default)]
    pub weight: Option<i64>,
    /// Pod metadata.
    #[serde(default)]
    pub metadata: Option<PodMetadata>,
    /// A label selector.
    #[serde(default)]
    pub selector: Option<Value>,
    /// A Service for it.
    #[serde(default)]
    pub service: Option<ExperimentService>,
}

/// The Service of an experiment's ReplicaSet.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExperimentService {
    /// Its name.
    #[serde(default)]
    pub name: Option<String>,
}

/// An analysis of an experiment.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExperimentAnalysis {
    /// Its name.
    pub name: String,
    /// The template.
    pub template_name: String,
    /// A ClusterAnalysisTemplate.
    #[serde(default)]
    pub cluster_scope: Option<bool>,
    /// Arguments.
    #[serde(default)]
    pub args: Option<Vec<AnalysisArg>>,
    /// The experiment ends when this analysis does.
    #[serde(default)]
    pub required_for_completion: Option<bool>,
}

/// `trafficRouting`: one or more routers.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrafficRouting {
    /// Istio VirtualServices (and DestinationRule subsets).
    #[serde(default)]
    pub istio: Option<IstioRouting>,
    /// ingress-nginx canary Ingresses.
    #[serde(default)]
    pub nginx: Option<NginxRouting>,
    /// An SMI TrafficSplit.
    #[serde(default)]
    pub smi: Option<SmiRouting>,
    /// Router plugins by name (`argoproj-labs/gatewayAPI`, ...).
    #[serde(default)]
    pub plugins: Option<BTreeMap<String, Value>>,
    /// AWS Application Load Balancer.
    #[serde(default)]
    pub alb: Option<Value>,
    /// Ambassador / Emissary Mappings.
    #[serde(default)]
    pub ambassador: Option<Value>,
    /// Apache APISIX routes.
    #[serde(default)]
    pub apisix: Option<Value>,
    /// AWS App Mesh.
    #[serde(default)]
    pub app_mesh: Option<Value>,
    /// Traefik weighted services.
    #[serde(default)]
    pub traefik: Option<Value>,
    /// Named header and mirror routes, in priority order.
    #[serde(default)]
    pub managed_routes: Option<Vec<ManagedRoute>>,
    /// The weight that means everything (nginx and plugins; default 100).
    #[serde(default)]
    pub max_traffic_weight: Option<i64>,
}

/// `managedRoutes[]`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ManagedRoute {
    /// The route's name.
    pub name: String,
}

/// `trafficRouting.istio`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IstioRouting {
    /// One VirtualService.
    #[serde(default)]
    pub virtual_service: Option<IstioVirtualService>,
    /// Several VirtualServices.
    #[serde(default)]
    pub virtual_services: Option<Vec<IstioVirtualService>>,
    /// Subset-level splitting.
    #[serde(default)]
    pub destination_rule: Option<IstioDestinationRule>,
}

/// An Istio VirtualService and the routes in it that are split.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IstioVirtualService {
    /// Its name.
    pub name: String,
    /// HTTP route names.
    #[serde(default)]
    pub routes: Option<Vec<String>>,
    /// TLS routes.
    #[serde(default)]
    pub tls_routes: Option<Vec<IstioTlsRoute>>,
    /// TCP routes.
    #[serde(default)]
    pub tcp_routes: Option<Vec<IstioTcpRoute>>,
}

/// A TLS route of a VirtualService, by port and SNI hosts.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IstioTlsRoute {
    /// The port.
    #[serde(default)]
    pub port: Option<i64>,
    /// The SNI hosts.
    #[serde(default)]
    pub sni_hosts: Option<Vec<String>>,
}

/// A TCP route of a VirtualService, by port.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IstioTcpRoute {
    /// The port.
    #[serde(default)]
    pub port: Option<i64>,
}

/// An Istio DestinationRule with a stable and a canary subset.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IstioDestinationRule {
    /// Its name.
    pub name: String,
    /// The canary subset.
    pub canary_subset_name: String,
    /// The stable subset.
    pub stable_subset_name: String,
    /// Other subsets.
    #[serde(default)]
    pub additional_subset_names: Option<Vec<String>>,
}

/// `trafficRouting.nginx`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NginxRouting {
    /// The stable Ingress.
    #[serde(default)]
    pub stable_ingress: Option<String>,
    /// Several stable Ingresses.
    #[serde(default)]
    pub stable_ingresses: Option<Vec<String>>,
    /// The annotation prefix (default `nginx.ingress.kubernetes.io`).
    #[serde(default)]
    pub annotation_prefix: Option<String>,
    /// Extra canary Ingress annotations.
    #[serde(default)]
    pub additional_ingress_annotations: Option<BTreeMap<String, String>>,
    /// Annotations of the canary Ingress.
    #[serde(default)]
    pub canary_ingress_annotations: Option<BTreeMap<String, String>>,
}

/// `trafficRouting.smi`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SmiRouting {
    /// The root Service.
    #[serde(default)]
    pub root_service: Option<String>,
    /// The TrafficSplit's name.
    #[serde(default)]
    pub traffic_split_name: Option<String>,
}

/// `spec.strategy.blueGreen`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BlueGreenStrategy {
    /// The Service that serves users.
    #[serde(default)]
    pub active_service: Option<String>,
    /// The Service of the new version before promotion.
    #[serde(default)]
    pub preview_service: Option<String>,
    /// Promote without a person (default true).
    #[serde(default)]
    pub auto_promotion_enabled: Option<bool>,
    /// Promote after this many seconds.
    #[serde(default)]
    pub auto_promotion_seconds: Option<i64>,
    /// Pods of the preview before promotion.
    #[serde(default)]
    pub preview_replica_count: Option<i64>,
    /// Analysis before the switch.
    #[serde(default)]
    pub pre_promotion_analysis: Option<RolloutAnalysis>,
    /// Analysis after the switch.
    #[serde(default)]
    pub post_promotion_analysis: Option<RolloutAnalysis>,
    /// Seconds before the old ReplicaSet is scaled down (default 30).
    #[serde(default)]
    pub scale_down_delay_seconds: Option<i64>,
    /// Old ReplicaSets left running during their delay.
    #[serde(default)]
    pub scale_down_delay_revision_limit: Option<i64>,
    /// Seconds before the preview is scaled down after an abort.
    #[serde(default)]
    pub abort_scale_down_delay_seconds: Option<i64>,
    /// Labels and annotations of active pods.
    #[serde(default)]
    pub active_metadata: Option<PodMetadata>,
    /// Labels and annotations of preview pods.
    #[serde(default)]
    pub preview_metadata: Option<PodMetadata>,
    /// Scheduling away from the old ReplicaSet's nodes.
    #[serde(default)]
    pub anti_affinity: Option<AntiAffinity>,
    /// Pods that may be unavailable.
    #[serde(default)]
    pub max_unavailable: Option<IntOrString>,
}

// === AnalysisTemplate, ClusterAnalysisTemplate, AnalysisRun ===

/// An `AnalysisTemplate` or `ClusterAnalysisTemplate`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnalysisTemplate {
    /// `argoproj.io/v1alpha1`.
    pub api_version: String,
    /// `AnalysisTemplate` or `ClusterAnalysisTemplate`.
    pub kind: String,
    /// Name, namespace, labels, annotations.
    #[serde(default)]
    pub metadata: Metadata,
    /// Arguments and metrics.
    pub spec: AnalysisTemplateSpec,
}

/// `spec` of an AnalysisTemplate.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnalysisTemplateSpec {
    /// Arguments.
    #[serde(default)]
    pub args: Option<Vec<AnalysisArg>>,
    /// Metrics.
    #[serde(default)]
    pub metrics: Option<Vec<Metric>>,
    /// Metrics whose results do not count.
    #[serde(default)]
    pub dry_run: Option<Vec<DryRun>>,
    /// Measurements kept per metric.
    #[serde(default)]
    pub measurement_retention: Option<Vec<MeasurementRetention>>,
    /// Nested templates.
    #[serde(default)]
    pub templates: Option<Vec<TemplateRef>>,
}

/// An `AnalysisRun`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnalysisRun {
    /// `argoproj.io/v1alpha1`.
    pub api_version: String,
    /// `AnalysisRun`.
    pub kind: String,
    /// Name, namespace, labels, annotations.
    #[serde(default)]
    pub metadata: Metadata,
    /// Arguments and metrics.
    pub spec: AnalysisRunSpec,
    /// Argo's runtime state, read and not acted on.
    #[serde(default)]
    pub status: Option<Value>,
}

/// `spec` of an AnalysisRun.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnalysisRunSpec {
    /// Arguments.
    #[serde(default)]
    pub args: Option<Vec<AnalysisArg>>,
    /// Metrics.
    pub metrics: Vec<Metric>,
    /// Stop measuring.
    #[serde(default)]
    pub terminate: Option<bool>,
    /// Metrics whose results do not count.
    #[serde(default)]
    pub dry_run: Option<Vec<DryRun>>,
    /// Measurements kept per metric.
    #[serde(default)]
    pub measurement_retention: Option<Vec<MeasurementRetention>>,
    /// When finished runs are deleted.
    #[serde(default)]
    pub ttl_strategy: Option<TtlStrategy>,
}

/// `ttlStrategy`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TtlStrategy {
    /// After any completion.
    #[serde(default)]
    pub seconds_after_completion: Option<i64>,
    /// After a failure.
    #[serde(default)]
    pub seconds_after_failure: Option<i64>,
    /// After a success.
    #[serde(default)]
    pub seconds_after_success: Option<i64>,
}

/// A metric: how often it is measured, what a measurement means, and where it comes from.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Metric {
    /// Its name, unique in the template.
    pub name: String,
    /// Time between measurements (a Go duration).
    #[serde(default)]
    pub interval: Option<String>,
    /// Time before the first measurement.
    #[serde(default)]
    pub initial_delay: Option<String>,
    /// Measurements taken.
    #[serde(default)]
    pub count: Option<IntOrString>,
    /// An expression over `result` that means success.
    #[serde(default)]
    pub success_condition: Option<String>,
    /// An expression over `result` that means failure.
    #[serde(default)]
    pub failure_condition: Option<String>,
    /// Failed measurements tolerated (default 0; -1: any).
    #[serde(default)]
    pub failure_limit: Option<IntOrString>,
    /// Inconclusive measurements tolerated (default 0).
    #[serde(default)]
    pub inconclusive_limit: Option<IntOrString>,
    /// Errors in a row tolerated (default 4).
    #[serde(default)]
    pub consecutive_error_limit: Option<IntOrString>,
    /// Successes in a row that end the metric successfully.
    #[serde(default)]
    pub consecutive_success_limit: Option<IntOrString>,
    /// Where measurements come from: exactly one provider.
    pub provider: MetricProvider,
}

/// `provider`: exactly one.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MetricProvider {
    /// A PromQL query.
    #[serde(default)]
    pub prometheus: Option<PrometheusMetric>,
    /// An HTTP call.
    #[serde(default)]
    pub web: Option<WebMetric>,
    /// A Kubernetes Job: success if it completes.
    #[serde(default)]
    pub job: Option<JobMetric>,
    /// Datadog.
    #[serde(default)]
    pub datadog: Option<DatadogMetric>,
    /// New Relic.
    #[serde(default)]
    pub new_relic: Option<NewRelicMetric>,
    /// Amazon CloudWatch.
    #[serde(default)]
    pub cloud_watch: Option<CloudWatchMetric>,
    /// Graphite.
    #[serde(default)]
    pub graphite: Option<QueryMetric>,
    /// InfluxDB.
    #[serde(default)]
    pub influxdb: Option<InfluxdbMetric>,
    /// Kayenta.
    #[serde(default)]
    pub kayenta: Option<Value>,
    /// Wavefront.
    #[serde(default)]
    pub wavefront: Option<Value>,
    /// Apache SkyWalking.
    #[serde(default)]
    pub skywalking: Option<Value>,
    /// Metric plugins by name.
    #[serde(default)]
    pub plugin: Option<Value>,
}

/// `provider.prometheus`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PrometheusMetric {
    /// The server.
    #[serde(default)]
    pub address: Option<String>,
    /// The query.
    #[serde(default)]
    pub query: Option<String>,
    /// Seconds to wait.
    #[serde(default)]
    pub timeout: Option<i64>,
    /// Skip TLS verification.
    #[serde(default)]
    pub insecure: Option<bool>,
    /// Extra request headers.
    #[serde(default)]
    pub headers: Option<Vec<Header>>,
    /// SigV4 or OAuth2.
    #[serde(default)]
    pub authentication: Option<Authentication>,
    /// A range query.
    #[serde(default)]
    pub range_query: Option<RangeQuery>,
}

/// `rangeQuery`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RangeQuery {
    /// The start (an expression such as `now() - 1h`).
    #[serde(default)]
    pub start: Option<String>,
    /// The end.
    #[serde(default)]
    pub end: Option<String>,
    /// The step.
    #[serde(default)]
    pub step: Option<String>,
}

/// `authentication`: AWS SigV4 or OAuth2 client credentials.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Authentication {
    /// AWS SigV4.
    #[serde(default)]
    pub sigv4: Option<Sigv4>,
    /// OAuth2 client credentials.
    #[serde(default)]
    pub oauth2: Option<OAuth2>,
}

/// `sigv4`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Sigv4 {
    /// The AWS region.
    #[serde(default)]
    pub region: Option<String>,
    /// An AWS profile.
    #[serde(default)]
    pub profile: Option<String>,
    /// A role to assume.
    #[serde(default)]
    pub role_arn: Option<String>,
}

/// `oauth2`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OAuth2 {
    /// The token endpoint.
    #[serde(default)]
    pub token_url: Option<String>,
    /// The client.
    #[serde(default)]
    pub client_id: Option<String>,
    /// The client's secret.
    #[serde(default)]
    pub client_secret: Option<String>,
    /// Scopes.
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
}

/// `provider.datadog`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DatadogMetric {
    /// `v1` (default) or `v2`.
    #[serde(default)]
    pub api_version: Option<String>,
    /// One query (v1 and v2).
    #[serde(default)]
    pub query: Option<String>,
    /// Named queries combined by `formula` (v2).
    #[serde(default)]
    pub queries: Option<BTreeMap<String, String>>,
    /// A formula over `queries`.
    #[serde(default)]
    pub formula: Option<String>,
    /// The window (default 5m).
    #[serde(default)]
    pub interval: Option<String>,
    /// How points are reduced (v2).
    #[serde(default)]
    pub aggregator: Option<String>,
    /// How long a request may take (default 10s; Argo v1.10).
    #[serde(default)]
    pub request_timeout: Option<String>,
    /// The Secret with the keys.
    #[serde(default)]
    pub secret_ref: Option<DatadogSecretRef>,
}

/// `datadog.secretRef`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DatadogSecretRef {
    /// The Secret's name.
    #[serde(default)]
    pub name: Option<String>,
    /// In the AnalysisRun's namespace rather than the controller's.
    #[serde(default)]
    pub namespaced: Option<bool>,
}

/// `provider.newRelic`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewRelicMetric {
    /// The NRQL query.
    pub query: String,
    /// The Secret holding the account's credentials.
    #[serde(default)]
    pub profile: Option<String>,
    /// Seconds to wait.
    #[serde(default)]
    pub timeout: Option<i64>,
}

/// `provider.graphite`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QueryMetric {
    /// The server.
    #[serde(default)]
    pub address: Option<String>,
    /// The query.
    #[serde(default)]
    pub query: Option<String>,
}

/// `provider.influxdb`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InfluxdbMetric {
    /// The Secret holding the address and token.
    #[serde(default)]
    pub profile: Option<String>,
    /// The Flux query.
    #[serde(default)]
    pub query: Option<String>,
}

/// `provider.cloudWatch`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CloudWatchMetric {
    /// The window (default 5m).
    #[serde(default)]
    pub interval: Option<String>,
    /// The queries (GetMetricData's).
    pub metric_data_queries: Vec<CloudWatchQuery>,
}

/// One of `cloudWatch.metricDataQueries`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CloudWatchQuery {
    /// Its id.
    #[serde(default)]
    pub id: Option<String>,
    /// A metric math expression, or
    #[serde(default)]
    pub expression: Option<String>,
    /// a metric and statistic.
    #[serde(default)]
    pub metric_stat: Option<Value>,
    /// A label.
    #[serde(default)]
    pub label: Option<String>,
    /// The period.
    #[serde(default)]
    pub period: Option<IntOrString>,
    /// Whether its values are returned.
    #[serde(default)]
    pub return_data: Option<bool>,
}

/// `provider.web`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebMetric {
    /// The URL.
    pub url: String,
    /// The method (default GET).
    #[serde(default)]
    pub method: Option<String>,
    /// Request headers.
    #[serde(default)]
    pub headers: Option<Vec<Header>>,
    /// A request body.
    #[serde(default)]
    pub body: Option<String>,
    /// A JSON request body.
    #[serde(default)]
    pub json_body: Option<Value>,
    /// The JSON path of the result (default `{$}`).
    #[serde(default)]
    pub json_path: Option<String>,
    /// Seconds to wait (default 10).
    #[serde(default)]
    pub timeout_seconds: Option<i64>,
    /// Skip TLS verification.
    #[serde(default)]
    pub insecure: Option<bool>,
    /// SigV4 or OAuth2.
    #[serde(default)]
    pub authentication: Option<Authentication>,
}

/// A request header.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Header {
    /// The name.
    pub key: String,
    /// The value.
    pub value: String,
}

/// `provider.job`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobMetric {
    /// The Job's metadata.
    #[serde(default)]
    pub metadata: Option<Value>,
    /// The Job's spec (batch/v1).
    pub spec: Value,
}

// === Experiment ===

/// An `Experiment`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Experiment {
    /// `argoproj.io/v1alpha1`.
    pub api_version: String,
    /// `Experiment`.
    pub kind: String,
    /// Name, namespace, labels, annotations.
    #[serde(default)]
    pub metadata: Metadata,
    /// ReplicaSets and analyses.
    pub spec: ExperimentSpec,
    /// Argo's runtime state, read and not acted on.
    #[serde(default)]
    pub status: Option<Value>,
}

/// `spec` of an Experiment.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExperimentSpec {
    /// The ReplicaSets it runs.
    pub templates: Vec<ExperimentTemplate>,
    /// The analyses it runs.
    #[serde(default)]
    pub analyses: Option<Vec<ExperimentAnalysis>>,
    /// How long it runs.
    #[serde(default)]
    pub duration: Option<String>,
    /// Seconds for the ReplicaSets to become available (default 600).
    #[serde(default)]
    pub progress_deadline_seconds: Option<i64>,
    /// Seconds before its ReplicaSets are scaled down (default 30).
    #[serde(default)]
    pub scale_down_delay_seconds: Option<i64>,
    /// Stop it.
    #[serde(default)]
    pub terminate: Option<bool>,
    /// Metrics whose results do not count.
    #[serde(default)]
    pub dry_run: Option<Vec<DryRun>>,
    /// Measurements kept per metric.
    #[serde(default)]
    pub measurement_retention: Option<Vec<MeasurementRetention>>,
    /// Labels and annotations of its AnalysisRuns.
    #[serde(default)]
    pub analysis_run_metadata: Option<PodMetadata>,
}

/// A ReplicaSet of an Experiment.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExperimentTemplate {
    /// Its name.
    pub name: String,
    /// Pods (default 1).
    #[serde(default)]
    pub replicas: Option<i64>,
    /// The label selector.
    pub selector: Value,
    /// The pod template.
    pub template: Value,
    /// Seconds a pod must be ready to count.
    #[serde(default)]
    pub min_ready_seconds: Option<i64>,
    /// A Service for it.
    #[serde(default)]
    pub service: Option<ExperimentService>,
}
