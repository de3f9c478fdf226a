//! An engine running in the background of a test, on the test's runtime, until stopped.

use tokio::sync::oneshot;
use weir_engine::Engine;
use weir_store::Store;

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
