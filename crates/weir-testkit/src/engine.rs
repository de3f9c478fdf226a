//! An engine running in the background of a test, on the test's runtime, until stopped;
//! waiting until it has done everything due at its manual clock's time; load through the router
//! of one of its local rollouts (or at a router's address); the providers of local rollouts.

use std::sync::Arc;

use tokio::sync::{oneshot, watch};
use weir_core::catalog::SharedCatalog;
use weir_engine::clock::Clock;
use weir_engine::{Activity, Engine, Providers};
use weir_local::LocalTargets;
use weir_store::{RolloutKey, Store};
use weir_tools::load::{LoadConfig, LoadGenerator, LoadSummary};

use crate::wait::wait_for;

/// The providers of local rollouts in a test: `targets`, judged by their routers' counters,
/// webhooks over HTTP signed with `catalog`'s secrets, and notifications to its alert providers.
/// (`weir` adds Prometheus in front; the tests of that live with weir-prometheus and weir.)
/// All of them share the one catalog, so a change to it is seen by every one.
pub fn local_providers(targets: &LocalTargets, catalog: impl Into<SharedCatalog>) -> Providers {
    let catalog: SharedCatalog = catalog.into();
    targets.add_to(Providers::new(
        catalog.clone(),
        Arc::new(weir_webhooks::HttpHookRunner::new(catalog.clone())),
        Arc::new(weir_webhooks::AlertNotifier::new(catalog)),
    ))
}

/// A running engine. [`Background::stop`] ends it; dropping it ends it too (the run sees its
/// shutdown signal when the runtime next polls it).
pub struct Background {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), weir_engine::EngineError>>,
}

impl Background {
    /// Spawns `engine.run` on the current runtime.
    pub fn start<S: Store>(engine: Engine<S>) -> Background {
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(engine.run(async move {
            let _ = stopped.await;
        }));
        Background { stop, task }
    }

    /// Stops the engine and waits for it to end; panics if it failed.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.task
            .await
            .expect("the engine task panicked")
            .expect("the engine failed");
    }
}

/// Waits until the engine that `activity` watches (`Engine::activity`, asked for before it
/// started) has done everything due at `clock`'s time: no job running, no request waiting, no
/// timer due. Move the clock, then call this: it returns once the work the move made due is
/// committed and applied. Panics after [`crate::wait::DEADLINE`], with what the engine last
/// reported.
pub async fn until_idle(activity: &mut watch::Receiver<Activity>, clock: &dyn Clock) {
    let now = clock.now();
    let waited = tokio::time::timeout(crate::wait::DEADLINE, async {
        activity.wait_for(|seen| seen.is_idle_at(now)).await.is_ok()
    })
    .await;
    match waited {
        Ok(true) => {}
        Ok(false) => panic!("the engine stopped before it was idle at {now}"),
        Err(_) => panic!(
            "gave up after {:?} waiting for the engine to be idle at {now}; last: {:?}",
            crate::wait::DEADLINE,
            *activity.borrow()
        ),
    }
}

/// Open-loop load through the router of a local rollout, from the moment that router serves
/// (its socket may be bound before the rollout starts; requests sent before its first tick would
/// only wait in the backlog) until stopped.
pub struct Load {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Option<LoadSummary>>,
}

impl Load {
    /// Starts `rate` requests a second at `/` of the router of rollout `key`, once it serves,
    /// at the address it bound.
    pub fn start(targets: &LocalTargets, key: &RolloutKey, rate: f64) -> Load {
        let (targets, key) = (targets.clone(), key.clone());
        let (stop, mut stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let what = format!("the router of {key} to serve");
            let serving = wait_for(&what, || async {
                targets.metrics(&key).await?;
                targets.router_address(&key).await
            });
            // Stopped (or dropped) before the router served: no load was sent.
            let address = tokio::select! {
                address = serving => address,
                _ = &mut stopped => return None,
            };
            let config = LoadConfig::new(format!("http://{address}/"), rate, None);
            let summary = LoadGenerator::new(config)
                .unwrap()
                .run_until(async move {
                    let _ = stopped.await;
                })
                .await;
            Some(summary)
        });
        Load { stop, task }
    }

    /// Starts `rate` requests a second at `http://{address}/` now (a router this test reads the
    /// address of, e.g. from a `weir serve` rollout's history). Needs a runtime context.
    pub fn at(address: std::net::SocketAddr, rate: f64) -> Load {
        let (stop, stopped) = oneshot::channel::<()>();
        let config = LoadConfig::new(format!("http://{address}/"), rate, None);
        let generator = LoadGenerator::new(config).unwrap();
        let task = tokio::spawn(async move {
            let summary = generator
                .run_until(async move {
                    let _ = stopped.await;
                })
                .await;
            Some(summary)
        });
        Load { stop, task }
    }

    /// Stops the load and returns what it saw; panics if the router never served before.
    pub async fn stop(self) -> LoadSummary {
        let _ = self.stop.send(());
        self.task
            .await
            .expect("the load task panicked")
            .expect("the load was stopped before the router served")
    }
}
