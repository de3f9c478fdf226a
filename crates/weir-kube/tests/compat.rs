//! Every Canary of the Flagger corpus (when it sits beside the project: `WEIR_COMPAT_DIR`, or
//! `../shared/compat/flagger`) gets its primary Deployment and Services the way Flagger names and
//! wires them. Without the corpus the test prints a note and passes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::json;
use weir_core::document::{self, Document};
use weir_kube::workload;

fn corpus() -> Option<PathBuf> {
    let dir = std::env::var("WEIR_COMPAT_DIR")
        .map(PathBuf::from)
        .ok()
        .filter(|dir| dir.is_dir())
        .or_else(|| {
            let beside =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/compat/flagger");
            beside.is_dir().then_some(beside)
        });
    if dir.is_none() {
        println!("compat corpus not found: skipped");
    }
    dir
}

/// A Deployment as a Flagger user would have it for the Canary's targetRef.
fn target_for(name: &str, namespace: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "app:1", "ports": [{"name": "http", "containerPort": 9898}]}]}
            }
        }
    }))
    .unwrap()
}

#[test]
fn every_corpus_canary_gets_flaggers_primary_and_services() {
    let Some(dir) = corpus() else { return };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("canaries"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    let mut checked = 0;
    for file in &files {
        for loaded in document::load(&std::fs::read(file).unwrap()) {
            let loaded = loaded.unwrap_or_else(|refused| panic!("{}: {refused:?}", file.display()));
            let Document::Rollout(rollout) = loaded.document else {
                continue;
            };
            let kubernetes = rollout
                .spec
                .target
                .kubernetes()
                .expect("a kubernetes target");
            let target_name = kubernetes.target_ref.as_ref().unwrap().name.clone();
            let namespace = rollout.metadata.namespace_or_default().to_string();
            let target = target_for(&target_name, &namespace);
            let owner = OwnerReference {
                api_version: "flagger.app/v1beta1".into(),
                kind: "Canary".into(),
                name: rollout.metadata.name.clone(),
                uid: "u".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            };
            let primary =
                workload::primary_deployment(&target, &workload::TrackedConfigs::new(), &owner)
                    .unwrap_or_else(|error| panic!("{}: {error}", file.display()));
            assert_eq!(
                primary.metadata.name,
                Some(format!("{target_name}-primary"))
            );
            let service = kubernetes.service.clone().unwrap_or_default();
            let [apex, primary_service, canary] = workload::services(&target, &service, &owner)
                .unwrap_or_else(|error| panic!("{}: {error}", file.display()));
            let apex_name = service.name.clone().unwrap_or(target_name.clone());
            assert_eq!(apex.metadata.name.as_deref(), Some(apex_name.as_str()));
            assert_eq!(
                primary_service.metadata.name,
                Some(format!("{apex_name}-primary"))
            );
            assert_eq!(canary.metadata.name, Some(format!("{apex_name}-canary")));
            let port = &apex.spec.unwrap().ports.unwrap()[0];
            if let Some(expected) = service.port {
                assert_eq!(
                    i64::from(port.port),
                    i64::from(expected),
                    "{}",
                    file.display()
                );
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 65, "canaries checked");
    println!("{checked} corpus canaries: primary Deployment and three Services each");
}
