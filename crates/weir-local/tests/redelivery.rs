//! A notification that cannot be delivered stays pending and is delivered by a later tick of its
//! rollout (after the redelivery pause), not only when weir restarts; once delivered it is not
//! sent again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weir_core::machine::Notification;
use weir_core::model::{Phase, Rollout, Severity};
use weir_engine::{BoxFuture, Engine, EngineOptions, Notifier, ProviderError};
use weir_local::LocalTargets;
use weir_router::RouterConfig;
use weir_store::{RolloutKey, SqliteStore, Store};
use weir_testkit::engine::{Background, local_providers};
use weir_testkit::fixtures::{sample_config, start_sample_app};
use weir_testkit::wait::wait_for;

/// Refuses the first attempt of every delivery id, accepts later ones; counts attempts per id.
#[derive(Clone, Default)]
struct FlakyReceiver {
    attempts: Arc<Mutex<HashMap<String, (u32, Notification)>>>,
}

impl Notifier for FlakyReceiver {
    fn notify<'a>(
        &'a self,
        _key: &'a RolloutKey,
        _rollout: &'a Rollout,
        notification: &'a Notification,
    ) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async move {
            let mut attempts = self.attempts.lock().unwrap();
            let entry = attempts
                .entry(notification.delivery_id.clone())
                .or_insert((0, notification.clone()));
            entry.0 += 1;
            if entry.0 == 1 {
                Err(ProviderError::transient("the receiver is down"))
            } else {
                Ok(())
            }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_notification_is_delivered_by_a_later_tick_exactly_once_more() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("weir.db"))
        .await
        .unwrap();
    let targets = LocalTargets::new(RouterConfig::default()).allowing_commands();
    let mut providers = local_providers(&targets, weir_core::catalog::SharedCatalog::default());
    let receiver = FlakyReceiver::default();
    providers.notifier = Arc::new(receiver.clone());
    let options = EngineOptions {
        redelivery_pause: Duration::from_millis(500),
        ..EngineOptions::default()
    };
    let (engine, handle) = Engine::new(store.clone(), providers, options);
    let stats = engine.stats();
    let engine = Background::start(engine);

    let (v1, v2) = (
        start_sample_app(sample_config("v1")).await,
        start_sample_app(sample_config("v2")).await,
    );
    // No checks: every tick advances, and the promotion notifies. No traffic either, so the
    // run promotes on Flagger's semantics (`noHarm`): the evidence rule would hold it.
    let yaml = format!(
        "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {{name: shop}}\nspec:\n  target:\n    kind: local\n    listen: \"127.0.0.1:0\"\n    primary: {{url: \"http://{v1}\", healthCheck: /healthz}}\n    canary: {{url: \"http://{v2}\", healthCheck: /healthz}}\n  plan: {{canary: {{stepWeights: [50, 100]}}}}\n  analysis: {{interval: 1s, progressDeadline: 30s, evidence: {{promoteOn: noHarm}}}}\n"
    );
    let rollout: Rollout = serde_saphyr::from_str(&yaml).unwrap();
    let key = RolloutKey::of(&rollout);
    handle.apply(rollout, None).await.unwrap();

    wait_for("the promotion and its notification delivered", || async {
        let stored = store.get(&key).await.unwrap()?;
        let delivered =
            receiver
                .attempts
                .lock()
                .unwrap()
                .values()
                .any(|(attempts, notification)| {
                    *attempts >= 2 && notification.severity == Severity::Info
                });
        (stored.status.phase == Phase::Succeeded && delivered && stored.pending_effects.is_empty())
            .then_some(())
    })
    .await;
    // Several more ticks (counted, not timed): a delivered notification is not sent again.
    let ticks = stats.ticks.load(Ordering::Relaxed);
    wait_for("three more ticks", || async {
        (stats.ticks.load(Ordering::Relaxed) >= ticks + 3).then_some(())
    })
    .await;
    let attempts = receiver.attempts.lock().unwrap().clone();
    assert!(!attempts.is_empty());
    for (id, (count, notification)) in &attempts {
        assert_eq!(
            *count, 2,
            "{id} ({}): one failed attempt, one delivery",
            notification.message
        );
    }
    engine.stop().await;
    use weir_engine::TargetProvider;
    targets.remove(&key).await;
}
