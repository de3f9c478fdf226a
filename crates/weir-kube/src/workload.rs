//! Flagger's way with a Deployment, as pure functions: from the target Deployment `NAME` and the
//! rollout's `spec.target.service`, the objects weir keeps beside it - the primary Deployment
//! `NAME-primary` and the Services `NAME` (apex), `NAME-primary` and `NAME-canary` - the copies
//! `CONFIG-primary` of the ConfigMaps and Secrets its pods read (Flagger's tracked configs), and
//! the revision that says whether the target changed. No IO here: the operator reads the
//! referenced objects and applies what these return (server-side apply, field manager `weir`).
//!
//! The Services, ports, selector label and tracked configs read only a workload's name,
//! selector and pod template ([`Workload`]), so they serve DaemonSet targets too;
//! [`daemon_set`] has what differs for those (the primary DaemonSet, scaling to zero by a node
//! selector, the revision without it, readiness).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, DeploymentSpec};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{
    ConfigMap, PodSpec, PodTemplateSpec, Secret, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};
use weir_core::model::{KubernetesService, ObjectMetadata};

/// The suffix of the primary Deployment and Service.
pub const PRIMARY_SUFFIX: &str = "-primary";
/// The suffix of the canary Service.
pub const CANARY_SUFFIX: &str = "-canary";

pub mod daemon_set;

/// The selector labels Flagger looks for, in order: the first one present names the pods.
pub const SELECTOR_LABELS: [&str; 3] = ["app", "name", "app.kubernetes.io/name"];

/// A workload weir rolls out Flagger's way: what the Services, the ports, the selector label
/// and config tracking read of it.
pub trait Workload {
    /// `Deployment` or `DaemonSet`, for messages.
    const KIND: &'static str;
    /// Its metadata.
    fn metadata(&self) -> &ObjectMeta;
    /// `spec.selector`.
    fn selector(&self) -> &LabelSelector;
    /// `spec.template`.
    fn template(&self) -> &PodTemplateSpec;
}

impl Workload for Deployment {
    const KIND: &'static str = "Deployment";

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn selector(&self) -> &LabelSelector {
        &self.spec.selector
    }

    fn template(&self) -> &PodTemplateSpec {
        &self.spec.template
    }
}

impl Workload for DaemonSet {
    const KIND: &'static str = "DaemonSet";

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn selector(&self) -> &LabelSelector {
        &self.spec.selector
    }

    fn template(&self) -> &PodTemplateSpec {
        &self.spec.template
    }
}

/// Why a target workload cannot be rolled out Flagger's way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadError {
    /// The workload has no name.
    #[error("the target {kind} has no metadata.name")]
    Unnamed {
        /// `Deployment` or `DaemonSet`.
        kind: &'static str,
    },
    /// None of the selector labels is in `spec.selector.matchLabels`.
    #[error(
        "{kind} {name}: spec.selector.matchLabels has none of {labels}: weir (as Flagger) finds the pods by the first of them",
        labels = SELECTOR_LABELS.join(", ")
    )]
    NoSelectorLabel {
        /// `Deployment` or `DaemonSet`.
        kind: &'static str,
        /// The workload's name.
        name: String,
    },
    /// Neither `spec.target.service.port` nor a container port says which port to serve.
    #[error("{kind} {name}: spec.target.service.port is required (the port the Services expose)")]
    NoPort {
        /// `Deployment` or `DaemonSet`.
        kind: &'static str,
        /// The workload's name.
        name: String,
    },
    /// A DaemonSet whose pods are replaced only when deleted: a new template would never
    /// reach the primary's pods.
    #[error(
        "DaemonSet {name}: spec.updateStrategy.type is {strategy}; weir (as Flagger) needs RollingUpdate (the default), or a promotion would never replace the primary's pods"
    )]
    NotRollingUpdate {
        /// The DaemonSet's name.
        name: String,
        /// The strategy it has.
        strategy: String,
    },
}

/// The label that selects the target's pods, and its value.
pub fn selector_label<W: Workload>(target: &W) -> Result<(String, String), WorkloadError> {
    let name = name_of(target)?;
    let labels = target.selector().match_labels.as_ref();
    SELECTOR_LABELS
        .iter()
        .find_map(|key| {
            labels
                .and_then(|labels| labels.get(*key))
                .map(|value| (key.to_string(), value.clone()))
        })
        .ok_or(WorkloadError::NoSelectorLabel {
            kind: W::KIND,
            name,
        })
}

/// The revision of the target: a hash of its pod template and of the data of the ConfigMaps and
/// Secrets it reads (`configs`, tracked by kind and name, so in a stable order). Replicas and the
/// update strategy are left out: changing them is not a new revision. Without tracked configs
/// the hash is the pod template's alone, as before config tracking, so that a weir upgrade does
/// not make every untracked rollout's revision new.
pub fn revision(target: &Deployment, configs: &TrackedConfigs) -> String {
    template_revision(&target.spec.template, configs)
}

/// The pod label weir gives both versions' pods when the apex Service selects them both (the
/// canary without a mesh), valued with the apex's name. Not part of the revision: adding it to
/// the target starts no run.
pub const APEX_LABEL: &str = "weir.dev/apex";

/// The revision of a pod template and the tracked configs its pods read (see [`revision`]).
pub fn template_revision(template: &PodTemplateSpec, configs: &TrackedConfigs) -> String {
    let mut template = serde_json::to_value(template).unwrap_or(Value::Null);
    if let Some(labels) = template
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.remove(APEX_LABEL);
    }
    if configs.is_empty() {
        return weir_core::revision::of_definition(&template);
    }
    let configs: Vec<Value> = configs.values().map(TrackedConfig::content).collect();
    weir_core::revision::of_definition(&json!({"template": template, "configs": configs}))
}

/// The primary Deployment `NAME-primary`: the target's spec with the selector label's value
/// rewritten to `VALUE-primary` in the selector and the pod labels, its pods reading the copies
/// `CONFIG-primary` of the tracked `configs`, owned by the rollout.
pub fn primary_deployment(
    target: &Deployment,
    configs: &TrackedConfigs,
    owner: &OwnerReference,
) -> Result<Deployment, WorkloadError> {
    let name = name_of(target)?;
    let (key, value) = selector_label(target)?;
    let primary_value = format!("{value}{PRIMARY_SUFFIX}");
    let mut spec = target.spec.clone();
    relabel(&mut spec, &key, &primary_value);
    if let Some(pod) = spec.template.spec.as_mut() {
        point_at_primary_configs(pod, configs);
    }
    let mut labels = target.metadata.labels.clone().unwrap_or_default();
    if labels.contains_key(&key) {
        labels.insert(key.clone(), primary_value);
    }
    Ok(Deployment {
        metadata: ObjectMeta {
            name: Some(format!("{name}{PRIMARY_SUFFIX}")),
            namespace: target.metadata.namespace.clone(),
            labels: (!labels.is_empty()).then_some(labels),
            owner_references: Some(vec![owner.clone()]),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    })
}

/// The primary's HorizontalPodAutoscaler `NAME-primary`: the target's autoscaler (named by
/// `spec.target.autoscalerRef`) with its spec copied, scaling `TARGET-primary` instead, owned by
/// the rollout. Without it the primary would keep the replica count it was created with while the
/// target's autoscaler scales a Deployment that serves nothing outside a run.
pub fn primary_autoscaler(
    autoscaler: &HorizontalPodAutoscaler,
    target_name: &str,
    owner: &OwnerReference,
) -> HorizontalPodAutoscaler {
    let name = autoscaler.metadata.name.clone().unwrap_or_default();
    let mut spec = autoscaler.spec.clone();
    spec.scale_target_ref.name = format!("{target_name}{PRIMARY_SUFFIX}");
    HorizontalPodAutoscaler {
        metadata: ObjectMeta {
            name: Some(format!("{name}{PRIMARY_SUFFIX}")),
            namespace: autoscaler.metadata.namespace.clone(),
            labels: autoscaler.metadata.labels.clone(),
            owner_references: Some(vec![owner.clone()]),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    }
}

/// The annotation that pauses a KEDA ScaledObject at a replica count: weir sets it to `"0"` on
/// the target's ScaledObject outside runs (the target waits at zero), as Flagger does.
pub const KEDA_PAUSED_REPLICAS: &str = "autoscaling.keda.sh/paused-replicas";

/// The primary's KEDA ScaledObject `NAME-primary` (Flagger's copy): the target's ScaledObject
/// `scaled_object` (any API version of `keda.sh`) scaling `TARGET-primary` instead, its labels
/// and annotations without the pause, owned by the rollout. With `queries` (trigger name ->
/// query, `autoscalerRef.primaryScalerQueries`) those triggers' `metadata.query` are replaced;
/// otherwise every trigger query naming `TARGET-canary` or `TARGET` names `TARGET-primary`.
/// `replicas` (`autoscalerRef.primaryScalerReplicas`: `minReplicas`, `maxReplicas`) override
/// the copied counts; a named `advanced.horizontalPodAutoscalerConfig` gets `-primary` too.
pub fn primary_scaled_object(
    scaled_object: &Value,
    target_name: &str,
    owner: &OwnerReference,
    queries: Option<&Value>,
    replicas: Option<&Value>,
) -> Value {
    let name = scaled_object["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    let primary_target = format!("{target_name}{PRIMARY_SUFFIX}");
    let mut spec = scaled_object["spec"].clone();
    spec["scaleTargetRef"]["name"] = Value::String(primary_target.clone());
    if let Some(triggers) = spec.get_mut("triggers").and_then(Value::as_array_mut) {
        for trigger in triggers {
            let trigger_name = trigger["name"].as_str().unwrap_or_default().to_string();
            let Some(query) = trigger
                .pointer_mut("/metadata/query")
                .filter(|query| query.is_string())
            else {
                continue;
            };
            match queries {
                Some(queries) => {
                    if let Some(replacement) = queries.get(&trigger_name).filter(|q| q.is_string())
                    {
                        *query = replacement.clone();
                    }
                }
                None => {
                    let text = query.as_str().unwrap_or_default();
                    *query = Value::String(rename_workload(text, target_name, &primary_target));
                }
            }
        }
    }
    if let Some(replicas) = replicas {
        for (from, to) in [
            ("minReplicas", "minReplicaCount"),
            ("maxReplicas", "maxReplicaCount"),
        ] {
            if let Some(count) = replicas.get(from).filter(|count| count.is_number()) {
                spec[to] = count.clone();
            }
        }
    }
    if let Some(config_name) = spec
        .pointer_mut("/advanced/horizontalPodAutoscalerConfig/name")
        .filter(|name| name.is_string())
    {
        *config_name = Value::String(format!(
            "{}{PRIMARY_SUFFIX}",
            config_name.as_str().unwrap_or_default()
        ));
    }
    let mut annotations = scaled_object["metadata"]["annotations"].clone();
    if let Some(map) = annotations.as_object_mut() {
        map.remove(KEDA_PAUSED_REPLICAS);
        map.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
    let mut metadata = json!({
        "name": format!("{name}{PRIMARY_SUFFIX}"),
        "namespace": scaled_object["metadata"]["namespace"],
        "ownerReferences": [owner],
    });
    for (field, value) in [
        ("labels", scaled_object["metadata"]["labels"].clone()),
        ("annotations", annotations),
    ] {
        if value.as_object().is_some_and(|map| !map.is_empty()) {
            metadata[field] = value;
        }
    }
    json!({
        "apiVersion": scaled_object["apiVersion"],
        "kind": "ScaledObject",
        "metadata": metadata,
        "spec": spec,
    })
}

/// `text` with the workload `name` (and `name-canary`) renamed `primary` where it stands as a
/// name of its own: `podinfo` in `app="podinfo"`, not in `podinfo-db` or `mypodinfo` (Flagger
/// replaces every occurrence, which also renames `podinfo-db`).
fn rename_workload(text: &str, name: &str, primary: &str) -> String {
    let canary = format!("{name}{CANARY_SUFFIX}");
    let part_of_name = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_');
    let mut out = String::with_capacity(text.len());
    let (mut copied, mut search) = (0, 0);
    while let Some(offset) = text[search..].find(name) {
        let at = search + offset;
        let len = if text[at..].starts_with(&canary) {
            canary.len()
        } else {
            name.len()
        };
        let before = text[..at].chars().next_back();
        let after = text[at + len..].chars().next();
        if !before.is_some_and(part_of_name) && !after.is_some_and(part_of_name) {
            out.push_str(&text[copied..at]);
            out.push_str(primary);
            copied = at + len;
        }
        search = at + len;
    }
    out.push_str(&text[copied..]);
    out
}

fn relabel(spec: &mut DeploymentSpec, key: &str, value: &str) {
    relabel_pods(&mut spec.selector, &mut spec.template, key, value);
}

/// Sets the selector label `key` to `value` in `selector` and in the pod template's labels.
fn relabel_pods(
    selector: &mut LabelSelector,
    template: &mut PodTemplateSpec,
    key: &str,
    value: &str,
) {
    selector
        .match_labels
        .get_or_insert_with(BTreeMap::new)
        .insert(key.to_string(), value.to_string());
    template
        .metadata
        .get_or_insert_with(ObjectMeta::default)
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(key.to_string(), value.to_string());
}

/// The three Services of a rollout: the apex `NAME` and `NAME-primary` select the primary's
/// pods, `NAME-canary` the target's. `NAME` is `spec.target.service.name`, else the target's.
pub fn services(
    target: &impl Workload,
    service: &KubernetesService,
    owner: &OwnerReference,
) -> Result<[Service; 3], WorkloadError> {
    let target_name = name_of(target)?;
    let (key, value) = selector_label(target)?;
    let apex = service.name.clone().unwrap_or_else(|| target_name.clone());
    let ports = ports(target, service)?;
    let primary_pods = BTreeMap::from([(key.clone(), format!("{value}{PRIMARY_SUFFIX}"))]);
    let canary_pods = BTreeMap::from([(key, value)]);
    let namespace = target.metadata().namespace.as_deref();
    let make =
        |name: String, selector: BTreeMap<String, String>, extra: Option<&ObjectMetadata>| {
            service_object(name, namespace, selector, ports.clone(), extra, owner)
        };
    Ok([
        make(apex.clone(), primary_pods.clone(), service.apex.as_ref()),
        make(
            format!("{apex}{PRIMARY_SUFFIX}"),
            primary_pods,
            service.primary.as_ref(),
        ),
        make(
            format!("{apex}{CANARY_SUFFIX}"),
            canary_pods,
            service.canary.as_ref(),
        ),
    ])
}

/// A ClusterIP Service `name` selecting `selector` on `ports`, with the extra labels and
/// annotations of `extra`, owned by `owner`.
pub fn service_object(
    name: String,
    namespace: Option<&str>,
    selector: BTreeMap<String, String>,
    ports: Vec<ServicePort>,
    extra: Option<&ObjectMetadata>,
    owner: &OwnerReference,
) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: namespace.map(str::to_string),
            labels: extra
                .map(|extra| extra.labels.clone())
                .filter(|labels| !labels.is_empty()),
            annotations: extra
                .map(|extra| extra.annotations.clone())
                .filter(|annotations| !annotations.is_empty()),
            owner_references: Some(vec![owner.clone()]),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(selector),
            ports: Some(ports),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// The port the Services expose, which the traffic providers' routes must name:
/// `spec.target.service.port`, else the target's first container port.
pub fn service_port(
    target: &impl Workload,
    service: &KubernetesService,
) -> Result<i32, WorkloadError> {
    Ok(ports(target, service)?[0].port)
}

/// The Services' ports: `port` (named `portName`, default `http`) to `targetPort` (default: the
/// same port), and with `portDiscovery` every other named or numbered container port too.
pub fn ports<W: Workload>(
    target: &W,
    service: &KubernetesService,
) -> Result<Vec<ServicePort>, WorkloadError> {
    let containers = target
        .template()
        .spec
        .as_ref()
        .map(|pod| pod.containers.clone())
        .unwrap_or_default();
    let container_ports: Vec<(Option<String>, i32)> = containers
        .iter()
        .flat_map(|container| container.ports.clone().unwrap_or_default())
        .map(|port| (port.name, port.container_port))
        .collect();
    let port = match service.port {
        Some(port) => i32::try_from(port).unwrap_or(i32::MAX),
        None => match container_ports.first() {
            Some((_, port)) => *port,
            None => {
                return Err(WorkloadError::NoPort {
                    kind: W::KIND,
                    name: name_of(target)?,
                });
            }
        },
    };
    let target_port = match &service.target_port {
        Some(Value::Number(number)) => number
            .as_i64()
            .and_then(|port| i32::try_from(port).ok())
            .map_or(IntOrString::Int(port), IntOrString::Int),
        Some(Value::String(name)) => IntOrString::String(name.clone()),
        _ => IntOrString::Int(port),
    };
    let main = ServicePort {
        name: Some(service.port_name.clone().unwrap_or_else(|| "http".into())),
        port,
        target_port: Some(target_port.clone()),
        protocol: Some("TCP".into()),
        app_protocol: service.app_protocol.clone(),
        ..ServicePort::default()
    };
    let mut ports = vec![main];
    if service.port_discovery == Some(true) {
        for (name, container_port) in container_ports {
            let is_main = match &target_port {
                IntOrString::Int(number) => *number == container_port,
                IntOrString::String(main_name) => name.as_deref() == Some(main_name.as_str()),
            };
            if is_main || ports.iter().any(|known| known.port == container_port) {
                continue;
            }
            ports.push(ServicePort {
                name: Some(name.map_or_else(
                    || format!("tcp-{container_port}"),
                    |name| format!("tcp-{name}"),
                )),
                port: container_port,
                target_port: Some(IntOrString::Int(container_port)),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            });
        }
    }
    Ok(ports)
}

// === tracked configs ===

/// The annotation that turns config tracking off: on the target Deployment for all of its
/// ConfigMaps and Secrets (weir's reading), on one ConfigMap or Secret for that one (Flagger's).
pub const CONFIG_TRACKING_ANNOTATION: &str = "flagger.app/config-tracking";
/// weir's name for [`CONFIG_TRACKING_ANNOTATION`]; either one set to `disabled` turns it off.
pub const WEIR_CONFIG_TRACKING_ANNOTATION: &str = "weir.dev/config-tracking";

/// The Secret types whose content is tracked, as Flagger: the others (registry credentials,
/// service account tokens, ...) are not the application's configuration.
const TRACKED_SECRET_TYPES: [&str; 4] = [
    "Opaque",
    "kubernetes.io/basic-auth",
    "kubernetes.io/ssh-auth",
    "kubernetes.io/tls",
];

/// The kinds of object a pod template reads its configuration from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConfigKind {
    /// A ConfigMap.
    ConfigMap,
    /// A Secret.
    Secret,
}

impl ConfigKind {
    /// `ConfigMap` or `Secret`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigKind::ConfigMap => "ConfigMap",
            ConfigKind::Secret => "Secret",
        }
    }
}

/// A ConfigMap or Secret a pod template reads.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConfigReference {
    /// ConfigMap or Secret.
    pub kind: ConfigKind,
    /// Its name, in the target's namespace.
    pub name: String,
    /// Every reference to it says `optional: true`: the pods start without it.
    pub optional: bool,
}

/// A tracked ConfigMap or Secret, as read from the cluster.
#[derive(Debug, Clone, PartialEq)]
pub enum TrackedConfig {
    /// A ConfigMap.
    ConfigMap(ConfigMap),
    /// A Secret.
    Secret(Secret),
}

/// The tracked configs of a target by kind and name: the order is stable, so the revision is.
pub type TrackedConfigs = BTreeMap<(ConfigKind, String), TrackedConfig>;

impl TrackedConfig {
    /// ConfigMap or Secret.
    pub fn kind(&self) -> ConfigKind {
        match self {
            TrackedConfig::ConfigMap(_) => ConfigKind::ConfigMap,
            TrackedConfig::Secret(_) => ConfigKind::Secret,
        }
    }

    /// Its metadata.
    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            TrackedConfig::ConfigMap(config_map) => &config_map.metadata,
            TrackedConfig::Secret(secret) => &secret.metadata,
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        self.metadata().name.as_deref().unwrap_or_default()
    }

    /// Whether its content is part of the revision and copied for the primary: not annotated
    /// `config-tracking: disabled`, and for a Secret, one of the types Flagger tracks (a Secret
    /// without a type is `Opaque`).
    pub fn trackable(&self) -> bool {
        if tracking_disabled(self.metadata()) {
            return false;
        }
        match self {
            TrackedConfig::ConfigMap(_) => true,
            TrackedConfig::Secret(secret) => {
                TRACKED_SECRET_TYPES.contains(&secret.type_.as_deref().unwrap_or("Opaque"))
            }
        }
    }

    /// What of it counts for the revision: kind, name and data (Secret data as base64, so the
    /// hash never carries a secret in the clear; it is a hash anyway).
    fn content(&self) -> Value {
        match self {
            TrackedConfig::ConfigMap(config_map) => json!({
                "kind": "ConfigMap",
                "name": self.name(),
                "data": config_map.data,
                "binaryData": config_map.binary_data,
            }),
            TrackedConfig::Secret(secret) => json!({
                "kind": "Secret",
                "name": self.name(),
                "type": secret.type_,
                "data": secret.data,
            }),
        }
    }
}

/// Whether config tracking is on for `target`: it is unless the workload is annotated
/// `flagger.app/config-tracking: disabled` or `weir.dev/config-tracking: disabled`.
pub fn config_tracking_enabled(target: &impl Workload) -> bool {
    !tracking_disabled(target.metadata())
}

fn tracking_disabled(metadata: &ObjectMeta) -> bool {
    metadata.annotations.as_ref().is_some_and(|annotations| {
        [CONFIG_TRACKING_ANNOTATION, WEIR_CONFIG_TRACKING_ANNOTATION]
            .iter()
            .any(|key| annotations.get(*key).map(String::as_str) == Some("disabled"))
    })
}

/// The ConfigMaps and Secrets a pod template reads, once each, ordered by kind and name:
/// volumes (`configMap`, `secret`, and the sources of `projected` ones), and in every container
/// and init container `envFrom` (`configMapRef`, `secretRef`) and `env[].valueFrom`
/// (`configMapKeyRef`, `secretKeyRef`). A reference is optional only when all of its mentions
/// are.
pub fn config_references(template: &PodTemplateSpec) -> Vec<ConfigReference> {
    let mut found: BTreeMap<(ConfigKind, String), bool> = BTreeMap::new();
    if let Some(pod) = &template.spec {
        // The walk is written once, over mutable names; reading walks a copy.
        let mut pod = pod.clone();
        visit_config_names(&mut pod, &mut |kind, name, optional| {
            found
                .entry((kind, name.clone()))
                .and_modify(|all_optional| *all_optional &= optional)
                .or_insert(optional);
        });
    }
    found
        .into_iter()
        .map(|((kind, name), optional)| ConfigReference {
            kind,
            name,
            optional,
        })
        .collect()
}

/// Points every reference to a tracked config in `pod` at its copy `NAME-primary`; references
/// to anything else (untracked, optional and absent) stay as they are.
pub fn point_at_primary_configs(pod: &mut PodSpec, configs: &TrackedConfigs) {
    visit_config_names(pod, &mut |kind, name, _optional| {
        if configs.contains_key(&(kind, name.clone())) {
            name.push_str(PRIMARY_SUFFIX);
        }
    });
}

/// Calls `visit(kind, name, optional)` for every ConfigMap and Secret name `pod` mentions.
fn visit_config_names(pod: &mut PodSpec, visit: &mut dyn FnMut(ConfigKind, &mut String, bool)) {
    for volume in pod.volumes.iter_mut().flatten() {
        if let Some(source) = volume.config_map.as_mut() {
            visit(
                ConfigKind::ConfigMap,
                &mut source.name,
                source.optional == Some(true),
            );
        }
        if let Some(source) = volume.secret.as_mut()
            && let Some(name) = source.secret_name.as_mut()
        {
            visit(ConfigKind::Secret, name, source.optional == Some(true));
        }
        let sources = volume
            .projected
            .as_mut()
            .and_then(|projected| projected.sources.as_mut());
        for source in sources.into_iter().flatten() {
            if let Some(config_map) = source.config_map.as_mut() {
                visit(
                    ConfigKind::ConfigMap,
                    &mut config_map.name,
                    config_map.optional == Some(true),
                );
            }
            if let Some(secret) = source.secret.as_mut() {
                visit(
                    ConfigKind::Secret,
                    &mut secret.name,
                    secret.optional == Some(true),
                );
            }
        }
    }
    let containers = pod
        .containers
        .iter_mut()
        .chain(pod.init_containers.iter_mut().flatten());
    for container in containers {
        for source in container.env_from.iter_mut().flatten() {
            if let Some(config_map) = source.config_map_ref.as_mut() {
                visit(
                    ConfigKind::ConfigMap,
                    &mut config_map.name,
                    config_map.optional == Some(true),
                );
            }
            if let Some(secret) = source.secret_ref.as_mut() {
                visit(
                    ConfigKind::Secret,
                    &mut secret.name,
                    secret.optional == Some(true),
                );
            }
        }
        let sources = container
            .env
            .iter_mut()
            .flatten()
            .filter_map(|variable| variable.value_from.as_mut());
        for source in sources {
            if let Some(key) = source.config_map_key_ref.as_mut() {
                visit(
                    ConfigKind::ConfigMap,
                    &mut key.name,
                    key.optional == Some(true),
                );
            }
            if let Some(key) = source.secret_key_ref.as_mut() {
                visit(
                    ConfigKind::Secret,
                    &mut key.name,
                    key.optional == Some(true),
                );
            }
        }
    }
}

/// The primary's copy `NAME-primary` of a tracked config: the same data (and type, for a
/// Secret) and labels, owned by the rollout. Not `immutable` even when the original is, since
/// the next promotion rewrites the copy.
pub fn primary_config(config: &TrackedConfig, owner: &OwnerReference) -> TrackedConfig {
    let original = config.metadata();
    let metadata = ObjectMeta {
        name: Some(format!("{}{PRIMARY_SUFFIX}", config.name())),
        namespace: original.namespace.clone(),
        labels: original.labels.clone(),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    };
    match config {
        TrackedConfig::ConfigMap(config_map) => TrackedConfig::ConfigMap(ConfigMap {
            metadata,
            data: config_map.data.clone(),
            binary_data: config_map.binary_data.clone(),
            immutable: None,
        }),
        TrackedConfig::Secret(secret) => TrackedConfig::Secret(Secret {
            metadata,
            data: secret.data.clone(),
            type_: secret.type_.clone(),
            immutable: None,
            string_data: None,
        }),
    }
}

fn name_of<W: Workload>(target: &W) -> Result<String, WorkloadError> {
    target
        .metadata()
        .name
        .clone()
        .ok_or(WorkloadError::Unnamed { kind: W::KIND })
}

#[cfg(test)]
mod tests;
