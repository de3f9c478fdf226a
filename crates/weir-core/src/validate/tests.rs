use super::*;
use crate::document::{Document, load};

fn rollout(spec_yaml: &str) -> Rollout {
    let yaml = format!(
        "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {{name: app}}\nspec:\n  target: {{kind: flag}}\n{spec_yaml}"
    );
    let parsed: Result<Rollout, _> = serde_saphyr::from_str(&yaml);
    match parsed {
        Ok(rollout) => rollout,
        Err(error) => panic!("does not parse: {error}"),
    }
}

fn error_paths(spec_yaml: &str) -> Vec<String> {
    super::rollout(&rollout(spec_yaml))
        .into_iter()
        .map(|error| error.path)
        .collect()
}

#[test]
fn canary_plans_set_exactly_one_way_of_stepping() {
    assert_eq!(
        error_paths("  plan: {canary: {maxWeight: 50}}\n"),
        vec!["spec.plan.canary"]
    );
    assert_eq!(
        error_paths("  plan: {canary: {stepWeight: 5, stepWeights: [5]}}\n"),
        vec!["spec.plan.canary"]
    );
    assert!(
        error_paths("  plan: {canary: {stepWeight: 0.01}}\n").is_empty(),
        "0.01% steps are allowed"
    );
}

#[test]
fn step_weights_are_ascending_positive_and_within_max_weight() {
    assert_eq!(
        error_paths("  plan: {canary: {stepWeights: [0, 5, 5, 60], maxWeight: 50}}\n"),
        vec![
            "spec.plan.canary.stepWeights[0]",
            "spec.plan.canary.stepWeights[2]",
            "spec.plan.canary.stepWeights[3]"
        ]
    );
    assert_eq!(
        error_paths("  plan: {canary: {stepWeight: 60, maxWeight: 50}}\n"),
        vec!["spec.plan.canary.stepWeight"]
    );
    assert_eq!(
        error_paths("  plan: {canary: {stepWeights: []}}\n"),
        vec!["spec.plan.canary.stepWeights"]
    );
}

#[test]
fn explicit_steps_need_positive_weights_and_pauses() {
    assert_eq!(
        error_paths(
            "  plan: {canary: {steps: [{weight: 0}, {weight: 10, pause: {duration: 0s}}, {weight: 20, pause: {}}]}}\n"
        ),
        vec![
            "spec.plan.canary.steps[0].weight",
            "spec.plan.canary.steps[1].pause.duration"
        ]
    );
}

#[test]
fn iterations_and_match_rules_are_checked() {
    assert_eq!(
        error_paths("  plan: {blueGreen: {iterations: 0}}\n"),
        vec!["spec.plan.blueGreen.iterations"]
    );
    assert_eq!(
        error_paths("  plan: {abTest: {iterations: 2, match: []}}\n"),
        vec!["spec.plan.abTest.match"]
    );
    assert_eq!(
        error_paths(
            "  plan: {abTest: {iterations: 2, match: [{}, {headers: {x-user: {exact: a, prefix: b}}}, {cookies: {type: {regex: '(unclosed'}}}]}}\n"
        ),
        vec![
            "spec.plan.abTest.match[0]",
            "spec.plan.abTest.match[1].headers.x-user",
            "spec.plan.abTest.match[2].cookies.type.regex"
        ]
    );
}

#[test]
fn schedules_follow_the_seed_rules() {
    assert_eq!(
        error_paths("  plan: {schedule: {}}\n"),
        vec!["spec.plan.schedule"]
    );
    assert_eq!(
        error_paths("  plan: {schedule: {manual: []}}\n"),
        vec!["spec.plan.schedule.manual"]
    );
    let errors = super::rollout(&rollout(
        "  plan: {schedule: {manual: [{at: '2027-01-01T00:00:00Z', weight: 10}, {at: '2027-01-01T00:04:59Z', weight: 20}, {at: '2027-01-01T00:04:59Z', weight: 30}, {at: '2027-01-01T01:00:00Z', weight: 101}]}}\n",
    ));
    let found: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        found,
        vec![
            "spec.plan.schedule.manual[1].at",
            "spec.plan.schedule.manual[2].at",
            "spec.plan.schedule.manual[3].weight"
        ]
    );
    assert!(errors[0].message.contains("at least 5 minutes apart"));
    assert!(errors[1].message.contains("strictly ascending"));
    assert_eq!(
        error_paths(
            "  plan: {schedule: {template: {start: '2027-01-01T00:00:00Z', interval: daily, increments: 0}}}\n"
        ),
        vec!["spec.plan.schedule.template.increments"]
    );
}

#[test]
fn analysis_rules_are_checked() {
    let paths = error_paths(
        "  plan: {blueGreen: {iterations: 1}}\n  analysis:\n    interval: 500ms\n    progressDeadline: 200ms\n    metrics:\n      - {name: request-success-rate}\n      - {name: request-success-rate, thresholdRange: {min: 5, max: 1}}\n      - {name: custom, thresholdRange: {max: 1}}\n      - {name: request-duration, query: up, thresholdRange: {max: 1}}\n    webhooks:\n      - {name: a, url: 'ftp://x'}\n      - {name: a, url: 'http://x', timeout: 0s}\n    judges: [Sequential, sequential, sequential]\n",
    );
    assert_eq!(
        paths,
        vec![
            "spec.analysis.interval",
            "spec.analysis.progressDeadline",
            "spec.analysis.metrics[0].thresholdRange",
            "spec.analysis.metrics[1].name",
            "spec.analysis.metrics[1].thresholdRange.min",
            "spec.analysis.metrics[2]",
            "spec.analysis.metrics[3]",
            "spec.analysis.webhooks[0].url",
            "spec.analysis.webhooks[1].name",
            "spec.analysis.webhooks[1].timeout",
            "spec.analysis.judges[0]",
            "spec.analysis.judges[2]",
        ]
    );
}

#[test]
fn session_affinity_needs_a_canary_plan_and_a_cookie_name() {
    assert_eq!(
        error_paths(
            "  plan: {blueGreen: {iterations: 1}}\n  sessionAffinity: {cookieName: 'bad name', maxAge: 0}\n"
        ),
        vec![
            "spec.sessionAffinity",
            "spec.sessionAffinity.cookieName",
            "spec.sessionAffinity.maxAge"
        ]
    );
}

#[test]
fn names_follow_kubernetes_rules() {
    let mut bad = rollout("  plan: {blueGreen: {iterations: 1}}\n");
    bad.metadata.name = "Not_OK".into();
    bad.metadata.namespace = Some("-x".into());
    let paths: Vec<String> = super::rollout(&bad).into_iter().map(|e| e.path).collect();
    assert_eq!(paths, vec!["metadata.name", "metadata.namespace"]);
}

#[test]
fn metric_templates_name_their_provider_types() {
    let yaml = "apiVersion: weir.dev/v1alpha1\nkind: MetricTemplate\nmetadata: {name: t}\nspec: {provider: {type: graphana, address: 'prometheus:9090'}, query: up}\n";
    let results = load(yaml.as_bytes());
    let Some(Err(refused)) = results.first() else {
        panic!("expected a refusal");
    };
    let paths: Vec<&str> = refused.errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, vec!["spec.provider.type", "spec.provider.address"]);
    assert!(refused.errors[0].message.contains("prometheus"));
    let good = yaml
        .replace("graphana", "prometheus")
        .replace("'prometheus:9090'", "'http://prometheus:9090'");
    assert!(
        matches!(load(good.as_bytes()).first(), Some(Ok(loaded)) if matches!(loaded.document, Document::MetricTemplate(_)))
    );
}

#[test]
fn webhook_retries_are_bounded_and_a_secret_ref_names_its_secret() {
    assert_eq!(
        error_paths(
            "  plan: {canary: {stepWeight: 10}}\n  analysis:\n    webhooks:\n      - {name: a, url: 'http://x', retries: 11}\n      - {name: b, url: 'http://x', retries: 10, secretRef: {name: ''}}\n      - {name: c, url: 'http://x', secretRef: {name: signing, namespace: shop}}\n"
        ),
        vec![
            "spec.analysis.webhooks[0].retries",
            "spec.analysis.webhooks[1].secretRef.name"
        ]
    );
}

// === flags ===

/// The errors of a flag document (apiVersion and kind given) as (path, message) pairs.
fn flag_errors(yaml: &str) -> Vec<(String, String)> {
    let parsed: Result<crate::model::Flag, _> = serde_saphyr::from_str(yaml);
    let flag = match parsed {
        Ok(flag) => flag,
        Err(error) => panic!("does not parse: {error}\n{yaml}"),
    };
    super::flag(&flag)
        .into_iter()
        .map(|error| (error.path, error.message))
        .collect()
}

/// A flag document around `spec_yaml`.
fn flag_doc(spec_yaml: &str) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1\nkind: Flag\nmetadata: {{name: new-checkout}}\nspec:\n{spec_yaml}"
    )
}

const FLAG_VARIATIONS: &str =
    "  variations: [{name: \"off\", value: false}, {name: \"on\", value: true}]\n";

fn flag_error_paths(spec_yaml: &str) -> Vec<String> {
    flag_errors(&flag_doc(spec_yaml))
        .into_iter()
        .map(|(path, _)| path)
        .collect()
}

fn flag_message(spec_yaml: &str, path: &str) -> String {
    flag_errors(&flag_doc(spec_yaml))
        .into_iter()
        .find(|(found, _)| found == path)
        .map(|(_, message)| message)
        .unwrap_or_else(|| {
            panic!(
                "no error at {path}: {:?}",
                flag_errors(&flag_doc(spec_yaml))
            )
        })
}

#[test]
fn a_valid_flag_has_no_errors() {
    let spec = format!(
        "{FLAG_VARIATIONS}  offVariation: \"off\"\n  targets: {{\"on\": [alice, bob], \"off\": [carol]}}\n  rules:\n    - name: beta\n      clauses:\n        - {{attribute: country, op: in, values: [DE, FR]}}\n        - {{attribute: email, op: matches, values: [\"@example\\\\.com$\"]}}\n        - {{attribute: app, op: semverGte, values: [\"v2.0.0-rc.1\"]}}\n        - {{attribute: age, op: gte, values: [18]}}\n      weights: {{\"on\": 33.333, \"off\": 66.667}}\n  defaultStrategy: {{variation: \"off\"}}\n  bucketBy: org.id\n"
    );
    assert_eq!(
        flag_errors(&flag_doc(&spec)),
        Vec::<(String, String)>::new()
    );
}

#[test]
fn a_flag_is_weir_dev_v1alpha1_kind_flag_with_a_valid_key() {
    let spec = format!("{FLAG_VARIATIONS}  defaultStrategy: {{variation: \"on\"}}\n");
    let errors = flag_errors(&format!(
        "apiVersion: weir.dev/v1\nkind: Flags\nmetadata: {{name: New_Checkout}}\nspec:\n{spec}"
    ));
    let paths: Vec<&str> = errors.iter().map(|(path, _)| path.as_str()).collect();
    assert_eq!(paths, vec!["apiVersion", "kind", "metadata.name"]);
    assert!(errors[2].1.contains("lowercase"), "{}", errors[2].1);
    for good in ["new_checkout", "a", "checkout.v2", "x-1"] {
        assert!(flags::is_flag_key(good), "{good}");
    }
    let long = "a".repeat(254);
    for bad in ["", "-a", "a_", "A", "a b", "ä", long.as_str()] {
        assert!(!flags::is_flag_key(bad), "{bad}");
    }
    let errors = flag_errors(&format!(
        "apiVersion: weir.dev/v1alpha1\nkind: Flag\nmetadata: {{name: \"\"}}\nspec:\n{spec}"
    ));
    assert_eq!(errors[0].0, "metadata.name");
}

#[test]
fn variations_are_two_or_more_uniquely_named_of_one_type() {
    assert_eq!(
        flag_error_paths(
            "  variations: [{name: only, value: 1}]\n  defaultStrategy: {variation: only}\n"
        ),
        vec!["spec.variations"]
    );
    assert_eq!(
        flag_error_paths(
            "  variations: [{name: a, value: 1}, {name: a, value: 2}, {name: \"\", value: 3}]\n  defaultStrategy: {variation: a}\n"
        ),
        vec!["spec.variations[1].name", "spec.variations[2].name"]
    );
    let spec = "  variations: [{name: a, value: true}, {name: b, value: \"yes\"}, {name: c, value: {x: 1}}, {name: d, value: [1]}, {name: e, value: null}]\n  defaultStrategy: {variation: a}\n";
    assert_eq!(
        flag_error_paths(spec),
        vec![
            "spec.variations[1].value",
            "spec.variations[2].value",
            "spec.variations[3].value",
            "spec.variations[4].value"
        ]
    );
    assert!(
        flag_message(spec, "spec.variations[1].value").contains("spec.variations[0] is a boolean")
    );
    // Objects and lists are one type, JSON.
    assert!(
        flag_error_paths(
            "  variations: [{name: a, value: {x: 1}}, {name: b, value: [1, 2]}]\n  defaultStrategy: {variation: a}\n"
        )
        .is_empty()
    );
}

#[test]
fn named_variations_must_exist() {
    let spec = format!(
        "{FLAG_VARIATIONS}  offVariation: of\n  targets: {{onn: [alice]}}\n  rules: [{{name: beta, clauses: [{{attribute: a, op: equals, values: [1]}}], variation: yes}}]\n  defaultStrategy: {{variation: no}}\n"
    );
    assert_eq!(
        flag_error_paths(&spec),
        vec![
            "spec.offVariation",
            "spec.targets.onn",
            "spec.rules[0].variation",
            "spec.defaultStrategy.variation"
        ]
    );
    let message = flag_message(&spec, "spec.rules[0].variation");
    assert!(message.contains("rule 0 (\"beta\")"), "{message}");
    assert!(message.contains("\"off\", \"on\""), "{message}");
}

#[test]
fn a_strategy_sets_exactly_one_of_variation_and_weights() {
    assert_eq!(
        flag_error_paths(&format!(
            "{FLAG_VARIATIONS}  rules: [{{clauses: [{{attribute: a, op: equals, values: [1]}}]}}]\n  defaultStrategy: {{variation: \"on\", weights: {{\"on\": 100}}}}\n"
        )),
        vec!["spec.rules[0]", "spec.defaultStrategy"]
    );
}

#[test]
fn weights_name_variations_and_sum_to_exactly_100_percent() {
    let spec = format!(
        "{FLAG_VARIATIONS}  rules: [{{clauses: [{{attribute: a, op: equals, values: [1]}}], weights: {{\"on\": 50, maybe: 50}}}}]\n  defaultStrategy: {{weights: {{\"on\": 33.333, \"off\": 66.666}}}}\n"
    );
    assert_eq!(
        flag_error_paths(&spec),
        vec![
            "spec.rules[0].weights.maybe",
            "spec.defaultStrategy.weights"
        ]
    );
    let message = flag_message(&spec, "spec.defaultStrategy.weights");
    assert!(message.contains("sum to 99.999%"), "{message}");
    let over =
        format!("{FLAG_VARIATIONS}  defaultStrategy: {{weights: {{\"on\": 100, \"off\": 20}}}}\n");
    assert!(flag_message(&over, "spec.defaultStrategy.weights").contains("sum to 120%"));
}

#[test]
fn rules_need_clauses_and_clauses_need_values_of_the_operators_type() {
    let spec = format!(
        "{FLAG_VARIATIONS}  rules:\n    - {{name: empty, clauses: [], variation: \"on\"}}\n    - clauses:\n        - {{attribute: a, op: equals, values: []}}\n        - {{attribute: \"\", op: equals, values: [{{x: 1}}]}}\n        - {{attribute: b, op: matches, values: [\"(unclosed\", 7]}}\n        - {{attribute: c, op: semverGt, values: [\"1.2\", \"v1.2.3\"]}}\n        - {{attribute: d, op: gt, values: [\"10\", 10]}}\n        - {{attribute: e, op: startsWith, values: [1]}}\n      variation: \"on\"\n  defaultStrategy: {{variation: \"off\"}}\n"
    );
    assert_eq!(
        flag_error_paths(&spec),
        vec![
            "spec.rules[0].clauses",
            "spec.rules[1].clauses[0].values",
            "spec.rules[1].clauses[1].attribute",
            "spec.rules[1].clauses[1].values[0]",
            "spec.rules[1].clauses[2].values[0]",
            "spec.rules[1].clauses[2].values[1]",
            "spec.rules[1].clauses[3].values[0]",
            "spec.rules[1].clauses[4].values[0]",
            "spec.rules[1].clauses[5].values[0]",
        ]
    );
    assert!(flag_message(&spec, "spec.rules[0].clauses").contains("rule 0 (\"empty\")"));
    let regex = flag_message(&spec, "spec.rules[1].clauses[2].values[0]");
    assert!(regex.contains("not a valid regular expression"), "{regex}");
    assert!(regex.contains("rule 1"), "{regex}");
    assert!(
        flag_message(&spec, "spec.rules[1].clauses[3].values[0]").contains("MAJOR.MINOR.PATCH")
    );
}

#[test]
fn a_targeting_key_gets_one_variation() {
    let spec = format!(
        "{FLAG_VARIATIONS}  targets: {{\"off\": [alice, bob], \"on\": [carol, alice, \"\"]}}\n  defaultStrategy: {{variation: \"off\"}}\n"
    );
    assert_eq!(
        flag_error_paths(&spec),
        vec!["spec.targets.on[1]", "spec.targets.on[2]"]
    );
    assert!(
        flag_message(&spec, "spec.targets.on[1]")
            .contains("also listed under the variation \"off\"")
    );
}

#[test]
fn flags_load_as_documents_with_every_error() {
    let good = flag_doc(&format!(
        "{FLAG_VARIATIONS}  defaultStrategy: {{variation: \"on\"}}\n"
    ));
    assert!(matches!(
        load(good.as_bytes()).first(),
        Some(Ok(loaded)) if matches!(&loaded.document, Document::Flag(flag) if flag.key() == "new-checkout")
    ));
    let Some(Ok(loaded)) = load(good.as_bytes()).pop() else {
        panic!("loads");
    };
    assert_eq!(loaded.document.describe(), "Flag default/new-checkout");
    // Structural errors, all of them, with paths (in the order serde meets them: keys sorted).
    let broken = flag_doc(
        "  variations: [{name: a, value: 1, colour: red}, {name: b, value: 2}]\n  rules: [{clauses: [{attribute: x, op: equals, values: [1]}], variation: a, weight: 3}]\n  defaultStrategy: {weights: {a: 0.0001, b: 100}}\n",
    );
    let Some(Err(refused)) = load(broken.as_bytes()).pop() else {
        panic!("refused");
    };
    let paths: Vec<&str> = refused.errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        vec![
            "spec.defaultStrategy.weights.a",
            "spec.rules[0].weight",
            "spec.variations[0].colour",
        ],
        "{:?}",
        refused.errors
    );
    assert!(refused.errors[0].message.contains("finer than 0.001%"));
    assert!(refused.errors[1].message.contains("did you mean `weights`"));
    // An unknown operator names the allowed ones. (Collection stops there: the clause is left
    // without an op, which no value can stand in for.)
    let bad_op = flag_doc(
        "  variations: [{name: a, value: 1}, {name: b, value: 2}]\n  rules: [{clauses: [{attribute: x, op: like, values: [1]}], variation: a}]\n  defaultStrategy: {variation: a}\n",
    );
    let Some(Err(refused)) = load(bad_op.as_bytes()).pop() else {
        panic!("refused");
    };
    assert_eq!(refused.errors[0].path, "spec.rules[0].clauses[0].op");
    assert!(refused.errors[0].message.contains("semverGte"));
    // Validation errors come through load too.
    let invalid = flag_doc(&format!(
        "{FLAG_VARIATIONS}  defaultStrategy: {{variation: maybe}}\n"
    ));
    let Some(Err(refused)) = load(invalid.as_bytes()).pop() else {
        panic!("refused");
    };
    assert_eq!(refused.subject, "Flag new-checkout");
    assert_eq!(refused.errors[0].path, "spec.defaultStrategy.variation");
}

#[test]
fn the_evidence_rule_is_checked_and_bad_values_named_with_what_is_allowed() {
    assert!(error_paths("  plan: {canary: {stepWeight: 50}}\n  analysis: {evidence: {marginPercent: 0.5, fromWeight: 20%, deadline: 30m, onDeadline: rollback}}\n").is_empty());
    let errors = super::rollout(&rollout(
        "  plan: {canary: {stepWeight: 50}}\n  analysis: {interval: 1m, evidence: {marginPercent: 0, deadline: 30s, fromWeight: 100%}}\n",
    ));
    let paths: Vec<&str> = errors.iter().map(|error| error.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "spec.analysis.evidence.marginPercent",
            "spec.analysis.evidence.deadline",
            "spec.analysis.evidence.fromWeight"
        ]
    );
    assert!(
        errors[0]
            .message
            .contains("above 0 and below 100 (default 2)"),
        "{}",
        errors[0].message
    );
    assert!(
        errors[1].message.contains("at least the interval (1m"),
        "{}",
        errors[1].message
    );
    // An unknown policy is refused when the document is read, naming the allowed values.
    let yaml = "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {name: app}\nspec:\n  target: {kind: flag}\n  plan: {canary: {stepWeight: 50}}\n  analysis: {evidence: {onDeadline: maybe}}\n";
    let loaded = load(yaml.as_bytes());
    let text = format!("{loaded:?}");
    assert!(matches!(loaded.as_slice(), [Err(_)]), "{text}");
    assert!(
        text.contains("onDeadline") && text.contains("rollback"),
        "{text}"
    );
}

#[test]
fn judge_counts_need_a_template_four_queries_and_known_placeholders() {
    let valid = "  plan: {canary: {stepWeights: [50]}}\n  analysis:\n    judges: [sequential]\n    judgeCounts:\n      templateRef: {name: datadog}\n      templateVariables: {service: shop}\n      interval: 5s\n      canary: {requests: \"sum:hits{service:{{ variables.service }},v:canary}.rollup(sum, {{ interval }})\", errors: \"e{{ target }}\"}\n      primary: {requests: \"r{{ namespace }}\", errors: \"e{{ name }}\"}\n";
    assert!(error_paths(valid).is_empty(), "{:?}", error_paths(valid));
    let parsed = rollout(valid);
    let Some(counts) = parsed.spec.analysis.judge_counts.as_ref() else {
        panic!("no judgeCounts: {parsed:?}");
    };
    assert_eq!(counts.interval(), GoDuration::from_secs(5));
    assert_eq!(counts.queries()[3], ("primary.errors", "e{{ name }}"));

    let broken = "  plan: {canary: {stepWeights: [50]}}\n  analysis:\n    judges: [sequential]\n    judgeCounts:\n      templateRef: {name: \"\"}\n      interval: 0s\n      canary: {requests: \"{{ variables.nope }}\"}\n      primary: {requests: \"{{ revision }}\", errors: \" \"}\n";
    let errors = super::rollout(&rollout(broken));
    let paths: Vec<&str> = errors.iter().map(|error| error.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "spec.analysis.judgeCounts.templateRef.name",
            "spec.analysis.judgeCounts.interval",
            "spec.analysis.judgeCounts.canary.requests",
            "spec.analysis.judgeCounts.canary.errors",
            "spec.analysis.judgeCounts.primary.requests",
            "spec.analysis.judgeCounts.primary.errors",
        ]
    );
    let text = |path: &str| {
        errors
            .iter()
            .find(|error| error.path == path)
            .map(ToString::to_string)
            .unwrap_or_default()
    };
    // Unknown placeholders are named, with the known ones.
    assert!(
        text("spec.analysis.judgeCounts.canary.requests")
            .contains("unknown variable `variables.nope`"),
        "{errors:?}"
    );
    assert!(
        text("spec.analysis.judgeCounts.primary.requests").contains("unknown variable `revision`")
            && text("spec.analysis.judgeCounts.primary.requests").contains("interval"),
        "{errors:?}"
    );
    assert!(
        text("spec.analysis.judgeCounts.canary.errors")
            .contains("number of errors the canary served"),
        "{errors:?}"
    );
}

#[test]
fn flag_tags_and_metadata_are_checked_by_path() {
    let fine = format!(
        "{FLAG_VARIATIONS}  defaultStrategy: {{variation: \"off\"}}\n  tags: [team:checkout, release/2026-11]\n  metadata: {{owner: shop, tier: 2, beta: true}}\n"
    );
    assert!(
        flag_error_paths(&fine).is_empty(),
        "{:?}",
        flag_error_paths(&fine)
    );
    let wrong = format!(
        "{FLAG_VARIATIONS}  defaultStrategy: {{variation: \"off\"}}\n  tags: [ok, Bad, ok]\n  metadata: {{owner: [a], fine: x}}\n"
    );
    assert_eq!(
        flag_error_paths(&wrong),
        ["spec.tags[1]", "spec.tags[2]", "spec.metadata.owner"]
    );
}
