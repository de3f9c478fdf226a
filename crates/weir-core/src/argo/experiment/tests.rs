//! The Experiment reconcile, pass by pass: what is created, when it ends and the status written.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use super::*;
use crate::argo::types::Experiment;

fn experiment(spec: Value) -> Experiment {
    read_experiment(&json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": "exp", "namespace": "ns", "uid": "u-1"},
        "spec": spec,
    }))
    .unwrap()
}

fn template(name: &str, replicas: Option<i64>) -> Value {
    let mut template = json!({
        "name": name,
        "selector": {"matchLabels": {"app": "demo"}},
        "template": {"metadata": {"labels": {"app": "demo"}},
            "spec": {"containers": [{"name": "demo", "image": format!("demo:{name}")}]}},
    });
    if let Some(replicas) = replicas {
        template["replicas"] = json!(replicas);
    }
    template
}

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}

fn rs(name: &str, template: &str, replicas: i64, available: i64) -> TemplateReplicaSet {
    TemplateReplicaSet {
        name: name.into(),
        template: template.into(),
        replicas,
        status_replicas: replicas,
        ready: available,
        available,
        scale_down_deadline: None,
    }
}

fn run(name: &str, phase: Option<Phase>, message: &str) -> RunView {
    RunView {
        name: name.into(),
        phase,
        message: message.into(),
        terminating: false,
        created: None,
    }
}

struct World<'a> {
    experiment: &'a Experiment,
    status: ExperimentStatus,
    replica_sets: Vec<TemplateReplicaSet>,
    runs: Vec<RunView>,
    services: Vec<String>,
}

impl World<'_> {
    fn pass(&mut self, now: Timestamp) -> ExperimentSync {
        let sync = reconcile(&ExperimentObserved {
            experiment: self.experiment,
            status: self.status.clone(),
            created: Some(at(0)),
            replica_sets: &self.replica_sets,
            runs: &self.runs,
            services: &self.services,
            now,
        });
        self.status = sync.status.clone();
        sync
    }
}

fn world(experiment: &Experiment) -> World<'_> {
    World {
        experiment,
        status: ExperimentStatus::default(),
        replica_sets: Vec::new(),
        runs: Vec::new(),
        services: Vec::new(),
    }
}

#[test]
fn two_templates_run_pending_then_running_then_successful_after_the_duration_and_scale_down() {
    let exp = experiment(json!({
        "duration": "10s",
        "scaleDownDelaySeconds": 5,
        "templates": [template("baseline", None), template("canary", Some(2))],
    }));
    let mut world = world(&exp);
    let first = world.pass(at(1));
    let hash = template_hash(&exp.spec.templates[0].template);
    assert_eq!(
        first.actions,
        vec![
            ExperimentAction::CreateReplicaSet {
                name: "exp-baseline".into(),
                template: "baseline".into(),
                hash: hash.clone(),
                replicas: 1,
            },
            ExperimentAction::CreateReplicaSet {
                name: "exp-canary".into(),
                template: "canary".into(),
                hash: template_hash(&exp.spec.templates[1].template),
                replicas: 2,
            },
        ]
    );
    assert_eq!(first.status.phase, "Pending");
    assert_eq!(first.status.template_statuses[0].status, "Progressing");
    assert_eq!(first.status.template_statuses[0].pod_template_hash, hash);
    assert!(first.status.available_at.is_none());

    // One available, the other not yet: still Pending, nothing more to do.
    world.replica_sets = vec![
        rs("exp-baseline", "baseline", 1, 1),
        rs("exp-canary", "canary", 2, 1),
    ];
    let second = world.pass(at(2));
    assert!(second.actions.is_empty(), "{:?}", second.actions);
    assert_eq!(second.status.phase, "Pending");
    assert_eq!(second.status.template_statuses[0].status, "Running");
    assert_eq!(second.status.template_statuses[1].status, "Progressing");

    world.replica_sets[1].available = 2;
    let running = world.pass(at(3));
    assert_eq!(running.status.phase, "Running");
    assert_eq!(running.status.available_at, Some(at(3).to_string()));
    assert_eq!(running.status.template_statuses[1].available_replicas, 2);
    assert!(running.actions.is_empty());
    assert_eq!(world.pass(at(12)).status.phase, "Running");

    // The duration counts from availableAt: at 13 it has passed.
    let ended = world.pass(at(13));
    assert_eq!(ended.status.phase, "Successful");
    let deadline = at(13).checked_add(SignedDuration::from_secs(5)).unwrap();
    assert_eq!(
        ended.actions,
        vec![
            ExperimentAction::ScaleDownDeadline {
                name: "exp-baseline".into(),
                deadline: Some(deadline),
            },
            ExperimentAction::ScaleDownDeadline {
                name: "exp-canary".into(),
                deadline: Some(deadline),
            },
        ]
    );
    for rs in &mut world.replica_sets {
        rs.scale_down_deadline = Some(deadline);
    }
    assert!(world.pass(at(17)).actions.is_empty());
    let scaled = world.pass(at(18));
    assert_eq!(
        scaled.actions,
        vec![
            ExperimentAction::ScaleReplicaSet {
                name: "exp-baseline".into(),
                from: 1,
                to: 0,
            },
            ExperimentAction::ScaleReplicaSet {
                name: "exp-canary".into(),
                from: 2,
                to: 0,
            },
        ]
    );
    assert_eq!(scaled.status.template_statuses[0].status, "Successful");
    assert_eq!(scaled.status.phase, "Successful");
}

#[test]
fn analyses_start_once_running_and_a_failed_run_ends_it_failed_with_its_message() {
    let exp = experiment(json!({
        "templates": [template("baseline", None)],
        "analyses": [
            {"name": "check", "templateName": "web-check",
             "args": [{"name": "hash", "value": "{{templates.baseline.podTemplateHash}}"}]},
            {"name": "other", "templateName": "web-other", "clusterScope": true},
        ],
    }));
    let mut world = world(&exp);
    world.pass(at(1));
    // Pending: no run yet.
    assert!(world.status.analysis_runs.is_empty());
    world.replica_sets = vec![rs("exp-baseline", "baseline", 1, 1)];
    let running = world.pass(at(2));
    let hash = template_hash(&exp.spec.templates[0].template);
    let ExperimentAction::CreateRun {
        name,
        analysis_name,
        analysis,
    } = &running.actions[0]
    else {
        panic!("{:?}", running.actions)
    };
    assert_eq!(
        (name.as_str(), analysis_name.as_str()),
        ("exp-check", "check")
    );
    let args = analysis.args.as_ref().unwrap();
    assert_eq!(args[0].value.as_deref(), Some(hash.as_str()));
    let templates = analysis.templates.as_ref().unwrap();
    assert_eq!(templates[0].template_name.as_deref(), Some("web-check"));
    let ExperimentAction::CreateRun { analysis, .. } = &running.actions[1] else {
        panic!("{:?}", running.actions)
    };
    assert_eq!(
        analysis.templates.as_ref().unwrap()[0].cluster_scope,
        Some(true)
    );
    assert_eq!(running.status.analysis_runs[0].phase, "Pending");
    assert_eq!(running.status.analysis_runs[0].analysis_run, "exp-check");

    world.runs = vec![
        run("exp-check", Some(Phase::Running), ""),
        run("exp-other", Some(Phase::Running), ""),
    ];
    let still = world.pass(at(100));
    assert_eq!(still.status.phase, "Running", "no duration: it runs on");
    assert!(still.actions.is_empty());

    world.runs[0] = run(
        "exp-check",
        Some(Phase::Failed),
        "Metric \"web\" assessed Failed",
    );
    let failed = world.pass(at(101));
    assert_eq!(failed.status.phase, "Failed");
    assert_eq!(failed.status.message, "Metric \"web\" assessed Failed");
    assert_eq!(failed.status.analysis_runs[0].phase, "Failed");
    assert!(failed.actions.contains(&ExperimentAction::TerminateRun {
        name: "exp-other".into()
    }));
    assert!(!failed.actions.contains(&ExperimentAction::TerminateRun {
        name: "exp-check".into()
    }));
    // Final: a run recovering later changes nothing.
    world.runs[0].phase = Some(Phase::Successful);
    assert_eq!(world.pass(at(102)).status.phase, "Failed");
}

#[test]
fn required_analyses_end_it_when_they_finish_and_inconclusive_wins_over_successful() {
    let exp = experiment(json!({
        "templates": [template("baseline", None)],
        "analyses": [
            {"name": "a", "templateName": "t", "requiredForCompletion": true},
            {"name": "b", "templateName": "t", "requiredForCompletion": true},
        ],
    }));
    let mut world = world(&exp);
    world.replica_sets = vec![rs("exp-baseline", "baseline", 1, 1)];
    world.pass(at(1));
    world.runs = vec![
        run("exp-a", Some(Phase::Successful), ""),
        run("exp-b", Some(Phase::Running), ""),
    ];
    assert_eq!(world.pass(at(2)).status.phase, "Running");
    world.runs[1].phase = Some(Phase::Inconclusive);
    let ended = world.pass(at(3));
    assert_eq!(ended.status.phase, "Inconclusive");
}

#[test]
fn terminate_ends_it_successful_and_terminates_the_runs() {
    let mut exp = experiment(json!({
        "templates": [template("baseline", None)],
        "analyses": [{"name": "a", "templateName": "t"}],
        "scaleDownDelaySeconds": 0,
    }));
    let mut world_ = world(&exp);
    world_.replica_sets = vec![rs("exp-baseline", "baseline", 1, 1)];
    world_.pass(at(1));
    let status = world_.status.clone();
    assert_eq!(status.phase, "Running");
    exp.spec.terminate = Some(true);
    let mut world = world(&exp);
    world.status = status;
    world.replica_sets = vec![rs("exp-baseline", "baseline", 1, 1)];
    world.runs = vec![run("exp-a", Some(Phase::Running), "")];
    let ended = world.pass(at(2));
    assert_eq!(ended.status.phase, "Successful");
    assert_eq!(
        ended.actions,
        vec![
            ExperimentAction::ScaleReplicaSet {
                name: "exp-baseline".into(),
                from: 1,
                to: 0,
            },
            ExperimentAction::TerminateRun {
                name: "exp-a".into()
            },
        ]
    );
}

#[test]
fn pending_past_the_progress_deadline_fails() {
    let exp = experiment(json!({
        "progressDeadlineSeconds": 60,
        "templates": [template("baseline", None)],
    }));
    let mut world = world(&exp);
    world.replica_sets = vec![rs("exp-baseline", "baseline", 1, 0)];
    assert_eq!(world.pass(at(59)).status.phase, "Pending");
    let failed = world.pass(at(60));
    assert_eq!(failed.status.phase, "Failed");
    assert!(failed.status.message.contains("timed out progressing"));
    assert_eq!(failed.status.template_statuses[0].status, "Failed");
}

#[test]
fn a_service_is_created_once_running_and_deleted_after_the_scale_down() {
    let mut spec_template = template("web", None);
    spec_template["service"] = json!({});
    let exp = experiment(json!({
        "duration": "5s",
        "scaleDownDelaySeconds": 0,
        "templates": [spec_template],
    }));
    let mut world = world(&exp);
    world.replica_sets = vec![rs("exp-web", "web", 1, 1)];
    let running = world.pass(at(1));
    assert_eq!(
        running.actions,
        vec![ExperimentAction::CreateService {
            name: "exp-web".into(),
            template: "web".into(),
            hash: template_hash(&exp.spec.templates[0].template),
        }]
    );
    assert_eq!(running.status.template_statuses[0].service_name, "exp-web");
    world.services = vec!["exp-web".into()];
    assert!(world.pass(at(2)).actions.is_empty());
    let ended = world.pass(at(6));
    assert_eq!(ended.status.phase, "Successful");
    assert!(ended.actions.contains(&ExperimentAction::DeleteService {
        name: "exp-web".into()
    }));
}

#[test]
fn the_status_reads_back_what_it_writes_in_argos_shape() {
    let exp = experiment(json!({"templates": [template("baseline", None)]}));
    let mut world = world(&exp);
    world.replica_sets = vec![rs("exp-baseline", "baseline", 1, 1)];
    let sync = world.pass(at(1));
    let written = sync.status.to_json();
    assert_eq!(written["phase"], json!("Running"));
    assert_eq!(
        written["templateStatuses"][0]["availableReplicas"],
        json!(1)
    );
    assert_eq!(written["templateStatuses"][0]["updatedReplicas"], json!(1));
    assert!(written["templateStatuses"][0]["podTemplateHash"].is_string());
    assert_eq!(ExperimentStatus::read(Some(&written)), sync.status);
    assert_eq!(
        ExperimentStatus::read(Some(&json!("nonsense"))),
        ExperimentStatus::default()
    );
}

#[test]
fn a_rollouts_experiment_step_becomes_an_experiment_argo_would_create() {
    let step: StepExperiment = serde_json::from_value(json!({
        "duration": "1m",
        "templates": [
            {"name": "baseline", "specRef": "stable", "replicas": 1},
            {"name": "canary", "specRef": "canary", "metadata": {"labels": {"role": "exp"}},
             "weight": 5},
        ],
        "analyses": [{"name": "check", "templateName": "t", "requiredForCompletion": true,
            "args": [{"name": "h", "valueFrom": {"podTemplateHashValue": "Latest"}}]}],
    }))
    .unwrap();
    let stable = json!({"metadata": {"labels": {"app": "demo", "rollouts-pod-template-hash": "s1"}},
        "spec": {"containers": [{"name": "demo", "image": "demo:1"}]}});
    let canary = json!({"metadata": {"labels": {"app": "demo", "rollouts-pod-template-hash": "c2"}},
        "spec": {"containers": [{"name": "demo", "image": "demo:2"}]}});
    let selector = json!({"matchLabels": {"app": "demo"}});
    let source = StepSource {
        rollout: "demo",
        namespace: "ns",
        rollout_uid: "uid-1",
        step_index: 2,
        revision: 3,
        pod_hash: "c2",
        stable_template: &stable,
        canary_template: &canary,
        selector: &selector,
        progress_deadline_seconds: Some(120),
    };
    let object = experiment_for_step(&step, &source);
    assert_eq!(object["metadata"]["name"], json!("demo-c2-3-2"));
    assert_eq!(
        object["metadata"]["labels"]["rollouts-pod-template-hash"],
        json!("c2")
    );
    assert_eq!(
        object["metadata"]["annotations"]["rollout.argoproj.io/revision"],
        json!("3")
    );
    assert_eq!(
        object["metadata"]["ownerReferences"][0]["uid"],
        json!("uid-1")
    );
    let templates = &object["spec"]["templates"];
    assert_eq!(templates[0]["template"], stable);
    assert_eq!(templates[0]["replicas"], json!(1));
    assert_eq!(
        templates[1]["template"]["metadata"]["labels"]["role"],
        json!("exp")
    );
    assert_eq!(templates[1]["service"], json!({}));
    assert_eq!(templates[1]["selector"], selector);
    assert_eq!(object["spec"]["duration"], json!("1m"));
    assert_eq!(object["spec"]["progressDeadlineSeconds"], json!(120));
    assert_eq!(
        object["spec"]["analyses"][0]["args"][0]["valueFrom"],
        json!({"podTemplateHashValue": "Latest"})
    );
    // What it builds is an Experiment weir reads back.
    let read = read_experiment(&object).unwrap();
    assert_eq!(read.spec.templates.len(), 2);
}

#[test]
fn experiment_placeholders_in_arguments_are_resolved_and_others_left_for_the_run() {
    let mut placeholders = std::collections::BTreeMap::new();
    placeholders.insert("templates.a.podTemplateHash".to_string(), "h1".to_string());
    assert_eq!(
        substitute(
            "x-{{ templates.a.podTemplateHash }}-{{args.other}}-{{",
            &placeholders
        ),
        "x-h1-{{args.other}}-{{"
    );
}

#[test]
fn terminated_while_pending_it_ends_without_starting_its_analyses() {
    let exp = experiment(json!({
        "terminate": true,
        "templates": [template("baseline", None)],
        "analyses": [{"name": "a", "templateName": "t"}],
    }));
    let mut world = world(&exp);
    world.replica_sets = vec![rs("exp-baseline", "baseline", 1, 0)];
    let ended = world.pass(at(1));
    assert_eq!(ended.status.phase, "Successful");
    assert!(ended.status.available_at.is_none());
    assert!(
        ended
            .actions
            .iter()
            .all(|action| !matches!(action, ExperimentAction::CreateRun { .. })),
        "{:?}",
        ended.actions
    );
}

#[test]
fn a_replica_set_scaled_by_hand_is_scaled_back_while_it_runs() {
    let exp = experiment(json!({"templates": [template("baseline", Some(3))]}));
    let mut world = world(&exp);
    world.replica_sets = vec![rs("exp-baseline", "baseline", 1, 1)];
    let sync = world.pass(at(1));
    assert_eq!(sync.status.phase, "Pending");
    assert_eq!(
        sync.actions,
        vec![ExperimentAction::ScaleReplicaSet {
            name: "exp-baseline".into(),
            from: 1,
            to: 3,
        }]
    );
}
