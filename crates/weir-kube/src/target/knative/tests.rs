#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use weir_core::document::{self, Document};
use weir_core::model::Phase;

use super::*;

/// A rollout of Knative Service `podinfo` with `extra` lines in `spec.target` and `plan` (YAML
/// flow).
fn rollout(extra: &str, plan: &str) -> Rollout {
    load(&format!(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: podinfo, namespace: shop}}
spec:
  target:
    kind: kubernetes
    provider: knative
    targetRef: {{apiVersion: serving.knative.dev/v1, kind: Service, name: podinfo}}
{extra}
  plan: {plan}
  analysis: {{interval: 1s, threshold: 2}}
"
    ))
}

fn load(yaml: &str) -> Rollout {
    let loaded = document::load(yaml.as_bytes()).pop().unwrap().unwrap();
    let Document::Rollout(rollout) = loaded.document else {
        panic!("a rollout");
    };
    *rollout
}

fn paths(errors: &[FieldError]) -> Vec<&str> {
    errors.iter().map(|error| error.path.as_str()).collect()
}

#[test]
fn a_knative_service_is_a_target_with_no_copy() {
    let canary = rollout("", "{canary: {stepWeight: 10, maxWeight: 50}}");
    let settings = settings(&canary).unwrap();
    assert!(settings.knative);
    assert!(!settings.daemon_set && !settings.replica_split);
    assert_eq!(settings.target_name, "podinfo");
    assert_eq!(settings.provider, Provider::Knative);
    // Blue/green runs too: the switch is one route.
    let blue_green = rollout("", "{blueGreen: {iterations: 3}}");
    assert!(settings_ok(&blue_green));
}

fn settings_ok(rollout: &Rollout) -> bool {
    settings(rollout).is_ok()
}

#[test]
fn what_knative_cannot_do_is_refused_naming_the_provider_and_the_field() {
    let refused = |extra: &str, plan: &str| {
        settings(&rollout(extra, plan))
            .err()
            .unwrap_or_else(|| panic!("{extra} {plan}: refused"))
    };
    let errors = refused(
        "",
        "{abTest: {iterations: 3, match: [{headers: {x-canary: {exact: insider}}}]}}",
    );
    assert_eq!(paths(&errors), ["spec.plan.abTest.match"]);
    assert!(errors[0].message.contains("provider knative"), "{errors:?}");

    let errors = refused(
        "    autoscalerRef: {apiVersion: autoscaling/v2, kind: HorizontalPodAutoscaler, name: podinfo}",
        "{canary: {stepWeight: 10}}",
    );
    assert_eq!(paths(&errors), ["spec.target.autoscalerRef"]);
    assert!(
        errors[0].message.contains("provider knative")
            && errors[0]
                .message
                .contains("Knative scales each revision itself"),
        "{errors:?}"
    );

    // (A document with another mode and a targetRef is refused before: targetRef is a setting
    // of mode copy only.)
    let errors = refusals(&KubernetesTarget {
        mode: Some(KubernetesMode::Managed),
        ..KubernetesTarget::default()
    });
    assert_eq!(paths(&errors), ["spec.target.mode"]);

    let errors = refused(
        "  sessionAffinity: {cookieName: flagger-cookie}",
        "{canary: {stepWeight: 10}}",
    );
    assert_eq!(paths(&errors), ["spec.sessionAffinity"]);

    // A Deployment is not a Knative Service.
    let deployment = load(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {name: podinfo, namespace: shop}
spec:
  target:
    kind: kubernetes
    provider: knative
    targetRef: {apiVersion: apps/v1, kind: Deployment, name: podinfo}
  plan: {canary: {stepWeight: 10}}
",
    );
    let errors = settings(&deployment).err().unwrap();
    assert_eq!(
        paths(&errors),
        [
            "spec.target.targetRef.kind",
            "spec.target.targetRef.apiVersion"
        ]
    );
}

fn service(annotated: Option<&str>, created: Option<&str>, ready: Option<&str>) -> DynamicObject {
    let mut metadata = json!({"name": "podinfo", "namespace": "shop"});
    if let Some(annotated) = annotated {
        metadata["annotations"] = json!({PRIMARY_REVISION_ANNOTATION: annotated});
    }
    serde_json::from_value(json!({
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {"template": {"spec": {"containers": [{"image": "podinfo:6.0.1"}]}}},
        "status": {"latestCreatedRevisionName": created, "latestReadyRevisionName": ready},
    }))
    .unwrap()
}

#[test]
fn the_canary_is_ready_only_as_the_latest_ready_revision() {
    let read = KnativeService::of(&service(
        Some("podinfo-00001"),
        Some("podinfo-00002"),
        Some("podinfo-00001"),
    ));
    assert_eq!(read.annotated.as_deref(), Some("podinfo-00001"));
    assert_eq!(read.latest_created.as_deref(), Some("podinfo-00002"));
    assert!(!read.canary_ready(), "latestRevision still reaches 00001");
    let read = KnativeService::of(&service(None, Some("podinfo-00002"), Some("podinfo-00002")));
    assert!(read.canary_ready());
    assert_eq!(read.annotated, None);
    // A Service Knative has not reconciled yet.
    let read = KnativeService::of(&service(None, None, None));
    assert_eq!(read, KnativeService::default());
    assert!(!read.canary_ready());
}

#[test]
fn a_revision_is_ready_when_its_ready_condition_is_true() {
    let revision = |status: &str| {
        json!({"status": {"conditions": [
            {"type": "ContainerHealthy", "status": "True"},
            {"type": "Ready", "status": status},
        ]}})
    };
    assert!(condition_true(&revision("True"), "Ready"));
    assert!(!condition_true(&revision("Unknown"), "Ready"));
    assert!(!condition_true(&revision("False"), "Ready"));
    assert!(!condition_true(&json!({}), "Ready"));
}

#[test]
fn once_the_canary_is_promoted_every_route_goes_to_the_primary() {
    let run = RolloutStatus {
        phase: Phase::Progressing,
        primary_revision: Some("podinfo-00001".into()),
        canary_revision: Some("podinfo-00002".into()),
        canary_weight: Weight::from_percent(30),
        ..RolloutStatus::default()
    };
    let route = Route::of(&rollout("", "{canary: {stepWeight: 10}}").spec, &run);
    assert_eq!(knative_route(&route, &run), route);
    let promoting = RolloutStatus {
        phase: Phase::Promoting,
        primary_revision: Some("podinfo-00002".into()),
        ..run.clone()
    };
    assert_eq!(knative_route(&route, &promoting), all_to_primary());
}

#[test]
fn the_primary_routed_to_is_the_rollouts_once_set_up() {
    let read = KnativeService::of(&service(
        Some("podinfo-00001"),
        Some("podinfo-00002"),
        Some("podinfo-00002"),
    ));
    let setting_up = RolloutStatus {
        phase: Phase::Initializing,
        primary_revision: Some("podinfo-00007".into()),
        ..RolloutStatus::default()
    };
    assert_eq!(
        KubernetesTargets::knative_primary(&setting_up, &read).as_deref(),
        Some("podinfo-00001")
    );
    // A promotion committed, its write still to come: the rollout's revision.
    let promoting = RolloutStatus {
        phase: Phase::Promoting,
        primary_revision: Some("podinfo-00002".into()),
        ..RolloutStatus::default()
    };
    assert_eq!(
        KubernetesTargets::knative_primary(&promoting, &read).as_deref(),
        Some("podinfo-00002")
    );
}
