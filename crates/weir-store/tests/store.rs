//! The store suite: every test runs against `SqliteStore` (a real file in a temporary
//! directory) and `PostgresStore` (a database in a throwaway PostgreSQL cluster, weir-testkit's
//! `PgCluster`), from one generic body each (`mod sqlite` and `mod postgres` at the end):
//! rollouts, flags and tokens. What only SQLite has (the in-memory store, the kill -9 test of the
//! file's durability) runs on SQLite alone; what only PostgreSQL has (leases, fencing, requests,
//! notifications) is tested in `src/postgres/tests.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use jiff::Timestamp;
use sqlx::{Connection, PgConnection, Row, SqliteConnection};
use weir_core::document::{Document, load};
use weir_core::machine::{Effect, Notification};
use weir_core::model::{
    Event, EventReason, Evidence, Flag, HookType, Phase, Rollout, RolloutStatus, Severity,
};
use weir_core::units::Weight;
use weir_store::{
    ApplyOutcome, CommitItem, FlagKey, FlagStore, FlagStoreError, ListQuery, MAX_PAGE, NewToken,
    PostgresStore, RolloutKey, SqliteStore, Store, StoreError, StoredRollout, TokenScope,
    TokenStamp, TokenStore, TokenStoreError,
};
use weir_testkit::postgres::PgCluster;
use weir_testkit::process::Guard;
use weir_testkit::wait::DEADLINE;

// === backends ===

/// A fresh database of one kind, its stores, and raw SQL on it (to look behind the store, or to
/// corrupt a row). SQL given to it uses `$1`, `$2`, ... for parameters (both databases read them).
trait Backend: Sized {
    type Store: Store + FlagStore + TokenStore;
    /// An empty database.
    async fn fresh() -> Self;
    /// A store on it (another one each call: another process, as far as the store knows).
    async fn open(&self) -> Self::Store;
    async fn close(store: &Self::Store);
    /// Runs `sql` with text parameters.
    async fn execute(&self, sql: &str, binds: &[&str]);
    /// The rows `sql` returns, every column as text (integers printed).
    async fn rows(&self, sql: &str, binds: &[&str]) -> Vec<Vec<String>>;
    /// What only this kind of database can say about its schema after several opens.
    async fn check_schema(&self);
}

struct Sqlite {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Backend for Sqlite {
    type Store = SqliteStore;

    async fn fresh() -> Sqlite {
        let dir = tempfile::tempdir().unwrap();
        // open creates no directory (tests/open.rs): the test makes them.
        let path = dir.path().join("state/nested/weir.db");
        std::fs::create_dir_all(dir.path().join("state/nested")).unwrap();
        Sqlite { _dir: dir, path }
    }

    async fn open(&self) -> SqliteStore {
        SqliteStore::open(&self.path).await.unwrap()
    }

    async fn close(store: &SqliteStore) {
        store.close().await;
    }

    async fn execute(&self, sql: &str, binds: &[&str]) {
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.to_string()));
        for bind in binds {
            query = query.bind(bind.to_string());
        }
        query.execute(&mut raw(&self.path).await).await.unwrap();
    }

    async fn rows(&self, sql: &str, binds: &[&str]) -> Vec<Vec<String>> {
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.to_string()));
        for bind in binds {
            query = query.bind(bind.to_string());
        }
        let rows = query.fetch_all(&mut raw(&self.path).await).await.unwrap();
        rows.iter()
            .map(|row| {
                (0..row.len())
                    .map(|i| {
                        row.try_get::<String, _>(i)
                            .unwrap_or_else(|_| row.get::<i64, _>(i).to_string())
                    })
                    .collect()
            })
            .collect()
    }

    async fn check_schema(&self) {
        let mut connection = raw(&self.path).await;
        let mode: String = sqlx::query("PRAGMA journal_mode")
            .fetch_one(&mut connection)
            .await
            .unwrap()
            .get(0);
        assert_eq!(mode, "wal");
        let migrations: i64 = sqlx::query("SELECT count(*) FROM _sqlx_migrations WHERE success")
            .fetch_one(&mut connection)
            .await
            .unwrap()
            .get(0);
        // 1: rollouts and events; 2: flags; 3: tokens and server keys; 4: flag records.
        assert_eq!(migrations, 4);
    }
}

struct Postgres {
    url: String,
    // Dropped last: stops the server after the stores' connections are gone with the test.
    _cluster: PgCluster,
}

impl Backend for Postgres {
    type Store = PostgresStore;

    async fn fresh() -> Postgres {
        let cluster = PgCluster::start();
        let url = cluster.database("weir");
        Postgres {
            url,
            _cluster: cluster,
        }
    }

    async fn open(&self) -> PostgresStore {
        PostgresStore::open(&self.url, "test-host").await.unwrap()
    }

    async fn close(store: &PostgresStore) {
        store.close().await;
    }

    async fn execute(&self, sql: &str, binds: &[&str]) {
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.to_string()));
        for bind in binds {
            query = query.bind(bind.to_string());
        }
        let mut connection = PgConnection::connect(&self.url).await.unwrap();
        query.execute(&mut connection).await.unwrap();
    }

    async fn rows(&self, sql: &str, binds: &[&str]) -> Vec<Vec<String>> {
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.to_string()));
        for bind in binds {
            query = query.bind(bind.to_string());
        }
        let mut connection = PgConnection::connect(&self.url).await.unwrap();
        let rows = query.fetch_all(&mut connection).await.unwrap();
        rows.iter()
            .map(|row| {
                (0..row.len())
                    .map(|i| {
                        row.try_get::<String, _>(i)
                            .unwrap_or_else(|_| row.get::<i64, _>(i).to_string())
                    })
                    .collect()
            })
            .collect()
    }

    async fn check_schema(&self) {
        let migrations = self
            .rows("SELECT count(*) FROM _sqlx_migrations WHERE success", &[])
            .await;
        // 1: every table (migrations/postgres/0001_schema.sql); 2: flag records.
        assert_eq!(migrations, [["2"]]);
    }
}

// === fixtures ===

const ROLLOUT_YAML: &str = r#"
apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata:
  name: checkout
  namespace: shop
  labels: {team: payments}
spec:
  target:
    kind: kubernetes
    targetRef: {apiVersion: apps/v1, kind: Deployment, name: checkout}
    provider: istio
  plan:
    canary:
      stepWeights: [1, 5, 10, 25, 50]
      stepWeightPromotion: 25
  analysis:
    interval: 30s
    threshold: 3
    metrics:
      - name: request-success-rate
        thresholdRange: {min: 99}
      - name: request-duration
        thresholdRange: {max: 500}
    webhooks:
      - name: load-test
        url: http://loadtester.shop/
        metadata: {cmd: "hey -z 1m -q 10 http://checkout-canary.shop/"}
"#;

fn rollout(namespace: &str, name: &str) -> Rollout {
    let mut results = load(ROLLOUT_YAML.as_bytes());
    assert_eq!(results.len(), 1);
    let Document::Rollout(rollout) = results.remove(0).unwrap().document else {
        panic!("not a rollout");
    };
    let mut rollout = *rollout;
    rollout.metadata.namespace = Some(namespace.to_string());
    rollout.metadata.name = name.to_string();
    rollout
}

fn at(second: i64) -> Timestamp {
    // Nanoseconds, so a lossy timestamp encoding would show.
    Timestamp::new(1_700_000_000 + second, 123_456_789).unwrap()
}

fn event(second: i64, run: u64, message: String) -> Event {
    Event {
        at: at(second),
        run,
        reason: EventReason::Advanced,
        phase: Phase::Progressing,
        canary_weight: Weight::from_percent(10),
        message,
        evidence: Evidence::default(),
    }
}

fn status(phase: Phase, steps_taken: u32) -> RolloutStatus {
    RolloutStatus {
        phase,
        run: 1,
        canary_revision: Some(format!("rev-{steps_taken}")),
        steps_taken,
        canary_weight: Weight::from_percent(5),
        message: format!("step {steps_taken}"),
        ..RolloutStatus::default()
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

fn hooks(delivery_id: &str) -> Effect {
    Effect::RunHooks {
        hook_type: HookType::Rollout,
        delivery_id: delivery_id.to_string(),
        event: None,
    }
}

fn delivery_ids(stored: &StoredRollout) -> Vec<String> {
    stored
        .pending_effects
        .iter()
        .map(|effect| effect.delivery_id().unwrap().to_string())
        .collect()
}

async fn raw(path: &Path) -> SqliteConnection {
    SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap()
}

async fn event_rows<B: Backend>(db: &B, key: &RolloutKey) -> i64 {
    let rows = db
        .rows(
            "SELECT count(*) FROM events WHERE namespace = $1 AND name = $2",
            &[&key.namespace, &key.name],
        )
        .await;
    rows[0][0].parse().unwrap()
}

/// Every event of a rollout, checking that the sequence is 1, 2, 3, ... without gaps.
async fn all_events(store: &impl Store, key: &RolloutKey) -> Vec<Event> {
    let mut events = Vec::new();
    loop {
        let page = store
            .events(key, events.len() as u64, MAX_PAGE)
            .await
            .unwrap();
        if page.is_empty() {
            return events;
        }
        for stored in page {
            assert_eq!(
                stored.seq,
                events.len() as u64 + 1,
                "gap in the sequence of {key}"
            );
            events.push(stored.event);
        }
    }
}

// === apply, get ===

async fn apply_creates_updates_and_recognises_unchanged_documents<B: Backend>() {
    let db = B::fresh().await;
    let store = db.open().await;
    let key = RolloutKey::new("shop", "checkout");
    assert_eq!(store.get(&key).await.unwrap(), None);

    // A status in the document is never stored.
    let mut document = rollout("shop", "checkout");
    document.status = Some(status(Phase::Succeeded, 9));
    let (created, outcome) = store.apply(&document, Some(0), at(0)).await.unwrap();
    assert_eq!(outcome, ApplyOutcome::Created);
    assert_eq!(created.key, key);
    assert_eq!(created.rollout, rollout("shop", "checkout"));
    assert_eq!(created.status, RolloutStatus::default());
    assert_eq!((created.version, created.generation), (1, 1));
    assert_eq!(
        (created.last_event_seq, created.pending_effects.len()),
        (0, 0)
    );
    assert_eq!((created.created_at, created.updated_at), (at(0), at(0)));
    assert_eq!(store.get(&key).await.unwrap(), Some(created.clone()));

    // The same document again: nothing written.
    let (same, outcome) = store.apply(&document, None, at(1)).await.unwrap();
    assert_eq!(outcome, ApplyOutcome::Unchanged);
    assert_eq!(same, created);
    assert_eq!(store.get(&key).await.unwrap(), Some(created.clone()));

    // A status written by a step survives later applies.
    let stepped = store
        .commit(&key, 1, &status(Phase::Progressing, 2), &[], &[], at(2))
        .await
        .unwrap();
    assert_eq!(stepped.version, 2);

    // Metadata only: a new version, the same generation.
    let mut relabelled = rollout("shop", "checkout");
    relabelled.metadata.labels.insert("tier".into(), "1".into());
    let (updated, outcome) = store.apply(&relabelled, Some(2), at(3)).await.unwrap();
    assert_eq!(outcome, ApplyOutcome::Updated);
    assert_eq!((updated.version, updated.generation), (3, 1));
    assert_eq!(updated.status, status(Phase::Progressing, 2));
    assert_eq!((updated.created_at, updated.updated_at), (at(0), at(3)));

    // The spec: a new generation.
    let mut respecced = relabelled.clone();
    respecced.spec.analysis.threshold += 1;
    let (updated, outcome) = store.apply(&respecced, Some(3), at(4)).await.unwrap();
    assert_eq!(outcome, ApplyOutcome::Updated);
    assert_eq!((updated.version, updated.generation), (4, 2));
    assert_eq!(updated.rollout, respecced);
    assert_eq!(updated.status, status(Phase::Progressing, 2));
    assert_eq!(store.get(&key).await.unwrap(), Some(updated));

    // A document without a namespace lives in `default`.
    let mut bare = rollout("x", "bare");
    bare.metadata.namespace = None;
    let (stored, _) = store.apply(&bare, None, at(5)).await.unwrap();
    assert_eq!(stored.key, RolloutKey::new("default", "bare"));
    assert_eq!(
        store
            .get(&RolloutKey::new("default", "bare"))
            .await
            .unwrap()
            .unwrap()
            .rollout,
        bare
    );
}

// === optimistic concurrency ===

async fn conflicting_writes_fail_and_change_nothing<B: Backend>() {
    let db = B::fresh().await;
    let store = db.open().await;
    let key = RolloutKey::new("shop", "checkout");
    store
        .apply(&rollout("shop", "checkout"), None, at(0))
        .await
        .unwrap();
    store
        .commit(
            &key,
            1,
            &status(Phase::Progressing, 1),
            &[event(1, 1, "one".into())],
            &[notify("n1")],
            at(1),
        )
        .await
        .unwrap();
    let before = store.get(&key).await.unwrap().unwrap();
    assert_eq!(before.version, 2);

    let mut changed = rollout("shop", "checkout");
    changed.spec.analysis.threshold += 1;
    assert!(matches!(
        store.apply(&changed, Some(0), at(5)).await,
        Err(StoreError::AlreadyExists(k)) if k == key
    ));
    assert!(matches!(
        store.apply(&changed, Some(1), at(5)).await,
        Err(StoreError::Conflict { key: k, expected: 1, actual: 2 }) if k == key
    ));
    assert!(matches!(
        store
            .commit(
                &key,
                1,
                &status(Phase::Failed, 7),
                &[event(5, 1, "stale".into())],
                &[notify("n2")],
                at(5)
            )
            .await,
        Err(StoreError::Conflict {
            expected: 1,
            actual: 2,
            ..
        })
    ));
    assert!(matches!(
        store
            .commit(&key, 0, &status(Phase::Failed, 7), &[], &[], at(5))
            .await,
        Err(StoreError::Conflict {
            expected: 0,
            actual: 2,
            ..
        })
    ));
    assert!(matches!(
        store.delete(&key, Some(1)).await,
        Err(StoreError::Conflict {
            expected: 1,
            actual: 2,
            ..
        })
    ));
    assert!(matches!(
        store.delete(&key, Some(0)).await,
        Err(StoreError::Conflict {
            expected: 0,
            actual: 2,
            ..
        })
    ));
    assert_eq!(store.get(&key).await.unwrap(), Some(before.clone()));
    assert_eq!(event_rows(&db, &key).await, 1);
    assert_eq!(all_events(&store, &key).await.len(), 1);

    // Writes to a rollout that does not exist.
    let missing = RolloutKey::new("shop", "missing");
    assert!(matches!(
        store.apply(&rollout("shop", "missing"), Some(3), at(5)).await,
        Err(StoreError::NotFound(k)) if k == missing
    ));
    assert!(matches!(
        store
            .commit(&missing, 1, &RolloutStatus::default(), &[], &[], at(5))
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store.delete(&missing, None).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store.clear_pending(&missing, &["x".into()]).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store.events(&missing, 0, 10).await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(store.get(&missing).await.unwrap(), None);
    assert_eq!(store.load_all().await.unwrap(), vec![before]);

    // The right version goes through.
    let (updated, outcome) = store.apply(&changed, Some(2), at(6)).await.unwrap();
    assert_eq!(
        (outcome, updated.version, updated.generation),
        (ApplyOutcome::Updated, 3, 2)
    );
}

async fn concurrent_commits_on_one_version_have_exactly_one_winner<B: Backend>() {
    let db = B::fresh().await;
    let store = db.open().await;
    // A second store on the same database stands for another process: its writes meet ours in
    // the database's locks (SQLite's file lock, PostgreSQL's row lock), not in our writer queue.
    let other = db.open().await;
    let key = RolloutKey::new("shop", "checkout");
    store
        .apply(&rollout("shop", "checkout"), None, at(0))
        .await
        .unwrap();

    for round in 0..20u64 {
        let version = store.get(&key).await.unwrap().unwrap().version;
        let mut tasks = Vec::new();
        for writer in 0..6u64 {
            let store = if writer % 2 == 0 {
                store.clone()
            } else {
                other.clone()
            };
            let key = key.clone();
            tasks.push(tokio::spawn(async move {
                let events = [
                    event(10, round, format!("round {round} writer {writer} a")),
                    event(10, round, format!("round {round} writer {writer} b")),
                ];
                let pending = [notify(&format!("{round}-{writer}"))];
                store
                    .commit(
                        &key,
                        version,
                        &status(Phase::Progressing, writer as u32),
                        &events,
                        &pending,
                        at(10),
                    )
                    .await
            }));
        }
        let mut winners = Vec::new();
        for (writer, task) in tasks.into_iter().enumerate() {
            match task.await.unwrap() {
                Ok(stored) => winners.push((writer, stored)),
                Err(StoreError::Conflict {
                    expected, actual, ..
                }) => {
                    assert_eq!((expected, actual), (version, version + 1));
                }
                Err(other) => panic!("unexpected error: {other}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        let (writer, won) = &winners[0];
        assert_eq!(won.version, version + 1);
        assert_eq!(store.get(&key).await.unwrap().as_ref(), Some(won));
        let events = all_events(&store, &key).await;
        assert_eq!(events.len() as u64, 2 * (round + 1));
        assert_eq!(
            events[events.len() - 1].message,
            format!("round {round} writer {writer} b")
        );
        assert_eq!(won.pending_effects.len() as u64, round + 1);
    }
}

async fn concurrent_creates_of_one_rollout_have_exactly_one_creator<B: Backend>() {
    let db = B::fresh().await;
    let store = db.open().await;
    let other = db.open().await;
    for (round, expected) in [None, Some(0)].into_iter().enumerate() {
        let name = format!("new-{round}");
        let mut tasks = Vec::new();
        for writer in 0..8 {
            let store = if writer % 2 == 0 {
                store.clone()
            } else {
                other.clone()
            };
            let document = rollout("shop", &name);
            tasks.push(tokio::spawn(async move {
                store.apply(&document, expected, at(0)).await
            }));
        }
        let mut created = 0;
        for task in tasks {
            match (task.await.unwrap(), expected) {
                (Ok((_, ApplyOutcome::Created)), _) => created += 1,
                // Identical documents: the others find it there and write nothing.
                (Ok((stored, ApplyOutcome::Unchanged)), None) => assert_eq!(stored.version, 1),
                (Err(StoreError::AlreadyExists(key)), Some(0)) => assert_eq!(key.name, name),
                (other, _) => panic!("round {round}: unexpected {other:?}"),
            }
        }
        assert_eq!(created, 1, "round {round}");
        let stored = store
            .get(&RolloutKey::new("shop", &name))
            .await
            .unwrap()
            .unwrap();
        assert_eq!((stored.version, stored.generation), (1, 1));
    }
}

// === commit, events, clear_pending ===

async fn commits_write_status_events_and_pending_effects_together<B: Backend>() {
    let db = B::fresh().await;
    let store = db.open().await;
    let key = RolloutKey::new("shop", "checkout");
    store
        .apply(&rollout("shop", "checkout"), None, at(0))
        .await
        .unwrap();

    let mut expected_events = Vec::new();
    let mut expected_pending = Vec::new();
    for (version, step) in (1..).zip(1..=60u32) {
        let events: Vec<Event> = (0..step % 4)
            .map(|i| event(i64::from(step), 1, format!("step {step} event {i}")))
            .collect();
        // Desired state (Finalize) is not stored: it is derived from the status again.
        let pending = match step % 3 {
            0 => vec![],
            1 => vec![notify(&format!("n{step}")), Effect::Finalize],
            _ => vec![hooks(&format!("h{step}")), notify(&format!("n{step}"))],
        };
        let phase = if step == 60 {
            Phase::Succeeded
        } else {
            Phase::Progressing
        };
        let stored = store
            .commit(
                &key,
                version,
                &status(phase, step),
                &events,
                &pending,
                at(i64::from(step)),
            )
            .await
            .unwrap();
        expected_events.extend(events);
        expected_pending.extend(
            pending
                .into_iter()
                .filter(|effect| effect.delivery_id().is_some()),
        );
        assert_eq!(stored.version, version + 1);
        assert_eq!(stored.last_event_seq, expected_events.len() as u64);
        assert_eq!(stored.pending_effects, expected_pending);
        assert_eq!(stored.status, status(phase, step));
        assert_eq!(
            (stored.created_at, stored.updated_at),
            (at(0), at(i64::from(step)))
        );
        assert_eq!(store.get(&key).await.unwrap(), Some(stored));
    }
    assert_eq!(all_events(&store, &key).await, expected_events);

    // The inspection columns follow the status.
    let row = db
        .rows("SELECT phase, canary_revision FROM rollouts", &[])
        .await;
    assert_eq!(row, [["Succeeded", "rev-60"]]);
    let reasons: Vec<(i64, String)> = db
        .rows("SELECT seq, reason FROM events ORDER BY seq LIMIT 2", &[])
        .await
        .into_iter()
        .map(|row| (row[0].parse().unwrap(), row[1].clone()))
        .collect();
    assert_eq!(
        reasons,
        [(1, "Advanced".to_string()), (2, "Advanced".to_string())]
    );
}

async fn events_page_after_a_sequence_number<B: Backend>() {
    let db = B::fresh().await;
    let store = db.open().await;
    let key = RolloutKey::new("shop", "checkout");
    store
        .apply(&rollout("shop", "checkout"), None, at(0))
        .await
        .unwrap();
    assert_eq!(store.events(&key, 0, 10).await.unwrap(), vec![]);

    let events: Vec<Event> = (1..=650)
        .map(|i| event(i, 1, format!("event {i}")))
        .collect();
    store
        .commit(
            &key,
            1,
            &status(Phase::Progressing, 1),
            &events[..600],
            &[],
            at(1),
        )
        .await
        .unwrap();
    store
        .commit(
            &key,
            2,
            &status(Phase::Progressing, 2),
            &events[600..],
            &[],
            at(2),
        )
        .await
        .unwrap();

    let page = store.events(&key, 0, 10).await.unwrap();
    assert_eq!(
        page.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=10).collect::<Vec<_>>()
    );
    assert_eq!(page[0].event, events[0]);
    let page = store.events(&key, 595, 10).await.unwrap();
    assert_eq!(
        page.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (596..=605).collect::<Vec<_>>()
    );
    assert_eq!(page[9].event, events[604]);
    // 0 is the default page, and pages are capped.
    assert_eq!(store.events(&key, 0, 0).await.unwrap().len(), 100);
    assert_eq!(store.events(&key, 0, 10_000).await.unwrap().len(), MAX_PAGE);
    assert_eq!(store.events(&key, 640, 100).await.unwrap().len(), 10);
    assert_eq!(store.events(&key, 650, 100).await.unwrap(), vec![]);
    assert_eq!(store.events(&key, u64::MAX, 100).await.unwrap(), vec![]);
    assert_eq!(all_events(&store, &key).await, events);
}

async fn clear_pending_removes_only_the_named_deliveries<B: Backend>() {
    let db = B::fresh().await;
    let store = db.open().await;
    let key = RolloutKey::new("shop", "checkout");
    store
        .apply(&rollout("shop", "checkout"), None, at(0))
        .await
        .unwrap();
    store
        .commit(
            &key,
            1,
            &status(Phase::Progressing, 1),
            &[],
            &[notify("a"), hooks("b"), notify("c")],
            at(1),
        )
        .await
        .unwrap();
    let committed = store
        .commit(
            &key,
            2,
            &status(Phase::Progressing, 2),
            &[],
            &[hooks("d")],
            at(2),
        )
        .await
        .unwrap();
    assert_eq!(delivery_ids(&committed), ["a", "b", "c", "d"]);

    store
        .clear_pending(&key, &["b".into(), "unknown".into(), "d".into()])
        .await
        .unwrap();
    let cleared = store.get(&key).await.unwrap().unwrap();
    assert_eq!(delivery_ids(&cleared), ["a", "c"]);
    assert_eq!(cleared.pending_effects, vec![notify("a"), notify("c")]);
    // Nothing a reader acts on changed: same version, same timestamps.
    assert_eq!((cleared.version, cleared.updated_at), (3, at(2)));

    store.clear_pending(&key, &[]).await.unwrap();
    store
        .clear_pending(&key, &["nothing".into()])
        .await
        .unwrap();
    assert_eq!(store.get(&key).await.unwrap().unwrap(), cleared);

    // The next commit with the version read before the clear still succeeds.
    let stored = store
        .commit(
            &key,
            3,
            &status(Phase::Progressing, 3),
            &[],
            &[notify("e")],
            at(3),
        )
        .await
        .unwrap();
    assert_eq!(delivery_ids(&stored), ["a", "c", "e"]);
    store
        .clear_pending(&key, &["a".into(), "c".into(), "e".into()])
        .await
        .unwrap();
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().pending_effects,
        vec![]
    );
}

// === delete ===

async fn delete_removes_the_rollout_and_its_events<B: Backend>() {
    let db = B::fresh().await;
    let store = db.open().await;
    let key = RolloutKey::new("shop", "checkout");
    let other = RolloutKey::new("shop", "checkout-2");
    for name in ["checkout", "checkout-2"] {
        store
            .apply(&rollout("shop", name), None, at(0))
            .await
            .unwrap();
        let events: Vec<Event> = (0..5).map(|i| event(i, 1, format!("{name} {i}"))).collect();
        store
            .commit(
                &RolloutKey::new("shop", name),
                1,
                &status(Phase::Progressing, 1),
                &events,
                &[],
                at(1),
            )
            .await
            .unwrap();
    }
    assert_eq!(event_rows(&db, &key).await, 5);

    store.delete(&key, Some(2)).await.unwrap();
    assert_eq!(store.get(&key).await.unwrap(), None);
    assert_eq!(event_rows(&db, &key).await, 0);
    assert!(matches!(
        store.events(&key, 0, 10).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store.delete(&key, None).await,
        Err(StoreError::NotFound(_))
    ));
    // The neighbour is untouched.
    assert_eq!(all_events(&store, &other).await.len(), 5);
    assert_eq!(store.load_all().await.unwrap().len(), 1);

    // Created again, it starts a new history.
    let (created, outcome) = store
        .apply(&rollout("shop", "checkout"), Some(0), at(9))
        .await
        .unwrap();
    assert_eq!(
        (outcome, created.version, created.last_event_seq),
        (ApplyOutcome::Created, 1, 0)
    );
    let stored = store
        .commit(
            &key,
            1,
            &status(Phase::Progressing, 1),
            &[event(10, 1, "again".into())],
            &[],
            at(10),
        )
        .await
        .unwrap();
    assert_eq!(stored.last_event_seq, 1);
    assert_eq!(store.events(&key, 0, 10).await.unwrap()[0].seq, 1);

    store.delete(&other, None).await.unwrap();
    assert_eq!(event_rows(&db, &other).await, 0);
}

// === list ===

async fn list_pages_in_key_order_with_filters_and_cursors<B: Backend>() {
    let db = B::fresh().await;
    let store = db.open().await;
    let namespaces = ["alpha", "beta/x", "gamma"];
    let mut keys = Vec::new();
    for i in 0..250u32 {
        let namespace = namespaces[i as usize % 3];
        // Separators and dots in names must not confuse the cursor.
        let name = match i % 5 {
            0 => format!("svc/{i:03}"),
            1 => format!("svc.{i:03}"),
            _ => format!("svc-{i:03}"),
        };
        let key = RolloutKey::new(namespace, &name);
        store
            .apply(&rollout(namespace, &name), Some(0), at(0))
            .await
            .unwrap();
        if i.is_multiple_of(4) {
            store
                .commit(&key, 1, &status(Phase::Progressing, 1), &[], &[], at(1))
                .await
                .unwrap();
        }
        keys.push(key);
    }
    keys.sort();
    let phase_of = |key: &RolloutKey| {
        let i: u32 = key.name[4..].parse().unwrap();
        if i.is_multiple_of(4) {
            Phase::Progressing
        } else {
            Phase::Initializing
        }
    };

    let collect = |query: ListQuery| {
        let store = store.clone();
        async move {
            let mut query = query;
            let mut items = Vec::new();
            let mut pages = 0;
            loop {
                let page = store.list(&query).await.unwrap();
                pages += 1;
                assert!(page.items.len() <= query.limit.max(1));
                items.extend(
                    page.items
                        .into_iter()
                        .map(|stored| (stored.key, stored.status.phase)),
                );
                match page.next_cursor {
                    Some(cursor) => query.cursor = Some(cursor),
                    None => return (items, pages),
                }
            }
        }
    };

    let (all, pages) = collect(ListQuery {
        limit: 7,
        ..ListQuery::default()
    })
    .await;
    assert_eq!(
        all.iter().map(|(key, _)| key.clone()).collect::<Vec<_>>(),
        keys
    );
    assert_eq!(pages, 250_usize.div_ceil(7));
    assert!(all.iter().all(|(key, phase)| *phase == phase_of(key)));

    // An exact multiple of the page size ends without an empty page.
    let (all, pages) = collect(ListQuery {
        limit: 125,
        ..ListQuery::default()
    })
    .await;
    assert_eq!((all.len(), pages), (250, 2));

    let (in_beta, _) = collect(ListQuery {
        namespace: Some("beta/x".into()),
        limit: 10,
        ..ListQuery::default()
    })
    .await;
    let expected: Vec<_> = keys
        .iter()
        .filter(|key| key.namespace == "beta/x")
        .cloned()
        .collect();
    assert_eq!(
        in_beta.into_iter().map(|(key, _)| key).collect::<Vec<_>>(),
        expected
    );

    let (progressing, _) = collect(ListQuery {
        phase: Some(Phase::Progressing),
        limit: 9,
        ..ListQuery::default()
    })
    .await;
    let expected: Vec<_> = keys
        .iter()
        .filter(|key| phase_of(key) == Phase::Progressing)
        .cloned()
        .collect();
    assert_eq!(expected.len(), 63);
    assert_eq!(
        progressing
            .into_iter()
            .map(|(key, _)| key)
            .collect::<Vec<_>>(),
        expected
    );

    let (both, _) = collect(ListQuery {
        namespace: Some("gamma".into()),
        phase: Some(Phase::Progressing),
        limit: 5,
        ..ListQuery::default()
    })
    .await;
    let expected: Vec<_> = keys
        .iter()
        .filter(|key| key.namespace == "gamma" && phase_of(key) == Phase::Progressing)
        .cloned()
        .collect();
    assert!(!expected.is_empty());
    assert_eq!(
        both.into_iter().map(|(key, _)| key).collect::<Vec<_>>(),
        expected
    );

    let none = store
        .list(&ListQuery {
            phase: Some(Phase::Held),
            ..ListQuery::default()
        })
        .await
        .unwrap();
    assert_eq!((none.items.len(), none.next_cursor), (0, None));

    // 0 means the default page size.
    let page = store.list(&ListQuery::default()).await.unwrap();
    assert_eq!(page.items.len(), 100);
    assert!(page.next_cursor.is_some());

    for cursor in ["alpha/svc-001", "not hex.00", "", "ff.00"] {
        let result = store
            .list(&ListQuery {
                cursor: Some(cursor.into()),
                ..ListQuery::default()
            })
            .await;
        assert!(
            matches!(result, Err(StoreError::InvalidCursor(c)) if c == cursor),
            "{cursor:?}"
        );
    }

    let loaded = store.load_all().await.unwrap();
    assert_eq!(
        loaded
            .into_iter()
            .map(|stored| stored.key)
            .collect::<Vec<_>>(),
        keys
    );
}

// === files ===

async fn everything_is_there_after_reopening_the_file<B: Backend>() {
    // SQLite: the parent directories are created (Sqlite::fresh names a nested path).
    let db = B::fresh().await;
    let store = db.open().await;
    let key = RolloutKey::new("shop", "checkout");
    store
        .apply(&rollout("shop", "checkout"), None, at(0))
        .await
        .unwrap();
    store
        .apply(&rollout("shop", "other"), None, at(0))
        .await
        .unwrap();
    let events: Vec<Event> = (0..30).map(|i| event(i, 1, format!("event {i}"))).collect();
    store
        .commit(
            &key,
            1,
            &status(Phase::Progressing, 3),
            &events,
            &[notify("n"), hooks("h")],
            at(40),
        )
        .await
        .unwrap();
    let before = store.load_all().await.unwrap();
    // Dropped without closing, as a process that exits without cleaning up.
    drop(store);

    let reopened = db.open().await;
    assert_eq!(reopened.load_all().await.unwrap(), before);
    assert_eq!(all_events(&reopened, &key).await, events);
    B::close(&reopened).await;

    // Opening runs the (already applied) migrations again without harm.
    let again = db.open().await;
    assert_eq!(again.load_all().await.unwrap(), before);
    db.check_schema().await;
}

#[tokio::test]
async fn in_memory_store_works_and_forgets() {
    let store = SqliteStore::open_in_memory().await.unwrap();
    let key = RolloutKey::new("shop", "checkout");
    store
        .apply(&rollout("shop", "checkout"), Some(0), at(0))
        .await
        .unwrap();
    store
        .commit(
            &key,
            1,
            &status(Phase::Progressing, 1),
            &[event(1, 1, "e".into())],
            &[],
            at(1),
        )
        .await
        .unwrap();
    assert_eq!(store.events(&key, 0, 0).await.unwrap().len(), 1);
    let other = SqliteStore::open_in_memory().await.unwrap();
    assert_eq!(other.load_all().await.unwrap(), vec![]);
}

async fn corrupt_rows_are_reported_with_the_rollout_not_panicked_on<B: Backend>() {
    let db = B::fresh().await;
    let store = db.open().await;
    let key = RolloutKey::new("shop", "checkout");
    store
        .apply(&rollout("shop", "checkout"), None, at(0))
        .await
        .unwrap();
    store
        .apply(&rollout("shop", "fine"), None, at(0))
        .await
        .unwrap();
    store
        .commit(
            &key,
            1,
            &status(Phase::Progressing, 1),
            &[event(1, 1, "e".into())],
            &[],
            at(1),
        )
        .await
        .unwrap();

    let corrupt = |column: &'static str, value: &'static str| {
        let db = &db;
        async move {
            let sql = format!("UPDATE rollouts SET {column} = $1 WHERE name = 'checkout'");
            db.execute(&sql, &[value]).await;
        }
    };
    let is_corrupt = |result: Result<Option<StoredRollout>, StoreError>, column: &str| match result
    {
        Err(StoreError::Corrupt { key: k, detail }) => {
            assert_eq!(k, key);
            assert!(detail.starts_with(column), "{detail}");
        }
        other => panic!("{column}: expected Corrupt, got {other:?}"),
    };

    for (column, value) in [
        ("status", "{not json"),
        ("document", "{\"apiVersion\": 1}"),
        ("pending_effects", "[{\"teleport\": {}}]"),
        ("created_at", "yesterday"),
    ] {
        let good = db
            .rows(
                &format!("SELECT {column} FROM rollouts WHERE name = 'checkout'"),
                &[],
            )
            .await
            .remove(0)
            .remove(0);
        corrupt(column, value).await;
        is_corrupt(store.get(&key).await, column);
        assert!(matches!(
            store.load_all().await,
            Err(StoreError::Corrupt { .. })
        ));
        assert!(matches!(
            store.list(&ListQuery::default()).await,
            Err(StoreError::Corrupt { .. })
        ));
        assert!(matches!(
            store
                .commit(&key, 2, &RolloutStatus::default(), &[], &[], at(3))
                .await,
            Err(StoreError::Corrupt { .. })
        ));
        // Put it back for the next column.
        let restore = format!("UPDATE rollouts SET {column} = $1 WHERE name = 'checkout'");
        db.execute(&restore, &[&good]).await;
        assert!(store.get(&key).await.unwrap().is_some());
    }

    // A document naming another rollout.
    let other_document = serde_json::to_string(&rollout("shop", "fine")).unwrap();
    db.execute(
        "UPDATE rollouts SET document = $1 WHERE name = 'checkout'",
        &[&other_document],
    )
    .await;
    is_corrupt(store.get(&key).await, "document");

    // A corrupt event.
    db.execute("UPDATE events SET event = 'garbage'", &[]).await;
    match store.events(&key, 0, 10).await {
        Err(StoreError::Corrupt { key: k, detail }) => {
            assert_eq!(k, key);
            assert!(detail.starts_with("event 1: event:"), "{detail}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }

    // A corrupt rollout can still be deleted.
    store.delete(&key, None).await.unwrap();
    assert_eq!(store.load_all().await.unwrap().len(), 1);
}

// === crash ===

const CRASH_DB_ENV: &str = "WEIR_STORE_CRASH_DB";
const EVENTS_PER_COMMIT: u64 = 2;

fn crash_key() -> RolloutKey {
    RolloutKey::new("shop", "checkout")
}

/// What commit `n` (from version `n` to `n + 1`) writes, so the parent can check every detail.
fn crash_commit(n: u64) -> (RolloutStatus, Vec<Event>, Vec<Effect>) {
    let events = (0..EVENTS_PER_COMMIT)
        .map(|part| event(n as i64, n, format!("commit {n} part {part}")))
        .collect();
    (
        status(Phase::Progressing, n as u32),
        events,
        vec![notify(&format!("d{n}"))],
    )
}

/// Run by `kill_9_loses_no_acknowledged_commit` in a child process: commits in a loop and prints
/// each acknowledged version on stdout, until it is killed.
#[test]
#[ignore = "helper process for kill_9_loses_no_acknowledged_commit"]
fn crash_child() {
    let path = PathBuf::from(std::env::var_os(CRASH_DB_ENV).expect("run by the crash test"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = SqliteStore::open(&path).await.unwrap();
        let key = crash_key();
        let mut stdout = std::io::stdout().lock();
        let mut version = store.get(&key).await.unwrap().unwrap().version;
        loop {
            let (status, events, pending) = crash_commit(version);
            let stored = store
                .commit(
                    &key,
                    version,
                    &status,
                    &events,
                    &pending,
                    at(version as i64),
                )
                .await
                .unwrap();
            version = stored.version;
            writeln!(stdout, "ack {version}").unwrap();
            stdout.flush().unwrap();
        }
    });
}

fn random_below(bound: u64) -> u64 {
    RandomState::new().build_hasher().finish() % bound
}

#[test]
fn kill_9_loses_no_acknowledged_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = SqliteStore::open(&path).await.unwrap();
        store
            .apply(&rollout("shop", "checkout"), Some(0), at(0))
            .await
            .unwrap();
        store.close().await;
    });

    let mut acknowledged = 1;
    for round in 0..6 {
        // Killed and reaped however the round ends, so a failed round leaves no child committing.
        let mut child = Guard::spawn(
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "crash_child",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CRASH_DB_ENV, &path)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        let stdout = child.0.stdout.take().unwrap();
        let (acks, received) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(version) = line.strip_prefix("ack ") {
                    let _ = acks.send(version.parse::<u64>().unwrap());
                }
            }
        });

        // Let it commit a little, then kill it at a random moment, mid-commit or between.
        let wanted = 5 + random_below(30);
        for _ in 0..wanted {
            match received.recv_timeout(DEADLINE) {
                Ok(version) => acknowledged = acknowledged.max(version),
                Err(error) => {
                    let _ = child.0.kill();
                    let mut stderr = String::new();
                    if let Some(mut pipe) = child.0.stderr.take() {
                        let _ = pipe.read_to_string(&mut stderr);
                    }
                    panic!("round {round}: the child stopped acknowledging ({error}): {stderr}");
                }
            }
        }
        // Not synchronisation: a random moment to kill at, so rounds hit different points of a
        // commit; any moment is a valid one, so no machine is too slow for it.
        std::thread::sleep(Duration::from_millis(random_below(100)));
        child.0.kill().unwrap(); // SIGKILL on Unix
        let exit = child.0.wait().unwrap();
        assert!(!exit.success(), "the child ended on its own: {exit:?}");
        reader.join().unwrap();
        // Acknowledgements printed before the kill are still in the pipe.
        for version in received.try_iter() {
            acknowledged = acknowledged.max(version);
        }

        runtime.block_on(async {
            let store = SqliteStore::open(&path).await.unwrap();
            let key = crash_key();
            let stored = store.get(&key).await.unwrap().unwrap();
            // Every acknowledged commit is there; at most one more (committed, not yet printed).
            assert!(
                stored.version == acknowledged || stored.version == acknowledged + 1,
                "round {round}: stored version {}, acknowledged {acknowledged}",
                stored.version
            );
            let commits = stored.version - 1;
            // Status, events and pending effects of each commit are all there or all absent.
            assert_eq!(stored.status, crash_commit(commits).0);
            assert_eq!(stored.last_event_seq, EVENTS_PER_COMMIT * commits);
            let expected_pending: Vec<Effect> =
                (1..=commits).flat_map(|n| crash_commit(n).2).collect();
            assert_eq!(stored.pending_effects, expected_pending);
            let expected_events: Vec<Event> =
                (1..=commits).flat_map(|n| crash_commit(n).1).collect();
            assert_eq!(all_events(&store, &key).await, expected_events);
            store.close().await;

            let mut connection = raw(&path).await;
            let integrity: String = sqlx::query("PRAGMA integrity_check")
                .fetch_one(&mut connection)
                .await
                .unwrap()
                .get(0);
            assert_eq!(integrity, "ok");
            let orphans: i64 = sqlx::query("SELECT count(*) FROM pragma_foreign_key_check")
                .fetch_one(&mut connection)
                .await
                .unwrap()
                .get(0);
            assert_eq!(orphans, 0);
            connection.close().await.unwrap();
            println!(
                "round {round}: acknowledged up to version {acknowledged}, found version {}",
                stored.version
            );
        });
    }
}

async fn a_batch_commits_every_item_that_is_current_and_only_those<B: Backend>() {
    let db = B::fresh().await;
    let store = db.open().await;
    let mut keys = Vec::new();
    for name in ["a", "b", "c"] {
        let (stored, _) = store
            .apply(&rollout("batch", name), None, at(0))
            .await
            .unwrap();
        keys.push((stored.key.clone(), stored.version));
    }
    // The middle item is stale: it must fail alone.
    let items: Vec<CommitItem> = keys
        .iter()
        .enumerate()
        .map(|(index, (key, version))| CommitItem {
            key: key.clone(),
            expected_version: if index == 1 { version + 7 } else { *version },
            status: status(Phase::Progressing, 1),
            events: vec![
                event(1, 1, format!("step of {}", key.name)),
                event(2, 1, "second".into()),
            ],
            pending: vec![notify(&format!("n-{}", key.name))],
            now: at(2),
            request: None,
        })
        .collect();
    let results = store.commit_batch(items).await;
    assert_eq!(results.len(), 3);
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    assert!(
        matches!(results[1], Err(StoreError::Conflict { .. })),
        "{:?}",
        results[1]
    );
    for (index, (key, version)) in keys.iter().enumerate() {
        let stored = store.get(key).await.unwrap().unwrap();
        if index == 1 {
            assert_eq!(stored.version, *version, "the stale item changed nothing");
            assert_eq!(event_rows(&db, key).await, 0);
            assert!(stored.pending_effects.is_empty());
        } else {
            assert_eq!(stored.version, version + 1);
            assert_eq!(stored.status.phase, Phase::Progressing);
            let seqs: Vec<u64> = store
                .events(key, 0, 10)
                .await
                .unwrap()
                .iter()
                .map(|e| e.seq)
                .collect();
            assert_eq!(seqs, vec![1, 2]);
            assert_eq!(delivery_ids(&stored), vec![format!("n-{}", key.name)]);
        }
    }
    assert!(store.commit_batch(Vec::new()).await.is_empty());
}

// === flags ===

fn flag(namespace: &str, key: &str, default_variant: &str) -> Flag {
    let yaml = format!(
        "apiVersion: weir.dev/v1alpha1\nkind: Flag\nmetadata: {{name: {key}, namespace: {namespace}}}\n\
         spec:\n  variations: [{{name: enabled, value: true}}, {{name: disabled, value: false}}]\n  \
         defaultStrategy: {{variation: {default_variant}}}\n"
    );
    let mut results = load(yaml.as_bytes());
    assert_eq!(results.len(), 1);
    let Document::Flag(flag) = results.remove(0).unwrap().document else {
        panic!("not a flag");
    };
    *flag
}

async fn flags_are_versioned_like_rollouts<B: Backend>() {
    let db = B::fresh().await;
    let store = db.open().await;
    let key = FlagKey::new("shop", "new-checkout");
    assert_eq!(store.get_flag(&key).await.unwrap(), None);
    let (created, outcome) = store
        .put_flag(&flag("shop", "new-checkout", "disabled"), Some(0), at(0))
        .await
        .unwrap();
    assert_eq!(outcome, ApplyOutcome::Created);
    assert_eq!((created.key.clone(), created.version), (key.clone(), 1));
    assert_eq!((created.created_at, created.updated_at), (at(0), at(0)));
    assert_eq!(store.get_flag(&key).await.unwrap(), Some(created.clone()));

    // The same document: nothing written.
    let (same, outcome) = store
        .put_flag(&flag("shop", "new-checkout", "disabled"), None, at(1))
        .await
        .unwrap();
    assert_eq!((outcome, same), (ApplyOutcome::Unchanged, created.clone()));

    let on = flag("shop", "new-checkout", "enabled");
    assert_eq!(
        store.put_flag(&on, Some(0), at(2)).await,
        Err(FlagStoreError::AlreadyExists(key.clone()))
    );
    assert_eq!(
        store.put_flag(&on, Some(5), at(2)).await,
        Err(FlagStoreError::Conflict {
            key: key.clone(),
            expected: 5,
            actual: 1
        })
    );
    let (updated, outcome) = store.put_flag(&on, Some(1), at(2)).await.unwrap();
    assert_eq!((outcome, updated.version), (ApplyOutcome::Updated, 2));
    assert_eq!((updated.created_at, updated.updated_at), (at(0), at(2)));
    assert_eq!(updated.flag, on);
    assert_eq!(
        store
            .put_flag(&flag("shop", "missing", "enabled"), Some(3), at(2))
            .await,
        Err(FlagStoreError::NotFound(FlagKey::new("shop", "missing")))
    );

    // Listed by namespace and key.
    for (namespace, name) in [("alpha", "z"), ("shop", "a-flag"), ("alpha", "b")] {
        store
            .put_flag(&flag(namespace, name, "enabled"), None, at(3))
            .await
            .unwrap();
    }
    let listed: Vec<FlagKey> = store
        .list_flags()
        .await
        .unwrap()
        .into_iter()
        .map(|stored| stored.key)
        .collect();
    assert_eq!(
        listed,
        [
            FlagKey::new("alpha", "b"),
            FlagKey::new("alpha", "z"),
            FlagKey::new("shop", "a-flag"),
            key.clone(),
        ]
    );

    assert_eq!(
        store.delete_flag(&key, Some(1)).await,
        Err(FlagStoreError::Conflict {
            key: key.clone(),
            expected: 1,
            actual: 2
        })
    );
    store.delete_flag(&key, Some(2)).await.unwrap();
    assert_eq!(store.get_flag(&key).await.unwrap(), None);
    assert_eq!(
        store.delete_flag(&key, None).await,
        Err(FlagStoreError::NotFound(key.clone()))
    );
    assert_eq!(store.list_flags().await.unwrap().len(), 3);
}

// === tokens ===

fn new_token(name: &str, hash: &str) -> NewToken {
    NewToken {
        name: name.into(),
        scope: TokenScope::Operate,
        namespaces: Some(vec!["team-a".into()]),
        expires_at: None,
        secret_hash: hash.into(),
    }
}

async fn tokens_round_trip_and_names_are_unique<B: Backend>() {
    let db = B::fresh().await;
    let store = db.open().await;
    assert!(!store.has_tokens().await.unwrap());
    let now = Timestamp::from_second(1_800_000_000).unwrap();
    let created = store
        .create_token(&new_token("ci", "aa11"), now)
        .await
        .unwrap();
    assert_eq!(created.name, "ci");
    assert_eq!(created.scope, TokenScope::Operate);
    assert_eq!(created.namespaces, Some(vec!["team-a".to_string()]));
    assert_eq!(created.created_at, now);
    assert!(store.has_tokens().await.unwrap());
    assert_eq!(
        store.create_token(&new_token("ci", "bb22"), now).await,
        Err(TokenStoreError::AlreadyExists("ci".into()))
    );
    assert_eq!(
        store.token_by_hash("aa11").await.unwrap(),
        Some(created.clone())
    );
    assert_eq!(store.token_by_hash("bb22").await.unwrap(), None);
    assert_eq!(
        store.token_by_id(created.id).await.unwrap(),
        Some(created.clone())
    );

    let later = Timestamp::from_second(1_800_000_100).unwrap();
    store.touch_token(created.id, later).await.unwrap();
    let revoked = store.revoke_token("ci", later).await.unwrap();
    assert_eq!(revoked.revoked_at, Some(later));
    assert_eq!(revoked.last_used_at, Some(later));
    assert!(revoked.usable(later).is_err());
    let again = store
        .revoke_token("ci", Timestamp::from_second(1_800_000_200).unwrap())
        .await
        .unwrap();
    assert_eq!(
        again.revoked_at,
        Some(later),
        "the first revocation time is kept"
    );
    assert_eq!(
        store.revoke_token("nobody", later).await,
        Err(TokenStoreError::NotFound("nobody".into()))
    );
    // Revoked tokens still count: revoking the last one does not open the server.
    assert!(store.has_tokens().await.unwrap());

    let key = store.server_key("session", &[1; 32]).await.unwrap();
    assert_eq!(key, vec![1; 32]);
    B::close(&store).await;
    let reopened = db.open().await;
    assert_eq!(
        reopened.server_key("session", &[2; 32]).await.unwrap(),
        vec![1; 32]
    );
    assert_eq!(reopened.list_tokens().await.unwrap(), vec![again]);
}

async fn token_stamps_change_with_every_creation_and_revocation<B: Backend>() {
    let db = B::fresh().await;
    let store = db.open().await;
    let now = Timestamp::from_second(1_800_000_000).unwrap();
    let empty = store.token_stamp().await.unwrap();
    assert_eq!(empty, TokenStamp::default());
    assert!(store.tokens_with_hashes().await.unwrap().is_empty());
    let ci = store
        .create_token(&new_token("ci", "aa11"), now)
        .await
        .unwrap();
    let bot = store
        .create_token(&new_token("bot", "bb22"), now)
        .await
        .unwrap();
    let two = store.token_stamp().await.unwrap();
    assert_eq!(
        two,
        TokenStamp {
            created: 2,
            revoked: 0
        }
    );
    // A touch is no change of the set.
    store.touch_token(ci.id, now).await.unwrap();
    assert_eq!(store.token_stamp().await.unwrap(), two);
    let revoked = store.revoke_token("ci", now).await.unwrap();
    let after = store.token_stamp().await.unwrap();
    assert_eq!(
        after,
        TokenStamp {
            created: 2,
            revoked: 1
        }
    );
    // Revoking again changes nothing.
    store.revoke_token("ci", now).await.unwrap();
    assert_eq!(store.token_stamp().await.unwrap(), after);
    let hashed = store.tokens_with_hashes().await.unwrap();
    let pairs: Vec<(String, String)> = hashed
        .iter()
        .map(|entry| (entry.token.name.clone(), entry.secret_hash.clone()))
        .collect();
    assert_eq!(
        pairs,
        vec![
            ("bot".to_string(), "bb22".to_string()),
            ("ci".to_string(), "aa11".to_string())
        ]
    );
    assert_eq!(hashed[0].token, bot);
    assert_eq!(hashed[1].token, revoked);
    // The hash stays out of debug output.
    assert!(!format!("{hashed:?}").contains("aa11"));
}

async fn flag_history_counts_and_triggers_survive_reopening<B: Backend>() {
    use weir_store::{EvaluationCount, FieldChange, NewFlagChange, NewFlagTrigger};
    let db = B::fresh().await;
    let store = db.open().await;
    let key = FlagKey::new("shop", "banner");
    let other = FlagKey::new("shop", "other");
    for (n, action) in ["created", "updated", "disabled"].into_iter().enumerate() {
        let change = NewFlagChange {
            key: key.clone(),
            at: at(n as i64),
            actor: "ci".into(),
            action: action.into(),
            version: Some(n as u64 + 1),
            address: (n == 2).then(|| "192.0.2.7".into()),
            changes: vec![FieldChange {
                path: "spec.enabled".into(),
                before: Some(serde_json::json!(true)),
                after: Some(serde_json::json!(false)),
            }],
        };
        store.record_flag_change(&change).await.unwrap();
    }
    let elsewhere = NewFlagChange {
        key: other.clone(),
        at: at(9),
        actor: "ci".into(),
        action: "deleted".into(),
        version: None,
        address: None,
        changes: vec![],
    };
    store.record_flag_change(&elsewhere).await.unwrap();
    let counts = |minute: i64, count: u64| EvaluationCount {
        key: key.clone(),
        variation: "on".into(),
        minute,
        count,
    };
    store
        .add_evaluation_counts(&[counts(100, 3), counts(101, 1)])
        .await
        .unwrap();
    store
        .add_evaluation_counts(&[counts(101, 4)])
        .await
        .unwrap();
    store
        .create_trigger(&NewFlagTrigger {
            id: "t1".into(),
            key: key.clone(),
            action: "off".into(),
            description: "alert".into(),
            secret_hash: "ab".repeat(32),
            created_by: "ci".into(),
            created_at: at(1),
        })
        .await
        .unwrap();
    store.trigger_used("t1", at(5)).await.unwrap();
    B::close(&store).await;

    let store = db.open().await;
    let history = store.flag_history(&key, 10, None).await.unwrap();
    let actions: Vec<&str> = history.iter().map(|c| c.change.action.as_str()).collect();
    assert_eq!(actions, ["disabled", "updated", "created"]);
    assert_eq!(history[0].change.address.as_deref(), Some("192.0.2.7"));
    assert_eq!(
        history[0].change.changes[0].to_string(),
        "spec.enabled: true -> false"
    );
    assert_eq!(history[2].change.at, at(0));
    let page = store
        .flag_history(&key, 1, Some(history[0].id))
        .await
        .unwrap();
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].change.action, "updated");
    let deleted = store.flag_history(&other, 10, None).await.unwrap();
    assert_eq!(deleted[0].change.version, None);

    let read = store.evaluation_counts(&key, 0).await.unwrap();
    assert_eq!(read, [counts(100, 3), counts(101, 5)]);
    assert_eq!(
        store.evaluation_counts(&key, 101).await.unwrap(),
        [counts(101, 5)]
    );
    store.prune_evaluation_counts(101).await.unwrap();
    assert_eq!(
        store.evaluation_counts(&key, 0).await.unwrap(),
        [counts(101, 5)]
    );

    let triggers = store.list_triggers(&key).await.unwrap();
    assert_eq!(triggers.len(), 1);
    assert_eq!(
        (triggers[0].uses, triggers[0].last_used_at),
        (1, Some(at(5)))
    );
    assert_eq!(
        store.get_trigger("t1").await.unwrap(),
        Some(triggers[0].clone())
    );
    assert!(!store.delete_trigger(&other, "t1").await.unwrap());
    assert!(store.delete_trigger(&key, "t1").await.unwrap());
    assert_eq!(store.get_trigger("t1").await.unwrap(), None);
    assert!(store.list_triggers(&key).await.unwrap().is_empty());
}

// === on both backends ===

macro_rules! suite {
    ($($test:ident),* $(,)?) => {
        /// The suite on SQLite files.
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $test() {
                    super::$test::<super::Sqlite>().await;
                }
            )*
        }

        /// The suite on PostgreSQL databases.
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $test() {
                    super::$test::<super::Postgres>().await;
                }
            )*
        }
    };
}

suite!(
    apply_creates_updates_and_recognises_unchanged_documents,
    conflicting_writes_fail_and_change_nothing,
    concurrent_commits_on_one_version_have_exactly_one_winner,
    concurrent_creates_of_one_rollout_have_exactly_one_creator,
    commits_write_status_events_and_pending_effects_together,
    events_page_after_a_sequence_number,
    clear_pending_removes_only_the_named_deliveries,
    delete_removes_the_rollout_and_its_events,
    list_pages_in_key_order_with_filters_and_cursors,
    everything_is_there_after_reopening_the_file,
    corrupt_rows_are_reported_with_the_rollout_not_panicked_on,
    a_batch_commits_every_item_that_is_current_and_only_those,
    flags_are_versioned_like_rollouts,
    flag_history_counts_and_triggers_survive_reopening,
    tokens_round_trip_and_names_are_unique,
    token_stamps_change_with_every_creation_and_revocation,
);
