#![allow(clippy::expect_used)]

use serde_json::{Value, json};

use super::*;
use crate::model::{HookType, Plan, Severity, ThresholdRange};
use crate::units::{GoDuration, Weight};

/// A minimal valid Canary with the given analysis.
fn canary_with(analysis: Value) -> Value {
    json!({
        "apiVersion": "flagger.app/v1beta1",
        "kind": "Canary",
        "metadata": {"name": "shop", "namespace": "store"},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "shop"},
            "service": {"port": 8080},
            "analysis": analysis,
        }
    })
}

fn convert_ok(document: &Value) -> Converted<Rollout> {
    match convert_canary(document) {
        Ok(converted) => converted,
        Err(errors) => panic!("refused: {errors:#?}"),
    }
}

fn convert_err(document: &Value) -> Vec<FieldError> {
    match convert_canary(document) {
        Ok(converted) => panic!("accepted: {:#?}", converted.value),
        Err(errors) => errors,
    }
}

fn has_warning(converted: &Converted<Rollout>, path: &str, fragment: &str) -> bool {
    converted
        .warnings
        .iter()
        .any(|warning| warning.path == path && warning.message.contains(fragment))
}

fn unmapped(converted: &Converted<Rollout>) -> Value {
    converted
        .value
        .metadata
        .annotations
        .get(UNMAPPED_ANNOTATION)
        .map(|text| serde_json::from_str(text).unwrap_or(Value::Null))
        .unwrap_or(Value::Null)
}

fn paths(errors: &[FieldError]) -> Vec<&str> {
    errors.iter().map(|error| error.path.as_str()).collect()
}

fn canary_plan(converted: &Converted<Rollout>) -> &crate::model::CanaryPlan {
    match &converted.value.spec.plan {
        Plan::Canary(plan) => plan,
        other => panic!("not a canary plan: {other:?}"),
    }
}

// === defaults ===

#[test]
fn flagger_defaults_fill_what_is_not_written() {
    let converted = convert_ok(&canary_with(json!({"stepWeight": 20})));
    let rollout = &converted.value;
    assert_eq!(rollout.api_version, "weir.dev/v1alpha1");
    assert_eq!(rollout.kind, "Rollout");
    assert_eq!(rollout.metadata.name, "shop");
    assert_eq!(rollout.metadata.namespace.as_deref(), Some("store"));
    let analysis = &rollout.spec.analysis;
    assert_eq!(analysis.interval, GoDuration::from_secs(60));
    assert_eq!(analysis.threshold, 1);
    assert_eq!(analysis.progress_deadline, GoDuration::from_secs(600));
    assert_eq!(
        analysis.failure_counting,
        crate::model::FailureCounting::Total
    );
    assert_eq!(analysis.no_data, crate::model::NoDataPolicy::Fail);
    assert_eq!(analysis.on_failure, crate::model::FailureAction::Rollback);
    let plan = canary_plan(&converted);
    assert_eq!(plan.step_weight, Some(Weight::from_percent(20)));
    assert_eq!(plan.max_weight, Some(Weight::FULL));
    assert_eq!(plan.step_weight_promotion, None);
    assert_eq!(plan.mirror_weight, None);
    assert_eq!(
        rollout.spec.target.kind(),
        crate::model::TargetKind::Kubernetes
    );
    assert_eq!(
        rollout
            .spec
            .target
            .kubernetes()
            .expect("a kubernetes target")
            .service
            .as_ref()
            .and_then(|service| service.port),
        Some(8080)
    );
    assert!(crate::validate::rollout(rollout).is_empty());
}

#[test]
fn max_weight_with_step_weights_is_the_last_step_and_a_written_one_is_kept() {
    let converted = convert_ok(&canary_with(json!({"stepWeights": [1, 5, 25, 40]})));
    assert_eq!(
        canary_plan(&converted).max_weight,
        Some(Weight::from_percent(40))
    );

    let converted = convert_ok(&canary_with(
        json!({"stepWeights": [10, 20, 60], "maxWeight": 50}),
    ));
    assert_eq!(
        canary_plan(&converted).max_weight,
        Some(Weight::from_percent(60))
    );
    assert!(has_warning(
        &converted,
        "spec.analysis.maxWeight",
        "last step (60%)"
    ));
    assert_eq!(unmapped(&converted)["spec.analysis.maxWeight"], json!(50));
}

#[test]
fn written_max_weight_and_promotion_step_are_carried() {
    let converted = convert_ok(&canary_with(
        json!({"stepWeight": 5, "maxWeight": 30, "stepWeightPromotion": 50}),
    ));
    let plan = canary_plan(&converted);
    assert_eq!(plan.max_weight, Some(Weight::from_percent(30)));
    assert_eq!(plan.step_weight_promotion, Some(Weight::from_percent(50)));

    // Flagger's 0 means "all at once", which is weir's absent value.
    let converted = convert_ok(&canary_with(
        json!({"stepWeight": 5, "stepWeightPromotion": 0}),
    ));
    assert_eq!(canary_plan(&converted).step_weight_promotion, None);
}

#[test]
fn progress_deadline_seconds_becomes_the_progress_deadline() {
    let mut document = canary_with(json!({"stepWeight": 10}));
    document["spec"]["progressDeadlineSeconds"] = json!(1200);
    let converted = convert_ok(&document);
    assert_eq!(
        converted.value.spec.analysis.progress_deadline,
        GoDuration::from_secs(1200)
    );

    document["spec"]["progressDeadlineSeconds"] = json!(-5);
    let errors = convert_err(&document);
    assert_eq!(paths(&errors), ["spec.progressDeadlineSeconds"]);
}

#[test]
fn interval_below_ten_seconds_is_raised_with_a_warning() {
    let converted = convert_ok(&canary_with(json!({"stepWeight": 10, "interval": "5s"})));
    assert_eq!(
        converted.value.spec.analysis.interval,
        GoDuration::from_secs(10)
    );
    assert!(has_warning(
        &converted,
        "spec.analysis.interval",
        "raised to 10s"
    ));

    let converted = convert_ok(&canary_with(json!({"stepWeight": 10, "interval": "10s"})));
    assert_eq!(
        converted.value.spec.analysis.interval,
        GoDuration::from_secs(10)
    );
    assert!(!has_warning(&converted, "spec.analysis.interval", ""));
}

#[test]
fn threshold_of_zero_or_less_is_one_with_a_warning() {
    for written in [0, -3] {
        let converted = convert_ok(&canary_with(
            json!({"stepWeight": 10, "threshold": written}),
        ));
        assert_eq!(converted.value.spec.analysis.threshold, 1);
        assert!(has_warning(
            &converted,
            "spec.analysis.threshold",
            "read as 1"
        ));
    }
    let converted = convert_ok(&canary_with(json!({"stepWeight": 10, "threshold": 7})));
    assert_eq!(converted.value.spec.analysis.threshold, 7);
}

// === strategy ===

#[test]
fn match_with_iterations_is_an_ab_test() {
    let converted = convert_ok(&canary_with(json!({
        "iterations": 4,
        "stepWeight": 10,
        "match": [
            {"headers": {"x-beta": {"exact": "yes"}}},
            {"headers": {"cookie": {"regex": "^(.*?;)?(beta=1)(;.*)?$"}}, "uri": {"prefix": "/api"}},
        ],
    })));
    let Plan::AbTest(plan) = &converted.value.spec.plan else {
        panic!("not an A/B test: {:?}", converted.value.spec.plan);
    };
    assert_eq!(plan.iterations, 4);
    assert_eq!(plan.match_rules.len(), 2);
    assert_eq!(
        plan.match_rules[0].headers["x-beta"].exact.as_deref(),
        Some("yes")
    );
    assert_eq!(
        plan.match_rules[1]
            .uri
            .as_ref()
            .and_then(|uri| uri.prefix.as_deref()),
        Some("/api")
    );
    // stepWeight means nothing to an A/B test in Flagger: kept, with a warning.
    assert!(has_warning(
        &converted,
        "spec.analysis.stepWeight",
        "A/B testing"
    ));
    assert_eq!(unmapped(&converted)["spec.analysis.stepWeight"], json!(10));
}

#[test]
fn iterations_alone_are_blue_green_and_with_mirror_a_mirror() {
    let converted = convert_ok(&canary_with(json!({"iterations": 6})));
    assert!(matches!(
        converted.value.spec.plan,
        Plan::BlueGreen(crate::model::IterationsPlan { iterations: 6 })
    ));

    let converted = convert_ok(&canary_with(json!({"iterations": 6, "mirror": true})));
    let Plan::Mirror(plan) = &converted.value.spec.plan else {
        panic!("not a mirror: {:?}", converted.value.spec.plan);
    };
    assert_eq!(plan.iterations, 6);
    assert_eq!(plan.mirror_weight, Some(Weight::FULL));

    let converted = convert_ok(&canary_with(
        json!({"iterations": 6, "mirror": true, "mirrorWeight": 25}),
    ));
    let Plan::Mirror(plan) = &converted.value.spec.plan else {
        panic!("not a mirror");
    };
    assert_eq!(plan.mirror_weight, Some(Weight::from_percent(25)));
}

#[test]
fn canary_with_mirror_mirrors_one_interval_before_the_first_step() {
    let converted = convert_ok(&canary_with(
        json!({"stepWeight": 10, "mirror": true, "mirrorWeight": 50}),
    ));
    assert_eq!(
        canary_plan(&converted).mirror_weight,
        Some(Weight::from_percent(50))
    );
    let converted = convert_ok(&canary_with(json!({"stepWeight": 10, "mirror": true})));
    assert_eq!(canary_plan(&converted).mirror_weight, Some(Weight::FULL));
}

#[test]
fn match_without_iterations_is_a_canary_and_the_match_is_kept() {
    let converted = convert_ok(&canary_with(json!({
        "stepWeight": 10,
        "match": [{"headers": {"x-beta": {"exact": "yes"}}}],
    })));
    assert!(matches!(converted.value.spec.plan, Plan::Canary(_)));
    assert!(has_warning(
        &converted,
        "spec.analysis.match",
        "only for A/B testing"
    ));
}

#[test]
fn a_canary_without_any_step_or_iterations_is_refused() {
    let errors = convert_err(&canary_with(json!({"interval": "1m", "threshold": 5})));
    assert_eq!(paths(&errors), ["spec.analysis"]);
    assert!(
        errors[0]
            .message
            .contains("stepWeight, stepWeights and iterations")
    );
}

#[test]
fn match_conditions_without_an_equivalent_are_kept_and_a_rule_left_empty_is_refused() {
    let converted = convert_ok(&canary_with(json!({
        "iterations": 3,
        "match": [{"headers": {"x-beta": {"exact": "yes"}}, "sourceLabels": {"app": "web"}}],
    })));
    assert!(has_warning(
        &converted,
        "spec.analysis.match[0].sourceLabels",
        "no equivalent"
    ));
    assert_eq!(
        unmapped(&converted)["spec.analysis.match[0].sourceLabels"],
        json!({"app": "web"})
    );

    let errors = convert_err(&canary_with(json!({
        "iterations": 3,
        "match": [{"sourceLabels": {"app": "web"}}],
    })));
    assert_eq!(paths(&errors), ["spec.analysis.match[0]"]);
}

// === the deprecated alias and threshold ===

#[test]
fn canary_analysis_is_read_as_analysis_with_a_warning() {
    let mut document = canary_with(Value::Null);
    let spec = document["spec"].as_object_mut().map(|spec| {
        spec.remove("analysis");
        spec.insert(
            "canaryAnalysis".into(),
            json!({"stepWeight": 10, "interval": "30s", "threshold": 3}),
        );
    });
    assert!(spec.is_some());
    let converted = convert_ok(&document);
    assert_eq!(
        converted.value.spec.analysis.interval,
        GoDuration::from_secs(30)
    );
    assert_eq!(converted.value.spec.analysis.threshold, 3);
    assert!(has_warning(&converted, "spec.canaryAnalysis", "deprecated"));

    // Errors point at the field as written.
    document["spec"]["canaryAnalysis"]["stepWeight"] = json!(250);
    let errors = convert_err(&document);
    assert!(
        paths(&errors).contains(&"spec.canaryAnalysis.stepWeight"),
        "{errors:#?}"
    );
}

#[test]
fn analysis_wins_over_canary_analysis_which_is_kept() {
    let mut document = canary_with(json!({"stepWeight": 10}));
    document["spec"]["canaryAnalysis"] = json!({"stepWeight": 50});
    let converted = convert_ok(&document);
    assert_eq!(
        canary_plan(&converted).step_weight,
        Some(Weight::from_percent(10))
    );
    assert!(has_warning(&converted, "spec.canaryAnalysis", "ignores"));
    assert_eq!(
        unmapped(&converted)["spec.canaryAnalysis"],
        json!({"stepWeight": 50})
    );
}

#[test]
fn deprecated_metric_threshold_is_a_minimum_for_success_rate_and_a_maximum_otherwise() {
    let converted = convert_ok(&canary_with(json!({
        "stepWeight": 10,
        "metrics": [
            {"name": "request-success-rate", "threshold": 99},
            {"name": "request-duration", "threshold": 500, "interval": "30s"},
            {"name": "errors", "threshold": 5, "templateRef": {"name": "error-rate"}},
        ],
    })));
    let metrics = &converted.value.spec.analysis.metrics;
    assert_eq!(
        metrics[0].threshold_range,
        Some(ThresholdRange {
            min: Some(99.0),
            max: None
        })
    );
    assert_eq!(
        metrics[1].threshold_range,
        Some(ThresholdRange {
            min: None,
            max: Some(500.0)
        })
    );
    assert_eq!(
        metrics[2].threshold_range,
        Some(ThresholdRange {
            min: None,
            max: Some(5.0)
        })
    );
    // Builtin names stay as they are; the window defaults to 1m.
    assert_eq!(metrics[0].name, "request-success-rate");
    assert_eq!(metrics[0].interval, Some(GoDuration::from_secs(60)));
    assert_eq!(metrics[1].interval, Some(GoDuration::from_secs(30)));
    for index in 0..3 {
        assert!(has_warning(
            &converted,
            &format!("spec.analysis.metrics[{index}].threshold"),
            "deprecated"
        ));
    }
}

#[test]
fn threshold_range_wins_over_the_deprecated_threshold() {
    let converted = convert_ok(&canary_with(json!({
        "stepWeight": 10,
        "metrics": [{"name": "request-success-rate", "threshold": 90, "thresholdRange": {"min": 99}}],
    })));
    assert_eq!(
        converted.value.spec.analysis.metrics[0].threshold_range,
        Some(ThresholdRange {
            min: Some(99.0),
            max: None
        })
    );
    assert_eq!(
        unmapped(&converted)["spec.analysis.metrics[0].threshold"],
        json!(90)
    );
}

#[test]
fn template_ref_and_variables_are_carried() {
    let converted = convert_ok(&canary_with(json!({
        "stepWeight": 10,
        "metrics": [{
            "name": "not-found",
            "templateRef": {"name": "not-found-percentage", "namespace": "monitoring"},
            "templateVariables": {"path": "/api", "retries": 3},
            "thresholdRange": {"max": 5},
        }],
    })));
    let metric = &converted.value.spec.analysis.metrics[0];
    let reference = metric
        .template_ref
        .as_ref()
        .map(|r| (r.name.as_str(), r.namespace.as_deref()));
    assert_eq!(
        reference,
        Some(("not-found-percentage", Some("monitoring")))
    );
    assert_eq!(metric.template_variables["path"], "/api");
    assert_eq!(metric.template_variables["retries"], "3");
    assert!(has_warning(
        &converted,
        "spec.analysis.metrics[0].templateVariables.retries",
        "not a string"
    ));
}

#[test]
fn a_metric_flagger_never_checks_is_kept_and_later_errors_keep_their_index() {
    let errors = convert_err(&canary_with(json!({
        "stepWeight": 10,
        "metrics": [
            {"name": "nothing-to-run", "thresholdRange": {"max": 1}},
            {"name": "request-duration", "thresholdRange": {"min": 9, "max": 1}},
        ],
    })));
    assert_eq!(
        paths(&errors),
        ["spec.analysis.metrics[1].thresholdRange.min"]
    );

    let converted = convert_ok(&canary_with(json!({
        "stepWeight": 10,
        "metrics": [{"name": "nothing-to-run", "thresholdRange": {"max": 1}}],
    })));
    assert!(converted.value.spec.analysis.metrics.is_empty());
    assert!(has_warning(
        &converted,
        "spec.analysis.metrics[0]",
        "no check"
    ));
}

// === webhooks and alerts ===

#[test]
fn every_webhook_type_converts_and_an_empty_type_is_rollout() {
    let mut hooks: Vec<Value> = HookType::ALL
        .iter()
        .map(|hook_type| {
            json!({"name": hook_type.as_str(), "type": hook_type.as_str(), "url": "http://hooks.test/"})
        })
        .collect();
    hooks.push(json!({"name": "untyped", "url": "http://hooks.test/"}));
    hooks.push(json!({"name": "empty", "type": "", "url": "http://hooks.test/"}));
    let converted = convert_ok(&canary_with(json!({"stepWeight": 10, "webhooks": hooks})));
    let webhooks = &converted.value.spec.analysis.webhooks;
    for (index, hook_type) in HookType::ALL.iter().enumerate() {
        assert_eq!(webhooks[index].hook_type, *hook_type);
    }
    assert_eq!(webhooks[8].hook_type, HookType::Rollout);
    assert_eq!(webhooks[9].hook_type, HookType::Rollout);
}

#[test]
fn webhook_fields_are_carried_and_disable_tls_is_kept() {
    let converted = convert_ok(&canary_with(json!({
        "stepWeight": 10,
        "webhooks": [
            {"name": "gate", "type": "confirm-promotion", "url": "http://gate.test/"},
            {
                "name": "load", "url": "https://load.test/", "timeout": "30s", "retries": 2,
                "muteAlert": true, "disableTLS": true,
                "metadata": {"cmd": "hey", "logCmdOutput": true, "count": 3},
            },
        ],
    })));
    let hook = &converted.value.spec.analysis.webhooks[1];
    assert_eq!(hook.timeout, Some(GoDuration::from_secs(30)));
    assert_eq!(hook.retries, Some(2));
    assert!(hook.mute_alert);
    assert_eq!(hook.metadata["cmd"], "hey");
    assert_eq!(hook.metadata["logCmdOutput"], "true");
    assert_eq!(hook.metadata["count"], "3");
    assert!(has_warning(
        &converted,
        "spec.analysis.webhooks[1].metadata.logCmdOutput",
        "not a string"
    ));
    assert!(has_warning(
        &converted,
        "spec.analysis.webhooks[1].disableTLS",
        "kept as an annotation; weir does not act on it yet"
    ));
    assert_eq!(
        unmapped(&converted)["spec.analysis.webhooks[1].disableTLS"],
        json!(true)
    );
}

#[test]
fn an_unknown_webhook_type_is_refused_with_its_path() {
    let errors = convert_err(&canary_with(json!({
        "stepWeight": 10,
        "webhooks": [{"name": "x", "type": "pre-flight", "url": "http://x.test/"}],
    })));
    assert_eq!(paths(&errors), ["spec.analysis.webhooks[0].type"]);
    assert!(errors[0].message.contains("confirm-rollout"));
}

#[test]
fn alerts_are_carried_with_a_warning() {
    let converted = convert_ok(&canary_with(json!({
        "stepWeight": 10,
        "alerts": [
            {"name": "team", "severity": "error", "providerRef": {"name": "slack", "namespace": "ops"}},
            {"name": "all", "providerRef": {"name": "chat"}},
        ],
    })));
    let alerts = &converted.value.spec.analysis.alerts;
    assert_eq!(alerts.len(), 2);
    assert_eq!(alerts[0].severity, Severity::Error);
    assert_eq!(alerts[0].provider_ref.namespace.as_deref(), Some("ops"));
    assert_eq!(alerts[1].severity, Severity::Info);
    // Alerts are acted on (docs/NOTIFICATIONS.md), so they convert without a warning.
    assert!(
        !converted
            .warnings
            .iter()
            .any(|warning| warning.path.starts_with("spec.analysis.alerts")),
        "{:?}",
        converted.warnings
    );
}

// === session affinity, flags, kept fields ===

#[test]
fn session_affinity_and_spec_flags_are_carried() {
    let mut document = canary_with(json!({
        "stepWeight": 10,
        "sessionAffinity": {"cookieName": "canary", "primaryCookieName": "primary", "maxAge": 600, "sameSite": "Lax"},
        "primaryReadyThreshold": 50,
    }));
    document["spec"]["skipAnalysis"] = json!(true);
    document["spec"]["suspend"] = json!(true);
    document["spec"]["revertOnDeletion"] = json!(true);
    let converted = convert_ok(&document);
    let spec = &converted.value.spec;
    assert!(spec.skip_analysis && spec.suspend && spec.revert_on_deletion);
    let affinity = spec.session_affinity.as_ref().map(|a| {
        (
            a.cookie_name.as_str(),
            a.primary_cookie_name.as_deref(),
            a.max_age,
        )
    });
    assert_eq!(affinity, Some(("canary", Some("primary"), Some(600))));
    assert!(has_warning(
        &converted,
        "spec.analysis.sessionAffinity.sameSite",
        "kept"
    ));
    // Pod readiness belongs to the Kubernetes side.
    assert_eq!(
        spec.target
            .kubernetes()
            .expect("a kubernetes target")
            .primary_ready_threshold,
        Some(50)
    );
}

#[test]
fn session_affinity_outside_a_canary_plan_is_kept() {
    let converted = convert_ok(&canary_with(json!({
        "iterations": 5,
        "sessionAffinity": {"cookieName": "canary"},
    })));
    assert!(converted.value.spec.session_affinity.is_none());
    assert!(has_warning(
        &converted,
        "spec.analysis.sessionAffinity",
        "canary releases only"
    ));
}

#[test]
fn unknown_fields_are_kept_in_the_annotation_with_a_warning_each() {
    let mut document = canary_with(json!({"stepWeight": 10, "shadowTraffic": "on"}));
    document["spec"]["priority"] = json!({"level": 3});
    document["metadata"]["labels"] = json!({"team": "shop"});
    document["metadata"]["annotations"] = json!({"owner": "me"});
    let converted = convert_ok(&document);
    assert_eq!(
        unmapped(&converted),
        json!({"spec.analysis.shadowTraffic": "on", "spec.priority": {"level": 3}})
    );
    assert!(has_warning(
        &converted,
        "spec.analysis.shadowTraffic",
        "kept as an annotation"
    ));
    assert!(has_warning(
        &converted,
        "spec.priority",
        "kept as an annotation"
    ));
    let metadata = &converted.value.metadata;
    assert_eq!(metadata.labels["team"], "shop");
    assert_eq!(metadata.annotations["owner"], "me");
    // The Kubernetes side is the operator's target: converted without a warning.
    assert!(
        !converted
            .warnings
            .iter()
            .any(|w| w.path.starts_with("spec.targetRef") || w.message.contains("targetRef"))
    );
}

#[test]
fn nothing_kept_means_no_annotation() {
    let converted = convert_ok(&canary_with(json!({"stepWeight": 10})));
    assert!(
        !converted
            .value
            .metadata
            .annotations
            .contains_key(UNMAPPED_ANNOTATION)
    );
}

// === refusals ===

#[test]
fn missing_target_ref_and_analysis_are_refused_together() {
    let document = json!({
        "apiVersion": "flagger.app/v1beta1",
        "kind": "Canary",
        "metadata": {"name": "shop"},
        "spec": {"service": {"port": 80}},
    });
    let errors = convert_err(&document);
    assert_eq!(paths(&errors), ["spec.targetRef", "spec.analysis"]);
    assert_eq!(
        errors[0].message,
        "is required: the workload to roll out ({apiVersion, kind, name})"
    );
}

#[test]
fn missing_name_and_spec_are_refused_together() {
    let document = json!({"apiVersion": "flagger.app/v1beta1", "kind": "Canary"});
    let errors = convert_err(&document);
    assert_eq!(paths(&errors), ["metadata.name", "spec"]);
}

#[test]
fn a_target_ref_without_kind_or_name_is_refused() {
    let mut document = canary_with(json!({"stepWeight": 10}));
    document["spec"]["targetRef"] = json!({"apiVersion": "apps/v1"});
    let errors = convert_err(&document);
    assert_eq!(
        paths(&errors),
        ["spec.targetRef.kind", "spec.targetRef.name"]
    );
}

#[test]
fn structural_errors_are_all_reported_with_their_paths() {
    let errors = convert_err(&canary_with(json!({
        "stepWeight": "lots",
        "threshold": "high",
        "webhooks": [{"name": "x", "url": "http://x.test/", "timeout": 5}],
    })));
    let found = paths(&errors);
    for expected in [
        "spec.analysis.stepWeight",
        "spec.analysis.threshold",
        "spec.analysis.webhooks[0].timeout",
    ] {
        assert!(found.contains(&expected), "{expected} not in {found:?}");
    }
}

#[test]
fn validation_errors_point_into_the_flagger_document() {
    let errors = convert_err(&canary_with(json!({"stepWeights": [10, 30, 20, 40]})));
    assert_eq!(paths(&errors), ["spec.analysis.stepWeights[2]"]);

    let errors = convert_err(&canary_with(json!({"stepWeight": 10, "maxWeight": 150})));
    assert!(
        paths(&errors).contains(&"spec.analysis.maxWeight"),
        "{errors:#?}"
    );
}

#[test]
fn versions_and_kinds() {
    let mut document = canary_with(json!({"stepWeight": 10}));
    document["apiVersion"] = json!("flagger.app/v1alpha3");
    let converted = convert_ok(&document);
    assert!(has_warning(
        &converted,
        "apiVersion",
        "read as flagger.app/v1beta1"
    ));

    document["apiVersion"] = json!("flagger.app/v2");
    assert_eq!(paths(&convert_err(&document)), ["apiVersion"]);

    let mut document = canary_with(json!({"stepWeight": 10}));
    document["kind"] = json!("AlertProvider");
    assert_eq!(paths(&convert_err(&document)), ["kind"]);
}

#[test]
fn odd_shapes_are_refused_without_panicking() {
    for document in [
        json!(null),
        json!([1, 2]),
        json!("Canary"),
        json!({"apiVersion": "flagger.app/v1beta1", "kind": "Canary", "metadata": "x", "spec": "y"}),
        json!({"apiVersion": "flagger.app/v1beta1", "kind": "Canary", "metadata": {"name": "a"},
               "spec": {"targetRef": [1], "analysis": [1]}}),
        json!({"apiVersion": "flagger.app/v1beta1", "kind": "Canary", "metadata": {"name": "a"},
               "spec": {"targetRef": {"kind": "Deployment", "name": "a"},
                        "analysis": {"iterations": 99999999999_i64, "stepWeights": [], "match": [null]}}}),
    ] {
        assert!(convert_canary(&document).is_err(), "{document}");
        assert!(convert_metric_template(&document).is_err(), "{document}");
    }
}

// === metric templates ===

fn template(spec: Value) -> Value {
    json!({
        "apiVersion": "flagger.app/v1beta1",
        "kind": "MetricTemplate",
        "metadata": {"name": "error-rate", "namespace": "monitoring"},
        "spec": spec,
    })
}

#[test]
fn a_metric_template_converts_with_its_provider() {
    let converted = convert_metric_template(&template(json!({
        "provider": {
            "type": "datadog",
            "address": "https://api.datadoghq.eu",
            "secretRef": {"name": "dd"},
            "headers": {"X-Scope": ["a", "b"], "X-Team": "shop"},
            "insecureSkipVerify": true,
            "region": "eu",
        },
        "query": "sum:errors{service:{{ target }}}",
    })));
    let Ok(converted) = converted else {
        panic!("refused: {converted:?}");
    };
    let spec = &converted.value.spec;
    assert_eq!(converted.value.api_version, "weir.dev/v1alpha1");
    assert_eq!(spec.provider.provider_type, "datadog");
    assert_eq!(
        spec.provider.address.as_deref(),
        Some("https://api.datadoghq.eu")
    );
    assert_eq!(
        spec.provider.secret_ref.as_ref().map(|r| r.name.as_str()),
        Some("dd")
    );
    assert_eq!(spec.provider.headers["X-Scope"], "a, b");
    assert_eq!(spec.provider.headers["X-Team"], "shop");
    assert!(spec.provider.insecure_skip_verify);
    assert_eq!(spec.provider.region.as_deref(), Some("eu"));
    assert_eq!(
        spec.query.as_deref(),
        Some("sum:errors{service:{{ target }}}")
    );
    assert!(crate::validate::metric_template(&converted.value).is_empty());
}

#[test]
fn a_template_with_nothing_set_defaults_to_prometheus_and_warns_about_the_query() {
    let converted = convert_metric_template(&template(json!({
        "provider": {"type": null, "address": null, "insecureSkipVerify": null, "secretRef": {"name": null}},
        "query": null,
    })));
    let Ok(converted) = converted else {
        panic!("refused: {converted:?}");
    };
    assert_eq!(converted.value.spec.provider.provider_type, "prometheus");
    assert!(converted.value.spec.query.is_none());
    let warned = |path: &str| converted.warnings.iter().any(|w| w.path == path);
    assert!(warned("spec.provider.type"));
    assert!(warned("spec.query"));
    assert!(warned("spec.provider.secretRef"));
    assert!(crate::validate::metric_template(&converted.value).is_empty());
}

#[test]
fn a_template_without_name_or_spec_is_refused() {
    let document = json!({"apiVersion": "flagger.app/v1beta1", "kind": "MetricTemplate"});
    let Err(errors) = convert_metric_template(&document) else {
        panic!("accepted");
    };
    assert_eq!(paths(&errors), ["metadata.name", "spec"]);
}

// === robustness ===

/// Every path of a value, as JSON pointers.
fn pointers(value: &Value, prefix: String, out: &mut Vec<String>) {
    out.push(prefix.clone());
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                pointers(child, format!("{prefix}/{key}"), out);
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                pointers(child, format!("{prefix}/{index}"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn replacing_any_field_with_an_odd_value_never_panics() {
    let rich = canary_with(json!({
        "interval": "30s", "threshold": 3, "iterations": 2, "stepWeight": 5, "stepWeights": [5, 10],
        "maxWeight": 50, "mirror": true, "mirrorWeight": 20, "stepWeightPromotion": 10,
        "match": [{"headers": {"x": {"exact": "y"}}, "uri": {"prefix": "/"}, "method": {"exact": "GET"},
                   "queryParams": {"q": {"regex": "a+"}}, "sourceLabels": {"a": "b"}}],
        "sessionAffinity": {"cookieName": "c", "maxAge": 10},
        "metrics": [{"name": "m", "threshold": 1, "thresholdRange": {"min": 1, "max": 2},
                     "templateRef": {"name": "t"}, "templateVariables": {"a": "b"}, "interval": "1m"}],
        "webhooks": [{"name": "w", "type": "rollout", "url": "http://w/", "timeout": "5s", "retries": 1,
                      "metadata": {"a": "b"}, "muteAlert": true}],
        "alerts": [{"name": "a", "severity": "warn", "providerRef": {"name": "p"}}],
    }));
    let template = template(
        json!({"provider": {"type": "prometheus", "address": "http://p",
        "secretRef": {"name": "s"}, "headers": {"h": ["v"]}}, "query": "q"}),
    );
    let odd_values = [
        json!(null),
        json!(""),
        json!(-1),
        json!(0),
        json!(1.5),
        json!(1e300),
        json!(true),
        json!([]),
        json!({}),
        json!("-5s"),
        json!([null]),
        json!({"": null}),
    ];
    for document in [rich, template] {
        let mut all = Vec::new();
        pointers(&document, String::new(), &mut all);
        for pointer in all.iter().filter(|pointer| !pointer.is_empty()) {
            for odd in &odd_values {
                let mut mutated = document.clone();
                if let Some(slot) = mutated.pointer_mut(pointer) {
                    *slot = odd.clone();
                }
                let _ = convert_canary(&mutated);
                let _ = convert_metric_template(&mutated);
                let _ = crate::document::load_value(&mutated);
            }
        }
    }
}

#[test]
fn an_imported_canary_keeps_flaggers_promotion_unless_annotated_to_need_evidence() {
    let plain = convert_ok(&canary_with(json!({"interval": "1m", "stepWeight": 10})));
    let analysis = &plain.value.spec.analysis;
    assert_eq!(
        analysis.evidence.promote_on,
        crate::model::PromotionEvidence::NoHarm
    );
    assert!(analysis.judges.is_empty());

    let mut opted = canary_with(json!({"interval": "1m", "stepWeight": 10}));
    opted["metadata"]["annotations"] = json!({"weir.dev/promote-on": "health"});
    let converted = convert_ok(&opted);
    let analysis = &converted.value.spec.analysis;
    assert_eq!(
        analysis.evidence.promote_on,
        crate::model::PromotionEvidence::Health
    );
    assert_eq!(analysis.judges, ["sequential"]);

    opted["metadata"]["annotations"] = json!({"weir.dev/promote-on": "always"});
    let errors = convert_err(&opted);
    assert_eq!(
        paths(&errors),
        ["metadata.annotations[\"weir.dev/promote-on\"]"]
    );
    assert!(
        errors[0].message.contains("`health`") && errors[0].message.contains("`noHarm`"),
        "{}",
        errors[0].message
    );
}
