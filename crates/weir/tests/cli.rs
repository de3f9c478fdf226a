//! The `weir` binary's core commands, run as a user runs them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn weir(args: &[&str]) -> Output {
    match Command::new(env!("CARGO_BIN_EXE_weir")).args(args).output() {
        Ok(output) => output,
        Err(error) => panic!("cannot run weir: {error}"),
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn repo_file(relative: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative)
        .display()
        .to_string()
}

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

/// The Flagger corpus beside the project (CI), or `None` on a user's fresh clone.
fn compat_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("WEIR_COMPAT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/compat/flagger")
        });
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!("compat corpus not found at {}: skipped", dir.display());
        None
    }
}

#[test]
fn validate_accepts_the_examples_and_exits_0() {
    let files: Vec<String> = [
        "canary-kubernetes.yaml",
        "kubernetes-revisions.yaml",
        "kubernetes-managed.yaml",
        "steps-with-pauses.yaml",
        "flag-schedule.yaml",
        "flags/guarded-rollout.yaml",
        "prometheus.yaml",
        "notifications.yaml",
        "webhooks.yaml",
    ]
    .iter()
    .map(|name| repo_file(&format!("examples/{name}")))
    .collect();
    let args: Vec<&str> = std::iter::once("validate")
        .chain(files.iter().map(String::as_str))
        .collect();
    let output = weir(&args);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let counted = text(&output.stdout);
    let documents = counted
        .lines()
        .filter(|line| line.contains(" is valid"))
        .count();
    // The revisions example holds the Deployment pair KubeVela would write: not weir's.
    assert!(
        counted.contains(&format!(
            "{documents} valid, 0 invalid, 2 skipped (not weir's)"
        )) && documents >= 8,
        "{counted}"
    );
    assert!(
        counted.contains("Deployment frontend-v1 skipped: not a weir document"),
        "{counted}"
    );
    // Every reference of the examples resolves within their own files.
    assert!(
        !text(&output.stderr).contains("warning: spec."),
        "{}",
        text(&output.stderr)
    );
}

#[test]
#[allow(clippy::expect_used)]
fn validate_warns_about_references_that_no_file_given_defines() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("rollout.yaml");
    std::fs::write(
        &file,
        "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {name: web}\nspec:\n  target: {kind: flag}\n  plan: {canary: {stepWeight: 10}}\n  analysis:\n    metrics: [{name: errors, templateRef: {name: error-rate}, thresholdRange: {max: 1}}]\n",
    )
    .expect("the rollout file is written");
    let output = weir(&["validate", &file.display().to_string()]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let warnings = text(&output.stderr);
    assert!(
        warnings.contains("spec.analysis.metrics[0].templateRef.name")
            && warnings.contains("no MetricTemplate default/error-rate"),
        "{warnings}"
    );
}

#[test]
fn validate_reports_every_error_and_exits_1() {
    let invalid = repo_file("examples/invalid.yaml");
    let valid = repo_file("examples/flag-schedule.yaml");
    let output = weir(&["validate", &valid, &invalid]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    for path in [
        "metadata.name",
        "spec.plan.canary.stepWeights[1]",
        "spec.plan.canary.stepWeights[2]",
        "spec.analysis.threshold",
        "spec.analysis.metrics[0]",
    ] {
        assert!(
            stderr.contains(&format!("  - {path}: ")),
            "{path} missing from:\n{stderr}"
        );
    }
    assert!(text(&output.stdout).contains("1 valid, 1 invalid"));
}

#[test]
#[allow(clippy::expect_used)]
fn validate_names_each_kubernetes_mode_setting_error_by_its_path() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("modes.yaml");
    let rollout = |name: &str, target: &str| {
        format!(
            "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {{name: {name}, namespace: shop}}\nspec:\n  target: {target}\n  plan: {{canary: {{stepWeight: 10}}}}\n"
        )
    };
    let documents = [
        rollout("a", "{kind: kubernetes, mode: managed, replicas: 2}"),
        rollout(
            "b",
            "{kind: kubernetes, mode: revisions, statusTo: {name: shop}}",
        ),
        rollout(
            "c",
            "{kind: kubernetes, targetRef: {name: web}, skipCanary: true, template: {spec: {containers: [{name: web, image: web:1}]}}}",
        ),
        rollout(
            "d",
            "{kind: kubernetes, mode: managed, targetRef: {name: web}, template: {metadata: {labels: {weir.dev/track: x}}, spec: {containers: [{name: web}]}}}",
        ),
        rollout(
            "e",
            "{kind: kubernetes, mode: clone, targetRef: {name: web}}",
        ),
        rollout("f", "{kind: kubernetes, mode: revisions, selector: {}}"),
    ];
    std::fs::write(&file, documents.join("---\n")).expect("the file is written");
    let output = weir(&["validate", &file.display().to_string()]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    for (path, says) in [
        (
            "spec.target.template",
            "mode managed needs the pod template",
        ),
        (
            "spec.target.component",
            "mode revisions needs the component",
        ),
        ("spec.target.statusTo.apiVersion", "is required but missing"),
        ("spec.target.statusTo.kind", "is required but missing"),
        (
            "spec.target.skipCanary",
            "is a setting of mode managed only",
        ),
        ("spec.target.targetRef", "is a setting of mode copy only"),
        (
            "spec.target.template.spec.containers[0].image",
            "is required",
        ),
        (
            "spec.target.template.metadata.labels",
            "weir.dev/* are weir's own",
        ),
        ("spec.target.mode", "`copy`, `revisions`, `managed`"),
        ("spec.target.selector", "must name at least one label"),
    ] {
        assert!(
            stderr
                .lines()
                .any(|line| line.starts_with(&format!("  - {path}: ")) && line.contains(says)),
            "{path} ({says}) missing from:\n{stderr}"
        );
    }
    assert!(text(&output.stdout).contains("0 valid, 6 invalid"));
}

#[test]
fn validate_reports_unreadable_files() {
    let output = weir(&["validate", "/nonexistent/rollout.yaml"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(text(&output.stderr).contains("cannot read /nonexistent/rollout.yaml"));
}

#[test]
fn convert_prints_a_weir_rollout_and_warnings_apart() {
    let output = weir(&["convert", &fixture("flagger-canary.yaml")]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let yaml = text(&output.stdout);
    assert!(yaml.contains("apiVersion: weir.dev/v1alpha1"), "{yaml}");
    assert!(
        yaml.contains("stepWeight: 15") && yaml.contains("maxWeight: 45"),
        "{yaml}"
    );
    assert!(
        yaml.contains("interval: 20s") && yaml.contains("threshold: 4"),
        "{yaml}"
    );
    // The deprecated `threshold: 98` of the success rate becomes its minimum.
    assert!(yaml.contains("min: 98"), "{yaml}");
    assert!(!yaml.contains("warning"), "warnings belong on stderr");
    // The converted document is itself valid input.
    let dir = std::env::temp_dir().join(format!("weir-cli-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let converted = dir.join("converted.yaml");
    assert!(std::fs::write(&converted, &yaml).is_ok());
    let output = weir(&["validate", &converted.display().to_string()]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

/// An Argo Rollouts manifest as its users keep it (a Service beside the Rollout and an
/// AnalysisTemplate): `validate` reads the argoproj.io objects and skips the Service; `convert`
/// prints the canary as a weir Rollout whose steps are Argo's, valid input itself; a step with no
/// weir equivalent is refused naming its path.
#[test]
#[allow(clippy::unwrap_used)]
fn argo_rollouts_are_validated_and_converted_beside_their_services() {
    let output = weir(&["validate", &fixture("argo-rollout.yaml")]);
    let printed = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{printed}{}",
        text(&output.stderr)
    );
    assert!(printed.contains("Service checkout skipped"), "{printed}");
    assert!(
        printed.contains("2 valid, 0 invalid, 1 skipped"),
        "{printed}"
    );

    let output = weir(&["convert", &fixture("argo-rollout.yaml")]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let yaml = text(&output.stdout);
    let weights: Vec<&str> = yaml
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- weight: "))
        .collect();
    assert_eq!(weights, ["25", "50", "75"], "{yaml}");
    assert!(yaml.contains("duration: 45s"), "{yaml}");
    assert!(
        yaml.contains("image: registry.example/checkout:2.4.1"),
        "{yaml}"
    );
    assert!(text(&output.stderr).contains("Service checkout skipped"));
    let dir = weir_testkit::fixtures::TempDb::new();
    let converted = dir.file("converted.yaml");
    std::fs::write(&converted, yaml.as_bytes()).unwrap();
    let output = weir(&["validate", &converted.display().to_string()]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}{}",
        text(&output.stdout),
        text(&output.stderr)
    );

    let scaled = std::fs::read_to_string(fixture("argo-rollout.yaml"))
        .unwrap()
        .replace(
            "        - setWeight: 75\n",
            "        - setCanaryScale: {replicas: 1}\n",
        );
    let file = dir.file("scaled.yaml");
    std::fs::write(&file, scaled).unwrap();
    let output = weir(&["convert", &file.display().to_string()]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stdout));
    let refused = text(&output.stderr);
    assert!(
        refused.contains("spec.strategy.canary.steps[4].setCanaryScale"),
        "{refused}"
    );
    assert!(
        text(&output.stdout).is_empty(),
        "nothing printed when a conversion fails"
    );
}

#[test]
fn convert_refuses_invalid_input_with_exit_2() {
    let output = weir(&["convert", &repo_file("examples/invalid.yaml")]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("spec.analysis.threshold"));
}

#[test]
fn plan_shows_each_step_and_the_minimum_duration() {
    let output = weir(&["plan", &fixture("flagger-canary.yaml")]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    for expected in [
        "15%",
        "30%",
        "45%",
        "confirm-traffic-increase",
        "minimum duration: 2m",
    ] {
        assert!(
            stdout.contains(expected),
            "{expected} missing from:\n{stdout}"
        );
    }
}

#[test]
fn plan_json_has_offsets_weights_and_gates() {
    let output = weir(&["plan", "--output", "json", &fixture("flagger-canary.yaml")]);
    assert_eq!(output.status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
    let timeline = &json["timeline"];
    assert_eq!(timeline["strategy"], "canary");
    assert_eq!(timeline["minimumDuration"], "2m");
    let steps = timeline["steps"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let weights: Vec<f64> = steps
        .iter()
        .filter_map(|step| step["canaryWeight"].as_f64())
        .collect();
    assert_eq!(weights, vec![0.0, 15.0, 30.0, 45.0, 45.0, 0.0, 0.0]);
    assert_eq!(steps[1]["offset"], "20s");
    assert_eq!(steps[1]["gate"], "confirm-traffic-increase");
}

#[test]
fn help_explains_the_commands() {
    let output = weir(&["--help"]);
    let stdout = text(&output.stdout);
    for command in ["validate", "convert", "plan"] {
        assert!(stdout.contains(command), "{stdout}");
    }
    let output = weir(&["validate", "--help"]);
    assert!(
        text(&output.stdout)
            .contains("Exit status: 0 when every document is valid, 1 when any is not")
    );
}

#[test]
fn compat_corpus_validates_and_fragments_are_refused() {
    let Some(dir) = compat_dir() else {
        return;
    };
    let list = |sub: &str| -> Vec<String> {
        let mut files: Vec<String> = std::fs::read_dir(dir.join(sub))
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|entry| entry.path().display().to_string())
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        files
    };
    let complete: Vec<String> = list("canaries")
        .into_iter()
        .chain(list("metric-templates"))
        .collect();
    assert_eq!(complete.len(), 65 + 27);
    let args: Vec<&str> = std::iter::once("validate")
        .chain(complete.iter().map(String::as_str))
        .collect();
    let output = weir(&args);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("92 valid, 0 invalid"));
    let fragments = list("fragments");
    assert_eq!(fragments.len(), 18);
    for fragment in &fragments {
        let output = weir(&["validate", fragment]);
        assert_eq!(
            output.status.code(),
            Some(1),
            "{fragment} should be refused"
        );
        let stderr = text(&output.stderr);
        let names_missing = [
            "spec.targetRef",
            "spec.analysis",
            "metadata.name",
            "spec:",
            "apiVersion",
        ]
        .iter()
        .any(|field| stderr.contains(field));
        assert!(
            names_missing && stderr.contains("required"),
            "{fragment}: {stderr}"
        );
    }
}

/// Dry-run plans of real Flagger manifests, one per strategy and provider.
#[test]
fn plan_snapshots_of_compat_manifests() {
    let Some(dir) = compat_dir() else {
        return;
    };
    let chosen = [
        "artifacts-examples-istio-abtest-a1c884a7.yaml",
        "artifacts-examples-istio-canary-be3de0dc.yaml",
        "artifacts-examples-kuma-canary-d7b47f92.yaml",
        "artifacts-examples-linkerd-canary-4de048b7.yaml",
        "artifacts-examples-linkerd-canary-steps-ac23356d.yaml",
        "docs-gitbook-faq-150fa79e.yaml",
        "docs-gitbook-tutorials-gatewayapi-progressive-delivery-417cec34.yaml",
        "README-f8cbab37.yaml",
    ];
    let mut files: Vec<String> = chosen.iter().map(|name| name.to_string()).collect();
    // Fill up to a dozen with the first others in name order, so the set is stable.
    let mut others: Vec<String> = std::fs::read_dir(dir.join("canaries"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    others.sort();
    for name in others {
        if files.len() >= 14 {
            break;
        }
        if !files.contains(&name) {
            files.push(name);
        }
    }
    for name in &files {
        let path = dir.join("canaries").join(name);
        let output = weir(&["plan", &path.display().to_string()]);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{name}: {}",
            text(&output.stderr)
        );
        let snapshot_name = format!("plan-{}", name.trim_end_matches(".yaml"));
        insta::assert_snapshot!(snapshot_name, text(&output.stdout));
    }
}

#[test]
#[allow(clippy::expect_used)]
fn validate_refuses_a_query_with_a_placeholder_weir_cannot_fill() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("rollout.yaml");
    std::fs::write(
        &file,
        "apiVersion: weir.dev/v1alpha1\nkind: MetricTemplate\nmetadata: {name: errors}\nspec:\n  provider: {type: prometheus, address: \"http://prom:9090\"}\n  query: sum(rate(errors{ns=\"{{ namespce }}\"}[{{ interval }}]))\n---\napiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {name: web}\nspec:\n  target: {kind: flag}\n  plan: {canary: {stepWeight: 10}}\n  analysis:\n    metrics:\n      - {name: errors, templateRef: {name: errors}, thresholdRange: {max: 1}}\n      - {name: inline, query: \"sum(up{job=\\\"{{ variables.job }}\\\"})\", templateVariables: {job: web}, thresholdRange: {min: 1}}\n",
    )
    .expect("the rollout file is written");
    let output = weir(&["validate", &file.display().to_string()]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let errors = text(&output.stderr);
    assert!(
        errors.contains("spec.analysis.metrics[0].templateRef: unknown variable `namespce`"),
        "{errors}"
    );
    // The inline query's template variable is known: no complaint about metrics[1].
    assert!(!errors.contains("metrics[1]"), "{errors}");
    assert!(
        text(&output.stdout).contains("1 valid, 1 invalid"),
        "{}",
        text(&output.stdout)
    );
}

#[test]
fn weir_crds_prints_what_deploy_crds_yaml_holds() {
    let output = weir(&["crds"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let printed = text(&output.stdout);
    assert!(printed.contains("name: rollouts.weir.dev"), "{printed}");
    let checked_in = std::fs::read_to_string(repo_file("deploy/crds.yaml"))
        .unwrap_or_else(|error| panic!("deploy/crds.yaml: {error}"));
    assert!(
        printed == checked_in,
        "deploy/crds.yaml is out of date: run `cargo run -- crds > deploy/crds.yaml`"
    );
}
