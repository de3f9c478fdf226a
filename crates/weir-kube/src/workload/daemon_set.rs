//! Flagger's way with a DaemonSet, as pure functions (Flagger's `pkg/canary/daemonset_*.go`).
//! A DaemonSet runs one pod per matching node, so it has no replica count to set to zero: the
//! target "waits at zero" with the node selector `flagger.app/scale-to-zero: "true"` added to
//! its pod template, which no node matches, and is scaled up by removing that entry again
//! ([`scale_patch`]). That entry is not part of the revision ([`revision`]), so scaling starts
//! no run, and the primary never gets it ([`primary`]). The Services, ports and tracked configs
//! are the Deployment's ([`super::Workload`]).

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::{Value, json};

use super::{
    PRIMARY_SUFFIX, TrackedConfigs, WorkloadError, name_of, point_at_primary_configs, relabel_pods,
    selector_label, template_revision,
};

/// The node selector entry that keeps a DaemonSet's pods off every node: Flagger's
/// `daemonSetScaleDownNodeSelector`, with the same key and value, so a cluster moving from
/// Flagger finds the target as Flagger left it.
pub const SCALE_TO_ZERO_KEY: &str = "flagger.app/scale-to-zero";
/// The value of [`SCALE_TO_ZERO_KEY`].
pub const SCALE_TO_ZERO_VALUE: &str = "true";

/// Whether the DaemonSet waits at zero: its pod template's node selector has
/// [`SCALE_TO_ZERO_KEY`] (whatever its value: Flagger removes the key to scale up).
pub fn scaled_to_zero(daemon_set: &DaemonSet) -> bool {
    daemon_set
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|pod| pod.node_selector.as_ref())
        .is_some_and(|selector| selector.contains_key(SCALE_TO_ZERO_KEY))
}

/// The JSON merge patch that scales a DaemonSet to zero (adds the node selector entry) or back
/// up (removes it; the rest of the node selector is the user's and stays).
pub fn scale_patch(to_zero: bool) -> Value {
    let value = if to_zero {
        Value::String(SCALE_TO_ZERO_VALUE.into())
    } else {
        Value::Null
    };
    json!({"spec": {"template": {"spec": {"nodeSelector": {SCALE_TO_ZERO_KEY: value}}}}})
}

/// `template` without the scale-to-zero entry (and without a node selector left empty by its
/// removal, so that a selector emptied by a merge patch and one never set are the same).
pub fn without_scale_to_zero(template: &PodTemplateSpec) -> PodTemplateSpec {
    let mut template = template.clone();
    if let Some(pod) = template.spec.as_mut() {
        if let Some(selector) = pod.node_selector.as_mut() {
            selector.remove(SCALE_TO_ZERO_KEY);
        }
        if pod.node_selector.as_ref().is_some_and(|s| s.is_empty()) {
            pod.node_selector = None;
        }
    }
    template
}

/// The revision of a target DaemonSet: its pod template without the scale-to-zero entry and
/// the tracked configs its pods read (as [`super::revision`] for a Deployment).
pub fn revision(target: &DaemonSet, configs: &TrackedConfigs) -> String {
    template_revision(&without_scale_to_zero(&target.spec.template), configs)
}

/// The primary DaemonSet `NAME-primary`: the target's spec with the selector label's value
/// rewritten to `VALUE-primary` in the selector and the pod labels, without the scale-to-zero
/// entry, its pods reading the copies `CONFIG-primary` of the tracked `configs`, owned by the
/// rollout. A target whose `spec.updateStrategy.type` is not `RollingUpdate` (it is `OnDelete`)
/// is refused, as Flagger refuses it: a promotion would never replace the primary's pods.
pub fn primary(
    target: &DaemonSet,
    configs: &TrackedConfigs,
    owner: &OwnerReference,
) -> Result<DaemonSet, WorkloadError> {
    let name = name_of(target)?;
    let (key, value) = selector_label(target)?;
    if let Some(strategy) = target
        .spec
        .update_strategy
        .as_ref()
        .and_then(|strategy| strategy.type_.as_deref())
        .filter(|strategy| !strategy.is_empty() && *strategy != "RollingUpdate")
    {
        return Err(WorkloadError::NotRollingUpdate {
            name,
            strategy: strategy.to_string(),
        });
    }
    let primary_value = format!("{value}{PRIMARY_SUFFIX}");
    let mut spec = target.spec.clone();
    spec.template = without_scale_to_zero(&spec.template);
    relabel_pods(&mut spec.selector, &mut spec.template, &key, &primary_value);
    if let Some(pod) = spec.template.spec.as_mut() {
        point_at_primary_configs(pod, configs);
    }
    let mut labels = target.metadata.labels.clone().unwrap_or_default();
    if labels.contains_key(&key) {
        labels.insert(key.clone(), primary_value);
    }
    Ok(DaemonSet {
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

/// Whether a DaemonSet serves, by Flagger's rule (`isDaemonSetReady`, with its default ready
/// threshold of 100%): its controller has seen the newest spec (`observedGeneration` at least
/// `generation`), and `updatedNumberScheduled` and `numberAvailable` reach
/// `desiredNumberScheduled`. Unlike Flagger, a DaemonSet scheduled on no node
/// (`desiredNumberScheduled` 0: scaled to zero, or no node matches) does not serve: traffic
/// sent to it would find no pod.
pub fn ready(daemon_set: &DaemonSet) -> bool {
    let Some(status) = &daemon_set.status else {
        return false;
    };
    let desired = status.desired_number_scheduled;
    desired > 0
        && status.observed_generation.unwrap_or(0) >= daemon_set.metadata.generation.unwrap_or(0)
        && status.updated_number_scheduled.unwrap_or(0) >= desired
        && status.number_available.unwrap_or(0) >= desired
}

/// Where a DaemonSet stands, for messages: `2 of 3 pods updated, 1 available`.
pub fn progress(daemon_set: &DaemonSet) -> String {
    let Some(status) = &daemon_set.status else {
        return "no status yet".into();
    };
    if status.observed_generation.unwrap_or(0) < daemon_set.metadata.generation.unwrap_or(0) {
        return "its controller has not seen the newest spec yet".into();
    }
    format!(
        "{} of {} pods updated, {} available",
        status.updated_number_scheduled.unwrap_or(0),
        status.desired_number_scheduled,
        status.number_available.unwrap_or(0)
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::workload::{ConfigKind, TrackedConfig, services};
    use k8s_openapi::api::core::v1::ConfigMap;
    use weir_core::model::KubernetesService;

    fn podinfo_ds() -> DaemonSet {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "podinfo-ds", "namespace": "test", "labels": {"app": "podinfo-ds", "team": "a"},
                         "resourceVersion": "7", "uid": "u-1", "generation": 4},
            "spec": {
                "minReadySeconds": 3,
                "selector": {"matchLabels": {"app": "podinfo-ds", "tier": "edge"}},
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                "template": {
                    "metadata": {"labels": {"app": "podinfo-ds", "tier": "edge"}},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/os": "linux"},
                        "volumes": [{"name": "config", "configMap": {"name": "ds-config"}}],
                        "containers": [{
                            "name": "podinfod",
                            "image": "ghcr.io/stefanprodan/podinfo:6.0.0",
                            "ports": [{"name": "http", "containerPort": 9898}]
                        }]
                    }
                }
            },
            "status": {"currentNumberScheduled": 3, "desiredNumberScheduled": 3, "numberMisscheduled": 0,
                       "numberReady": 3, "numberAvailable": 3, "updatedNumberScheduled": 3, "observedGeneration": 4}
        }))
        .unwrap()
    }

    fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "weir.dev/v1alpha1".into(),
            kind: "Rollout".into(),
            name: "podinfo-ds".into(),
            uid: "r-1".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    fn node_selector(daemon_set: &DaemonSet) -> Value {
        serde_json::to_value(
            &daemon_set
                .spec
                .template
                .spec
                .as_ref()
                .unwrap()
                .node_selector,
        )
        .unwrap()
    }

    /// `daemon_set` after the merge patch `patch`, as the API server applies it (RFC 7386).
    fn patched(daemon_set: &DaemonSet, patch: &Value) -> DaemonSet {
        fn merge(target: &mut Value, patch: &Value) {
            let Some(patch) = patch.as_object() else {
                *target = patch.clone();
                return;
            };
            if !target.is_object() {
                *target = json!({});
            }
            let map = target.as_object_mut().unwrap();
            for (key, value) in patch {
                if value.is_null() {
                    map.remove(key);
                } else {
                    merge(map.entry(key.clone()).or_insert(Value::Null), value);
                }
            }
        }
        let mut value = serde_json::to_value(daemon_set).unwrap();
        merge(&mut value, patch);
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn scaling_to_zero_adds_flaggers_node_selector_and_scaling_up_removes_only_it() {
        let target = podinfo_ds();
        assert!(!scaled_to_zero(&target));
        let down = patched(&target, &scale_patch(true));
        assert!(scaled_to_zero(&down));
        assert_eq!(
            node_selector(&down),
            json!({"flagger.app/scale-to-zero": "true", "kubernetes.io/os": "linux"})
        );
        let up = patched(&down, &scale_patch(false));
        assert!(!scaled_to_zero(&up));
        assert_eq!(node_selector(&up), json!({"kubernetes.io/os": "linux"}));
    }

    #[test]
    fn the_scale_to_zero_entry_is_not_part_of_the_revision() {
        let target = podinfo_ds();
        let configs = TrackedConfigs::new();
        let down = patched(&target, &scale_patch(true));
        assert_eq!(revision(&down, &configs), revision(&target, &configs));
        // Without a node selector of the user's, the merge patch may leave an empty one.
        let mut bare = target.clone();
        bare.spec.template.spec.as_mut().unwrap().node_selector = None;
        let mut emptied = bare.clone();
        emptied.spec.template.spec.as_mut().unwrap().node_selector = Some(Default::default());
        let bare_down = patched(&bare, &scale_patch(true));
        assert_eq!(revision(&emptied, &configs), revision(&bare, &configs));
        assert_eq!(revision(&bare_down, &configs), revision(&bare, &configs));
        // Anything else in the template is a new revision: the user's node selector too.
        let mut other = target.clone();
        other
            .spec
            .template
            .spec
            .as_mut()
            .unwrap()
            .node_selector
            .as_mut()
            .unwrap()
            .insert("pool".into(), "edge".into());
        assert_ne!(revision(&other, &configs), revision(&target, &configs));
        let mut image = target.clone();
        image.spec.template.spec.as_mut().unwrap().containers[0].image =
            Some("podinfo:6.0.1".into());
        assert_ne!(revision(&image, &configs), revision(&target, &configs));
        // Status and metadata are not.
        let mut status = target.clone();
        status.metadata.generation = Some(9);
        status.status = None;
        assert_eq!(revision(&status, &configs), revision(&target, &configs));
    }

    #[test]
    fn the_primary_is_the_target_relabelled_without_the_scale_to_zero_entry_and_owned() {
        let target = patched(&podinfo_ds(), &scale_patch(true));
        let config: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "ds-config", "namespace": "test"}, "data": {"a": "1"}
        }))
        .unwrap();
        let configs = TrackedConfigs::from([(
            (ConfigKind::ConfigMap, "ds-config".to_string()),
            TrackedConfig::ConfigMap(config),
        )]);
        let primary = primary(&target, &configs, &owner()).unwrap();
        let value = serde_json::to_value(&primary).unwrap();
        assert_eq!(value["metadata"]["name"], "podinfo-ds-primary");
        assert_eq!(value["metadata"]["namespace"], "test");
        assert_eq!(
            value["metadata"]["labels"],
            json!({"app": "podinfo-ds-primary", "team": "a"})
        );
        assert_eq!(
            value["metadata"]["ownerReferences"][0]["name"],
            "podinfo-ds"
        );
        assert!(value["metadata"]["uid"].is_null());
        assert!(value["metadata"]["resourceVersion"].is_null());
        assert!(value["status"].is_null());
        assert_eq!(
            value["spec"]["selector"],
            json!({"matchLabels": {"app": "podinfo-ds-primary", "tier": "edge"}})
        );
        assert_eq!(
            value["spec"]["template"]["metadata"]["labels"],
            json!({"app": "podinfo-ds-primary", "tier": "edge"})
        );
        assert_eq!(
            value["spec"]["template"]["spec"]["nodeSelector"],
            json!({"kubernetes.io/os": "linux"})
        );
        assert_eq!(
            value["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"],
            "ds-config-primary"
        );
        assert_eq!(value["spec"]["minReadySeconds"], 3);
        assert_eq!(
            value["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"],
            1
        );
        // The primary's pods are told apart from the target's by the Services.
        let [apex, primary_service, canary] =
            services(&target, &KubernetesService::default(), &owner()).unwrap();
        let selector = |service: &k8s_openapi::api::core::v1::Service| {
            serde_json::to_value(&service.spec.as_ref().unwrap().selector).unwrap()
        };
        assert_eq!(selector(&apex), json!({"app": "podinfo-ds-primary"}));
        assert_eq!(
            selector(&primary_service),
            json!({"app": "podinfo-ds-primary"})
        );
        assert_eq!(selector(&canary), json!({"app": "podinfo-ds"}));
        assert_eq!(
            apex.spec.as_ref().unwrap().ports.as_ref().unwrap()[0].port,
            9898
        );
    }

    #[test]
    fn on_delete_and_a_missing_selector_label_are_refused_naming_the_daemon_set() {
        let mut on_delete = podinfo_ds();
        on_delete.spec.update_strategy.as_mut().unwrap().type_ = Some("OnDelete".into());
        let error = primary(&on_delete, &TrackedConfigs::new(), &owner()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "DaemonSet podinfo-ds: spec.updateStrategy.type is OnDelete; weir (as Flagger) needs RollingUpdate (the default), or a promotion would never replace the primary's pods"
        );
        let mut unlabelled = podinfo_ds();
        unlabelled.spec.selector.match_labels =
            Some([("tier".to_string(), "edge".to_string())].into());
        let error = primary(&unlabelled, &TrackedConfigs::new(), &owner()).unwrap_err();
        assert!(
            error.to_string().starts_with(
                "DaemonSet podinfo-ds: spec.selector.matchLabels has none of app, name"
            ),
            "{error}"
        );
        // No strategy at all is RollingUpdate (the API server's default).
        let mut unset = podinfo_ds();
        unset.spec.update_strategy = None;
        assert!(primary(&unset, &TrackedConfigs::new(), &owner()).is_ok());
    }

    #[test]
    fn ready_follows_flaggers_rule_and_needs_a_node() {
        let target = podinfo_ds();
        assert!(ready(&target));
        let with = |status: Value| {
            let mut daemon_set = podinfo_ds();
            let mut full = json!({"currentNumberScheduled": 3, "desiredNumberScheduled": 3,
                "numberMisscheduled": 0, "numberReady": 3, "numberAvailable": 3,
                "updatedNumberScheduled": 3, "observedGeneration": 4});
            for (key, value) in status.as_object().unwrap() {
                full[key] = value.clone();
            }
            daemon_set.status = Some(serde_json::from_value(full).unwrap());
            daemon_set
        };
        assert!(!ready(&with(json!({"observedGeneration": 3}))));
        assert!(!ready(&with(json!({"updatedNumberScheduled": 2}))));
        assert!(!ready(&with(json!({"numberAvailable": 2}))));
        assert!(!ready(&with(json!({"numberAvailable": null}))));
        assert!(
            !ready(&with(
                json!({"desiredNumberScheduled": 0, "numberAvailable": 0,
                "updatedNumberScheduled": 0})
            )),
            "on no node: serves nothing"
        );
        assert!(ready(&with(json!({"observedGeneration": 5}))));
        let mut no_status = podinfo_ds();
        no_status.status = None;
        assert!(!ready(&no_status));
        assert_eq!(
            progress(&with(
                json!({"updatedNumberScheduled": 2, "numberAvailable": 1})
            )),
            "2 of 3 pods updated, 1 available"
        );
    }
}
