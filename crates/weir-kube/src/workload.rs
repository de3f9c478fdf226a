//! Flagger's way with a Deployment, as pure functions: from the target Deployment `NAME` and the
//! rollout's `spec.target.service`, the objects weir keeps beside it - the primary Deployment
//! `NAME-primary` and the Services `NAME` (apex), `NAME-primary` and `NAME-canary` - and the
//! revision that says whether the target changed. No IO here: the operator applies what these
//! return (server-side apply, field manager `weir`).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;
use weir_core::model::{KubernetesService, ObjectMetadata};

/// The suffix of the primary Deployment and Service.
pub const PRIMARY_SUFFIX: &str = "-primary";
/// The suffix of the canary Service.
pub const CANARY_SUFFIX: &str = "-canary";

/// The selector labels Flagger looks for, in order: the first one present names the pods.
pub const SELECTOR_LABELS: [&str; 3] = ["app", "name", "app.kubernetes.io/name"];

/// Why a target Deployment cannot be rolled out Flagger's way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadError {
    /// The Deployment has no name.
    #[error("the target Deployment has no metadata.name")]
    Unnamed,
    /// None of the selector labels is in `spec.selector.matchLabels`.
    #[error(
        "Deployment {name}: spec.selector.matchLabels has none of {labels}: weir (as Flagger) finds the pods by the first of them",
        labels = SELECTOR_LABELS.join(", ")
    )]
    NoSelectorLabel {
        /// The Deployment's name.
        name: String,
    },
    /// Neither `spec.target.service.port` nor a container port says which port to serve.
    #[error(
        "Deployment {name}: spec.target.service.port is required (the port the Services expose)"
    )]
    NoPort {
        /// The Deployment's name.
        name: String,
    },
}

/// The label that selects the target's pods, and its value.
pub fn selector_label(target: &Deployment) -> Result<(String, String), WorkloadError> {
    let name = name_of(target)?;
    let labels = target.spec.selector.match_labels.as_ref();
    SELECTOR_LABELS
        .iter()
        .find_map(|key| {
            labels
                .and_then(|labels| labels.get(*key))
                .map(|value| (key.to_string(), value.clone()))
        })
        .ok_or(WorkloadError::NoSelectorLabel { name })
}

/// The revision of the target: a hash of its pod template only, so that a change of replicas or
/// of the update strategy is not a new revision.
pub fn revision(target: &Deployment) -> String {
    let template = serde_json::to_value(&target.spec.template).unwrap_or(Value::Null);
    weir_core::revision::of_definition(&template)
}

/// The primary Deployment `NAME-primary`: the target's spec with the selector label's value
/// rewritten to `VALUE-primary` in the selector and the pod labels, owned by the rollout.
pub fn primary_deployment(
    target: &Deployment,
    owner: &OwnerReference,
) -> Result<Deployment, WorkloadError> {
    let name = name_of(target)?;
    let (key, value) = selector_label(target)?;
    let primary_value = format!("{value}{PRIMARY_SUFFIX}");
    let mut spec = target.spec.clone();
    relabel(&mut spec, &key, &primary_value);
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

fn relabel(spec: &mut DeploymentSpec, key: &str, value: &str) {
    let selector: &mut LabelSelector = &mut spec.selector;
    selector
        .match_labels
        .get_or_insert_with(BTreeMap::new)
        .insert(key.to_string(), value.to_string());
    spec.template
        .metadata
        .get_or_insert_with(ObjectMeta::default)
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(key.to_string(), value.to_string());
}

/// The three Services of a rollout: the apex `NAME` and `NAME-primary` select the primary's
/// pods, `NAME-canary` the target's. `NAME` is `spec.target.service.name`, else the target's.
pub fn services(
    target: &Deployment,
    service: &KubernetesService,
    owner: &OwnerReference,
) -> Result<[Service; 3], WorkloadError> {
    let target_name = name_of(target)?;
    let (key, value) = selector_label(target)?;
    let apex = service.name.clone().unwrap_or_else(|| target_name.clone());
    let ports = ports(target, service)?;
    let primary_pods = BTreeMap::from([(key.clone(), format!("{value}{PRIMARY_SUFFIX}"))]);
    let canary_pods = BTreeMap::from([(key, value)]);
    let make = |name: String,
                selector: BTreeMap<String, String>,
                extra: Option<&ObjectMetadata>| Service {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: target.metadata.namespace.clone(),
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
            ports: Some(ports.clone()),
            ..ServiceSpec::default()
        }),
        status: None,
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

/// The port the Services expose, which the traffic providers' routes must name:
/// `spec.target.service.port`, else the target's first container port.
pub fn service_port(
    target: &Deployment,
    service: &KubernetesService,
) -> Result<i32, WorkloadError> {
    Ok(ports(target, service)?[0].port)
}

/// The Services' ports: `port` (named `portName`, default `http`) to `targetPort` (default: the
/// same port), and with `portDiscovery` every other named or numbered container port too.
fn ports(
    target: &Deployment,
    service: &KubernetesService,
) -> Result<Vec<ServicePort>, WorkloadError> {
    let containers = target
        .spec
        .template
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

fn name_of(target: &Deployment) -> Result<String, WorkloadError> {
    target.metadata.name.clone().ok_or(WorkloadError::Unnamed)
}

#[cfg(test)]
mod tests;
