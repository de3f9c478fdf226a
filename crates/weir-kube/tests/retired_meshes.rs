//! The Canaries of Flagger's corpus that name App Mesh or OSM (`canaries-more/`, taken from
//! Flagger's history: both meshes are gone upstream) convert as any Canary does, and the
//! `kubernetes` target refuses each with a message that says why and names the alternatives,
//! before anything is written. Without the corpus the test prints that it was skipped.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use weir_core::document::{self, Document};
use weir_engine::TargetProvider;
use weir_kube::target::KubernetesTargets;

fn canaries_more() -> Option<PathBuf> {
    let dir = std::env::var("WEIR_COMPAT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/compat/flagger")
        })
        .join("canaries-more");
    if !dir.is_dir() {
        println!("{} not found: skipped", dir.display());
        return None;
    }
    Some(dir)
}

#[tokio::test]
async fn every_app_mesh_and_osm_canary_is_refused_naming_the_alternatives() {
    let Some(dir) = canaries_more() else {
        return;
    };
    // The target refuses from the rollout alone: the client never connects.
    let client =
        kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
    let targets = KubernetesTargets::new(client);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} holds no Canary", dir.display());
    for file in &files {
        let loaded = document::load(&std::fs::read(file).unwrap());
        let canary = loaded
            .into_iter()
            .filter_map(Result::ok)
            .find_map(|loaded| match loaded.document {
                Document::Rollout(rollout) => Some(rollout),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{}: no Canary converted", file.display()));
        let errors = targets.validate(&canary);
        let provider = errors
            .iter()
            .find(|error| error.path == "spec.target.provider")
            .unwrap_or_else(|| panic!("{}: not refused: {errors:?}", file.display()));
        let message = provider.to_string();
        for expected in ["App Mesh", "Open Service Mesh", "istio", "gatewayapi:v1"] {
            assert!(
                message.contains(expected),
                "{}: the refusal names {expected:?}: {message}",
                file.display()
            );
        }
    }
    println!(
        "{} App Mesh and OSM Canaries refused, each naming the alternatives",
        files.len()
    );
}
