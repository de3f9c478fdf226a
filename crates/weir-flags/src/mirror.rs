//! Flags on an instance that does not own their rollouts (several instances on one database,
//! docs/SCALE-OUT.md): OFREP must answer the same on every instance.
//!
//! A flag rollout's weights are in force only in memory during its run (its committed status is
//! what makes them durable), and only its owner applies its effects. [`FlagMirror`] keeps every
//! other instance's [`Flags`] in step: a change of a flag written elsewhere is read back from the
//! store, and a change of a flag rollout committed elsewhere lays the same strategy over the flag
//! as the owner did (or drops it when the run has ended: the owner writes the final strategy to
//! the flag, which arrives as a flag change).

use weir_core::machine::Route;
use weir_core::model::TargetKind;
use weir_engine::BoxFuture;
use weir_engine::cluster::Mirror;
use weir_store::{FlagKey, FlagStore, RolloutKey, StoredRollout};

use crate::Flags;
use crate::target::{Overlay, moving, overlay};

/// Keeps these [`Flags`] as the owners of other rollouts have them (see the module docs).
#[derive(Clone)]
pub struct FlagMirror<S: FlagStore> {
    flags: Flags<S>,
}

impl<S: FlagStore> FlagMirror<S> {
    /// A mirror into `flags`.
    pub fn new(flags: Flags<S>) -> FlagMirror<S> {
        FlagMirror { flags }
    }

    async fn mirror(&self, key: &RolloutKey, stored: &StoredRollout) {
        if stored.rollout.spec.target.kind() != TargetKind::Flag {
            return;
        }
        let status = &stored.status;
        let route = Route::of(&stored.rollout.spec, status);
        let Ok(Overlay {
            key: flag,
            strategy,
        }) = overlay(&stored.rollout, status, &route)
        else {
            return;
        };
        let running = moving(status);
        self.flags.mark_rolled_out(flag.clone(), key, running);
        match strategy {
            Some(strategy) if running => {
                self.flags.set_rollout_strategy(&flag, strategy).await;
            }
            _ => self.flags.drop_rollout_strategy(&flag).await,
        }
    }
}

impl<S: FlagStore> Mirror for FlagMirror<S> {
    fn rollout_changed<'a>(
        &'a self,
        key: &'a RolloutKey,
        stored: Option<&'a StoredRollout>,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            match stored {
                Some(stored) => self.mirror(key, stored).await,
                None => {
                    for flag in self.flags.flags_of(key) {
                        self.flags.drop_rollout_strategy(&flag).await;
                    }
                    self.flags.release(key);
                }
            }
        })
    }

    fn flag_changed<'a>(&'a self, namespace: &'a str, key: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let key = FlagKey::new(namespace, key);
            if let Err(error) = self.flags.reload(&key).await {
                tracing::warn!(flag = %key, "reading a flag changed by another instance: {error}");
            }
        })
    }

    fn resync<'a>(&'a self, rollouts: &'a [StoredRollout]) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if let Err(error) = self.flags.reload_all().await {
                tracing::warn!("reading the flags again: {error}");
            }
            for stored in rollouts {
                self.mirror(&stored.key, stored).await;
            }
        })
    }
}
