//! The `kubernetes` target with `provider: knative`, driven directly (no engine, no operator)
//! against the testkit's in-memory API server with Knative's CRDs and its Knative Serving
//! stand-in: set-up waits for the revision to be ready and changes nothing until then, keeps a
//! ready revision the annotation already names (an untested latest revision is not made the
//! primary), observe reports the primary ready only while the annotation names the revision weir
//! routes to, a promotion to a revision that is not ready is refused (transient) with nothing
//! written, scaling does nothing, and reverting gives the Service back to Knative's default.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use serde_json::{Value, json};
use weir_core::document::{self, Document};
use weir_core::machine::{Effect, Scale};
use weir_core::model::{Phase, Rollout, RolloutStatus};
use weir_engine::TargetProvider;
use weir_kube::routes::PRIMARY_REVISION_ANNOTATION;
use weir_kube::target::KubernetesTargets;
use weir_store::RolloutKey;
use weir_testkit::knative_controller::{self, KnativeController, Readiness, SERVING};
use weir_testkit::kube_cluster::NAMESPACE;
use weir_testkit::kube_server::KubeServer;
use weir_testkit::wait::wait_for;

fn rollout() -> Rollout {
    let loaded = document::load_value(&json!({
        "apiVersion": "weir.dev/v1alpha1",
        "kind": "Rollout",
        "metadata": {"name": "podinfo", "namespace": NAMESPACE},
        "spec": {
            "target": {
                "kind": "kubernetes",
                "provider": "knative",
                "targetRef": {"apiVersion": SERVING, "kind": "Service", "name": "podinfo"},
            },
            "plan": {"canary": {"stepWeight": 10, "maxWeight": 50}},
            "analysis": {"interval": "1s", "threshold": 2},
            "revertOnDeletion": true,
        },
    }))
    .unwrap();
    let Document::Rollout(rollout) = loaded.document else {
        panic!("a Rollout loads as a rollout");
    };
    *rollout
}

struct Setup {
    server: Arc<KubeServer>,
    controller: KnativeController,
    targets: KubernetesTargets,
    key: RolloutKey,
    rollout: Rollout,
}

/// Knative's CRDs and Knative Service `podinfo`, whose revisions become ready only when the
/// test says so (the controller's readiness starts at never).
async fn set_up() -> Setup {
    let server = Arc::new(KubeServer::start().await);
    server
        .create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}))
        .unwrap();
    println!("with {}", knative_controller::install_crds(&server));
    let controller = KnativeController::spawn(server.clone(), NAMESPACE, Readiness::Never);
    server
        .create(knative_controller::service(
            NAMESPACE,
            "podinfo",
            "podinfo:6.0.0",
        ))
        .unwrap();
    let config = kube::Config::new(server.url().parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    Setup {
        server,
        controller,
        targets: KubernetesTargets::new(client),
        key: RolloutKey::new(NAMESPACE, "podinfo"),
        rollout: rollout(),
    }
}

fn status(phase: Phase, primary: Option<&str>, canary: Option<&str>) -> RolloutStatus {
    RolloutStatus {
        phase,
        primary_revision: primary.map(str::to_string),
        canary_revision: canary.map(str::to_string),
        ..RolloutStatus::default()
    }
}

fn all_on(revision: &str) -> Value {
    json!([{"latestRevision": true, "percent": 0}, {"revisionName": revision, "percent": 100}])
}

impl Setup {
    fn service(&self) -> Value {
        self.server
            .get(SERVING, "Service", NAMESPACE, "podinfo")
            .unwrap()
    }

    fn annotated(&self) -> Value {
        self.service()["metadata"]["annotations"][PRIMARY_REVISION_ANNOTATION].clone()
    }

    /// Waits until the Service's latest created and latest ready revisions are these.
    async fn wait_revisions(&self, created: &str, ready: Option<&str>) {
        wait_for(
            &format!("latest created {created}, ready {ready:?}"),
            || async {
                let status = &self.service()["status"];
                (status["latestCreatedRevisionName"] == created
                    && status["latestReadyRevisionName"].as_str() == ready)
                    .then_some(())
            },
        )
        .await;
    }

    async fn apply(
        &self,
        status: &RolloutStatus,
        effect: Effect,
    ) -> Result<(), weir_engine::ProviderError> {
        self.targets
            .apply(&self.key, &self.rollout, status, &effect)
            .await
    }

    fn set_image(&self, image: &str) {
        self.server
            .merge_patch(
                SERVING,
                "Service",
                NAMESPACE,
                "podinfo",
                &json!({"spec": {"template": {"spec": {"containers": [{"image": image,
                    "ports": [{"containerPort": 9898, "protocol": "TCP"}]}]}}}}),
                false,
            )
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_knative_service_is_set_up_promoted_and_given_back_on_ready_revisions_only() {
    let setup = set_up().await;
    assert_eq!(setup.targets.validate(&setup.rollout), vec![]);
    let initializing = status(Phase::Initializing, None, None);
    setup.wait_revisions("podinfo-00001", None).await;

    // Set-up waits for the revision and changes nothing meanwhile.
    let before = setup.service();
    let waiting = setup
        .apply(&initializing, Effect::Prepare)
        .await
        .unwrap_err();
    assert!(!waiting.is_permanent(), "{waiting}");
    assert!(
        waiting.message.contains("podinfo-00001") && waiting.message.contains("ready"),
        "{waiting}"
    );
    assert_eq!(
        setup.service()["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    let observed = setup
        .targets
        .observe(&setup.key, &setup.rollout, &initializing)
        .await
        .unwrap();
    assert_eq!(observed.canary_revision.as_deref(), Some("podinfo-00001"));
    assert_eq!(observed.primary_revision, None);
    assert!(!observed.primary_ready && !observed.canary_ready);

    // Ready: the annotation and all traffic on it, and only then the primary ready.
    setup.controller.set_readiness(Readiness::Instant);
    setup
        .wait_revisions("podinfo-00001", Some("podinfo-00001"))
        .await;
    let observed = setup
        .targets
        .observe(&setup.key, &setup.rollout, &initializing)
        .await
        .unwrap();
    assert!(!observed.primary_ready, "not set up before the write");
    setup
        .targets
        .reconcile(&setup.key, &setup.rollout, &initializing)
        .await
        .unwrap();
    assert_eq!(setup.annotated(), "podinfo-00001");
    assert_eq!(setup.service()["spec"]["traffic"], all_on("podinfo-00001"));
    let observed = setup
        .targets
        .observe(&setup.key, &setup.rollout, &initializing)
        .await
        .unwrap();
    assert_eq!(observed.primary_revision.as_deref(), Some("podinfo-00001"));
    assert!(observed.primary_ready && observed.canary_ready);

    // A new revision that is not ready yet: the canary is not ready, and nothing scales.
    setup.controller.set_readiness(Readiness::Never);
    setup.set_image("podinfo:6.0.1");
    setup
        .wait_revisions("podinfo-00002", Some("podinfo-00001"))
        .await;
    let run = status(
        Phase::Progressing,
        Some("podinfo-00001"),
        Some("podinfo-00002"),
    );
    let observed = setup
        .targets
        .observe(&setup.key, &setup.rollout, &run)
        .await
        .unwrap();
    assert_eq!(observed.canary_revision.as_deref(), Some("podinfo-00002"));
    assert!(observed.primary_ready && !observed.canary_ready);
    let before = setup.service();
    setup
        .apply(&run, Effect::ScaleCanary(Scale::Up))
        .await
        .unwrap();
    setup
        .apply(&run, Effect::ScaleCanary(Scale::Down))
        .await
        .unwrap();
    assert_eq!(
        setup.service()["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );

    // A promotion to it is refused while it is not ready: nothing written.
    let promoting = status(
        Phase::Promoting,
        Some("podinfo-00002"),
        Some("podinfo-00002"),
    );
    let refused = setup
        .apply(
            &promoting,
            Effect::Promote {
                revision: "podinfo-00002".into(),
            },
        )
        .await
        .unwrap_err();
    assert!(!refused.is_permanent(), "{refused}");
    assert!(
        refused
            .message
            .contains("podinfo-00002 of the Knative Service shop/podinfo is not ready"),
        "{refused}"
    );
    assert_eq!(setup.annotated(), "podinfo-00001");
    // Meanwhile the promoted primary does not pass for ready: the annotation names the former.
    let observed = setup
        .targets
        .observe(&setup.key, &setup.rollout, &promoting)
        .await
        .unwrap();
    assert!(!observed.primary_ready);

    // Ready: the promotion is written, all traffic on it at once.
    setup.controller.set_readiness(Readiness::Instant);
    setup
        .wait_revisions("podinfo-00002", Some("podinfo-00002"))
        .await;
    setup
        .apply(
            &promoting,
            Effect::Promote {
                revision: "podinfo-00002".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(setup.annotated(), "podinfo-00002");
    assert_eq!(setup.service()["spec"]["traffic"], all_on("podinfo-00002"));
    let observed = setup
        .targets
        .observe(&setup.key, &setup.rollout, &promoting)
        .await
        .unwrap();
    assert!(observed.primary_ready);
    assert_eq!(
        setup.service()["spec"]["template"]["spec"]["containers"][0]["image"],
        "podinfo:6.0.1"
    );

    // Reverting: Knative's default again, no annotation; a Service gone is fine.
    setup.apply(&promoting, Effect::Finalize).await.unwrap();
    let service = setup.service();
    assert_eq!(
        service["spec"]["traffic"],
        json!([{"latestRevision": true, "percent": 100}])
    );
    assert_eq!(
        service["metadata"]["annotations"].get(PRIMARY_REVISION_ANNOTATION),
        None,
        "{service:#}"
    );
    setup
        .server
        .delete(SERVING, "Service", NAMESPACE, "podinfo")
        .unwrap();
    setup
        .targets
        .revert(&setup.key, &setup.rollout)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_up_keeps_a_ready_revision_the_annotation_names() {
    let setup = set_up().await;
    setup.controller.set_readiness(Readiness::Instant);
    setup
        .wait_revisions("podinfo-00001", Some("podinfo-00001"))
        .await;
    // As Flagger left it: podinfo-00001 the primary, a newer revision not promoted.
    setup
        .server
        .merge_patch(
            SERVING,
            "Service",
            NAMESPACE,
            "podinfo",
            &json!({"metadata": {"annotations": {PRIMARY_REVISION_ANNOTATION: "podinfo-00001"}}}),
            false,
        )
        .unwrap();
    setup.set_image("podinfo:6.0.1");
    setup
        .wait_revisions("podinfo-00002", Some("podinfo-00002"))
        .await;
    let initializing = status(Phase::Initializing, None, None);
    setup.apply(&initializing, Effect::Prepare).await.unwrap();
    assert_eq!(setup.annotated(), "podinfo-00001");
    assert_eq!(setup.service()["spec"]["traffic"], all_on("podinfo-00001"));
    let observed = setup
        .targets
        .observe(&setup.key, &setup.rollout, &initializing)
        .await
        .unwrap();
    assert_eq!(observed.primary_revision.as_deref(), Some("podinfo-00001"));
    assert_eq!(observed.canary_revision.as_deref(), Some("podinfo-00002"));
    assert!(
        observed.primary_ready,
        "the older revision's Revision is Ready"
    );
}
