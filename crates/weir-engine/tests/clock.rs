//! The engine takes time only from its clock: a rollout with ten-minute steps runs to the end as
//! fast as a manual clock is moved, and every time in its history is the clock's.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use weir_core::model::{EventReason, Phase, Rollout, TargetKind};
use weir_engine::clock::{Clock, ManualClock};
use weir_engine::synthetic::{SyntheticMetrics, SyntheticTargets};
use weir_engine::{Engine, EngineOptions, Providers};
use weir_store::{PostgresStore, RolloutKey, SqliteStore, Store};
use weir_testkit::engine::Background;
use weir_testkit::postgres::TestDb;
use weir_testkit::wait::wait_for;
use weir_webhooks::{HttpHookRunner, LogNotifier};

const STEP: Duration = Duration::from_secs(600);

fn rollout() -> Rollout {
    serde_saphyr::from_str(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {name: slow, namespace: default}
spec:
  target: {kind: flag, flag: slow, revision: r2}
  plan: {canary: {stepWeights: [10, 50]}}
  analysis:
    interval: 10m
    metrics: [{name: request-success-rate, thresholdRange: {min: 99}}]
",
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_minute_steps_run_as_fast_as_the_clock_is_moved() {
    // On the store WEIR_TEST_STORE names: SQLite by default, or PostgreSQL.
    let db = TestDb::from_env();
    match &db {
        TestDb::Sqlite(dir) => {
            ten_minute_steps_on(SqliteStore::open(&dir.path()).await.unwrap()).await
        }
        TestDb::Postgres { url, .. } => {
            ten_minute_steps_on(PostgresStore::open(url, "test").await.unwrap()).await
        }
    }
}

async fn ten_minute_steps_on<S: Store>(store: S) {
    let start: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let clock = ManualClock::new(start);
    let providers = Providers::new(
        weir_core::catalog::SharedCatalog::default(),
        Arc::new(HttpHookRunner::default()),
        Arc::new(LogNotifier),
    )
    .with_metrics(Arc::new(SyntheticMetrics::default()));
    let providers = Providers {
        targets: vec![(TargetKind::Flag, Arc::new(SyntheticTargets::default()))],
        ..providers
    };
    let options = EngineOptions {
        clock: clock.shared(),
        ..EngineOptions::default()
    };
    let (engine, handle) = Engine::new(store.clone(), providers, options);
    let stats = engine.stats();
    let engine = Background::start(engine);
    let rollout = rollout();
    let key = RolloutKey::of(&rollout);
    handle.apply(rollout, None).await.unwrap();

    // Each move of the clock by one interval makes the next tick due; wait (on the condition,
    // with a generous deadline) for that tick to start before moving again. Nothing happens on
    // its own: the wall clock plays no part.
    let mut moves = 0;
    let phase = || async { store.get(&key).await.unwrap().unwrap().status.phase };
    while phase().await != Phase::Succeeded {
        assert!(moves < 20, "still not promoted after {moves} intervals");
        let ticks = stats.ticks.load(Ordering::SeqCst);
        clock.advance(STEP);
        moves += 1;
        // A tick already under way may be the one that promotes; then no further tick comes.
        wait_for("the tick the clock made due", || async {
            (stats.ticks.load(Ordering::SeqCst) > ticks || phase().await == Phase::Succeeded)
                .then_some(())
        })
        .await;
    }
    engine.stop().await;

    let events = store.events(&key, 0, 0).await.unwrap();
    let weights: Vec<(EventReason, f64)> = events
        .iter()
        .map(|stored| (stored.event.reason, stored.event.canary_weight.percent()))
        .collect();
    assert!(
        weights.contains(&(EventReason::Succeeded, 0.0)),
        "{weights:?}"
    );
    // Every time recorded is the clock's: on the start or a whole number of intervals after it.
    for stored in &events {
        let since = stored.event.at.duration_since(start);
        assert!(
            since >= SignedDuration::ZERO
                && since.as_secs() % 600 == 0
                && stored.event.at <= clock.now(),
            "{:?} at {} is not a time the clock showed",
            stored.event.reason,
            stored.event.at
        );
    }
    // Two steps of ten minutes each, then the promotion: at least half an hour on the clock.
    assert!(clock.now().duration_since(start) >= SignedDuration::from_mins(30));
}
