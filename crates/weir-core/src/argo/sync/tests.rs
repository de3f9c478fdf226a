#![allow(clippy::expect_used, clippy::panic)]

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use super::super::analysis::Phase;
use super::super::types::Rollout;
use super::*;

/// A cluster in miniature: the Rollout, its ReplicaSets (pods available at once) and runs, and
/// a clock the test moves.
struct Sim {
    rollout: Value,
    generation: i64,
    status: Status,
    replica_sets: Vec<ReplicaSetView>,
    runs: Vec<RunView>,
    experiments: Vec<RunView>,
    services: Vec<(String, String)>,
    weights: Option<(i64, i64)>,
    events: Vec<String>,
    now: Timestamp,
    /// New pods never become available (as with a broken image).
    pods_never_ready: bool,
    /// The size last asked of the workloadRef Deployment.
    workload: Option<i64>,
    /// Managed routes written and not removed.
    managed: Vec<String>,
}

impl Sim {
    fn new(rollout: Value) -> Sim {
        Sim {
            rollout,
            generation: 1,
            status: Status::default(),
            replica_sets: Vec::new(),
            runs: Vec::new(),
            experiments: Vec::new(),
            services: Vec::new(),
            weights: None,
            events: Vec::new(),
            pods_never_ready: false,
            workload: None,
            managed: Vec::new(),
            now: "2026-11-28T10:00:00Z".parse().expect("a time"),
        }
    }

    fn typed(&self) -> Rollout {
        serde_json::from_value(self.rollout.clone()).expect("a Rollout")
    }

    /// One reconcile, its actions carried out.
    fn pass(&mut self) -> Sync {
        let rollout = self.typed();
        let template = self.rollout["spec"]["template"].clone();
        let observed = Observed {
            rollout: &rollout,
            generation: self.generation,
            status: self.status.clone(),
            template: &template,
            replica_sets: &self.replica_sets,
            runs: &self.runs,
            experiments: &self.experiments,
            now: self.now,
        };
        assert_eq!(unsupported(&rollout), None);
        let sync = reconcile(&observed);
        for action in &sync.actions {
            match action {
                Action::CreateReplicaSet {
                    name,
                    hash,
                    revision,
                } => self.replica_sets.push(ReplicaSetView {
                    name: name.clone(),
                    hash: hash.clone(),
                    revision: *revision,
                    replicas: 0,
                    status_replicas: 0,
                    ready: 0,
                    available: 0,
                    scale_down_deadline: None,
                }),
                Action::ScaleReplicaSet { name, to, .. } => {
                    let rs = self
                        .replica_sets
                        .iter_mut()
                        .find(|rs| &rs.name == name)
                        .expect("a ReplicaSet");
                    rs.replicas = *to;
                    rs.status_replicas = *to;
                    if !(self.pods_never_ready && *to > rs.available) {
                        rs.ready = *to;
                        rs.available = *to;
                    }
                }
                Action::ScaleDownDeadline { name, deadline } => {
                    let rs = self
                        .replica_sets
                        .iter_mut()
                        .find(|rs| &rs.name == name)
                        .expect("a ReplicaSet");
                    rs.scale_down_deadline = *deadline;
                }
                Action::SetHeaderRoute(route) => {
                    self.managed.push(route.name.clone().unwrap_or_default())
                }
                Action::SetMirrorRoute(route) => self.managed.push(route.name.clone()),
                Action::RemoveManagedRoutes => self.managed.clear(),
                Action::CreateRun { name, .. } => self.runs.push(RunView {
                    name: name.clone(),
                    phase: Some(Phase::Running),
                    message: String::new(),
                    terminating: false,
                    created: Some(self.now),
                }),
                Action::DeleteReplicaSet { name } => {
                    self.replica_sets.retain(|rs| &rs.name != name);
                }
                Action::DeleteRun { name } => self.runs.retain(|run| &run.name != name),
                Action::ScaleWorkload { replicas } => self.workload = Some(*replicas),
                Action::CreateExperiment { name, .. } => self.experiments.push(RunView {
                    name: name.clone(),
                    phase: Some(Phase::Pending),
                    message: String::new(),
                    terminating: false,
                    created: Some(self.now),
                }),
                Action::TerminateExperiment { name } => {
                    if let Some(experiment) = self.experiments.iter_mut().find(|e| &e.name == name)
                    {
                        experiment.terminating = true;
                    }
                }
                Action::TerminateRun { name } => {
                    let run = self
                        .runs
                        .iter_mut()
                        .find(|run| &run.name == name)
                        .expect("a run");
                    run.terminating = true;
                }
                Action::RouteTraffic { canary, stable } => {
                    self.weights = Some((*canary, *stable));
                }
                Action::PointService { service, hash } => {
                    self.services.retain(|(name, _)| name != service);
                    self.services.push((service.clone(), hash.clone()));
                }
            }
        }
        self.events.extend(
            sync.events
                .iter()
                .map(|event| format!("{}: {}", event.reason, event.message)),
        );
        self.status = sync.status.clone();
        sync
    }

    /// Reconciles until nothing more happens by itself (no action), at most 50 times.
    fn settle(&mut self) {
        let mut last = Vec::new();
        for _ in 0..50 {
            let before = self.status.clone();
            let sync = self.pass();
            last.clone_from(&sync.actions);
            if sync.actions.iter().all(|action| {
                // What is asked again every pass, idempotent, or done once.
                matches!(
                    action,
                    Action::PointService { .. }
                        | Action::RouteTraffic { .. }
                        | Action::ScaleWorkload { .. }
                        | Action::RemoveManagedRoutes
                        | Action::DeleteReplicaSet { .. }
                        | Action::DeleteRun { .. }
                )
            }) && before == self.status
            {
                return;
            }
        }
        panic!(
            "the rollout did not settle: {:?}\nlast actions: {last:?}",
            self.status
        );
    }

    fn set_image(&mut self, image: &str) {
        self.rollout["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image);
        self.generation += 1;
    }

    fn counts(&self) -> Vec<(i64, i64)> {
        let mut by_revision: Vec<&ReplicaSetView> = self.replica_sets.iter().collect();
        by_revision.sort_by_key(|rs| rs.revision);
        by_revision
            .iter()
            .map(|rs| (rs.revision, rs.replicas))
            .collect()
    }

    fn replicas_of(&self, revision: i64) -> i64 {
        self.replica_sets
            .iter()
            .find(|rs| rs.revision == revision)
            .map_or(0, |rs| rs.replicas)
    }

    fn promote(&mut self) {
        self.status.pause_conditions.clear();
    }

    fn wait(&mut self, seconds: i64) {
        self.now = self
            .now
            .checked_add(SignedDuration::from_secs(seconds))
            .expect("a time");
    }

    fn set_run_phase(&mut self, phase: Phase, message: &str) {
        let run = self
            .runs
            .iter_mut()
            .rev()
            .find(|run| !run.terminating)
            .expect("a running run");
        run.phase = Some(phase);
        run.message = message.into();
    }
}

fn canary(replicas: i64, steps: Value) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Rollout",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "web:1"}]}
            },
            "strategy": {"canary": {"steps": steps}}
        }
    })
}

fn blue_green(replicas: i64, strategy: Value) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Rollout",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "web:1"}]}
            },
            "strategy": {"blueGreen": strategy}
        }
    })
}

#[test]
fn the_first_deploy_is_stable_at_once() {
    let mut sim = Sim::new(canary(4, json!([{"setWeight": 50}, {"pause": {}}])));
    sim.settle();
    assert_eq!(sim.counts(), vec![(1, 4)]);
    assert_eq!(sim.status.phase, "Healthy");
    assert_eq!(sim.status.stable_rs, sim.status.current_pod_hash);
    assert_eq!(sim.status.current_step_index, Some(2));
    assert_eq!(sim.status.available_replicas, 4);
    assert!(
        sim.events
            .iter()
            .any(|event| event.contains("RolloutCompleted") && event.contains("Initial deploy")),
        "{:?}",
        sim.events
    );
}

#[test]
fn a_canary_walks_its_steps_by_replica_counts_and_waits_for_promote() {
    let steps = json!([
        {"setWeight": 20}, {"pause": {}},
        {"setWeight": 50}, {"pause": {"duration": "10s"}},
        {"setWeight": 80}
    ]);
    let mut sim = Sim::new(canary(5, steps));
    sim.settle();
    sim.set_image("web:2");
    sim.settle();
    // setWeight 20 of 5 replicas: one canary pod, four stable; then the indefinite pause.
    assert_eq!((sim.replicas_of(2), sim.replicas_of(1)), (1, 4));
    assert_eq!(sim.status.current_step_index, Some(1));
    assert_eq!(sim.status.phase, "Paused");
    assert_eq!(sim.status.message, "CanaryPauseStep");
    assert!(sim.status.controller_pause);
    sim.settle();
    assert_eq!(sim.status.current_step_index, Some(1), "waits for promote");
    sim.promote();
    sim.settle();
    // setWeight 50 of 5 with the default maxSurge (25%: 2 pods): three and three, the split
    // nearest 50% within 5 + 1 pods (Argo's rounding), then the timed pause.
    assert_eq!((sim.replicas_of(2), sim.replicas_of(1)), (3, 3));
    assert_eq!(sim.status.current_step_index, Some(3));
    sim.wait(9);
    sim.settle();
    assert_eq!(
        sim.status.current_step_index,
        Some(3),
        "the pause lasts 10s"
    );
    sim.wait(2);
    sim.settle();
    assert_eq!(sim.status.current_step_index, Some(5));
    assert_eq!(sim.counts(), vec![(1, 0), (2, 5)]);
    assert_eq!(sim.status.phase, "Healthy");
    assert_eq!(sim.status.stable_rs, sim.status.current_pod_hash);
    assert!(
        sim.events.iter().any(
            |event| event == "RolloutStepCompleted: Rollout step 1/5 completed (setWeight: 20)"
        ),
        "{:?}",
        sim.events
    );
    assert!(
        sim.events
            .iter()
            .any(|event| event.contains("Completed all 5 canary steps")),
        "{:?}",
        sim.events
    );
}

#[test]
fn abort_returns_to_stable_and_retry_starts_again() {
    let mut sim = Sim::new(canary(4, json!([{"setWeight": 50}, {"pause": {}}])));
    sim.settle();
    sim.set_image("web:2");
    sim.settle();
    assert_eq!((sim.replicas_of(2), sim.replicas_of(1)), (2, 2));
    sim.status.abort = true;
    sim.settle();
    assert_eq!((sim.replicas_of(2), sim.replicas_of(1)), (0, 4));
    assert_eq!(sim.status.phase, "Degraded");
    assert!(
        sim.status
            .message
            .starts_with("RolloutAborted: Rollout aborted update to revision 2"),
        "{}",
        sim.status.message
    );
    assert_eq!(sim.status.current_step_index, Some(0));
    sim.status.abort = false;
    sim.settle();
    assert_eq!((sim.replicas_of(2), sim.replicas_of(1)), (2, 2));
    assert_eq!(sim.status.phase, "Paused");
    assert_eq!(sim.status.current_step_index, Some(1));
}

#[test]
fn promote_full_skips_the_remaining_steps() {
    let mut sim = Sim::new(canary(
        4,
        json!([{"setWeight": 25}, {"pause": {}}, {"setWeight": 75}]),
    ));
    sim.settle();
    sim.set_image("web:2");
    sim.settle();
    assert_eq!(sim.status.current_step_index, Some(1));
    sim.status.promote_full = true;
    sim.settle();
    assert_eq!(sim.counts(), vec![(1, 0), (2, 4)]);
    assert_eq!(sim.status.phase, "Healthy");
    assert!(!sim.status.promote_full);
    assert_eq!(sim.status.current_step_index, Some(3));
}

#[test]
fn an_analysis_step_passes_or_aborts() {
    let steps = json!([
        {"setWeight": 50},
        {"analysis": {"templates": [{"templateName": "success-rate"}]}},
        {"setWeight": 100}
    ]);
    let mut sim = Sim::new(canary(2, steps.clone()));
    sim.settle();
    sim.set_image("web:2");
    sim.settle();
    assert_eq!(sim.runs.len(), 1);
    let run = sim.runs[0].name.clone();
    assert!(run.starts_with("web-") && run.ends_with("-2-1"), "{run}");
    assert_eq!(sim.status.current_step_index, Some(1));
    sim.set_run_phase(Phase::Successful, "");
    sim.settle();
    assert_eq!(sim.status.phase, "Healthy");
    assert_eq!(sim.counts(), vec![(1, 0), (2, 2)]);

    sim.set_image("web:3");
    sim.settle();
    sim.set_run_phase(
        Phase::Failed,
        "Metric \"rate\" assessed Failed due to failed (1) > failureLimit (0)",
    );
    sim.settle();
    assert_eq!(sim.status.phase, "Degraded");
    assert!(
        sim.status
            .message
            .contains("Step-based analysis phase failed: Metric \"rate\" assessed Failed"),
        "{}",
        sim.status.message
    );
    assert_eq!((sim.replicas_of(3), sim.replicas_of(2)), (0, 2));
    // A retry makes a new run (the failed one keeps its name).
    sim.status.abort = false;
    sim.settle();
    let names: Vec<&str> = sim.runs.iter().map(|run| run.name.as_str()).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(names[2].ends_with("-3-1.1"), "{names:?}");
}

#[test]
fn blue_green_switches_after_pre_promotion_analysis_and_keeps_the_old_set_for_its_delay() {
    let strategy = json!({
        "activeService": "web-active",
        "previewService": "web-preview",
        "prePromotionAnalysis": {"templates": [{"templateName": "smoke"}]},
        "scaleDownDelaySeconds": 30
    });
    let mut sim = Sim::new(blue_green(3, strategy));
    sim.settle();
    let first = sim.status.current_pod_hash.clone();
    assert_eq!(sim.status.phase, "Healthy");
    assert!(sim.services.contains(&("web-active".into(), first.clone())));
    sim.set_image("web:2");
    sim.settle();
    let second = sim.status.current_pod_hash.clone();
    assert!(
        sim.services
            .contains(&("web-preview".into(), second.clone()))
    );
    assert!(sim.services.contains(&("web-active".into(), first.clone())));
    assert_eq!(sim.counts(), vec![(1, 3), (2, 3)]);
    assert_eq!(sim.status.phase, "Progressing");
    assert_eq!(sim.status.message, "active service cutover pending");
    assert!(sim.runs[0].name.ends_with("-2-pre"), "{:?}", sim.runs);
    sim.set_run_phase(Phase::Successful, "");
    sim.settle();
    assert!(
        sim.services
            .contains(&("web-active".into(), second.clone()))
    );
    assert_eq!(sim.status.stable_rs, second);
    assert_eq!(sim.status.phase, "Healthy");
    assert_eq!(sim.replicas_of(1), 3, "kept for scaleDownDelaySeconds");
    sim.wait(31);
    sim.settle();
    assert_eq!(sim.counts(), vec![(1, 0), (2, 3)]);
}

#[test]
fn blue_green_with_a_failing_pre_promotion_analysis_stays_on_the_old_version() {
    let strategy = json!({
        "activeService": "web-active",
        "prePromotionAnalysis": {"templates": [{"templateName": "smoke"}]},
        "abortScaleDownDelaySeconds": 0
    });
    let mut sim = Sim::new(blue_green(2, strategy));
    sim.settle();
    let first = sim.status.current_pod_hash.clone();
    sim.set_image("web:2");
    sim.settle();
    sim.set_run_phase(Phase::Failed, "smoke failed");
    sim.settle();
    assert!(sim.services.contains(&("web-active".into(), first.clone())));
    assert_eq!(sim.status.stable_rs, first);
    assert_eq!(sim.status.phase, "Degraded");
    assert!(
        sim.status
            .message
            .contains("PrePromotion analysis phase failed: smoke failed"),
        "{}",
        sim.status.message
    );
}

#[test]
fn blue_green_without_auto_promotion_waits_for_promote() {
    let strategy = json!({"activeService": "a", "autoPromotionEnabled": false});
    let mut sim = Sim::new(blue_green(2, strategy));
    sim.settle();
    sim.set_image("web:2");
    sim.settle();
    assert_eq!(sim.status.phase, "Paused");
    assert_eq!(sim.status.message, "BlueGreenPause");
    sim.promote();
    sim.settle();
    assert_eq!(sim.status.phase, "Healthy");
    assert_eq!(
        sim.status.blue_green.active_selector,
        sim.status.current_pod_hash
    );
}

#[test]
fn a_user_pause_holds_every_replica_set() {
    let mut sim = Sim::new(canary(4, json!([{"setWeight": 50}])));
    sim.settle();
    sim.rollout["spec"]["paused"] = json!(true);
    sim.set_image("web:2");
    sim.settle();
    assert_eq!(sim.counts(), vec![(1, 4), (2, 0)]);
    assert_eq!(sim.status.phase, "Paused");
    assert_eq!(sim.status.message, "manually paused");
}

#[test]
fn what_does_not_run_is_named() {
    let mut rollout = canary(1, json!([{"setCanaryScale": {"replicas": 1}}]));
    let typed: Rollout = serde_json::from_value(rollout.clone()).expect("a Rollout");
    assert_eq!(
        unsupported(&typed).as_deref(),
        Some(
            "spec.strategy.canary.steps[0].setCanaryScale: not run by weir's operator yet (it \
             runs setWeight, pause, analysis, experiment without weights and, with \
             trafficRouting, setCanaryScale, setHeaderRoute and setMirrorRoute steps)"
        )
    );
    rollout["spec"]["strategy"]["canary"]["trafficRouting"] = json!({"alb": {}});
    let typed: Rollout = serde_json::from_value(rollout.clone()).expect("a Rollout");
    assert!(
        unsupported(&typed)
            .is_some_and(|reason| reason.starts_with("spec.strategy.canary.trafficRouting.alb:")),
    );
    rollout["spec"]["strategy"]["canary"]["trafficRouting"] = json!({"istio": {}});
    let typed: Rollout = serde_json::from_value(rollout.clone()).expect("a Rollout");
    assert!(unsupported(&typed).is_some_and(|reason| reason.contains("Canary service and Stable")),);
    rollout["spec"]["strategy"]["canary"]["canaryService"] = json!("web-canary");
    rollout["spec"]["strategy"]["canary"]["stableService"] = json!("web-stable");
    let typed: Rollout = serde_json::from_value(rollout).expect("a Rollout");
    assert_eq!(unsupported(&typed), None);
}

fn routed(replicas: i64, steps: Value) -> Value {
    let mut rollout = canary(replicas, steps);
    rollout["spec"]["strategy"]["canary"]["canaryService"] = json!("web-canary");
    rollout["spec"]["strategy"]["canary"]["stableService"] = json!("web-stable");
    rollout["spec"]["strategy"]["canary"]["scaleDownDelaySeconds"] = json!(5);
    rollout["spec"]["strategy"]["canary"]["trafficRouting"] =
        json!({"plugins": {"argoproj-labs/gatewayAPI": {"httpRoute": "web"}}});
    rollout
}

#[test]
fn a_routed_canary_moves_weights_once_its_pods_are_there_and_keeps_the_old_stable_for_its_delay() {
    let steps = json!([
        {"setWeight": 30}, {"pause": {}},
        {"setCanaryScale": {"replicas": 4}}, {"setWeight": 60}
    ]);
    let mut sim = Sim::new(routed(4, steps));
    sim.settle();
    let first = sim.status.current_pod_hash.clone();
    assert_eq!(sim.weights, Some((0, 100)));
    assert!(sim.services.contains(&("web-stable".into(), first.clone())));
    sim.set_image("web:2");
    sim.settle();
    let second = sim.status.current_pod_hash.clone();
    // setWeight 30 of 4 pods: ceil(1.2) = 2 canary pods beside all 4 stable, then 30% to them.
    assert_eq!((sim.replicas_of(2), sim.replicas_of(1)), (2, 4));
    assert_eq!(sim.weights, Some((30, 70)));
    assert!(
        sim.services
            .contains(&("web-canary".into(), second.clone()))
    );
    assert!(sim.services.contains(&("web-stable".into(), first.clone())));
    let weights = sim
        .status
        .canary
        .weights
        .clone()
        .expect("weights in the status");
    assert_eq!(
        (weights.canary.weight, weights.canary.service_name.as_str()),
        (30, "web-canary")
    );
    assert_eq!(sim.status.phase, "Paused");
    sim.promote();
    sim.settle();
    // setCanaryScale then setWeight 60: the canary stays at 4 pods, 60% of traffic.
    assert_eq!(
        sim.weights.map(|weights| weights.0),
        Some(0),
        "after promotion"
    );
    assert_eq!(sim.status.stable_rs, second);
    assert!(
        sim.services
            .contains(&("web-stable".into(), second.clone()))
    );
    assert_eq!(sim.replicas_of(1), 4, "the old stable waits 5 s");
    assert_eq!(sim.status.phase, "Healthy", "{}", sim.status.message);
    sim.wait(6);
    sim.settle();
    assert_eq!(sim.counts(), vec![(1, 0), (2, 4)]);
    assert!(
        sim.events
            .iter()
            .any(|event| event.contains("Rollout step 3/4 completed")),
        "{:?}",
        sim.events
    );
}

#[test]
fn an_aborted_routed_canary_gets_no_traffic_at_once_and_its_pods_go_after_the_delay() {
    let mut rollout = routed(2, json!([{"setWeight": 50}, {"pause": {}}]));
    rollout["spec"]["strategy"]["canary"]["abortScaleDownDelaySeconds"] = json!(10);
    let mut sim = Sim::new(rollout);
    sim.settle();
    sim.set_image("web:2");
    sim.settle();
    assert_eq!(sim.weights, Some((50, 50)));
    sim.status.abort = true;
    sim.settle();
    assert_eq!(sim.weights, Some((0, 100)));
    assert_eq!(sim.status.phase, "Degraded");
    assert_eq!(sim.replicas_of(2), 1, "kept for abortScaleDownDelaySeconds");
    sim.wait(11);
    sim.settle();
    assert_eq!(sim.counts(), vec![(1, 2), (2, 0)]);
}

#[test]
fn the_pod_template_hash_ignores_key_order_and_uses_the_safe_alphabet() {
    let one = json!({"a": 1, "b": {"c": [1, 2]}});
    let two: Value = serde_json::from_str(r#"{"b": {"c": [1, 2]}, "a": 1}"#).expect("json");
    assert_eq!(pod_template_hash(&one, None), pod_template_hash(&two, None));
    assert_ne!(
        pod_template_hash(&one, None),
        pod_template_hash(&one, Some(1))
    );
    let hash = pod_template_hash(&one, None);
    assert!(
        hash.chars()
            .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)),
        "{hash}"
    );
}

#[test]
fn with_weirs_evidence_rule_the_end_of_the_steps_waits_for_a_successful_analysis() {
    let steps = json!([
        {"setWeight": 50},
        {"analysis": {"templates": [{"templateName": "smoke"}]}}
    ]);
    let mut rollout = canary(2, json!([{"setWeight": 50}]));
    rollout["metadata"]["annotations"] = json!({"weir.dev/promote-on": "health"});
    let mut sim = Sim::new(rollout.clone());
    sim.settle();
    assert_eq!(
        sim.status.phase, "Healthy",
        "the first deploy needs no evidence"
    );
    // Steps without an analysis: Argo would promote; weir waits.
    sim.set_image("web:2");
    sim.settle();
    assert_eq!(sim.status.phase, "Progressing");
    assert!(
        sim.status.message.starts_with("waiting for evidence"),
        "{}",
        sim.status.message
    );
    assert_ne!(sim.status.stable_rs, sim.status.current_pod_hash);
    // A user's full promotion is not held back.
    sim.status.promote_full = true;
    sim.settle();
    assert_eq!(sim.status.phase, "Healthy");
    // With an analysis step that succeeds, it promotes.
    sim.rollout["spec"]["strategy"]["canary"]["steps"] = steps;
    sim.set_image("web:3");
    sim.settle();
    assert_eq!(sim.status.current_step_index, Some(1));
    sim.set_run_phase(Phase::Successful, "");
    sim.settle();
    assert_eq!(sim.status.phase, "Healthy");
    assert_eq!(sim.status.stable_rs, sim.status.current_pod_hash);
}

#[test]
fn old_replica_sets_beyond_the_history_limit_are_deleted() {
    let mut rollout = canary(1, json!([{"setWeight": 100}]));
    rollout["spec"]["revisionHistoryLimit"] = json!(2);
    let mut sim = Sim::new(rollout);
    sim.settle();
    for image in ["web:2", "web:3", "web:4", "web:5"] {
        sim.set_image(image);
        sim.settle();
    }
    // Revision 5 runs; 3 and 4 are kept (the limit, 2); 1 and 2 are gone.
    let revisions: Vec<i64> = sim.counts().iter().map(|(revision, _)| *revision).collect();
    assert_eq!(revisions, vec![3, 4, 5]);
}

#[test]
fn a_canary_whose_pods_never_come_times_out_and_can_abort() {
    let mut rollout = canary(2, json!([{"setWeight": 50}]));
    rollout["spec"]["progressDeadlineSeconds"] = json!(60);
    rollout["spec"]["progressDeadlineAbort"] = json!(true);
    let mut sim = Sim::new(rollout);
    sim.settle();
    sim.pods_never_ready = true;
    sim.set_image("web:2");
    sim.settle();
    assert_eq!(sim.status.phase, "Progressing");
    sim.wait(61);
    sim.settle();
    assert_eq!(sim.status.phase, "Degraded");
    assert!(sim.status.abort, "progressDeadlineAbort aborts");
    assert!(
        sim.status.message.contains("has timed out progressing")
            || sim.status.message.starts_with("RolloutAborted"),
        "{}",
        sim.status.message
    );
    assert_eq!(sim.replicas_of(1), 2, "the stable kept serving");
}

#[test]
fn a_workload_ref_deployment_is_scaled_down_as_asked() {
    let mut rollout = canary(3, json!([{"setWeight": 50}]));
    rollout["spec"]["workloadRef"] = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "scaleDown": "onsuccess"});
    let mut sim = Sim::new(rollout.clone());
    sim.settle();
    assert_eq!(sim.status.phase, "Healthy");
    assert_eq!(sim.workload, Some(0), "onsuccess: to 0 once Healthy");

    rollout["spec"]["workloadRef"]["scaleDown"] = json!("progressively");
    let mut sim = Sim::new(rollout.clone());
    sim.pods_never_ready = true;
    sim.settle();
    assert_eq!(
        sim.workload,
        Some(3),
        "progressively: nothing available yet, nothing taken"
    );

    rollout["spec"]["workloadRef"]["scaleDown"] = json!("never");
    let mut sim = Sim::new(rollout);
    sim.settle();
    assert_eq!(sim.workload, None);
}

#[test]
fn an_experiment_step_waits_for_its_experiment_and_a_failed_one_aborts() {
    let steps = json!([
        {"setWeight": 50},
        {"experiment": {"duration": "1m", "templates": [{"name": "canary", "specRef": "canary"}]}},
        {"setWeight": 100}
    ]);
    let mut sim = Sim::new(canary(2, steps));
    sim.settle();
    sim.set_image("web:2");
    sim.settle();
    assert_eq!(sim.experiments.len(), 1);
    let name = sim.experiments[0].name.clone();
    assert!(name.ends_with("-2-1"), "{name}");
    assert_eq!(
        sim.status.canary.current_experiment.as_deref(),
        Some(name.as_str())
    );
    assert_eq!(sim.status.current_step_index, Some(1));
    sim.experiments[0].phase = Some(Phase::Successful);
    sim.settle();
    assert_eq!(sim.status.phase, "Healthy");
    assert_eq!(sim.status.canary.current_experiment, None);

    sim.set_image("web:3");
    sim.settle();
    sim.experiments[1].phase = Some(Phase::Failed);
    sim.experiments[1].message = "Metric \"smoke\" assessed Failed".into();
    sim.settle();
    assert_eq!(sim.status.phase, "Degraded");
    assert!(
        sim.status
            .message
            .contains("Experiment analysis phase is failed"),
        "{}",
        sim.status.message
    );
}

#[test]
fn header_routes_are_written_by_their_step_and_removed_at_promotion() {
    let mut rollout = routed(
        2,
        json!([
            {"setWeight": 10},
            {"setHeaderRoute": {"name": "beta", "match": [{"headerName": "x-beta", "headerValue": {"exact": "yes"}}]}},
            {"pause": {}}
        ]),
    );
    rollout["spec"]["strategy"]["canary"]["trafficRouting"]["managedRoutes"] =
        json!([{"name": "beta"}]);
    let mut sim = Sim::new(rollout);
    sim.settle();
    sim.set_image("web:2");
    sim.settle();
    assert_eq!(sim.managed, vec!["beta".to_string()]);
    assert_eq!(sim.status.current_step_index, Some(2));
    assert!(
        sim.events
            .iter()
            .any(|event| event.contains("completed (setHeaderRoute: beta)")),
        "{:?}",
        sim.events
    );
    sim.promote();
    sim.settle();
    assert_eq!(sim.status.phase, "Healthy");
    assert!(
        sim.managed.is_empty(),
        "removed at promotion: {:?}",
        sim.managed
    );
}
