//! `impl Cluster for PostgresStore` against a real PostgreSQL (weir-testkit's throwaway cluster):
//! two stores opened on one database are two instances (two instance ids), as two `weir serve`
//! processes would be. Leases that must lapse last [`SHORT`]; the tests wait for the database to
//! let them lapse (polling a claim), never for the clock.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde_json::json;
use sqlx::{Connection, PgConnection};
use tokio::sync::mpsc::Receiver;
use weir_core::document::{Document, load};
use weir_core::model::{Event, EventReason, Evidence, Flag, Phase, Rollout, RolloutStatus};
use weir_core::units::Weight;
use weir_store::{
    Cluster, CommitItem, FlagStore, Lease, NewToken, Notice, PendingRequest, PostgresStore,
    RolloutKey, Store, StoreError, TokenScope, TokenStore,
};
use weir_testkit::postgres::PgCluster;
use weir_testkit::wait::{DEADLINE, wait_for};

/// A lease that must not lapse while a test runs.
const LONG: Duration = Duration::from_secs(600);

/// A lease a test lets lapse.
const SHORT: Duration = Duration::from_secs(1);

// === fixtures ===

fn document(yaml: &str) -> Rollout {
    let mut results = load(yaml.as_bytes());
    let Document::Rollout(rollout) = results.remove(0).unwrap().document else {
        panic!("not a rollout");
    };
    *rollout
}

/// A rollout of a Kubernetes Deployment (any instance may own it).
fn remote(name: &str) -> Rollout {
    document(&format!(
        r#"
apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: {name}, namespace: shop}}
spec:
  target:
    kind: kubernetes
    targetRef: {{apiVersion: apps/v1, kind: Deployment, name: {name}}}
    provider: istio
  plan:
    canary:
      stepWeights: [10, 50]
  analysis:
    interval: 30s
    threshold: 3
"#
    ))
}

/// A rollout of a local target, bound to `host` by its label (or, without one, to the host of the
/// store that creates it).
fn local(name: &str, host: Option<&str>) -> Rollout {
    let labels = host
        .map(|host| format!(", labels: {{weir.dev/host: {host}}}"))
        .unwrap_or_default();
    document(&format!(
        r#"
apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: {name}, namespace: shop{labels}}}
spec:
  target:
    kind: local
    listen: 127.0.0.1:8080
    primary: {{url: "http://127.0.0.1:9001"}}
    canary: {{command: ["./app", "--port", "{{port}}"]}}
  plan:
    canary:
      stepWeights: [10, 50]
"#
    ))
}

fn key(name: &str) -> RolloutKey {
    RolloutKey::new("shop", name)
}

fn now() -> Timestamp {
    Timestamp::now()
}

fn status(steps_taken: u32) -> RolloutStatus {
    RolloutStatus {
        phase: Phase::Progressing,
        steps_taken,
        ..RolloutStatus::default()
    }
}

fn event(message: &str) -> Event {
    Event {
        at: now(),
        run: 1,
        reason: EventReason::Advanced,
        phase: Phase::Progressing,
        canary_weight: Weight::from_percent(10),
        message: message.to_string(),
        evidence: Evidence::default(),
    }
}

/// One step of `key` from `version`, executing `request` when given.
fn item(key: &RolloutKey, version: u64, request: Option<i64>) -> CommitItem {
    CommitItem {
        key: key.clone(),
        expected_version: version,
        status: status(u32::try_from(version).unwrap()),
        events: vec![event(&format!("step from version {version}"))],
        pending: Vec::new(),
        now: now(),
        request,
    }
}

/// Two instances (two stores, two instance ids) on one new database.
async fn pair(cluster: &PgCluster, host_a: &str, host_b: &str) -> (PostgresStore, PostgresStore) {
    let url = cluster.database("weir");
    let a = PostgresStore::open(&url, host_a).await.unwrap();
    let b = PostgresStore::open(&url, host_b).await.unwrap();
    assert_ne!(a.instance_id(), b.instance_id());
    assert_eq!(a.host_label(), host_a);
    (a, b)
}

async fn create(store: &PostgresStore, rollouts: &[Rollout]) {
    for rollout in rollouts {
        store.apply(rollout, Some(0), now()).await.unwrap();
    }
}

fn keys(leases: &[Lease]) -> Vec<RolloutKey> {
    leases.iter().map(|lease| lease.key.clone()).collect()
}

/// Claims for `claimer` until the database hands it something (the leases it waits for have to
/// lapse first).
async fn claim_when_lapsed(claimer: &PostgresStore, what: &str) -> Vec<Lease> {
    wait_for(what, move || async move {
        let won = claimer.claim(100, LONG).await.unwrap();
        (!won.is_empty()).then_some(won)
    })
    .await
}

/// Claims for `claimer` until it has won exactly `wanted`. A claim skips rows another session
/// holds locked, and a refused write keeps its locks until its rollback has reached the server
/// (sqlx sends it when the connection goes back to the pool): the rows come free soon after.
async fn claim_until(claimer: &PostgresStore, wanted: &[RolloutKey]) -> Vec<Lease> {
    let won = std::sync::Mutex::new(Vec::new());
    let won_so_far = &won;
    wait_for(
        &format!("{} to win {wanted:?}", claimer.instance_id()),
        move || async move {
            let batch = claimer.claim(100, LONG).await.unwrap();
            let mut won = won_so_far.lock().unwrap();
            won.extend(batch);
            (keys(&won) == wanted).then(|| won.clone())
        },
    )
    .await
}

/// The next notice, failing the test after the deadline.
async fn next(notices: &mut Receiver<Notice>) -> Notice {
    tokio::time::timeout(DEADLINE, notices.recv())
        .await
        .expect("no notice within the deadline")
        .expect("the notices channel closed")
}

/// Skips notices until one `wanted` accepts arrives.
async fn next_matching(notices: &mut Receiver<Notice>, wanted: impl Fn(&Notice) -> bool) -> Notice {
    loop {
        let notice = next(notices).await;
        if wanted(&notice) {
            return notice;
        }
    }
}

fn is_fenced(result: &Result<impl std::fmt::Debug, StoreError>, key: &RolloutKey, epoch: u64) {
    match result {
        Err(StoreError::Fenced {
            key: fenced,
            epoch: held,
        }) if fenced == key && *held == epoch => {}
        other => panic!("expected Fenced {{ {key}, epoch {epoch} }}, got {other:?}"),
    }
}

// === leases ===

#[tokio::test]
async fn claims_split_the_rows_skip_locked_ones_and_never_hand_one_row_to_both() {
    let cluster = PgCluster::start();
    let (a, b) = pair(&cluster, "host-a", "host-b").await;
    let names: Vec<String> = (0..40).map(|n| format!("r{n:02}")).collect();
    // Created before anyone joined: unowned, epoch 0.
    create(&a, &names.iter().map(|n| remote(n)).collect::<Vec<_>>()).await;
    a.heartbeat(Some("http://10.0.0.1:7979"), LONG)
        .await
        .unwrap();
    b.heartbeat(None, LONG).await.unwrap();

    // Another session holds r07's lease row locked: claims skip it instead of waiting for it.
    let mut locker = PgConnection::connect(&cluster.url("weir")).await.unwrap();
    let mut locked = locker.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM leases WHERE name = 'r07' FOR UPDATE")
        .execute(&mut *locked)
        .await
        .unwrap();

    async fn claim_all(store: &PostgresStore) -> Vec<Lease> {
        let mut won = Vec::new();
        loop {
            let batch = store.claim(3, LONG).await.unwrap();
            if batch.is_empty() {
                return won;
            }
            won.extend(batch);
        }
    }
    let (won_a, won_b) = tokio::join!(claim_all(&a), claim_all(&b));
    println!("a won {}, b won {}", won_a.len(), won_b.len());
    let set_a: BTreeSet<RolloutKey> = keys(&won_a).into_iter().collect();
    let set_b: BTreeSet<RolloutKey> = keys(&won_b).into_iter().collect();
    assert_eq!(set_a.len(), won_a.len(), "a was handed a row twice");
    assert_eq!(set_b.len(), won_b.len(), "b was handed a row twice");
    assert!(set_a.is_disjoint(&set_b), "a row was handed to both");
    let all: BTreeSet<RolloutKey> = set_a.union(&set_b).cloned().collect();
    let expected: BTreeSet<RolloutKey> = names
        .iter()
        .filter(|name| *name != "r07")
        .map(|name| key(name))
        .collect();
    assert_eq!(all, expected);
    for (won, store) in [(&won_a, &a), (&won_b, &b)] {
        for lease in won {
            assert_eq!(lease.owner.as_deref(), Some(store.instance_id()));
            assert_eq!(lease.epoch, 1);
            assert_eq!(lease.previous_owner, None);
            assert_eq!(lease.host, None);
            // One reading of the database's clock per claim.
            assert_eq!(lease.acquired_at, lease.renewed_at);
            assert_eq!(
                lease
                    .expires_at
                    .unwrap()
                    .duration_since(lease.acquired_at.unwrap()),
                SignedDuration::from_secs(600)
            );
            let stored = store.lease(&lease.key).await.unwrap().unwrap();
            assert_eq!(
                stored,
                Lease {
                    previous_owner: None,
                    ..lease.clone()
                }
            );
        }
    }
    // Nothing is left for anyone while r07 stays locked.
    assert_eq!(a.claim(100, LONG).await.unwrap(), vec![]);
    locked.rollback().await.unwrap();
    let last = b.claim(100, LONG).await.unwrap();
    assert_eq!(keys(&last), vec![key("r07")]);
    assert_eq!(last[0].epoch, 1);

    let summary = a.lease_summary(LONG).await.unwrap();
    assert_eq!(summary.claimable_total, 40);
    assert_eq!(summary.free, 0);
    let mut expected_owners = vec![
        (a.instance_id().to_string(), won_a.len() as u64),
        (b.instance_id().to_string(), won_b.len() as u64 + 1),
    ];
    expected_owners.retain(|(_, n)| *n > 0);
    expected_owners.sort();
    assert_eq!(summary.by_owner, expected_owners);
    let mut live = vec![a.instance_id().to_string(), b.instance_id().to_string()];
    live.sort();
    assert_eq!(summary.live_instances, live);
    assert_eq!(
        cluster
            .psql("weir", "SELECT api FROM instances WHERE api IS NOT NULL")
            .trim(),
        "http://10.0.0.1:7979"
    );
}

#[tokio::test]
async fn an_expired_lease_is_taken_over_and_its_old_owner_is_fenced() {
    let cluster = PgCluster::start();
    let (a, b) = pair(&cluster, "host-a", "host-a").await;
    let checkout = key("checkout");
    create(&a, &[remote("checkout")]).await;
    a.heartbeat(None, SHORT).await.unwrap();
    let won = a.claim(10, SHORT).await.unwrap();
    assert_eq!(keys(&won), vec![checkout.clone()]);
    assert_eq!((won[0].epoch, won[0].previous_owner.as_ref()), (1, None));
    // While it holds the lease, a writes.
    let written = a.commit_batch(vec![item(&checkout, 1, None)]).await;
    assert_eq!(written[0].as_ref().unwrap().version, 2);

    // a stops renewing; once the database says the lease lapsed, b takes it over.
    b.heartbeat(None, LONG).await.unwrap();
    let taken = claim_when_lapsed(&b, "a's lease to lapse and b to take it over").await;
    assert_eq!(keys(&taken), vec![checkout.clone()]);
    assert_eq!(taken[0].epoch, 2);
    assert_eq!(taken[0].owner.as_deref(), Some(b.instance_id()));
    assert_eq!(taken[0].previous_owner.as_deref(), Some(a.instance_id()));

    // a wakes up and tries to go on: every write is refused, and nothing changes.
    let before = a.get(&checkout).await.unwrap().unwrap();
    is_fenced(
        &a.commit_batch(vec![item(&checkout, 2, None)]).await[0],
        &checkout,
        1,
    );
    is_fenced(
        &a.commit(&checkout, 2, &status(9), &[event("late")], &[], now())
            .await,
        &checkout,
        1,
    );
    is_fenced(&a.delete(&checkout, None).await, &checkout, 1);
    let mut changed = remote("checkout");
    changed.spec.analysis.threshold = 7;
    is_fenced(&a.apply(&changed, None, now()).await, &checkout, 1);
    assert_eq!(a.get(&checkout).await.unwrap().unwrap(), before);
    assert_eq!(a.events(&checkout, 0, 100).await.unwrap().len(), 1);

    // Its next renew tells it the lease is gone (once), and it holds nothing afterwards.
    assert_eq!(a.renew(SHORT).await.unwrap(), vec![checkout.clone()]);
    assert_eq!(a.renew(SHORT).await.unwrap(), vec![]);
    is_fenced(
        &a.commit_batch(vec![item(&checkout, 2, None)]).await[0],
        &checkout,
        0,
    );

    // The new owner writes on from where a stopped.
    let written = b.commit_batch(vec![item(&checkout, 2, None)]).await;
    assert_eq!(written[0].as_ref().unwrap().version, 3);
    assert_eq!(b.renew(LONG).await.unwrap(), vec![]);
    let lease = b.lease(&checkout).await.unwrap().unwrap();
    assert_eq!(
        (lease.owner.as_deref(), lease.epoch),
        (Some(b.instance_id()), 2)
    );
}

#[tokio::test]
async fn renew_extends_the_leases_held_and_reports_those_lost() {
    let cluster = PgCluster::start();
    let (a, _b) = pair(&cluster, "host-a", "host-b").await;
    create(&a, &[remote("r1"), remote("r2"), remote("r3")]).await;
    a.heartbeat(None, SHORT).await.unwrap();
    assert_eq!(a.claim(10, SHORT).await.unwrap().len(), 3);
    let claimed = a.lease(&key("r1")).await.unwrap().unwrap();

    assert_eq!(a.renew(LONG).await.unwrap(), vec![]);
    let renewed = a.lease(&key("r1")).await.unwrap().unwrap();
    assert_eq!(renewed.epoch, claimed.epoch);
    assert_eq!(renewed.acquired_at, claimed.acquired_at);
    assert!(renewed.renewed_at > claimed.renewed_at);
    assert_eq!(
        renewed
            .expires_at
            .unwrap()
            .duration_since(renewed.renewed_at.unwrap()),
        SignedDuration::from_secs(600)
    );

    // Behind a's back: r2 taken over (a newer epoch, another owner), r3 deleted with its lease.
    cluster.psql(
        "weir",
        "UPDATE leases SET owner = 'elsewhere', epoch = epoch + 1 WHERE name = 'r2'",
    );
    cluster.psql("weir", "DELETE FROM rollouts WHERE name = 'r3'");
    assert_eq!(a.renew(LONG).await.unwrap(), vec![key("r2"), key("r3")]);
    is_fenced(
        &a.commit_batch(vec![item(&key("r2"), 1, None)]).await[0],
        &key("r2"),
        0,
    );
    // What it still holds it still writes, and renews.
    let written = a.commit_batch(vec![item(&key("r1"), 1, None)]).await;
    assert_eq!(written[0].as_ref().unwrap().version, 2);
    assert_eq!(a.renew(LONG).await.unwrap(), vec![]);
    let r2 = a.lease(&key("r2")).await.unwrap().unwrap();
    assert_eq!((r2.owner.as_deref(), r2.epoch), (Some("elsewhere"), 2));
}

#[tokio::test]
async fn local_rollouts_are_owned_only_on_their_host() {
    let cluster = PgCluster::start();
    let (a, b) = pair(&cluster, "host-a", "host-b").await;
    create(
        &a,
        &[
            local("here", None),
            local("there", Some("host-b")),
            remote("anywhere"),
        ],
    )
    .await;
    let host = |lease: Option<Lease>| lease.unwrap().host;
    assert_eq!(
        host(a.lease(&key("here")).await.unwrap()),
        Some("host-a".into())
    );
    assert_eq!(
        host(a.lease(&key("there")).await.unwrap()),
        Some("host-b".into())
    );
    assert_eq!(host(a.lease(&key("anywhere")).await.unwrap()), None);
    assert_eq!(a.lease(&key("nothing")).await.unwrap(), None);

    b.heartbeat(None, LONG).await.unwrap();
    let summary = b.lease_summary(LONG).await.unwrap();
    assert_eq!((summary.claimable_total, summary.free), (2, 2));
    let won = b.claim(100, LONG).await.unwrap();
    assert_eq!(keys(&won), vec![key("anywhere"), key("there")]);
    assert_eq!(won[1].host.as_deref(), Some("host-b"));
    a.heartbeat(None, LONG).await.unwrap();
    assert_eq!(keys(&a.claim(100, LONG).await.unwrap()), vec![key("here")]);
    let summary = a.lease_summary(LONG).await.unwrap();
    assert_eq!((summary.claimable_total, summary.free), (2, 0));
    assert_eq!(summary.by_owner.iter().map(|(_, n)| n).sum::<u64>(), 3);
}

#[tokio::test]
async fn release_and_leave_give_leases_up_and_fence_their_writer() {
    let cluster = PgCluster::start();
    let (a, b) = pair(&cluster, "host-a", "host-b").await;
    create(&a, &[remote("k1"), remote("k2"), remote("k3")]).await;
    a.heartbeat(None, LONG).await.unwrap();
    b.heartbeat(None, LONG).await.unwrap();
    assert_eq!(a.claim(100, LONG).await.unwrap().len(), 3);
    let mut notices = b.notices().await.unwrap();

    a.release(&[key("k1")]).await.unwrap();
    next_matching(&mut notices, |notice| *notice == Notice::LeasesFreed).await;
    let released = a.lease(&key("k1")).await.unwrap().unwrap();
    assert_eq!(
        released,
        Lease {
            key: key("k1"),
            owner: None,
            epoch: 1,
            host: None,
            acquired_at: None,
            renewed_at: None,
            expires_at: None,
            previous_owner: None,
        }
    );
    is_fenced(
        &a.commit_batch(vec![item(&key("k1"), 1, None)]).await[0],
        &key("k1"),
        0,
    );
    let taken = claim_until(&b, &[key("k1")]).await;
    assert_eq!(
        (taken[0].epoch, taken[0].previous_owner.as_ref()),
        (2, None)
    );
    // Releasing what another instance owns changes nothing.
    a.release(&[key("k1")]).await.unwrap();
    assert_eq!(
        a.lease(&key("k1")).await.unwrap().unwrap().owner.as_deref(),
        Some(b.instance_id())
    );
    assert_eq!(a.renew(LONG).await.unwrap(), vec![]);

    a.leave().await.unwrap();
    next_matching(&mut notices, |notice| *notice == Notice::LeasesFreed).await;
    for name in ["k2", "k3"] {
        let lease = a.lease(&key(name)).await.unwrap().unwrap();
        assert_eq!(
            (lease.owner, lease.epoch, lease.expires_at),
            (None, 1, None)
        );
        is_fenced(
            &a.commit_batch(vec![item(&key(name), 1, None)]).await[0],
            &key(name),
            0,
        );
    }
    let summary = b.lease_summary(LONG).await.unwrap();
    assert_eq!(summary.live_instances, vec![b.instance_id().to_string()]);
    assert_eq!(summary.free, 2);
    assert_eq!(summary.by_owner, vec![(b.instance_id().to_string(), 1)]);
    claim_until(&b, &[key("k2"), key("k3")]).await;
    // A rollout the instance that left creates is not leased to it (nor are others' writable).
    assert_eq!(a.renew(LONG).await.unwrap(), vec![]);
}

#[tokio::test]
async fn renew_release_and_leave_at_once_neither_fail_nor_deadlock() {
    let cluster = PgCluster::start();
    let (a, _b) = pair(&cluster, "host-a", "host-b").await;
    let names: Vec<String> = (0..200).map(|n| format!("c{n:03}")).collect();
    create(&a, &names.iter().map(|n| remote(n)).collect::<Vec<_>>()).await;
    a.heartbeat(None, LONG).await.unwrap();
    let all: Vec<RolloutKey> = names.iter().map(|name| key(name)).collect();
    claim_until(&a, &all).await;
    for round in 0..10 {
        // Released in the opposite order to the one renew locks rows in.
        let batch: Vec<RolloutKey> = all[round * 20..round * 20 + 20]
            .iter()
            .rev()
            .cloned()
            .collect();
        let (lost, released) = tokio::join!(a.renew(LONG), a.release(&batch));
        released.unwrap();
        // What was released meanwhile was given up, not lost.
        assert_eq!(lost.unwrap(), vec![]);
    }
    let summary = a.lease_summary(LONG).await.unwrap();
    assert_eq!((summary.free, summary.by_owner), (200, vec![]));

    claim_until(&a, &all).await;
    let (lost, left) = tokio::join!(a.renew(LONG), a.leave());
    left.unwrap();
    assert_eq!(lost.unwrap(), vec![]);
    let summary = a.lease_summary(LONG).await.unwrap();
    assert_eq!((summary.free, summary.by_owner), (200, vec![]));
    assert_eq!(summary.live_instances, Vec::<String>::new());
}

// === forwarded requests ===

#[tokio::test]
async fn a_request_reaches_the_owner_runs_once_and_its_answer_the_submitter() {
    let cluster = PgCluster::start();
    let (a, b) = pair(&cluster, "host-a", "host-b").await;
    let checkout = key("checkout");
    create(&a, &[remote("checkout")]).await;
    a.heartbeat(None, LONG).await.unwrap();
    b.heartbeat(None, LONG).await.unwrap();
    assert_eq!(a.claim(100, LONG).await.unwrap().len(), 1);
    let mut at_owner = a.notices().await.unwrap();
    let mut at_submitter = b.notices().await.unwrap();

    let body = json!({"command": "promote", "by": "alice"});
    let id = b.submit_request(&checkout, &body).await.unwrap();
    let submitted = Notice::RequestSubmitted {
        id,
        key: checkout.clone(),
    };
    next_matching(&mut at_owner, |notice| *notice == submitted).await;
    let pending = PendingRequest {
        id,
        key: checkout.clone(),
        body: body.clone(),
        executed: false,
    };
    assert_eq!(a.pending_requests().await.unwrap(), vec![pending.clone()]);
    assert_eq!(b.pending_requests().await.unwrap(), vec![]);
    assert_eq!(b.request_answer(id).await.unwrap(), None);

    // The owner executes it in a commit; a second commit of the same request is refused.
    let done = a.commit_batch(vec![item(&checkout, 1, Some(id))]).await;
    assert_eq!(done[0].as_ref().unwrap().version, 2);
    assert_eq!(
        a.pending_requests().await.unwrap(),
        vec![PendingRequest {
            executed: true,
            ..pending
        }]
    );
    let again = a.commit_batch(vec![item(&checkout, 2, Some(id))]).await;
    assert!(
        matches!(again[0], Err(StoreError::AlreadyExecuted(refused)) if refused == id),
        "{again:?}"
    );
    let stored = a.get(&checkout).await.unwrap().unwrap();
    assert_eq!((stored.version, stored.last_event_seq), (2, 1));

    let answer = json!({"ok": true, "version": 2});
    a.answer_request(id, &answer).await.unwrap();
    next_matching(&mut at_submitter, |notice| {
        *notice == Notice::RequestAnswered { id }
    })
    .await;
    assert_eq!(b.request_answer(id).await.unwrap(), Some(answer.clone()));
    assert_eq!(a.pending_requests().await.unwrap(), vec![]);
    // A second answer is ignored.
    a.answer_request(id, &json!({"ok": false})).await.unwrap();
    assert_eq!(b.request_answer(id).await.unwrap(), Some(answer));
    assert_eq!(b.request_answer(id + 1000).await.unwrap(), None);

    // Answered requests are kept an hour, then removed by a later answer.
    cluster.psql(
        "weir",
        &format!(
            "UPDATE requests SET answered_at = answered_at - interval '61 minutes' WHERE id = {id}"
        ),
    );
    let later = b.submit_request(&checkout, &json!({})).await.unwrap();
    a.answer_request(later, &json!({"ok": true})).await.unwrap();
    assert_eq!(b.request_answer(id).await.unwrap(), None);
    assert_eq!(
        b.request_answer(later).await.unwrap(),
        Some(json!({"ok": true}))
    );
}

#[tokio::test]
async fn a_request_executed_by_an_owner_that_died_is_answered_by_the_next_not_run_again() {
    let cluster = PgCluster::start();
    let (a, b) = pair(&cluster, "host-a", "host-b").await;
    let checkout = key("checkout");
    create(&a, &[remote("checkout")]).await;
    a.heartbeat(None, SHORT).await.unwrap();
    assert_eq!(a.claim(100, SHORT).await.unwrap().len(), 1);
    let id = b
        .submit_request(&checkout, &json!({"command": "abort"}))
        .await
        .unwrap();
    assert_eq!(a.pending_requests().await.unwrap().len(), 1);
    let done = a.commit_batch(vec![item(&checkout, 1, Some(id))]).await;
    assert_eq!(done[0].as_ref().unwrap().version, 2);
    // a dies before answering; b takes over once the lease lapses.
    b.heartbeat(None, LONG).await.unwrap();
    claim_when_lapsed(&b, "a's lease to lapse and b to take it over").await;
    assert_eq!(
        b.pending_requests().await.unwrap(),
        vec![PendingRequest {
            id,
            key: checkout.clone(),
            body: json!({"command": "abort"}),
            executed: true,
        }]
    );
    let again = b.commit_batch(vec![item(&checkout, 2, Some(id))]).await;
    assert!(
        matches!(again[0], Err(StoreError::AlreadyExecuted(refused)) if refused == id),
        "{again:?}"
    );
    b.answer_request(id, &json!({"ok": true})).await.unwrap();
    assert_eq!(
        b.request_answer(id).await.unwrap(),
        Some(json!({"ok": true}))
    );
    assert_eq!(b.pending_requests().await.unwrap(), vec![]);
    assert_eq!(a.pending_requests().await.unwrap(), vec![]);
}

// === notices ===

#[tokio::test]
async fn notices_arrive_for_every_instances_writes() {
    let cluster = PgCluster::start();
    let (a, b) = pair(&cluster, "host-a", "host-b").await;
    let mut notices = b.notices().await.unwrap();
    let checkout = key("checkout");
    let by = a.instance_id().to_string();

    create(&a, &[remote("checkout")]).await;
    assert_eq!(
        next(&mut notices).await,
        Notice::RolloutChanged {
            key: checkout.clone(),
            version: 1,
            last_event_seq: 0,
            by: by.clone(),
        }
    );
    assert_eq!(next(&mut notices).await, Notice::LeasesFreed);
    a.commit(&checkout, 1, &status(1), &[event("one")], &[], now())
        .await
        .unwrap();
    assert_eq!(
        next(&mut notices).await,
        Notice::RolloutChanged {
            key: checkout.clone(),
            version: 2,
            last_event_seq: 1,
            by: by.clone(),
        }
    );
    let flag: Flag = serde_json::from_value(json!({
        "apiVersion": "weir.dev/v1alpha1",
        "kind": "Flag",
        "metadata": {"name": "new-cart", "namespace": "shop"},
        "spec": {
            "variations": [{"name": "off", "value": false}, {"name": "on", "value": true}],
            "offVariation": "off",
            "defaultStrategy": {"variation": "off"},
        },
    }))
    .unwrap();
    a.put_flag(&flag, None, now()).await.unwrap();
    assert_eq!(
        next(&mut notices).await,
        Notice::FlagChanged {
            namespace: "shop".into(),
            key: "new-cart".into(),
            version: 1,
            by: by.clone(),
        }
    );
    // Tokens: created and revoked (what keeps every instance's tokens in memory current).
    let token = NewToken {
        name: "ci".into(),
        scope: TokenScope::Read,
        namespaces: None,
        expires_at: None,
        secret_hash: "aa11".into(),
    };
    a.create_token(&token, now()).await.unwrap();
    assert_eq!(
        next(&mut notices).await,
        Notice::TokensChanged { by: by.clone() }
    );
    a.revoke_token("ci", now()).await.unwrap();
    assert_eq!(
        next(&mut notices).await,
        Notice::TokensChanged { by: by.clone() }
    );
    let id = a.submit_request(&checkout, &json!({})).await.unwrap();
    assert_eq!(
        next(&mut notices).await,
        Notice::RequestSubmitted {
            id,
            key: checkout.clone(),
        }
    );
    a.answer_request(id, &json!({})).await.unwrap();
    assert_eq!(next(&mut notices).await, Notice::RequestAnswered { id });
    // The listening instance's own writes arrive too.
    let own = b.submit_request(&checkout, &json!({})).await.unwrap();
    assert_eq!(
        next(&mut notices).await,
        Notice::RequestSubmitted {
            id: own,
            key: checkout.clone(),
        }
    );
    a.delete(&checkout, None).await.unwrap();
    assert_eq!(
        next(&mut notices).await,
        Notice::RolloutChanged {
            key: checkout,
            version: 0,
            last_event_seq: 0,
            by,
        }
    );
    // Each call listens on its own connection; dropping a receiver ends its listener.
    let mut second = b.notices().await.unwrap();
    drop(notices);
    let id = a.submit_request(&key("other"), &json!({})).await.unwrap();
    assert_eq!(
        next(&mut second).await,
        Notice::RequestSubmitted {
            id,
            key: key("other"),
        }
    );
    wait_for(
        "the dropped receiver's listening connection to close",
        || {
            let listening = cluster.psql(
                "weir",
                "SELECT count(*) FROM pg_stat_activity \
             WHERE query LIKE '%LISTEN%' AND pid <> pg_backend_pid()",
            );
            async move { (listening.trim() == "1").then_some(()) }
        },
    )
    .await;
}

#[tokio::test]
async fn a_lost_listening_connection_is_opened_again_and_says_so() {
    let cluster = PgCluster::start();
    let (a, b) = pair(&cluster, "host-a", "host-b").await;
    let mut notices = b.notices().await.unwrap();
    let id = a.submit_request(&key("x"), &json!({})).await.unwrap();
    assert_eq!(
        next(&mut notices).await,
        Notice::RequestSubmitted { id, key: key("x") }
    );

    // The server ends the listening session (as a restarted pooler or an administrator would).
    let ended = cluster.psql(
        "weir",
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE query = 'LISTEN \"weir\"'",
    );
    assert_eq!(ended.trim(), "1");
    assert_eq!(next(&mut notices).await, Notice::Reconnected);
    let id = a.submit_request(&key("y"), &json!({})).await.unwrap();
    assert_eq!(
        next(&mut notices).await,
        Notice::RequestSubmitted { id, key: key("y") }
    );

    // The whole server goes down and comes back.
    cluster.stop_immediately();
    cluster.restart();
    assert_eq!(next(&mut notices).await, Notice::Reconnected);
    // The store's own pool reconnects on its own; its first attempts may still meet the old
    // connections.
    let id = wait_for("the store to write again after the restart", || async {
        a.submit_request(&key("z"), &json!({})).await.ok()
    })
    .await;
    assert_eq!(
        next_matching(&mut notices, |notice| matches!(
            notice,
            Notice::RequestSubmitted { .. }
        ))
        .await,
        Notice::RequestSubmitted { id, key: key("z") }
    );
}

#[tokio::test]
async fn a_full_channel_drops_notices_and_then_says_reconnected() {
    let cluster = PgCluster::start();
    let (_a, b) = pair(&cluster, "host-a", "host-b").await;
    let mut notices = b.notices().await.unwrap();
    // 5000 notifications in one transaction, nobody reading: the channel holds 4096.
    cluster.psql(
        "weir",
        "SELECT count(pg_notify('weir', json_build_object('t', 'answer', 'id', n)::text)) \
         FROM generate_series(1, 5000) AS n",
    );
    wait_for("the channel to fill up", || {
        let len = notices.len();
        async move { (len == 4096).then_some(()) }
    })
    .await;
    // What arrives: answers 1, 2, 3, ... in order, and wherever some were dropped, a Reconnected
    // before the next one that arrives. The closing notice (-1) is sent once the receiver has
    // been told of a gap or has every answer: sent earlier, it could find the channel still
    // full and be dropped itself, with nothing after it to report the gap.
    let mut next_id = 1;
    let mut gap_allowed = false;
    let mut reconnected = 0;
    let mut dropped = 0;
    let mut closing_sent = false;
    loop {
        if !closing_sent && (reconnected > 0 || next_id > 5000) {
            cluster.psql("weir", r#"NOTIFY weir, '{"t":"answer","id":-1}'"#);
            closing_sent = true;
        }
        match next(&mut notices).await {
            Notice::Reconnected => {
                assert!(next_id > 4096, "Reconnected before the channel was full");
                reconnected += 1;
                gap_allowed = true;
            }
            Notice::RequestAnswered { id: -1 } => {
                if next_id <= 5000 {
                    assert!(
                        gap_allowed,
                        "answers {next_id}..=5000 were dropped without a Reconnected"
                    );
                    dropped += 5001 - next_id;
                }
                break;
            }
            Notice::RequestAnswered { id } => {
                if id != next_id {
                    assert!(
                        gap_allowed && id > next_id,
                        "answer {id} arrived after {} without a Reconnected between",
                        next_id - 1
                    );
                    dropped += id - next_id;
                }
                next_id = id + 1;
                gap_allowed = false;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    println!("dropped {dropped} notices, {reconnected} Reconnected");
    assert_eq!(reconnected > 0, dropped > 0);
}
