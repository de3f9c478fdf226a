//! A target that fails to apply an effect is reconciled at the next tick, even when a request
//! (an apply, a command) is handled in between: the request must not swallow the reconcile.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use jiff::Timestamp;
use weir_core::FieldError;
use weir_core::machine::{Effect, Scale};
use weir_core::model::{Rollout, RolloutStatus, TargetKind};
use weir_engine::clock::ManualClock;
use weir_engine::synthetic::{SyntheticMetrics, SyntheticTargets};
use weir_engine::{
    BoxFuture, Engine, EngineOptions, ProviderError, Providers, TargetObservation, TargetProvider,
};
use weir_store::{PostgresStore, RolloutKey, SqliteStore};
use weir_testkit::engine::Background;
use weir_testkit::postgres::TestDb;
use weir_testkit::wait::wait_for;
use weir_webhooks::{HttpHookRunner, LogNotifier};

/// Synthetic targets whose first scale-down fails (as a Kubernetes target's does while the
/// primary is still starting), counting reconciles.
#[derive(Default)]
struct FlakyScale {
    inner: SyntheticTargets,
    scale_failures: AtomicU64,
    reconciles: AtomicU64,
}

impl TargetProvider for FlakyScale {
    fn validate(&self, rollout: &Rollout) -> Vec<FieldError> {
        self.inner.validate(rollout)
    }

    fn reconcile<'a>(
        &'a self,
        key: &'a RolloutKey,
        rollout: &'a Rollout,
        status: &'a RolloutStatus,
    ) -> BoxFuture<'a, Result<(), ProviderError>> {
        self.reconciles.fetch_add(1, Ordering::SeqCst);
        self.inner.reconcile(key, rollout, status)
    }

    fn observe<'a>(
        &'a self,
        key: &'a RolloutKey,
        rollout: &'a Rollout,
        status: &'a RolloutStatus,
    ) -> BoxFuture<'a, Result<TargetObservation, ProviderError>> {
        self.inner.observe(key, rollout, status)
    }

    fn apply<'a>(
        &'a self,
        key: &'a RolloutKey,
        rollout: &'a Rollout,
        status: &'a RolloutStatus,
        effect: &'a Effect,
    ) -> BoxFuture<'a, Result<(), ProviderError>> {
        if matches!(effect, Effect::ScaleCanary(Scale::Down))
            && self.scale_failures.fetch_add(1, Ordering::SeqCst) == 0
        {
            return Box::pin(async {
                Err(ProviderError::transient("the primary is not ready yet"))
            });
        }
        self.inner.apply(key, rollout, status, effect)
    }

    fn remove<'a>(&'a self, key: &'a RolloutKey) -> BoxFuture<'a, ()> {
        self.inner.remove(key)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_apply_is_reconciled_at_the_next_tick_even_after_a_request() {
    // On the store WEIR_TEST_STORE names: SQLite by default, or PostgreSQL.
    let db = TestDb::from_env();
    match &db {
        TestDb::Sqlite(dir) => {
            reconciled_at_the_next_tick_on(SqliteStore::open(&dir.path()).await.unwrap()).await
        }
        TestDb::Postgres { url, .. } => {
            reconciled_at_the_next_tick_on(PostgresStore::open(url, "test").await.unwrap()).await
        }
    }
}

async fn reconciled_at_the_next_tick_on<S: weir_store::Store>(store: S) {
    let clock = ManualClock::new("2026-01-01T00:00:00Z".parse::<Timestamp>().unwrap());
    let target = Arc::new(FlakyScale::default());
    let providers = Providers {
        targets: vec![(TargetKind::Flag, target.clone() as Arc<dyn TargetProvider>)],
        ..Providers::new(
            weir_core::catalog::SharedCatalog::default(),
            Arc::new(HttpHookRunner::default()),
            Arc::new(LogNotifier),
        )
        .with_metrics(Arc::new(SyntheticMetrics::default()))
    };
    let options = EngineOptions {
        clock: clock.shared(),
        ..EngineOptions::default()
    };
    let (engine, handle) = Engine::new(store, providers, options);
    let engine = Background::start(engine);
    let rollout: Rollout = serde_saphyr::from_str(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {name: flaky, namespace: default}
spec:
  target: {kind: flag, flag: flaky, revision: r1}
  plan: {canary: {stepWeights: [10, 50]}}
  analysis: {interval: 1m}
",
    )
    .unwrap();
    handle.apply(rollout.clone(), None).await.unwrap();
    // Set-up scales the canary down, which fails once.
    wait_for("the failed scale-down", || async {
        (target.scale_failures.load(Ordering::SeqCst) >= 1).then_some(())
    })
    .await;
    assert_eq!(target.reconciles.load(Ordering::SeqCst), 0);

    // A request before the next tick (the operator re-applies a rollout whenever its object
    // changes, status writes included).
    handle.apply(rollout, None).await.unwrap();

    clock.advance(Duration::from_secs(60));
    // Without the fix this gives up at the deadline: the request took the reconcile away.
    wait_for(
        "the tick after the failure to reconcile the target",
        || async { (target.reconciles.load(Ordering::SeqCst) >= 1).then_some(()) },
    )
    .await;
    assert_eq!(target.reconciles.load(Ordering::SeqCst), 1);
    engine.stop().await;
}
