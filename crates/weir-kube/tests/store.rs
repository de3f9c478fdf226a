//! `KubeStore` against the in-memory API server: what it writes is all a new process needs, a
//! writer that lost a race or its lease changes nothing, and a user's edit between two steps is
//! not mistaken for another writer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use jiff::Timestamp;
use kube::api::{Api, DynamicObject};
use serde_json::{Value, json};
use weir_core::model::{Event, Phase, RolloutStatus};
use weir_kube::store::{KubeStore, read_rollout, rollouts_resource};
use weir_store::{ApplyOutcome, RolloutKey, Store, StoreError};
use weir_testkit::kube_cluster::{NAMESPACE, rollout_yaml};
use weir_testkit::kube_server::KubeServer;

struct Set {
    server: KubeServer,
    client: kube::Client,
    key: RolloutKey,
}

impl Set {
    async fn up() -> Set {
        let server = KubeServer::start().await;
        server
            .create(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
            )
            .unwrap();
        for crd in weir_kube::crd::crds().unwrap() {
            server.create(serde_json::to_value(crd).unwrap()).unwrap();
        }
        let rollout: Value =
            serde_saphyr::from_str(&rollout_yaml("{canary: {stepWeights: [10, 20]}}")).unwrap();
        server.create(rollout).unwrap();
        let client =
            kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
        Set {
            server,
            client,
            key: RolloutKey::new(NAMESPACE, "podinfo"),
        }
    }

    fn store(&self) -> KubeStore {
        KubeStore::new(self.client.clone(), vec![NAMESPACE.into()], None)
    }

    async fn rollout(&self) -> weir_core::model::Rollout {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), NAMESPACE, &rollouts_resource());
        read_rollout(&api.get("podinfo").await.unwrap()).unwrap()
    }

    fn stored(&self) -> Value {
        self.server
            .get("weir.dev/v1alpha1", "Rollout", NAMESPACE, "podinfo")
            .unwrap()["status"]
            .clone()
    }
}

fn progressing(weight: f64) -> RolloutStatus {
    serde_json::from_value(json!({"phase": "Progressing", "run": 1, "canaryWeight": weight}))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_status_holds_the_engine_state_and_only_its_writer_may_change_it() {
    let set = Set::up().await;
    let now = Timestamp::now();
    let leader = set.store();
    let (created, outcome) = leader.apply(&set.rollout().await, None, now).await.unwrap();
    assert_eq!(outcome, ApplyOutcome::Created);
    assert_eq!(created.version, 1);

    // Another replica read the same state before the leader's next step.
    let stale = set.store();
    assert_eq!(stale.load_all().await.unwrap().len(), 1);

    let status = progressing(10.0);
    let event = Event::of_target(&status, now, "advanced to 10%".into());
    let committed = leader
        .commit(&set.key, 1, &status, std::slice::from_ref(&event), &[], now)
        .await
        .unwrap();
    assert_eq!(committed.version, 2);
    assert_eq!(set.stored()["store"]["version"], 2);
    assert_eq!(set.stored()["canaryWeight"], json!(10));

    // The stale replica's step is refused: nothing it computed reaches the cluster.
    let refused = stale
        .commit(&set.key, 1, &progressing(20.0), &[], &[], now)
        .await
        .unwrap_err();
    assert!(
        matches!(
            refused,
            StoreError::Conflict {
                expected: 1,
                actual: 2,
                ..
            }
        ),
        "{refused}"
    );
    assert_eq!(set.stored()["canaryWeight"], json!(10));

    // Nor does a replica whose fence is down write anything.
    let fenced = KubeStore::new(
        set.client.clone(),
        vec![NAMESPACE.into()],
        Some(Arc::new(|| false)),
    );
    fenced.load_all().await.unwrap();
    let error = fenced
        .commit(&set.key, 2, &progressing(30.0), &[], &[], now)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("leader lease"), "{error}");
    assert_eq!(set.stored()["store"]["version"], 2);

    // A user's edit changes the object under the leader: its next write re-reads and goes on.
    set.server
        .merge_patch(
            "weir.dev/v1alpha1",
            "Rollout",
            NAMESPACE,
            "podinfo",
            &json!({"metadata": {"labels": {"team": "shop"}}}),
            false,
        )
        .unwrap();
    let status = progressing(20.0);
    leader
        .commit(
            &set.key,
            2,
            &status,
            &[Event::of_target(&status, now, "advanced to 20%".into())],
            &[],
            now,
        )
        .await
        .unwrap();

    // A new process reads everything back from the cluster.
    let restarted = set.store();
    let loaded = restarted.load_all().await.unwrap();
    assert_eq!(loaded[0].version, 3);
    assert_eq!(loaded[0].status.phase, Phase::Progressing);
    assert_eq!(
        loaded[0].status.canary_weight,
        progressing(20.0).canary_weight
    );
    let history = restarted.events(&set.key, 0, 0).await.unwrap();
    let messages: Vec<&str> = history.iter().map(|e| e.event.message.as_str()).collect();
    assert_eq!(messages, ["advanced to 10%", "advanced to 20%"]);
    assert_eq!(history[1].seq, 2);
}
