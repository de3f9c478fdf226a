use super::*;

fn errors_of(yaml: &str) -> Vec<FieldError> {
    let results = load(yaml.as_bytes());
    assert_eq!(results.len(), 1, "one document expected");
    match results.into_iter().next() {
        Some(Err(refused)) => refused.errors,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn paths(errors: &[FieldError]) -> Vec<&str> {
    errors.iter().map(|error| error.path.as_str()).collect()
}

const HEADER: &str = "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {name: app}\n";

#[test]
fn a_valid_rollout_loads() {
    let yaml = format!(
        "{HEADER}spec:\n  target: {{kind: flag}}\n  plan: {{canary: {{stepWeight: 10}}}}\n"
    );
    let results = load(yaml.as_bytes());
    let Some(Ok(loaded)) = results.first() else {
        panic!("expected a loaded rollout: {results:?}");
    };
    assert_eq!(loaded.origin, Origin::Weir);
    assert!(
        matches!(&loaded.document, Document::Rollout(r) if r.spec.analysis.interval.get().as_secs() == 60)
    );
}

#[test]
fn every_structural_error_is_reported_with_its_path() {
    let yaml = format!(
        "{HEADER}spec:\n  target: {{kind: flag}}\n  plan: {{canary: {{stepWieght: 10, stepWeights: [5, ten, 20, -1]}}}}\n  analysis: {{interval: 1x, threshold: many, noData: maybe}}\n"
    );
    let errors = errors_of(&yaml);
    let found = paths(&errors);
    for expected in [
        "spec.plan.canary.stepWieght",
        "spec.plan.canary.stepWeights[1]",
        "spec.plan.canary.stepWeights[3]",
        "spec.analysis.interval",
        "spec.analysis.threshold",
        "spec.analysis.noData",
    ] {
        assert!(found.contains(&expected), "missing {expected} in {found:?}");
    }
    let typo = errors
        .iter()
        .find(|e| e.path == "spec.plan.canary.stepWieght");
    assert!(
        typo.is_some_and(|e| e.message.contains("did you mean `stepWeight`")),
        "{typo:?}"
    );
    let bad_unit = errors.iter().find(|e| e.path == "spec.analysis.interval");
    assert!(
        bad_unit.is_some_and(
            |e| e.message.contains("\"1x\"") && e.message.contains("ns, us, ms, s, m, h")
        )
    );
    let policy = errors.iter().find(|e| e.path == "spec.analysis.noData");
    assert!(
        policy.is_some_and(|e| e.message.contains("fail")
            && e.message.contains("hold")
            && e.message.contains("ignore")),
        "{policy:?}"
    );
}

#[test]
fn semantic_errors_are_all_reported_once_the_shape_is_right() {
    let yaml = format!(
        "{HEADER}spec:\n  target: {{kind: flag}}\n  plan: {{canary: {{stepWeights: [10, 5, 200]}}}}\n  analysis: {{threshold: 0}}\n"
    );
    let errors = errors_of(&yaml);
    assert_eq!(
        paths(&errors),
        vec![
            "spec.plan.canary.stepWeights[1]",
            "spec.plan.canary.stepWeights[2]",
            "spec.analysis.threshold"
        ]
    );
    assert_eq!(errors[1].value.as_deref(), Some("200%"));
}

#[test]
fn a_missing_required_field_is_named() {
    let errors = errors_of(&format!("{HEADER}spec:\n  target: {{kind: flag}}\n"));
    assert_eq!(paths(&errors), vec!["spec.plan"]);
    assert!(errors[0].message.contains("required"));
}

#[test]
fn unknown_api_versions_and_kinds_name_what_is_allowed() {
    let errors = errors_of("apiVersion: apps/v1\nkind: Deployment\n");
    assert_eq!(paths(&errors), vec!["apiVersion"]);
    assert!(
        errors[0].message.contains("weir.dev/v1alpha1")
            && errors[0].message.contains("flagger.app/v1beta1")
    );
    let errors = errors_of("apiVersion: weir.dev/v1alpha1\nkind: Rolout\n");
    assert_eq!(paths(&errors), vec!["kind"]);
    let errors = errors_of("apiVersion: weir.dev/v2\nkind: Rollout\n");
    assert_eq!(paths(&errors), vec!["apiVersion"]);
}

#[test]
fn json_and_multiple_yaml_documents_load() {
    let json = r#"{"apiVersion":"weir.dev/v1alpha1","kind":"Rollout","metadata":{"name":"a"},"spec":{"target":{"kind":"flag","flag":"f"},"plan":{"blueGreen":{"iterations":3}}}}"#;
    assert!(matches!(load(json.as_bytes()).as_slice(), [Ok(_)]));
    let two = format!(
        "{HEADER}spec: {{target: {{kind: flag}}, plan: {{blueGreen: {{iterations: 1}}}}}}\n---\n{HEADER}spec: {{}}\n"
    );
    let results = load(two.as_bytes());
    assert_eq!(results.len(), 2);
    assert!(results[0].is_ok() && results[1].is_err());
}

#[test]
fn malformed_input_is_refused_not_panicked_on() {
    for input in [
        &b"\xff\xfe"[..],
        b"{",
        b"key: [unclosed",
        b"- just\n- a list\n",
        b"42",
        b"apiVersion: [1]",
    ] {
        let results = load(input);
        assert!(
            results.iter().all(Result::is_err),
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
    assert!(load(b"").is_empty(), "an empty file holds no document");
}

#[test]
fn oversized_input_is_refused() {
    let big = vec![b'#'; MAX_DOCUMENT_BYTES + 1];
    let results = load(&big);
    assert!(
        matches!(results.as_slice(), [Err(refused)] if refused.errors[0].message.contains("limited"))
    );
}

#[test]
fn edit_distance_counts_single_edits() {
    assert_eq!(edit_distance("stepWieght", "stepWeight"), 2);
    assert_eq!(edit_distance("interval", "interval"), 0);
    assert_eq!(edit_distance("", "abc"), 3);
}

#[test]
fn a_misspelt_target_setting_is_named_with_its_path_and_nothing_else_is_hidden() {
    let errors = errors_of(
        "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {name: Bad_Name}\nspec:\n  target:\n    kind: local\n    lisen: 127.0.0.1:8080\n    listen: 127.0.0.1:8080\n    primary: {url: \"http://127.0.0.1:9001\", helthCheck: /}\n    canary: {command: []}\n  plan: {canary: {stepWeight: 150}}\n",
    );
    assert_eq!(
        paths(&errors),
        vec![
            "metadata.name",
            "spec.target.lisen",
            "spec.target.primary.helthCheck",
            "spec.plan.canary.stepWeight"
        ],
        "{errors:?}"
    );
    assert!(errors[1].message.contains("listen"), "{errors:?}");
}

#[test]
fn target_kinds_and_required_settings_are_named() {
    let kind = errors_of(&format!(
        "{HEADER}spec:\n  target: {{kind: lambda}}\n  plan: {{canary: {{stepWeight: 10}}}}\n"
    ));
    assert_eq!(paths(&kind), vec!["spec.target.kind"]);
    assert!(
        kind[0].message.contains("local, kubernetes, flag"),
        "{kind:?}"
    );

    let missing = errors_of(&format!(
        "{HEADER}spec:\n  target: {{kind: local}}\n  plan: {{canary: {{stepWeight: 10}}}}\n"
    ));
    assert_eq!(
        paths(&missing),
        vec![
            "spec.target.listen",
            "spec.target.primary",
            "spec.target.canary"
        ]
    );

    let flag = errors_of(&format!(
        "{HEADER}spec:\n  target: {{kind: flag, flag: checkout, variaton: on}}\n  plan: {{canary: {{stepWeight: 10}}}}\n"
    ));
    assert_eq!(paths(&flag), vec!["spec.target.variaton"]);

    let kubernetes = errors_of(&format!(
        "{HEADER}spec:\n  target: {{kind: kubernetes, targetRef: {{kind: Deployment}}, service: {{port: http}}}}\n  plan: {{canary: {{stepWeight: 10}}}}\n"
    ));
    assert_eq!(
        paths(&kubernetes),
        vec!["spec.target.service.port", "spec.target.targetRef.name"],
        "{kubernetes:?}"
    );
}

#[test]
fn local_target_rules_are_checked_when_the_document_is_read() {
    let errors = errors_of(&format!(
        "{HEADER}spec:\n  target:\n    kind: local\n    listen: 127.0.0.1:8080\n    primary: {{url: \"http://127.0.0.1:9001\", env: {{A: b}}}}\n    canary: {{command: [\"./app\"], healthCheck: healthz}}\n    metricsServer: prometheus:9090\n  plan: {{abTest: {{iterations: 2, match: [{{method: {{exact: GET}}}}]}}}}\n"
    ));
    assert_eq!(
        paths(&errors),
        vec![
            "spec.target.primary",
            "spec.target.canary.healthCheck",
            "spec.target.metricsServer",
            "spec.plan.abTest.match[0].method"
        ],
        "{errors:?}"
    );
}

#[test]
fn another_apis_object_is_refused_as_foreign_and_a_misspelt_group_is_not() {
    let foreign = |yaml: &str| match load(yaml.as_bytes()).into_iter().next() {
        Some(Err(refused)) => refused.foreign,
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert!(foreign(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n"
    ));
    assert!(foreign(
        "apiVersion: v1\nkind: Service\nmetadata: {name: web}\n"
    ));
    assert!(!foreign(
        "apiVersion: weir.dve/v1alpha1\nkind: Rollout\nmetadata: {name: web}\n"
    ));
    assert!(!foreign("apiVersion: weir.dev/v1alpha1\nkind: Rollot\n"));
    assert!(!foreign("kind: Deployment\nmetadata: {name: web}\n"));
}
