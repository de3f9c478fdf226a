#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::json;
use weir_core::model::KubernetesService;

use super::*;

fn podinfo() -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "podinfo", "namespace": "test", "labels": {"app": "podinfo", "team": "a"},
                     "resourceVersion": "7", "uid": "u-1"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "podinfo"}},
            "template": {
                "metadata": {"labels": {"app": "podinfo", "version": "6.0"}},
                "spec": {"containers": [{
                    "name": "podinfod",
                    "image": "ghcr.io/stefanprodan/podinfo:6.0.0",
                    "ports": [{"name": "http", "containerPort": 9898}, {"name": "grpc", "containerPort": 9999},
                              {"containerPort": 8080}]
                }]}
            }
        },
        "status": {"replicas": 2}
    }))
    .unwrap()
}

fn owner() -> OwnerReference {
    OwnerReference {
        api_version: "weir.dev/v1alpha1".into(),
        kind: "Rollout".into(),
        name: "podinfo".into(),
        uid: "r-1".into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn service(value: serde_json::Value) -> KubernetesService {
    serde_json::from_value(value).unwrap()
}

#[test]
fn the_primary_is_the_target_relabelled_and_owned_by_the_rollout() {
    let primary = primary_deployment(&podinfo(), &owner()).unwrap();
    insta::assert_yaml_snapshot!(primary);
    let spec = primary.spec;
    assert_eq!(
        spec.selector.match_labels.unwrap()["app"],
        "podinfo-primary"
    );
    assert_eq!(
        spec.template.metadata.unwrap().labels.unwrap()["app"],
        "podinfo-primary"
    );
    assert_eq!(spec.replicas, Some(2));
}

#[test]
fn services_select_the_primary_for_the_apex_and_the_target_for_the_canary() {
    let [apex, primary, canary] = services(
        &podinfo(),
        &service(json!({"port": 80, "targetPort": "http", "portDiscovery": true,
                        "apex": {"annotations": {"a": "b"}}, "canary": {"labels": {"role": "canary"}}})),
        &owner(),
    )
    .unwrap();
    insta::assert_yaml_snapshot!("services", [&apex, &primary, &canary]);
    let selector =
        |service: &Service| service.spec.clone().unwrap().selector.unwrap()["app"].clone();
    assert_eq!(selector(&apex), "podinfo-primary");
    assert_eq!(selector(&primary), "podinfo-primary");
    assert_eq!(selector(&canary), "podinfo");
    let names: Vec<String> = [&apex, &primary, &canary]
        .iter()
        .map(|service| service.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["podinfo", "podinfo-primary", "podinfo-canary"]);
    // The main port by name, and the other container ports discovered.
    let ports: Vec<(String, i32)> = apex
        .spec
        .unwrap()
        .ports
        .unwrap()
        .into_iter()
        .map(|port| (port.name.unwrap(), port.port))
        .collect();
    assert_eq!(
        ports,
        [
            ("http".into(), 80),
            ("tcp-grpc".into(), 9999),
            ("tcp-8080".into(), 8080)
        ]
    );
}

#[test]
fn the_service_name_and_port_name_come_from_the_spec() {
    let [apex, primary, canary] = services(
        &podinfo(),
        &service(json!({"name": "web", "port": 9898, "portName": "h2c"})),
        &owner(),
    )
    .unwrap();
    assert_eq!(apex.metadata.name.as_deref(), Some("web"));
    assert_eq!(primary.metadata.name.as_deref(), Some("web-primary"));
    assert_eq!(canary.metadata.name.as_deref(), Some("web-canary"));
    let port = &apex.spec.unwrap().ports.unwrap()[0];
    assert_eq!(port.name.as_deref(), Some("h2c"));
    assert_eq!(port.target_port, Some(IntOrString::Int(9898)));
}

#[test]
fn only_the_pod_template_makes_a_new_revision() {
    let base = podinfo();
    let mut scaled = base.clone();
    scaled.spec.replicas = Some(10);
    scaled.metadata.resource_version = Some("8".into());
    assert_eq!(revision(&base), revision(&scaled));
    let mut changed = base.clone();
    changed.spec.template.spec.as_mut().unwrap().containers[0].image =
        Some("ghcr.io/stefanprodan/podinfo:6.0.1".into());
    assert_ne!(revision(&base), revision(&changed));
}

#[test]
fn the_selector_label_is_the_first_of_flaggers_and_its_absence_is_named() {
    let mut named = podinfo();
    named.spec.selector.match_labels = Some(
        [
            ("app.kubernetes.io/name".to_string(), "shop".to_string()),
            ("name".to_string(), "n".to_string()),
        ]
        .into(),
    );
    assert_eq!(selector_label(&named).unwrap(), ("name".into(), "n".into()));
    let mut none = podinfo();
    none.spec.selector.match_labels = Some([("tier".to_string(), "web".to_string())].into());
    let error = primary_deployment(&none, &owner()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "Deployment podinfo: spec.selector.matchLabels has none of app, name, app.kubernetes.io/name: weir (as Flagger) finds the pods by the first of them"
    );
}

#[test]
fn a_target_without_any_port_is_refused() {
    let mut bare = podinfo();
    bare.spec.template.spec.as_mut().unwrap().containers[0].ports = None;
    let error = services(&bare, &KubernetesService::default(), &owner()).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("spec.target.service.port is required"),
        "{error}"
    );
}

#[test]
fn the_primary_autoscaler_is_the_targets_scaling_the_primary() {
    let autoscaler: HorizontalPodAutoscaler = serde_json::from_value(json!({
        "metadata": {"name": "podinfo", "namespace": "test", "labels": {"team": "a"}},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "podinfo"},
            "minReplicas": 2,
            "maxReplicas": 4
        }
    }))
    .unwrap();
    let primary = primary_autoscaler(&autoscaler, "podinfo", &owner());
    assert_eq!(primary.metadata.name.as_deref(), Some("podinfo-primary"));
    assert_eq!(primary.spec.scale_target_ref.name, "podinfo-primary");
    assert_eq!(primary.spec.max_replicas, 4);
    assert_eq!(primary.spec.min_replicas, Some(2));
    assert_eq!(primary.metadata.owner_references, Some(vec![owner()]));
}

#[test]
fn the_routes_port_is_the_services_port_even_without_service_port() {
    // Without spec.target.service.port the Services expose the first container port; the
    // routes must name the same port (they used to fall back to 80).
    let target = podinfo();
    let unset = service(json!({}));
    let [apex, _, _] = services(&target, &unset, &owner()).unwrap();
    let exposed = apex.spec.unwrap().ports.unwrap()[0].port;
    assert_eq!(service_port(&target, &unset).unwrap(), 9898);
    assert_eq!(service_port(&target, &unset).unwrap(), exposed);
    assert_eq!(
        service_port(&target, &service(json!({"port": 80}))).unwrap(),
        80
    );
}
