//! Flagger compatibility: every real-world manifest of the corpus converts and validates, every
//! fragment is refused naming what it lacks, and the conversion of a chosen dozen is pinned by
//! snapshots.
//!
//! The corpus is third-party material kept beside the project, not in it: its directory comes
//! from `WEIR_COMPAT_DIR` (set by `.ci/run`), or `../shared/compat/flagger` beside the
//! repository. Without it these tests print a note and pass.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;
use weir_core::document::{self, LoadResult};
use weir_core::flagger;
use weir_core::model::Rollout;
use weir_core::{FieldError, Warning};

const CANARIES: usize = 65;
const METRIC_TEMPLATES: usize = 27;
const FRAGMENTS: usize = 18;

fn corpus_dir() -> Option<PathBuf> {
    if let Ok(dir) = std::env::var("WEIR_COMPAT_DIR") {
        let dir = PathBuf::from(dir);
        if dir.is_dir() {
            return Some(dir);
        }
    }
    let beside = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/compat/flagger");
    beside.is_dir().then_some(beside)
}

/// The corpus directory, or `None` after printing why the test is skipped.
fn corpus() -> Option<PathBuf> {
    let dir = corpus_dir();
    if dir.is_none() {
        println!("compat corpus not found: skipped");
    }
    dir
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("reading {}: {error}", dir.display()))
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            path.extension()
                .is_some_and(|ext| ext == "yaml" || ext == "yml")
        })
        .collect();
    files.sort();
    files
}

fn load_file(path: &Path) -> Vec<LoadResult> {
    let bytes =
        fs::read(path).unwrap_or_else(|error| panic!("reading {}: {error}", path.display()));
    document::load(&bytes)
}

fn describe_errors(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(|error| format!("    {error}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn corpus_has_the_expected_counts() {
    let Some(dir) = corpus() else { return };
    assert_eq!(yaml_files(&dir.join("canaries")).len(), CANARIES);
    assert_eq!(
        yaml_files(&dir.join("metric-templates")).len(),
        METRIC_TEMPLATES
    );
    assert_eq!(yaml_files(&dir.join("fragments")).len(), FRAGMENTS);
}

fn assert_all_load(subdir: &str, expected: usize) {
    let Some(dir) = corpus() else { return };
    let files = yaml_files(&dir.join(subdir));
    assert_eq!(files.len(), expected, "{subdir}: number of files");
    let mut failures = Vec::new();
    for path in &files {
        let results = load_file(path);
        assert!(!results.is_empty(), "{}: no document", path.display());
        for result in results {
            if let Err(refused) = result {
                failures.push(format!(
                    "{} ({}):\n{}",
                    path.display(),
                    refused.subject,
                    describe_errors(&refused.errors)
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} {subdir} were refused:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

#[test]
fn every_canary_converts_and_validates() {
    assert_all_load("canaries", CANARIES);
}

#[test]
fn every_metric_template_converts_and_validates() {
    assert_all_load("metric-templates", METRIC_TEMPLATES);
}

#[test]
fn every_fragment_is_refused_naming_the_missing_field() {
    let Some(dir) = corpus() else { return };
    let files = yaml_files(&dir.join("fragments"));
    assert_eq!(files.len(), FRAGMENTS);
    for path in &files {
        let bytes = fs::read(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        let values = document::parse_values(&bytes)
            .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        assert_eq!(values.len(), 1, "{}", path.display());
        let value = &values[0];
        let spec = value.get("spec").filter(|spec| !spec.is_null());
        let has = |key: &str| {
            spec.and_then(|spec| spec.get(key))
                .is_some_and(|v| !v.is_null())
        };
        // What each fragment lacks, read from the fragment itself.
        let mut missing = Vec::new();
        if value.pointer("/metadata/name").is_none_or(Value::is_null) {
            missing.push("metadata.name");
        }
        if spec.is_none() {
            missing.push("spec");
        } else {
            if !has("targetRef") {
                missing.push("spec.targetRef");
            }
            if !has("analysis") && !has("canaryAnalysis") {
                missing.push("spec.analysis");
            }
        }
        assert!(
            !missing.is_empty(),
            "{}: the fragment lacks nothing",
            path.display()
        );

        let results = document::load(&bytes);
        let [Err(refused)] = results.as_slice() else {
            panic!("{}: not refused: {results:?}", path.display());
        };
        for field in &missing {
            assert!(
                refused
                    .errors
                    .iter()
                    .any(|error| error.path == *field && error.message.starts_with("is required")),
                "{}: no error names the missing {field}:\n{}",
                path.display(),
                describe_errors(&refused.errors)
            );
        }
    }
}

// === snapshots ===

/// What `weir convert` shows for a Canary: the Rollout and the warnings.
#[derive(Serialize)]
struct Conversion {
    rollout: Rollout,
    warnings: Vec<String>,
}

fn convert_snapshot(file: &str) -> Option<String> {
    let dir = corpus()?;
    let path = dir.join("canaries").join(file);
    let bytes = fs::read(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let values = document::parse_values(&bytes).unwrap_or_else(|error| panic!("{error}"));
    let [value] = values.as_slice() else {
        panic!("{file}: expected one document");
    };
    let converted = flagger::convert_canary(value)
        .unwrap_or_else(|errors| panic!("{file}:\n{}", describe_errors(&errors)));
    let conversion = Conversion {
        rollout: converted.value,
        warnings: converted.warnings.iter().map(Warning::to_string).collect(),
    };
    Some(serde_saphyr::to_string(&conversion).unwrap_or_else(|error| panic!("{error}")))
}

macro_rules! conversion_snapshots {
    ($($test:ident => $file:literal,)*) => {$(
        #[test]
        fn $test() {
            let Some(text) = convert_snapshot($file) else { return };
            insta::assert_snapshot!(text);
        }
    )*};
}

conversion_snapshots! {
    convert_istio_canary => "artifacts-examples-istio-canary-be3de0dc.yaml",
    convert_istio_ab_test => "artifacts-examples-istio-abtest-a1c884a7.yaml",
    convert_kubernetes_blue_green => "docs-gitbook-tutorials-kubernetes-blue-green-61eaa1c6.yaml",
    convert_linkerd_step_weights => "artifacts-examples-linkerd-canary-steps-ac23356d.yaml",
    convert_linkerd_step_weights_above_max_weight => "test-linkerd-test-steps-fddf3251.yaml",
    convert_nginx_canary => "docs-gitbook-tutorials-nginx-progressive-delivery-20273f02.yaml",
    convert_gateway_api_mirror => "docs-gitbook-tutorials-gatewayapi-progressive-delivery-417cec34.yaml",
    convert_kuma_canary => "artifacts-examples-kuma-canary-d7b47f92.yaml",
    convert_apisix_canary => "docs-gitbook-tutorials-apisix-progressive-delivery-9cac2376.yaml",
    convert_skipper_canary => "docs-gitbook-tutorials-skipper-progressive-delivery-6183b723.yaml",
    convert_knative_canary => "docs-gitbook-tutorials-knative-progressive-delivery-3447021b.yaml",
    convert_keda_autoscaler_blue_green => "docs-gitbook-tutorials-keda-scaledobject-1e0d535f.yaml",
    convert_contour_deprecated_metric_threshold => "test-contour-test-canary-be0907b0.yaml",
    convert_alerts => "README-f8cbab37.yaml",
    convert_istio_session_affinity => "test-istio-test-session-affinity-4c733f9f.yaml",
}
