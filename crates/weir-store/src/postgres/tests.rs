//! PostgresStore against a real PostgreSQL cluster (weir-testkit's throwaway one): what only a
//! unit test can reach, the instance's lease bookkeeping (fencing, forwarded requests).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use weir_core::document::{Document, load};
use weir_core::model::Phase;
use weir_testkit::postgres::PgCluster;

use super::*;

const ROLLOUT_YAML: &str = r#"
apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata:
  name: checkout
  namespace: shop
spec:
  target:
    kind: kubernetes
    targetRef: {apiVersion: apps/v1, kind: Deployment, name: checkout}
    provider: istio
  plan:
    canary:
      stepWeights: [10, 50]
  analysis:
    interval: 30s
    threshold: 3
"#;

fn rollout(name: &str) -> Rollout {
    let mut results = load(ROLLOUT_YAML.as_bytes());
    let Document::Rollout(rollout) = results.remove(0).unwrap().document else {
        panic!("not a rollout");
    };
    let mut rollout = *rollout;
    rollout.metadata.name = name.to_string();
    rollout
}

fn at(second: i64) -> Timestamp {
    Timestamp::new(1_700_000_000 + second, 123_456_789).unwrap()
}

fn status(steps_taken: u32) -> RolloutStatus {
    RolloutStatus {
        phase: Phase::Progressing,
        steps_taken,
        ..RolloutStatus::default()
    }
}

async fn open(cluster: &PgCluster, database: &str) -> PostgresStore {
    PostgresStore::open(&cluster.database(database), "host-a")
        .await
        .unwrap()
}

#[tokio::test]
async fn a_rollout_applied_reads_back_equal_with_its_lease_row() {
    let cluster = PgCluster::start();
    let store = open(&cluster, "weir").await;
    let (created, outcome) = store
        .apply(&rollout("checkout"), Some(0), at(0))
        .await
        .unwrap();
    assert_eq!(outcome, ApplyOutcome::Created);
    assert_eq!(
        store.get(&created.key).await.unwrap(),
        Some(created.clone())
    );
    let lease = cluster.psql(
        "weir",
        "SELECT coalesce(owner, '-'), epoch, coalesce(host, '-') FROM leases",
    );
    assert_eq!(lease.trim(), "-|0|-");
    assert!(
        store
            .node
            .id
            .starts_with(&format!("host-a-{}-", std::process::id()))
    );
    store.close().await;
}
