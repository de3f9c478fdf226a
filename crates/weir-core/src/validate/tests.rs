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
