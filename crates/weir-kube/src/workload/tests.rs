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
    let primary = primary_deployment(&podinfo(), &TrackedConfigs::new(), &owner()).unwrap();
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
    let none = TrackedConfigs::new();
    assert_eq!(revision(&base, &none), revision(&scaled, &none));
    let mut changed = base.clone();
    changed.spec.template.spec.as_mut().unwrap().containers[0].image =
        Some("ghcr.io/stefanprodan/podinfo:6.0.1".into());
    assert_ne!(revision(&base, &none), revision(&changed, &none));
    // Without tracked configs the revision is the pod template's hash, as before tracking.
    assert_eq!(
        revision(&base, &none),
        weir_core::revision::of_definition(&serde_json::to_value(&base.spec.template).unwrap())
    );
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
    let error = primary_deployment(&none, &TrackedConfigs::new(), &owner()).unwrap_err();
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

/// podinfo reading configuration every way a pod can: a volume, a projected volume, envFrom and
/// env valueFrom, in a container and an init container, with an optional reference.
fn configured() -> Deployment {
    let mut target = podinfo();
    let value = json!({
        "volumes": [
            {"name": "config", "configMap": {"name": "podinfo-config"}},
            {"name": "tls", "secret": {"secretName": "podinfo-tls"}},
            {"name": "all", "projected": {"sources": [
                {"configMap": {"name": "shared"}},
                {"secret": {"name": "podinfo-token", "optional": true}},
                {"downwardAPI": {"items": []}}
            ]}}
        ],
        "initContainers": [{"name": "init", "image": "busybox",
            "envFrom": [{"secretRef": {"name": "init-env"}}]}],
        "containers": [{
            "name": "podinfod",
            "image": "ghcr.io/stefanprodan/podinfo:6.0.0",
            "ports": [{"name": "http", "containerPort": 9898}],
            "envFrom": [{"configMapRef": {"name": "podinfo-env"}}, {"configMapRef": {"name": "extra", "optional": true}}],
            "env": [
                {"name": "COLOR", "valueFrom": {"configMapKeyRef": {"name": "podinfo-config", "key": "color"}}},
                {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "podinfo-token", "key": "t", "optional": true}}},
                {"name": "PLAIN", "value": "x"}
            ]
        }]
    });
    target.spec.template.spec = Some(serde_json::from_value(value).unwrap());
    target
}

fn config_map(name: &str, data: serde_json::Value) -> TrackedConfig {
    TrackedConfig::ConfigMap(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "test", "labels": {"team": "a"},
                         "annotations": {"note": "kept on the original only"}, "resourceVersion": "3"},
            "data": data,
            "immutable": true
        }))
        .unwrap(),
    )
}

fn secret(name: &str, type_: &str, data: serde_json::Value) -> TrackedConfig {
    TrackedConfig::Secret(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "test"},
            "type": type_,
            "data": data
        }))
        .unwrap(),
    )
}

fn tracked(configs: Vec<TrackedConfig>) -> TrackedConfigs {
    configs
        .into_iter()
        .map(|config| ((config.kind(), config.name().to_string()), config))
        .collect()
}

#[test]
fn every_way_a_pod_reads_a_config_map_or_secret_is_a_reference_once() {
    let references: Vec<(ConfigKind, String, bool)> =
        config_references(&configured().spec.template)
            .into_iter()
            .map(|reference| (reference.kind, reference.name, reference.optional))
            .collect();
    let expected: Vec<(ConfigKind, String, bool)> = [
        (ConfigKind::ConfigMap, "extra", true),
        (ConfigKind::ConfigMap, "podinfo-config", false),
        (ConfigKind::ConfigMap, "podinfo-env", false),
        (ConfigKind::ConfigMap, "shared", false),
        (ConfigKind::Secret, "db", false),
        (ConfigKind::Secret, "init-env", false),
        (ConfigKind::Secret, "podinfo-tls", false),
        (ConfigKind::Secret, "podinfo-token", true),
    ]
    .into_iter()
    .map(|(kind, name, optional)| (kind, name.to_string(), optional))
    .collect();
    assert_eq!(references, expected);
    assert!(config_references(&podinfo().spec.template).is_empty());
    // Optional only when every mention is.
    let mut mixed = configured();
    let pod = mixed.spec.template.spec.as_mut().unwrap();
    pod.containers[0].env_from.as_mut().unwrap()[1]
        .config_map_ref
        .as_mut()
        .unwrap()
        .name = "podinfo-config".into();
    let config = config_references(&mixed.spec.template)
        .into_iter()
        .find(|reference| reference.name == "podinfo-config")
        .unwrap();
    assert!(!config.optional);
}

#[test]
fn the_primary_reads_the_copies_of_tracked_configs_only() {
    let configs = tracked(vec![
        config_map("podinfo-config", json!({"color": "blue"})),
        config_map("shared", json!({})),
        config_map("podinfo-env", json!({"A": "1"})),
        secret("db", "Opaque", json!({"password": "c2VjcmV0"})),
        secret("podinfo-tls", "kubernetes.io/tls", json!({})),
        secret("init-env", "Opaque", json!({})),
    ]);
    let primary = primary_deployment(&configured(), &configs, &owner()).unwrap();
    let pod = primary.spec.template.spec.clone().unwrap();
    insta::assert_yaml_snapshot!("primary_with_configs", pod);
    let names: Vec<(ConfigKind, String)> = config_references(&primary.spec.template)
        .into_iter()
        .map(|reference| (reference.kind, reference.name))
        .collect();
    let expected: Vec<(ConfigKind, String)> = [
        (ConfigKind::ConfigMap, "extra"),
        (ConfigKind::ConfigMap, "podinfo-config-primary"),
        (ConfigKind::ConfigMap, "podinfo-env-primary"),
        (ConfigKind::ConfigMap, "shared-primary"),
        (ConfigKind::Secret, "db-primary"),
        (ConfigKind::Secret, "init-env-primary"),
        (ConfigKind::Secret, "podinfo-tls-primary"),
        // Optional and absent: not tracked, left as it is.
        (ConfigKind::Secret, "podinfo-token"),
    ]
    .into_iter()
    .map(|(kind, name)| (kind, name.to_string()))
    .collect();
    assert_eq!(names, expected);
    // The target itself is untouched.
    assert_eq!(
        config_references(&configured().spec.template)[1].name,
        "podinfo-config"
    );
}

#[test]
fn the_revision_covers_the_tracked_configs_data_in_a_stable_order() {
    let target = configured();
    let blue = config_map("podinfo-config", json!({"color": "blue"}));
    let password = secret("db", "Opaque", json!({"password": "c2VjcmV0"}));
    let base = revision(&target, &tracked(vec![blue.clone(), password.clone()]));
    // The order configs are found in does not matter.
    assert_eq!(
        base,
        revision(&target, &tracked(vec![password.clone(), blue.clone()]))
    );
    // Metadata (resourceVersion, labels, annotations) does not count.
    let mut relabelled = blue.clone();
    if let TrackedConfig::ConfigMap(config_map) = &mut relabelled {
        config_map.metadata.resource_version = Some("99".into());
        config_map.metadata.labels = None;
    }
    assert_eq!(
        base,
        revision(&target, &tracked(vec![relabelled, password.clone()]))
    );
    // The data does, of a ConfigMap and of a Secret.
    let red = config_map("podinfo-config", json!({"color": "red"}));
    assert_ne!(
        base,
        revision(&target, &tracked(vec![red, password.clone()]))
    );
    let rotated = secret("db", "Opaque", json!({"password": "bmV3"}));
    assert_ne!(
        base,
        revision(&target, &tracked(vec![blue.clone(), rotated]))
    );
    // So does a config appearing or going.
    assert_ne!(base, revision(&target, &tracked(vec![blue])));
    // Replicas do not.
    let mut scaled = target.clone();
    scaled.spec.replicas = Some(7);
    assert_eq!(
        base,
        revision(
            &scaled,
            &tracked(vec![
                config_map("podinfo-config", json!({"color": "blue"})),
                password
            ])
        )
    );
}

#[test]
fn tracking_is_off_by_annotation_and_for_secrets_that_are_not_configuration() {
    let mut target = podinfo();
    assert!(config_tracking_enabled(&target));
    for key in [CONFIG_TRACKING_ANNOTATION, WEIR_CONFIG_TRACKING_ANNOTATION] {
        target.metadata.annotations = Some([(key.to_string(), "disabled".to_string())].into());
        assert!(!config_tracking_enabled(&target), "{key}");
    }
    target.metadata.annotations = Some(
        [(
            CONFIG_TRACKING_ANNOTATION.to_string(),
            "enabled".to_string(),
        )]
        .into(),
    );
    assert!(config_tracking_enabled(&target));

    assert!(config_map("a", json!({})).trackable());
    let mut disabled = config_map("a", json!({}));
    if let TrackedConfig::ConfigMap(config_map) = &mut disabled {
        config_map.metadata.annotations = Some(
            [(
                CONFIG_TRACKING_ANNOTATION.to_string(),
                "disabled".to_string(),
            )]
            .into(),
        );
    }
    assert!(!disabled.trackable());
    assert!(secret("s", "Opaque", json!({})).trackable());
    assert!(secret("s", "kubernetes.io/tls", json!({})).trackable());
    assert!(!secret("s", "kubernetes.io/dockerconfigjson", json!({})).trackable());
    assert!(!secret("s", "kubernetes.io/service-account-token", json!({})).trackable());
}

#[test]
fn a_primary_config_is_a_labelled_owned_copy() {
    let copy = primary_config(
        &config_map("podinfo-config", json!({"color": "blue"})),
        &owner(),
    );
    insta::assert_yaml_snapshot!("primary_config_map", &copy_value(&copy));
    let TrackedConfig::ConfigMap(copy) = copy else {
        panic!("a ConfigMap's copy is a ConfigMap");
    };
    assert_eq!(
        copy.metadata.name.as_deref(),
        Some("podinfo-config-primary")
    );
    assert_eq!(copy.data.unwrap()["color"], "blue");
    assert_eq!(copy.metadata.owner_references, Some(vec![owner()]));
    assert_eq!(copy.immutable, None);
    assert_eq!(copy.metadata.annotations, None);

    let copy = primary_config(
        &secret(
            "db",
            "kubernetes.io/basic-auth",
            json!({"password": "c2VjcmV0"}),
        ),
        &owner(),
    );
    let TrackedConfig::Secret(copy) = copy else {
        panic!("a Secret's copy is a Secret");
    };
    assert_eq!(copy.metadata.name.as_deref(), Some("db-primary"));
    assert_eq!(copy.type_.as_deref(), Some("kubernetes.io/basic-auth"));
    assert_eq!(copy.data.unwrap()["password"].0, b"secret");
}

fn copy_value(config: &TrackedConfig) -> serde_json::Value {
    match config {
        TrackedConfig::ConfigMap(config_map) => serde_json::to_value(config_map).unwrap(),
        TrackedConfig::Secret(secret) => serde_json::to_value(secret).unwrap(),
    }
}

fn scaled_object() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "podinfo-so", "namespace": "shop", "labels": {"team": "web"},
            "annotations": {KEDA_PAUSED_REPLICAS: "0", "note": "kept"}},
        "spec": {
            "scaleTargetRef": {"name": "podinfo"},
            "minReplicaCount": 1,
            "maxReplicaCount": 3,
            "advanced": {"horizontalPodAutoscalerConfig": {"name": "podinfo-hpa"}},
            "triggers": [
                {"type": "prometheus", "name": "rps", "metadata": {"query": "sum(rate(http_requests_total{app=\"podinfo\"}[30s])) + sum(up{app=\"podinfo-canary\"}) + sum(up{app=\"podinfo-db\"})"}},
                {"type": "cpu", "metadata": {"value": "50"}}
            ]
        }
    })
}

#[test]
fn the_primary_scaled_object_scales_the_primary_with_its_queries_renamed() {
    let copy = primary_scaled_object(&scaled_object(), "podinfo", &owner(), None, None);
    assert_eq!(copy["metadata"]["name"], "podinfo-so-primary");
    assert_eq!(copy["metadata"]["ownerReferences"][0]["name"], "podinfo");
    assert_eq!(copy["metadata"]["labels"]["team"], "web");
    assert_eq!(
        copy["metadata"]["annotations"],
        serde_json::json!({"note": "kept"}),
        "never paused"
    );
    assert_eq!(copy["spec"]["scaleTargetRef"]["name"], "podinfo-primary");
    assert_eq!(
        copy["spec"]["triggers"][0]["metadata"]["query"],
        "sum(rate(http_requests_total{app=\"podinfo-primary\"}[30s])) + sum(up{app=\"podinfo-primary\"}) + sum(up{app=\"podinfo-db\"})"
    );
    assert_eq!(copy["spec"]["triggers"][1]["metadata"]["value"], "50");
    assert_eq!(
        copy["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["name"],
        "podinfo-hpa-primary"
    );
    assert_eq!(copy["spec"]["minReplicaCount"], 1);
}

#[test]
fn primary_scaler_queries_and_replicas_override_the_copy() {
    let queries =
        serde_json::json!({"rps": "sum(rate(requests{deployment=\"podinfo-primary\"}[1m]))"});
    let replicas = serde_json::json!({"minReplicas": 2, "maxReplicas": 5});
    let copy = primary_scaled_object(
        &scaled_object(),
        "podinfo",
        &owner(),
        Some(&queries),
        Some(&replicas),
    );
    assert_eq!(
        copy["spec"]["triggers"][0]["metadata"]["query"],
        "sum(rate(requests{deployment=\"podinfo-primary\"}[1m]))"
    );
    assert_eq!(copy["spec"]["minReplicaCount"], 2);
    assert_eq!(copy["spec"]["maxReplicaCount"], 5);
}
