//! PostgresStore against a real PostgreSQL cluster (weir-testkit's throwaway one): what only a
//! unit test can reach, the instance's lease bookkeeping (leases of created rollouts, fencing,
//! forwarded requests), and the notifications every write sends. The store suite
//! (`tests/store.rs`) covers the semantics shared with SQLite.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use sqlx::postgres::PgListener;
use weir_core::document::{Document, load};
use weir_core::machine::Notification;
use weir_core::model::{Flag, Phase, Severity};
use weir_testkit::postgres::PgCluster;
use weir_testkit::wait::DEADLINE;

use super::*;
use crate::{FlagKey, FlagStore};

const KUBERNETES_YAML: &str = r#"
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

const LOCAL_YAML: &str = r#"
apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata:
  name: api
  namespace: shop
spec:
  target:
    kind: local
    listen: 127.0.0.1:8080
    primary: {url: "http://127.0.0.1:9001"}
    canary: {url: "http://127.0.0.1:9002"}
  plan:
    canary:
      stepWeights: [10, 50]
  analysis:
    interval: 10s
    threshold: 5
"#;

fn document(yaml: &str, name: &str) -> Rollout {
    let mut results = load(yaml.as_bytes());
    let Document::Rollout(rollout) = results.remove(0).unwrap().document else {
        panic!("not a rollout");
    };
    let mut rollout = *rollout;
    rollout.metadata.name = name.to_string();
    rollout
}

fn rollout(name: &str) -> Rollout {
    document(KUBERNETES_YAML, name)
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

fn event(second: i64, message: &str) -> Event {
    Event {
        at: at(second),
        run: 1,
        reason: weir_core::model::EventReason::Advanced,
        phase: Phase::Progressing,
        canary_weight: Default::default(),
        message: message.to_string(),
        evidence: Default::default(),
    }
}

fn notify(delivery_id: &str) -> Effect {
    Effect::Notify(Notification {
        severity: Severity::Info,
        message: format!("notification {delivery_id}"),
        delivery_id: delivery_id.to_string(),
        phase: Default::default(),
        canary_weight: Default::default(),
        run: 1,
        revision: None,
        evidence: Default::default(),
    })
}

fn item(key: &RolloutKey, expected_version: u64, request: Option<i64>) -> CommitItem {
    CommitItem {
        key: key.clone(),
        expected_version,
        status: status(expected_version as u32),
        events: vec![event(expected_version as i64, "step")],
        pending: vec![],
        now: at(expected_version as i64),
        request,
    }
}

fn key(name: &str) -> RolloutKey {
    RolloutKey::new("shop", name)
}

async fn open(url: &str) -> PostgresStore {
    PostgresStore::open(url, "host-a").await.unwrap()
}

/// Joins as `Cluster::heartbeat` does (without the instances row, which fencing does not read).
fn join(store: &PostgresStore, lease_time_ms: u64) {
    store
        .node
        .lease_time_ms
        .store(lease_time_ms, Ordering::SeqCst);
    store.node.joined.store(true, Ordering::SeqCst);
}

fn hold(store: &PostgresStore, key: &RolloutKey, epoch: Option<u64>) {
    let mut held = store.node.held.lock().unwrap();
    match epoch {
        Some(epoch) => held.insert(key.clone(), epoch),
        None => held.remove(key),
    };
}

/// `owner|epoch|host` of a lease row, `-` for NULL.
fn lease(cluster: &PgCluster, key: &RolloutKey) -> String {
    cluster
        .psql(
            "weir",
            &format!(
                "SELECT coalesce(owner, '-') || '|' || epoch || '|' || coalesce(host, '-') \
                 FROM leases WHERE namespace = '{}' AND name = '{}'",
                key.namespace, key.name
            ),
        )
        .trim()
        .to_string()
}

fn set_lease(cluster: &PgCluster, key: &RolloutKey, owner: &str, epoch: u64) {
    cluster.psql(
        "weir",
        &format!(
            "UPDATE leases SET owner = '{owner}', epoch = {epoch} \
             WHERE namespace = '{}' AND name = '{}'",
            key.namespace, key.name
        ),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_applied_reads_back_equal_with_its_lease_row() {
    let cluster = PgCluster::start();
    let store = open(&cluster.database("weir")).await;
    let (created, outcome) = store
        .apply(&rollout("checkout"), Some(0), at(0))
        .await
        .unwrap();
    assert_eq!(outcome, ApplyOutcome::Created);
    assert_eq!(
        store.get(&created.key).await.unwrap(),
        Some(created.clone())
    );
    // Not joined: unowned, epoch 0; not a local target: any host.
    assert_eq!(lease(&cluster, &created.key), "-|0|-");
    assert!(
        store
            .node
            .id
            .starts_with(&format!("host-a-{}-", std::process::id()))
    );
    assert_eq!(
        store.node.id.len(),
        format!("host-a-{}-", std::process::id()).len() + 8
    );
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_rollouts_are_bound_to_a_host_and_joined_stores_lease_what_they_create() {
    let cluster = PgCluster::start();
    let store = open(&cluster.database("weir")).await;
    store
        .apply(&document(LOCAL_YAML, "api"), None, at(0))
        .await
        .unwrap();
    assert_eq!(lease(&cluster, &key("api")), "-|0|host-a");
    let mut labelled = document(LOCAL_YAML, "edge");
    labelled
        .metadata
        .labels
        .insert("weir.dev/host".into(), "edge-1".into());
    store.apply(&labelled, None, at(0)).await.unwrap();
    assert_eq!(lease(&cluster, &key("edge")), "-|0|edge-1");
    assert_eq!(store.node.held_epoch(&key("api")), None);

    join(&store, 60_000);
    store.apply(&rollout("joined"), None, at(0)).await.unwrap();
    assert_eq!(
        lease(&cluster, &key("joined")),
        format!("{}|1|-", store.node.id)
    );
    assert_eq!(store.node.held_epoch(&key("joined")), Some(1));
    // The lease lasts the heartbeat's lease time, by the database's clock.
    let times = cluster.psql(
        "weir",
        "SELECT expires_at - acquired_at = interval '60 seconds', renewed_at = acquired_at, \
         acquired_at <= clock_timestamp() FROM leases WHERE name = 'joined'",
    );
    assert_eq!(times.trim(), "t|t|t");
    // What it creates it may write at once.
    store
        .commit_batch(vec![item(&key("joined"), 1, None)])
        .await[0]
        .as_ref()
        .unwrap();
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_refuses_every_write_without_the_lease_at_its_epoch() {
    let cluster = PgCluster::start();
    let store = open(&cluster.database("weir")).await;
    join(&store, 60_000);
    let a = key("a");
    let b = key("b");
    store.apply(&rollout("a"), None, at(0)).await.unwrap();
    store.apply(&rollout("b"), None, at(0)).await.unwrap();
    let mut first = item(&a, 1, None);
    first.pending = vec![notify("n1")];
    let committed = store.commit_batch(vec![first]).await.remove(0).unwrap();
    assert_eq!((committed.version, committed.last_event_seq), (2, 1));

    // Held at another epoch than the row's, or not held at all.
    hold(&store, &a, Some(2));
    assert_fenced(
        store
            .commit(&a, 2, &status(9), &[event(9, "x")], &[], at(9))
            .await,
        &a,
        2,
    );
    hold(&store, &a, None);
    assert_fenced(
        store
            .commit(&a, 2, &status(9), &[event(9, "x")], &[], at(9))
            .await,
        &a,
        0,
    );

    // Taken over by another instance (epoch bumped): every kind of write is refused.
    hold(&store, &a, Some(1));
    set_lease(&cluster, &a, "someone-else", 2);
    assert_fenced(
        store
            .commit(&a, 2, &status(9), &[event(9, "x")], &[], at(9))
            .await,
        &a,
        1,
    );
    let mut changed = rollout("a");
    changed.spec.analysis.threshold += 1;
    assert_fenced(store.apply(&changed, Some(2), at(9)).await, &a, 1);
    assert_fenced(store.apply(&changed, None, at(9)).await, &a, 1);
    assert_fenced(store.clear_pending(&a, &["n1".into()]).await, &a, 1);
    assert_fenced(store.delete(&a, None).await, &a, 1);
    // The same epoch under another owner is not ours either.
    set_lease(&cluster, &a, "someone-else", 1);
    assert_fenced(
        store.commit(&a, 2, &status(9), &[], &[], at(9)).await,
        &a,
        1,
    );
    // An apply that changes nothing writes nothing, and needs no lease.
    let (_, outcome) = store.apply(&rollout("a"), None, at(9)).await.unwrap();
    assert_eq!(outcome, ApplyOutcome::Unchanged);
    // Nothing was written.
    assert_eq!(store.get(&a).await.unwrap(), Some(committed.clone()));
    assert_eq!(store.events(&a, 0, 10).await.unwrap().len(), 1);

    // In a batch, the fenced item fails alone.
    let results = store
        .commit_batch(vec![item(&a, 2, None), item(&b, 1, None)])
        .await;
    assert_fenced(results[0].as_ref().map(|_| ()).map_err(clone_error), &a, 1);
    assert_eq!(results[1].as_ref().unwrap().version, 2);
    assert_eq!(store.get(&a).await.unwrap(), Some(committed.clone()));

    // Claimed again by us at a new epoch: the writes go through.
    set_lease(&cluster, &a, &store.node.id, 3);
    hold(&store, &a, Some(3));
    let stored = store
        .commit(&a, 2, &status(3), &[event(3, "y")], &[], at(3))
        .await
        .unwrap();
    assert_eq!((stored.version, stored.last_event_seq), (3, 2));
    store.clear_pending(&a, &["n1".into()]).await.unwrap();
    assert!(
        store
            .get(&a)
            .await
            .unwrap()
            .unwrap()
            .pending_effects
            .is_empty()
    );

    // A store that has not joined checks nothing (a single instance).
    let single = open(&cluster.url("weir")).await;
    set_lease(&cluster, &a, "someone-else", 4);
    single
        .commit(&a, 3, &status(4), &[], &[], at(4))
        .await
        .unwrap();
    // Deleting under the lease forgets it.
    set_lease(&cluster, &a, &store.node.id, 4);
    hold(&store, &a, Some(4));
    store.delete(&a, None).await.unwrap();
    assert_eq!(store.node.held_epoch(&a), None);
    assert_eq!(
        cluster.psql("weir", "SELECT count(*) FROM leases").trim(),
        "1"
    );
    store.close().await;
    single.close().await;
}

fn assert_fenced<T>(result: Result<T, StoreError>, key: &RolloutKey, epoch: u64) {
    match result {
        Err(StoreError::Fenced { key: k, epoch: e }) => assert_eq!((&k, e), (key, epoch)),
        Err(other) => panic!("expected Fenced at epoch {epoch}, got {other}"),
        Ok(_) => panic!("expected Fenced at epoch {epoch}, the write went through"),
    }
}

fn clone_error(error: &StoreError) -> StoreError {
    match error {
        StoreError::Fenced { key, epoch } => StoreError::Fenced {
            key: key.clone(),
            epoch: *epoch,
        },
        other => StoreError::Database(other.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_request_is_executed_by_one_commit_only() {
    let cluster = PgCluster::start();
    let store = open(&cluster.database("weir")).await;
    let a = key("a");
    let b = key("b");
    store.apply(&rollout("a"), None, at(0)).await.unwrap();
    store.apply(&rollout("b"), None, at(0)).await.unwrap();
    let submit = || {
        cluster
            .psql(
                "weir",
                "INSERT INTO requests (namespace, name, body, submitted_by, submitted_at) \
                 VALUES ('shop', 'a', '{}', 'x', now()) RETURNING id",
            )
            .trim()
            .parse::<i64>()
            .unwrap()
    };
    let id = submit();
    let executed = |id: i64| {
        cluster
            .psql(
                "weir",
                &format!("SELECT executed_at IS NOT NULL FROM requests WHERE id = {id}"),
            )
            .trim()
            .to_string()
    };
    assert_eq!(executed(id), "f");
    let stored = store
        .commit_batch(vec![item(&a, 1, Some(id))])
        .await
        .remove(0)
        .unwrap();
    assert_eq!(stored.version, 2);
    assert_eq!(executed(id), "t");

    // The same request again (an owner that took over and did not see the answer yet).
    match store
        .commit_batch(vec![item(&a, 2, Some(id))])
        .await
        .remove(0)
    {
        Err(StoreError::AlreadyExecuted(again)) => assert_eq!(again, id),
        other => panic!("expected AlreadyExecuted, got {other:?}"),
    }
    assert_eq!(store.get(&a).await.unwrap(), Some(stored.clone()));
    assert_eq!(store.events(&a, 0, 10).await.unwrap().len(), 1);

    // In a batch the executed one fails alone; an unknown id was never executable.
    let second = submit();
    let results = store
        .commit_batch(vec![
            item(&a, 2, Some(id)),
            item(&b, 1, Some(second)),
            item(&a, 2, Some(i64::MAX)),
        ])
        .await;
    assert!(matches!(results[0], Err(StoreError::AlreadyExecuted(x)) if x == id));
    assert_eq!(results[1].as_ref().unwrap().version, 2);
    assert!(matches!(
        results[2],
        Err(StoreError::AlreadyExecuted(i64::MAX))
    ));
    assert_eq!(executed(second), "t");
    assert_eq!(store.get(&a).await.unwrap(), Some(stored));

    // A commit that fails for another reason leaves its request to be executed.
    let third = submit();
    assert!(matches!(
        store.commit_batch(vec![item(&a, 7, Some(third))]).await[0],
        Err(StoreError::Conflict { .. })
    ));
    assert_eq!(executed(third), "f");
    store.close().await;
}

fn flag(key: &str) -> Flag {
    let yaml = format!(
        "apiVersion: weir.dev/v1alpha1\nkind: Flag\nmetadata: {{name: {key}, namespace: shop}}\n\
         spec:\n  variations: [{{name: a, value: true}}, {{name: b, value: false}}]\n  \
         defaultStrategy: {{variation: a}}\n"
    );
    let Document::Flag(flag) = load(yaml.as_bytes()).remove(0).unwrap().document else {
        panic!("not a flag");
    };
    *flag
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_notifies_the_channel_on_commit_and_failed_ones_do_not() {
    let cluster = PgCluster::start();
    let url = cluster.database("weir");
    let store = open(&url).await;
    let mut listener = PgListener::connect(&url).await.unwrap();
    listener.listen(CHANNEL).await.unwrap();
    let by = store.node.id.clone();
    let mut next = async || {
        let notification = tokio::time::timeout(DEADLINE, listener.recv())
            .await
            .expect("a notification in time")
            .unwrap();
        assert_eq!(notification.channel(), CHANNEL);
        serde_json::from_str::<serde_json::Value>(notification.payload()).unwrap()
    };
    let rollout_changed = |version: u64, seq: u64| {
        serde_json::json!({"t": "rollout", "ns": "shop", "name": "a", "version": version,
            "seq": seq, "by": by})
    };
    let a = key("a");

    store.apply(&rollout("a"), None, at(0)).await.unwrap();
    assert_eq!(next().await, rollout_changed(1, 0));
    assert_eq!(next().await, serde_json::json!({"t": "freed"}));

    // Failed writes send nothing: the next notification is the next write's.
    assert!(
        store
            .commit(&a, 9, &status(1), &[], &[], at(1))
            .await
            .is_err()
    );
    assert!(store.apply(&rollout("a"), Some(0), at(1)).await.is_err());
    store.apply(&rollout("a"), None, at(1)).await.unwrap(); // unchanged: nothing written
    let events = [event(1, "one"), event(1, "two")];
    store
        .commit(&a, 1, &status(1), &events, &[notify("n")], at(1))
        .await
        .unwrap();
    assert_eq!(next().await, rollout_changed(2, 2));

    let mut changed = rollout("a");
    changed.spec.analysis.threshold += 1;
    store.apply(&changed, Some(2), at(2)).await.unwrap();
    assert_eq!(next().await, rollout_changed(3, 2));
    store.clear_pending(&a, &["n".into()]).await.unwrap();
    assert_eq!(next().await, rollout_changed(3, 2));

    store.put_flag(&flag("banner"), None, at(3)).await.unwrap();
    let flag_changed = |version: u64| {
        serde_json::json!({"t": "flag", "ns": "shop", "key": "banner", "version": version,
            "by": by})
    };
    assert_eq!(next().await, flag_changed(1));
    store
        .delete_flag(&FlagKey::new("shop", "banner"), Some(1))
        .await
        .unwrap();
    assert_eq!(next().await, flag_changed(0));

    // A batch: only the items that committed.
    store.apply(&rollout("b"), None, at(4)).await.unwrap();
    let b_created = next().await;
    assert_eq!(
        (b_created["name"].as_str(), b_created["version"].as_u64()),
        (Some("b"), Some(1))
    );
    assert_eq!(next().await, serde_json::json!({"t": "freed"}));
    let results = store
        .commit_batch(vec![item(&a, 99, None), item(&key("b"), 1, None)])
        .await;
    assert!(results[0].is_err() && results[1].is_ok());
    let b_committed = next().await;
    assert_eq!(
        b_committed,
        serde_json::json!({"t": "rollout", "ns": "shop", "name": "b", "version": 2, "seq": 1,
            "by": by})
    );

    store.delete(&a, None).await.unwrap();
    assert_eq!(next().await, rollout_changed(0, 0));
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_commits_survive_a_server_crash() {
    let cluster = PgCluster::start();
    let url = cluster.database("weir");
    let store = open(&url).await;
    let a = key("a");
    store.apply(&rollout("a"), None, at(0)).await.unwrap();
    let committed = store
        .commit_batch(vec![item(&a, 1, None)])
        .await
        .remove(0)
        .unwrap();
    store.close().await;
    // No checkpoint, no clean shutdown: the commit is only in the WAL.
    cluster.stop_immediately();
    assert_eq!(cluster.postmaster_pid(), None);
    cluster.restart();
    assert!(cluster.postmaster_pid().is_some());
    let reopened = open(&url).await;
    assert_eq!(reopened.get(&a).await.unwrap(), Some(committed));
    assert_eq!(reopened.events(&a, 0, 10).await.unwrap().len(), 1);
    reopened.close().await;
}
