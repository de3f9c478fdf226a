//! The `kubernetes` target with a DaemonSet (`targetRef.kind: DaemonSet`), driven directly (no
//! engine, no operator) against the testkit's in-memory API server: set-up creates the primary
//! DaemonSet and points the apex Service at it only once the primary is available, the target
//! waits at zero with Flagger's `flagger.app/scale-to-zero` node selector (no new revision), a
//! run scales it up, promotion copies its template and configs into the primary, and `revert`
//! gives the application back to its own DaemonSet with nothing of weir's left. Only blue/green
//! plans validate. Nothing runs pods here: the test plays the DaemonSet controller
//! ([`roll_out`], 3 nodes) at the points where it would have acted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{Value, json};
use weir_core::document::{self, Document};
use weir_core::machine::{Effect, Scale};
use weir_core::model::{Phase, Rollout, RolloutStatus};
use weir_engine::TargetProvider;
use weir_kube::target::{KubernetesTargets, REVISION_ANNOTATION};
use weir_store::RolloutKey;
use weir_testkit::deployment_controller::matching_nodes;
use weir_testkit::kube_cluster::NAMESPACE;
use weir_testkit::kube_server::KubeServer;

const SCALE_TO_ZERO: &str = "flagger.app/scale-to-zero";

/// DaemonSet `podinfo-ds` on Linux nodes, reading ConfigMap `ds-config` as a volume.
fn daemon_set() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "podinfo-ds", "namespace": NAMESPACE, "labels": {"app": "podinfo-ds"}},
        "spec": {
            "selector": {"matchLabels": {"app": "podinfo-ds"}},
            "template": {
                "metadata": {"labels": {"app": "podinfo-ds"}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/os": "linux"},
                    "volumes": [{"name": "config", "configMap": {"name": "ds-config"}}],
                    "containers": [{
                        "name": "podinfod",
                        "image": "podinfo:6.0.0",
                        "ports": [{"name": "http", "containerPort": 9898}, {"name": "grpc", "containerPort": 9999}]
                    }]
                }
            }
        }
    })
}

/// The rollout of `podinfo-ds` as the corpus's Canary has it: provider kubernetes, blue/green,
/// port 80 to 9898 with port discovery, `revertOnDeletion`.
fn rollout_spec() -> Value {
    json!({
        "target": {
            "kind": "kubernetes",
            "targetRef": {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "podinfo-ds"},
            "provider": "kubernetes",
            "service": {"port": 80, "targetPort": 9898, "portDiscovery": true}
        },
        "plan": {"blueGreen": {"iterations": 2}},
        "analysis": {"interval": "1s", "threshold": 2},
        "revertOnDeletion": true
    })
}

/// Plays the DaemonSet controller once: `name`'s spec is rolled out on every node its pod
/// template matches (of the testkit's 3), all available.
fn roll_out(server: &KubeServer, name: &str) {
    let daemon_set = server.get("apps/v1", "DaemonSet", NAMESPACE, name).unwrap();
    let desired = matching_nodes(&daemon_set["spec"]["template"]);
    let status = json!({
        "observedGeneration": daemon_set["metadata"]["generation"],
        "desiredNumberScheduled": desired,
        "currentNumberScheduled": desired,
        "numberMisscheduled": 0,
        "numberReady": desired,
        "numberAvailable": desired,
        "updatedNumberScheduled": desired,
    });
    server
        .merge_patch(
            "apps/v1",
            "DaemonSet",
            NAMESPACE,
            name,
            &json!({"status": status}),
            true,
        )
        .unwrap();
}

fn load(created: &Value) -> Rollout {
    let loaded = document::load_value(&json!({
        "apiVersion": created["apiVersion"],
        "kind": created["kind"],
        "metadata": {"name": created["metadata"]["name"], "namespace": NAMESPACE, "uid": created["metadata"]["uid"]},
        "spec": created["spec"],
    }))
    .unwrap();
    let Document::Rollout(rollout) = loaded.document else {
        panic!("a Rollout loads as a rollout");
    };
    *rollout
}

struct Setup {
    server: KubeServer,
    targets: KubernetesTargets,
    key: RolloutKey,
    rollout: Rollout,
}

/// A namespace with weir's CRD, ConfigMap `ds-config`, DaemonSet `podinfo-ds` (rolled out on
/// the 3 nodes) and rollout `podinfo-ds` (in the cluster too, so that the owner references weir
/// writes name a real object).
async fn set_up() -> Setup {
    let server = KubeServer::start().await;
    server
        .create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}))
        .unwrap();
    server
        .create(serde_json::to_value(weir_kube::crd::rollout_crd().unwrap()).unwrap())
        .unwrap();
    server
        .create(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "ds-config", "namespace": NAMESPACE}, "data": {"color": "blue"}}))
        .unwrap();
    server.create(daemon_set()).unwrap();
    roll_out(&server, "podinfo-ds");
    let created = server
        .create(json!({
            "apiVersion": "weir.dev/v1alpha1",
            "kind": "Rollout",
            "metadata": {"name": "podinfo-ds", "namespace": NAMESPACE},
            "spec": rollout_spec(),
        }))
        .unwrap();
    let config = kube::Config::new(server.url().parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    Setup {
        server,
        targets: KubernetesTargets::new(client),
        key: RolloutKey::new(NAMESPACE, "podinfo-ds"),
        rollout: load(&created),
    }
}

impl Setup {
    fn get(&self, api_version: &str, kind: &str, name: &str) -> Option<Value> {
        self.server.get(api_version, kind, NAMESPACE, name)
    }

    fn daemon_set(&self, name: &str) -> Value {
        self.get("apps/v1", "DaemonSet", name).unwrap()
    }

    fn node_selector(&self, name: &str) -> Value {
        self.daemon_set(name)["spec"]["template"]["spec"]["nodeSelector"].clone()
    }

    fn scaled_to_zero(&self) -> bool {
        self.node_selector("podinfo-ds")
            .get(SCALE_TO_ZERO)
            .is_some()
    }

    fn image(&self, name: &str) -> Value {
        self.daemon_set(name)["spec"]["template"]["spec"]["containers"][0]["image"].clone()
    }

    async fn observe(&self) -> weir_engine::TargetObservation {
        self.targets
            .observe(&self.key, &self.rollout, &RolloutStatus::default())
            .await
            .unwrap()
    }

    async fn apply(&self, effect: Effect) -> Result<(), weir_engine::ProviderError> {
        self.targets
            .apply(&self.key, &self.rollout, &RolloutStatus::default(), &effect)
            .await
    }

    async fn reconcile(&self, phase: Phase) -> Result<(), weir_engine::ProviderError> {
        let status = RolloutStatus {
            phase,
            ..RolloutStatus::default()
        };
        self.targets
            .reconcile(&self.key, &self.rollout, &status)
            .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_set_is_set_up_run_blue_green_promoted_and_reverted_flaggers_way() {
    let setup = set_up().await;
    assert_eq!(setup.targets.validate(&setup.rollout), vec![]);
    let target_before = setup.daemon_set("podinfo-ds");

    // Set-up: the primary (not available yet), its config copy, the -primary and -canary
    // Services; no apex Service, the target untouched.
    setup.reconcile(Phase::Initializing).await.unwrap();
    let primary = setup.daemon_set("podinfo-ds-primary");
    assert_eq!(
        primary["spec"]["selector"],
        json!({"matchLabels": {"app": "podinfo-ds-primary"}})
    );
    assert_eq!(
        primary["spec"]["template"]["metadata"]["labels"],
        json!({"app": "podinfo-ds-primary"})
    );
    assert_eq!(
        primary["metadata"]["labels"],
        json!({"app": "podinfo-ds-primary"})
    );
    assert_eq!(primary["metadata"]["ownerReferences"][0]["kind"], "Rollout");
    assert_eq!(
        primary["metadata"]["ownerReferences"][0]["name"],
        "podinfo-ds"
    );
    assert_eq!(
        primary["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"],
        "ds-config-primary"
    );
    assert_eq!(
        primary["spec"]["template"]["spec"]["nodeSelector"],
        json!({"kubernetes.io/os": "linux"})
    );
    assert_eq!(
        setup.get("v1", "ConfigMap", "ds-config-primary").unwrap()["data"],
        json!({"color": "blue"})
    );
    let primary_service = setup.get("v1", "Service", "podinfo-ds-primary").unwrap();
    assert_eq!(
        primary_service["spec"]["selector"],
        json!({"app": "podinfo-ds-primary"})
    );
    let ports: Vec<(Value, Value)> = primary_service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|port| (port["port"].clone(), port["targetPort"].clone()))
        .collect();
    assert_eq!(
        ports,
        vec![(json!(80), json!(9898)), (json!(9999), json!(9999))],
        "port 80 to 9898, and the discovered grpc port"
    );
    assert_eq!(
        setup.get("v1", "Service", "podinfo-ds-canary").unwrap()["spec"]["selector"],
        json!({"app": "podinfo-ds"})
    );
    assert!(
        setup.get("v1", "Service", "podinfo-ds").is_none(),
        "no apex Service before the primary is available"
    );
    assert_eq!(
        setup.daemon_set("podinfo-ds")["spec"],
        target_before["spec"]
    );
    let observed = setup.observe().await;
    assert!(!observed.primary_ready);
    assert!(observed.canary_ready);
    let initial = observed.canary_revision.clone().unwrap();
    assert_eq!(observed.primary_revision.as_deref(), Some(initial.as_str()));
    assert_eq!(
        primary["metadata"]["annotations"][REVISION_ANNOTATION],
        json!(initial)
    );

    // Set-up done while the primary is not available yet: the apex Service is the rollout's,
    // but the target stays up until the primary is ready.
    let waiting = setup.reconcile(Phase::Initialized).await.unwrap_err();
    assert!(!waiting.is_permanent(), "{waiting}");
    assert!(
        waiting.message.contains("podinfo-ds-primary is ready"),
        "{waiting}"
    );
    assert!(!setup.scaled_to_zero());
    roll_out(&setup.server, "podinfo-ds-primary");
    assert!(setup.observe().await.primary_ready);
    setup.reconcile(Phase::Initialized).await.unwrap();
    let apex = setup.get("v1", "Service", "podinfo-ds").unwrap();
    assert_eq!(
        apex["spec"]["selector"],
        json!({"app": "podinfo-ds-primary"})
    );
    assert_eq!(apex["metadata"]["ownerReferences"][0]["kind"], "Rollout");
    // The target waits at zero: Flagger's node selector beside the user's, no new revision.
    assert_eq!(
        setup.node_selector("podinfo-ds"),
        json!({"kubernetes.io/os": "linux", "flagger.app/scale-to-zero": "true"})
    );
    roll_out(&setup.server, "podinfo-ds");
    assert_eq!(
        setup.daemon_set("podinfo-ds")["status"]["desiredNumberScheduled"],
        0
    );
    let observed = setup.observe().await;
    assert_eq!(observed.canary_revision.as_deref(), Some(initial.as_str()));
    assert!(
        !observed.canary_ready,
        "a DaemonSet on no node serves nothing"
    );
    // Reconciling again changes nothing.
    let version = setup.daemon_set("podinfo-ds")["metadata"]["resourceVersion"].clone();
    setup.reconcile(Phase::Succeeded).await.unwrap();
    assert_eq!(
        setup.daemon_set("podinfo-ds")["metadata"]["resourceVersion"],
        version
    );

    // A new revision: a new image and new config data.
    setup
        .server
        .merge_patch(
            "apps/v1",
            "DaemonSet",
            NAMESPACE,
            "podinfo-ds",
            &json!({"spec": {"template": {"spec": {"containers": [{"name": "podinfod", "image": "podinfo:6.0.1",
                "ports": [{"name": "http", "containerPort": 9898}, {"name": "grpc", "containerPort": 9999}]}]}}}}),
            false,
        )
        .unwrap();
    setup
        .server
        .merge_patch(
            "v1",
            "ConfigMap",
            NAMESPACE,
            "ds-config",
            &json!({"data": {"color": "red"}}),
            false,
        )
        .unwrap();
    let observed = setup.observe().await;
    let next = observed.canary_revision.clone().unwrap();
    assert_ne!(next, initial);
    assert_eq!(observed.primary_revision.as_deref(), Some(initial.as_str()));
    assert!(setup.scaled_to_zero(), "still at zero until a run asks");

    // The run scales the target up: only Flagger's entry goes.
    setup.apply(Effect::ScaleCanary(Scale::Up)).await.unwrap();
    assert_eq!(
        setup.node_selector("podinfo-ds"),
        json!({"kubernetes.io/os": "linux"})
    );
    assert!(!setup.observe().await.canary_ready);
    roll_out(&setup.server, "podinfo-ds");
    let observed = setup.observe().await;
    assert!(observed.canary_ready);
    assert_eq!(observed.canary_revision.as_deref(), Some(next.as_str()));

    // Promotion: the primary takes the template and the configs as they are now.
    setup
        .apply(Effect::Promote {
            revision: next.clone(),
        })
        .await
        .unwrap();
    assert_eq!(setup.image("podinfo-ds-primary"), "podinfo:6.0.1");
    assert_eq!(
        setup.get("v1", "ConfigMap", "ds-config-primary").unwrap()["data"],
        json!({"color": "red"})
    );
    let observed = setup.observe().await;
    assert_eq!(observed.primary_revision.as_deref(), Some(next.as_str()));
    assert!(
        !observed.primary_ready,
        "the primary's rolling update is not observed yet"
    );
    // The target stays up until the promoted primary is available.
    let waiting = setup
        .apply(Effect::ScaleCanary(Scale::Down))
        .await
        .unwrap_err();
    assert!(!waiting.is_permanent(), "{waiting}");
    assert!(!setup.scaled_to_zero());
    roll_out(&setup.server, "podinfo-ds-primary");
    setup.apply(Effect::ScaleCanary(Scale::Down)).await.unwrap();
    assert!(setup.scaled_to_zero());
    assert_eq!(
        setup.node_selector("podinfo-ds-primary"),
        json!({"kubernetes.io/os": "linux"}),
        "the primary never gets the entry"
    );

    // Revert: the target back on its nodes first, then the apex Service on it, then nothing of
    // weir's left.
    roll_out(&setup.server, "podinfo-ds");
    let waiting = setup
        .targets
        .revert(&setup.key, &setup.rollout)
        .await
        .unwrap_err();
    assert!(!waiting.is_permanent(), "{waiting}");
    assert!(!setup.scaled_to_zero());
    assert_eq!(
        setup.get("v1", "Service", "podinfo-ds").unwrap()["spec"]["selector"],
        json!({"app": "podinfo-ds-primary"}),
        "the apex stays on the primary until the target is available"
    );
    assert!(
        setup
            .get("apps/v1", "DaemonSet", "podinfo-ds-primary")
            .is_some()
    );
    roll_out(&setup.server, "podinfo-ds");
    setup
        .targets
        .revert(&setup.key, &setup.rollout)
        .await
        .unwrap();
    let apex = setup.get("v1", "Service", "podinfo-ds").unwrap();
    assert_eq!(apex["spec"]["selector"], json!({"app": "podinfo-ds"}));
    assert!(apex["metadata"]["ownerReferences"].is_null(), "{apex:#}");
    for (api_version, kind, name) in [
        ("apps/v1", "DaemonSet", "podinfo-ds-primary"),
        ("v1", "Service", "podinfo-ds-primary"),
        ("v1", "Service", "podinfo-ds-canary"),
        ("v1", "ConfigMap", "ds-config-primary"),
    ] {
        assert!(
            setup.get(api_version, kind, name).is_none(),
            "{kind} {name} after the revert"
        );
    }
    assert_eq!(
        setup.node_selector("podinfo-ds"),
        json!({"kubernetes.io/os": "linux"})
    );
    assert_eq!(setup.image("podinfo-ds"), "podinfo:6.0.1");
    // Again: nothing left to do.
    setup
        .targets
        .revert(&setup.key, &setup.rollout)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_set_that_replaces_pods_only_on_delete_is_refused_at_set_up() {
    let setup = set_up().await;
    setup
        .server
        .merge_patch(
            "apps/v1",
            "DaemonSet",
            NAMESPACE,
            "podinfo-ds",
            &json!({"spec": {"updateStrategy": {"type": "OnDelete"}}}),
            false,
        )
        .unwrap();
    let refused = setup.reconcile(Phase::Initializing).await.unwrap_err();
    assert!(refused.is_permanent(), "{refused}");
    assert!(
        refused
            .message
            .contains("spec.updateStrategy.type is OnDelete")
            && refused.message.contains("RollingUpdate"),
        "{refused}"
    );
    assert!(
        setup
            .get("apps/v1", "DaemonSet", "podinfo-ds-primary")
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_blue_green_validates_for_a_daemon_set() {
    let setup = set_up().await;
    let with = |change: &dyn Fn(&mut Value)| {
        let mut spec = rollout_spec();
        change(&mut spec);
        load(&json!({
            "apiVersion": "weir.dev/v1alpha1",
            "kind": "Rollout",
            "metadata": {"name": "podinfo-ds", "uid": "u"},
            "spec": spec,
        }))
    };
    let refused = |rollout: &Rollout| -> Vec<(String, String)> {
        setup
            .targets
            .validate(rollout)
            .into_iter()
            .map(|error| (error.path, error.message))
            .collect()
    };

    for (plan, field) in [
        (json!({"canary": {"stepWeight": 20}}), "spec.plan.canary"),
        (
            json!({"canary": {"steps": [{"weight": 50}]}}),
            "spec.plan.canary",
        ),
        (
            json!({"abTest": {"iterations": 2, "match": [{"headers": {"x-canary": {"exact": "1"}}}]}}),
            "spec.plan.abTest",
        ),
    ] {
        for provider in ["kubernetes", "istio"] {
            let rollout = with(&|spec| {
                spec["plan"] = plan.clone();
                spec["target"]["provider"] = json!(provider);
            });
            let errors = refused(&rollout);
            let error = errors
                .iter()
                .find(|(path, _)| path == field)
                .unwrap_or_else(|| panic!("{plan} with {provider}: {errors:?}"));
            assert!(
                error.1.contains("spec.target.targetRef.kind is DaemonSet")
                    && error.1.contains("blue/green only")
                    && error.1.contains("spec.plan.blueGreen"),
                "{error:?}"
            );
        }
    }

    let autoscaled = with(&|spec| {
        spec["target"]["autoscalerRef"] = json!({"apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler", "name": "podinfo-ds"});
    });
    let errors = refused(&autoscaled);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, "spec.target.autoscalerRef");
    assert!(errors[0].1.contains("DaemonSet"), "{errors:?}");

    let stateful = with(&|spec| {
        spec["target"]["targetRef"]["kind"] = json!("StatefulSet");
    });
    let errors = refused(&stateful);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, "spec.target.targetRef.kind");
    assert!(
        errors[0]
            .1
            .contains("StatefulSet is not allowed: Deployment or DaemonSet"),
        "{errors:?}"
    );

    // Blue/green with any provider is fine.
    for provider in ["kubernetes", "istio", "gatewayapi:v1"] {
        let rollout = with(&|spec| spec["target"]["provider"] = json!(provider));
        assert_eq!(refused(&rollout), vec![], "{provider}");
    }
}
