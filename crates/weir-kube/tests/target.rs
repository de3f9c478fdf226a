//! The `kubernetes` target driven directly (no engine, no operator) against the testkit's
//! in-memory API server: tracked ConfigMaps and Secrets make the revision and are copied for
//! the primary at initialisation and promotion only, `revert` leaves the application
//! serving from its own Deployment with nothing of weir's left, and session-affinity cookies keep
//! their value for a run (whether applied or reconciled) and are expired after it. Nothing runs pods here: the test
//! plays the Deployment controller with [`roll_out`], at the points where it would have acted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{Value, json};
use weir_core::document::{self, Document};
use weir_core::machine::Effect;
use weir_core::model::{Phase, Rollout, RolloutStatus};
use weir_engine::TargetProvider;
use weir_kube::target::{KubernetesTargets, REVISION_ANNOTATION};
use weir_store::RolloutKey;
use weir_testkit::kube_cluster::{self, CREATED_FOR_PODINFO, NAMESPACE, autoscaler, router_crd};
use weir_testkit::kube_server::KubeServer;

/// podinfo reading ConfigMap `podinfo-config` as a volume and an env var, Secret `db` through
/// envFrom, and an optional ConfigMap `absent` that does not exist.
fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "podinfo", "namespace": NAMESPACE},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "podinfo"}},
            "template": {
                "metadata": {"labels": {"app": "podinfo"}},
                "spec": {
                    "volumes": [{"name": "config", "configMap": {"name": "podinfo-config"}}],
                    "containers": [{
                        "name": "podinfod",
                        "image": "podinfo:6.0.0",
                        "ports": [{"name": "http", "containerPort": 9898}],
                        "envFrom": [{"secretRef": {"name": "db"}}, {"configMapRef": {"name": "absent", "optional": true}}],
                        "env": [{"name": "COLOR", "valueFrom": {"configMapKeyRef": {"name": "podinfo-config", "key": "color"}}}]
                    }]
                }
            }
        }
    })
}

/// Plays the Deployment controller once: `name`'s spec is rolled out and available.
fn roll_out(server: &KubeServer, name: &str) {
    kube_cluster::roll_out(server, NAMESPACE, name);
}

struct Setup {
    server: KubeServer,
    targets: KubernetesTargets,
    key: RolloutKey,
    rollout: Rollout,
}

/// A namespace with the Istio and weir CRDs, ConfigMap `podinfo-config` (color blue), Secret
/// `db`, Deployment `podinfo` with its HorizontalPodAutoscaler, and rollout `podinfo` (in the
/// cluster too, so that the owner references weir writes name a real object).
async fn set_up() -> Setup {
    let server = KubeServer::start().await;
    server
        .create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}))
        .unwrap();
    for (group, kind, plural) in [
        ("networking.istio.io", "VirtualService", "virtualservices"),
        ("networking.istio.io", "DestinationRule", "destinationrules"),
    ] {
        server.create(router_crd(group, kind, plural)).unwrap();
    }
    server
        .create(serde_json::to_value(weir_kube::crd::rollout_crd().unwrap()).unwrap())
        .unwrap();
    server
        .create(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "podinfo-config", "namespace": NAMESPACE, "labels": {"team": "shop"}},
            "data": {"color": "blue"}}))
        .unwrap();
    server
        .create(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "namespace": NAMESPACE},
            "type": "Opaque", "data": {"PASSWORD": "c2VjcmV0"}}))
        .unwrap();
    server.create(deployment()).unwrap();
    roll_out(&server, "podinfo");
    server.create(autoscaler()).unwrap();
    let created = server
        .create(json!({
            "apiVersion": "weir.dev/v1alpha1",
            "kind": "Rollout",
            "metadata": {"name": "podinfo", "namespace": NAMESPACE},
            "spec": {
                "target": {
                    "kind": "kubernetes",
                    "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "podinfo"},
                    "provider": "istio",
                    "autoscalerRef": {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "name": "podinfo"},
                    "service": {"port": 9898}
                },
                "plan": {"canary": {"stepWeights": [10, 50]}},
                "analysis": {"interval": "1s", "threshold": 2},
                "revertOnDeletion": true
            }
        }))
        .unwrap();
    let loaded = document::load_value(&json!({
        "apiVersion": created["apiVersion"],
        "kind": created["kind"],
        "metadata": {"name": "podinfo", "namespace": NAMESPACE, "uid": created["metadata"]["uid"]},
        "spec": created["spec"],
    }))
    .unwrap();
    let Document::Rollout(rollout) = loaded.document else {
        panic!("a Rollout loads as a rollout");
    };
    let config = kube::Config::new(server.url().parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    Setup {
        server,
        targets: KubernetesTargets::new(client),
        key: RolloutKey::new(NAMESPACE, "podinfo"),
        rollout: *rollout,
    }
}

impl Setup {
    /// Initialisation as the operator's reconcile does it: while setting up (phase
    /// Initializing) the primary, its copies and the Services `-primary`/`-canary` only, with
    /// nothing routed to the primary and the target untouched; once the primary is available
    /// and set-up completed (phase Initialized), the apex Service and the routes, and the
    /// target at zero.
    async fn initialise(&self) {
        let setting_up = RolloutStatus::default();
        self.targets
            .reconcile(&self.key, &self.rollout, &setting_up)
            .await
            .unwrap();
        assert!(
            self.get("apps/v1", "Deployment", "podinfo-primary")
                .is_some()
        );
        assert!(self.get("v1", "Service", "podinfo-primary").is_some());
        assert!(
            self.get("v1", "Service", "podinfo").is_none(),
            "no apex Service before the primary is available"
        );
        assert!(
            self.get("networking.istio.io/v1", "VirtualService", "podinfo")
                .is_none()
        );
        assert_eq!(self.replicas("podinfo"), 2);
        roll_out(&self.server, "podinfo-primary");
        let initialized = RolloutStatus {
            phase: Phase::Initialized,
            ..RolloutStatus::default()
        };
        self.targets
            .reconcile(&self.key, &self.rollout, &initialized)
            .await
            .unwrap();
        assert!(self.get("v1", "Service", "podinfo").is_some());
        assert_eq!(self.replicas("podinfo"), 0);
    }

    /// (the target's revision, the primary's revision)
    async fn revisions(&self) -> (String, String) {
        let observed = self
            .targets
            .observe(&self.key, &self.rollout, &RolloutStatus::default())
            .await
            .unwrap();
        (
            observed.canary_revision.unwrap(),
            observed.primary_revision.unwrap(),
        )
    }

    fn get(&self, api_version: &str, kind: &str, name: &str) -> Option<Value> {
        self.server.get(api_version, kind, NAMESPACE, name)
    }

    fn replicas(&self, name: &str) -> i64 {
        self.get("apps/v1", "Deployment", name).unwrap()["spec"]["replicas"]
            .as_i64()
            .unwrap()
    }

    fn color_of_primary_copy(&self) -> Value {
        self.get("v1", "ConfigMap", "podinfo-config-primary")
            .unwrap()["data"]["color"]
            .clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_map_change_is_a_new_revision_that_reaches_the_primary_only_at_promotion() {
    let setup = set_up().await;
    setup.initialise().await;

    // Initialisation copied the tracked configs and pointed the primary at the copies.
    let copy = setup
        .get("v1", "ConfigMap", "podinfo-config-primary")
        .unwrap();
    assert_eq!(copy["data"], json!({"color": "blue"}));
    assert_eq!(copy["metadata"]["labels"], json!({"team": "shop"}));
    assert_eq!(copy["metadata"]["ownerReferences"][0]["kind"], "Rollout");
    assert_eq!(copy["metadata"]["ownerReferences"][0]["name"], "podinfo");
    let secret = setup.get("v1", "Secret", "db-primary").unwrap();
    assert_eq!(secret["data"], json!({"PASSWORD": "c2VjcmV0"}));
    assert_eq!(secret["type"], "Opaque");
    assert!(setup.get("v1", "ConfigMap", "absent-primary").is_none());
    let primary = setup
        .get("apps/v1", "Deployment", "podinfo-primary")
        .unwrap();
    let pod = &primary["spec"]["template"]["spec"];
    assert_eq!(
        pod["volumes"][0]["configMap"]["name"],
        "podinfo-config-primary"
    );
    let container = &pod["containers"][0];
    assert_eq!(container["envFrom"][0]["secretRef"]["name"], "db-primary");
    assert_eq!(container["envFrom"][1]["configMapRef"]["name"], "absent");
    assert_eq!(
        container["env"][0]["valueFrom"]["configMapKeyRef"]["name"],
        "podinfo-config-primary"
    );
    // The target still reads the originals.
    let target = setup.get("apps/v1", "Deployment", "podinfo").unwrap();
    assert_eq!(
        target["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"],
        "podinfo-config"
    );
    let (initial, primary_revision) = setup.revisions().await;
    assert_eq!(initial, primary_revision);
    assert_eq!(
        primary["metadata"]["annotations"][REVISION_ANNOTATION],
        json!(initial)
    );

    // A replicas-only change is no new revision.
    setup
        .server
        .merge_patch(
            "apps/v1",
            "Deployment",
            NAMESPACE,
            "podinfo",
            &json!({"spec": {"replicas": 3}}),
            false,
        )
        .unwrap();
    assert_eq!(setup.revisions().await, (initial.clone(), initial.clone()));

    // A change of the ConfigMap alone is one; the primary's copy keeps the old data meanwhile.
    setup
        .server
        .merge_patch(
            "v1",
            "ConfigMap",
            NAMESPACE,
            "podinfo-config",
            &json!({"data": {"color": "red"}}),
            false,
        )
        .unwrap();
    let (changed, primary_revision) = setup.revisions().await;
    assert_ne!(changed, initial);
    assert_eq!(primary_revision, initial);
    assert_eq!(setup.color_of_primary_copy(), "blue");
    // Reconciling (an operator restart) does not copy it either.
    roll_out(&setup.server, "podinfo-primary");
    setup
        .targets
        .reconcile(&setup.key, &setup.rollout, &RolloutStatus::default())
        .await
        .unwrap();
    assert_eq!(setup.color_of_primary_copy(), "blue");

    // So does a Secret's.
    setup
        .server
        .merge_patch(
            "v1",
            "Secret",
            NAMESPACE,
            "db",
            &json!({"data": {"PASSWORD": "bmV3"}}),
            false,
        )
        .unwrap();
    let (rotated, _) = setup.revisions().await;
    assert_ne!(rotated, changed);

    // Promotion copies the configs as they are and names the revision the target had.
    setup
        .targets
        .apply(
            &setup.key,
            &setup.rollout,
            &RolloutStatus::default(),
            &Effect::Promote {
                revision: rotated.clone(),
            },
        )
        .await
        .unwrap();
    assert_eq!(setup.color_of_primary_copy(), "red");
    assert_eq!(
        setup.get("v1", "Secret", "db-primary").unwrap()["data"],
        json!({"PASSWORD": "bmV3"})
    );
    assert_eq!(setup.revisions().await, (rotated.clone(), rotated));
    // The primary kept its own scale.
    assert_eq!(setup.replicas("podinfo-primary"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_tracking_is_off_with_the_annotation() {
    let setup = set_up().await;
    setup
        .server
        .merge_patch(
            "apps/v1",
            "Deployment",
            NAMESPACE,
            "podinfo",
            &json!({"metadata": {"annotations": {"flagger.app/config-tracking": "disabled"}}}),
            false,
        )
        .unwrap();
    setup.initialise().await;
    assert!(
        setup
            .get("v1", "ConfigMap", "podinfo-config-primary")
            .is_none()
    );
    let primary = setup
        .get("apps/v1", "Deployment", "podinfo-primary")
        .unwrap();
    assert_eq!(
        primary["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"],
        "podinfo-config"
    );
    let (initial, _) = setup.revisions().await;
    setup
        .server
        .merge_patch(
            "v1",
            "ConfigMap",
            NAMESPACE,
            "podinfo-config",
            &json!({"data": {"color": "red"}}),
            false,
        )
        .unwrap();
    assert_eq!(setup.revisions().await, (initial.clone(), initial));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revert_leaves_the_target_serving_and_nothing_of_weirs() {
    let setup = set_up().await;
    setup.initialise().await;
    // A ConfigMap of the user's named as the copy of one the target reads (the optional,
    // absent one) would be: the rollout does not own it, so it stays.
    setup
        .server
        .create(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "absent-primary", "namespace": NAMESPACE}, "data": {"mine": "yes"}}))
        .unwrap();
    let configs = [
        ("v1", "ConfigMap", "podinfo-config-primary"),
        ("v1", "Secret", "db-primary"),
    ];
    let weirs: Vec<(&str, &str, &str)> = CREATED_FOR_PODINFO.into_iter().chain(configs).collect();
    for (api_version, kind, name) in weirs.iter().copied() {
        assert!(
            setup.get(api_version, kind, name).is_some(),
            "{kind} {name} before the revert"
        );
    }

    // The target comes back first, at the primary's replicas; nothing else changes until it is
    // ready.
    let waiting = setup
        .targets
        .revert(&setup.key, &setup.rollout)
        .await
        .unwrap_err();
    assert!(waiting.to_string().contains("to be ready"), "{waiting}");
    assert_eq!(setup.replicas("podinfo"), 2);
    let apex = setup.get("v1", "Service", "podinfo").unwrap();
    assert_eq!(apex["spec"]["selector"], json!({"app": "podinfo-primary"}));
    assert!(
        setup
            .get("apps/v1", "Deployment", "podinfo-primary")
            .is_some()
    );

    roll_out(&setup.server, "podinfo");
    setup
        .targets
        .revert(&setup.key, &setup.rollout)
        .await
        .unwrap();
    let apex = setup.get("v1", "Service", "podinfo").unwrap();
    assert_eq!(apex["spec"]["selector"], json!({"app": "podinfo"}));
    assert_eq!(apex["spec"]["ports"][0]["port"], 9898);
    assert!(
        apex["metadata"]["ownerReferences"].is_null(),
        "{:#}",
        apex["metadata"]
    );
    for (api_version, kind, name) in weirs.iter().copied() {
        assert!(
            setup.get(api_version, kind, name).is_none(),
            "{kind} {name} after the revert"
        );
    }
    assert_eq!(
        setup.get("v1", "ConfigMap", "absent-primary").unwrap()["data"],
        json!({"mine": "yes"})
    );
    assert_eq!(
        setup.get("v1", "ConfigMap", "podinfo-config").unwrap()["data"],
        json!({"color": "blue"})
    );
    assert_eq!(setup.replicas("podinfo"), 2);

    // Again: nothing left to do.
    setup
        .targets
        .revert(&setup.key, &setup.rollout)
        .await
        .unwrap();

    // Deleting the rollout now collects nothing the application needs.
    setup
        .server
        .delete("weir.dev/v1alpha1", "Rollout", NAMESPACE, "podinfo")
        .unwrap();
    assert!(setup.get("v1", "Service", "podinfo").is_some());
    assert!(setup.get("apps/v1", "Deployment", "podinfo").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revert_leaves_a_running_targets_scale_alone() {
    let setup = set_up().await;
    setup.initialise().await;
    // Mid-run, an autoscaler has the target at 3 while the primary has 2.
    setup
        .server
        .merge_patch(
            "apps/v1",
            "Deployment",
            NAMESPACE,
            "podinfo",
            &json!({"spec": {"replicas": 3}}),
            false,
        )
        .unwrap();
    roll_out(&setup.server, "podinfo");
    setup
        .targets
        .revert(&setup.key, &setup.rollout)
        .await
        .unwrap();
    assert_eq!(setup.replicas("podinfo"), 3);
    let apex = setup.get("v1", "Service", "podinfo").unwrap();
    assert_eq!(apex["spec"]["selector"], json!({"app": "podinfo"}));
    assert!(
        setup
            .get("apps/v1", "Deployment", "podinfo-primary")
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_affinity_cookies_hold_for_a_run_and_expire_after_it() {
    let mut setup = set_up().await;
    setup.rollout.spec.session_affinity = Some(weir_core::model::SessionAffinity {
        cookie_name: "flagger-cookie".into(),
        primary_cookie_name: None,
        max_age: Some(600),
    });
    setup.initialise().await;
    let http = |setup: &Setup| {
        setup
            .get("networking.istio.io/v1", "VirtualService", "podinfo")
            .unwrap()["spec"]["http"]
            .as_array()
            .unwrap()
            .clone()
    };
    assert_eq!(http(&setup).len(), 1, "no cookie route before a run");

    // The first step of run 1, as the engine delivers it (with the status after the step).
    let mut status = RolloutStatus {
        run: 1,
        canary_weight: weir_core::Weight::from_basis_points(1_000),
        ..RolloutStatus::default()
    };
    let route = weir_core::machine::Route::of(&setup.rollout.spec, &status);
    setup
        .targets
        .apply(
            &setup.key,
            &setup.rollout,
            &status,
            &Effect::SetRoute(route),
        )
        .await
        .unwrap();
    let during = http(&setup);
    assert_eq!(during.len(), 2, "{during:?}");
    assert_eq!(
        during[0]["route"][0]["destination"]["host"],
        "podinfo-canary"
    );
    let set_cookie = during[1]["route"][1]["headers"]["response"]["add"]["Set-Cookie"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(set_cookie.starts_with("flagger-cookie="), "{set_cookie}");
    assert!(set_cookie.ends_with("; Max-Age=600"), "{set_cookie}");

    // A reconcile (after an operator restart, say) writes the same cookie.
    setup
        .targets
        .reconcile(&setup.key, &setup.rollout, &status)
        .await
        .unwrap();
    assert_eq!(http(&setup), during);

    // Rolled back: the cookie route goes, the primary's responses expire the cookie.
    status.canary_weight = weir_core::Weight::ZERO;
    let route = weir_core::machine::Route::of(&setup.rollout.spec, &status);
    setup
        .targets
        .apply(
            &setup.key,
            &setup.rollout,
            &status,
            &Effect::SetRoute(route),
        )
        .await
        .unwrap();
    let after = http(&setup);
    assert_eq!(after.len(), 1, "{after:?}");
    let value = set_cookie.split(';').next().unwrap();
    assert_eq!(
        after[0]["route"][0]["headers"]["response"]["add"]["Set-Cookie"],
        json!(format!("{value}; Max-Age=-1"))
    );
    assert_eq!(after[0]["route"][1].get("headers"), None);
}
