//! Rollout objects: each is applied to the engine (a refusal goes to its status, and onto the
//! Canary it runs), keeps [`REVERT_FINALIZER`] as its spec asks, and on deletion is forgotten by
//! the engine, its target restored first when it asks for `revertOnDeletion`.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;
use weir_engine::{EngineError, EngineHandle};
use weir_store::RolloutKey;

use super::{Error, Reconcile, canaries, report, retrying};
use crate::flagger::CANARY_LABEL;
use crate::store::{key_of, read_rollout, rollouts_resource};
use crate::target::KubernetesTargets;

/// The finalizer weir puts on a rollout whose spec asks for `revertOnDeletion`: deleting it
/// then first restores the target (Flagger's semantics) and removes what weir created.
pub const REVERT_FINALIZER: &str = "weir.dev/revert-on-deletion";

/// What the rollout watches share.
#[derive(Clone)]
pub(super) struct Rollouts {
    handle: EngineHandle,
    targets: KubernetesTargets,
    /// Rollouts whose deletion is being finalised (a watch event per retry must not start a
    /// second one).
    finalizing: Arc<Mutex<HashSet<RolloutKey>>>,
}

impl Rollouts {
    pub(super) fn new(handle: EngineHandle, targets: KubernetesTargets) -> Rollouts {
        Rollouts {
            handle,
            targets,
            finalizing: Arc::default(),
        }
    }

    fn finalizing(&self) -> std::sync::MutexGuard<'_, HashSet<RolloutKey>> {
        self.finalizing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A rollout being deleted with [`REVERT_FINALIZER`]: the engine forgets it (routing all
    /// traffic to the primary), the target is restored (tried again, as the error policy says,
    /// until its pods are ready), and then the finalizer goes, letting Kubernetes delete the
    /// object.
    fn finalize(&self, api: &Api<DynamicObject>, object: DynamicObject) {
        let has_ours = object
            .metadata
            .finalizers
            .as_ref()
            .is_some_and(|all| all.iter().any(|f| f == REVERT_FINALIZER));
        let key = key_of(&object);
        if !has_ours || !self.finalizing().insert(key.clone()) {
            return;
        }
        let (rollouts, api) = (self.clone(), api.clone());
        tokio::spawn(async move {
            let reverted = match read_rollout(&object) {
                Ok(rollout) => {
                    if let Err(error) = forget(&rollouts.handle, key.clone()).await {
                        report(&error);
                    }
                    let (targets, key, rollout) = (&rollouts.targets, &key, &rollout);
                    let reverted = retrying(move || async move {
                        targets
                            .revert(key, rollout)
                            .await
                            .map_err(|source| Error::Revert {
                                key: key.clone(),
                                source,
                            })
                    })
                    .await;
                    if reverted {
                        eprintln!("weir operator: {key} reverted: the target serves again");
                    }
                    reverted
                }
                // Nothing weir could have set up for a rollout it never read.
                Err(reason) => {
                    eprintln!("weir operator: {key} deleted unread ({reason})");
                    true
                }
            };
            // Not reverted: the finalizer stays, and the object's next change tries again.
            if reverted {
                let others: Vec<String> = object
                    .metadata
                    .finalizers
                    .clone()
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|f| f != REVERT_FINALIZER)
                    .collect();
                if let Err(error) = set_finalizers(&api, &object, json!(others)).await {
                    report(&error);
                }
            }
            rollouts.finalizing().remove(&key);
        });
    }
}

impl Reconcile for Rollouts {
    const WATCHED: &'static str = "rollouts";

    async fn applied(&self, api: &Api<DynamicObject>, object: DynamicObject) -> Result<(), Error> {
        if object.metadata.deletion_timestamp.is_some() {
            self.finalize(api, object);
            return Ok(());
        }
        apply(api, &self.handle, &object).await;
        keep_finalizer(api, &object).await
    }

    async fn deleted(&self, object: DynamicObject) -> Result<(), Error> {
        forget(&self.handle, key_of(&object)).await
    }
}

/// The engine forgets rollout `key` (routing all traffic to the primary).
async fn forget(handle: &EngineHandle, key: RolloutKey) -> Result<(), Error> {
    match handle.delete(key.clone(), None).await {
        // Forgotten already (a finalised rollout, or one weir refused).
        Ok(()) | Err(EngineError::NotFound(_)) => Ok(()),
        Err(source) => Err(Error::Forget { key, source }),
    }
}

/// Adds [`REVERT_FINALIZER`] to a rollout that asks for `revertOnDeletion`, and takes it off one
/// that no longer does.
async fn keep_finalizer(api: &Api<DynamicObject>, object: &DynamicObject) -> Result<(), Error> {
    let wanted = object
        .data
        .pointer("/spec/revertOnDeletion")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    let finalizers = object.metadata.finalizers.clone().unwrap_or_default();
    if wanted == finalizers.iter().any(|f| f == REVERT_FINALIZER) {
        return Ok(());
    }
    let kept: Vec<&String> = finalizers
        .iter()
        .filter(|f| f.as_str() != REVERT_FINALIZER)
        .collect();
    let finalizers = if wanted {
        json!(
            kept.into_iter()
                .chain([&REVERT_FINALIZER.to_string()])
                .collect::<Vec<_>>()
        )
    } else {
        json!(kept)
    };
    set_finalizers(api, object, finalizers).await
}

/// Writes a rollout's finalizers, if the object is still the one read (resourceVersion; a
/// conflict means a newer object is on its way through the watch).
async fn set_finalizers(
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    finalizers: serde_json::Value,
) -> Result<(), Error> {
    let key = key_of(object);
    let api: Api<DynamicObject> = Api::namespaced_with(
        api.clone().into_client(),
        &key.namespace,
        &rollouts_resource(),
    );
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": object.metadata.resource_version,
    }});
    match api
        .patch(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        // The newer object comes through the watch and is handled then: nothing to report.
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => Err(Error::api(format!("updating the finalizers of {key}"))(
            error,
        )),
        Ok(_) => Ok(()),
    }
}

/// One rollout object, read as a weir document and applied; a refusal goes to its status (and
/// to the Canary it runs), and what cannot be written is reported.
pub(super) async fn apply(api: &Api<DynamicObject>, handle: &EngineHandle, object: &DynamicObject) {
    let refusal = match read_rollout(object) {
        Ok(rollout) => match handle.apply(rollout, None).await {
            Ok(_) => None,
            Err(error) => Some(error.to_string()),
        },
        Err(reason) => Some(reason),
    };
    let Some(reason) = refusal else {
        return;
    };
    let name = object.metadata.name.clone().unwrap_or_default();
    let namespace = object
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    eprintln!("weir operator: rollout {namespace}/{name} refused: {reason}");
    let api: Api<DynamicObject> =
        Api::namespaced_with(api.clone().into_client(), &namespace, &rollouts_resource());
    let patch = json!({"status": {"message": format!("refused: {reason}")}});
    if let Err(error) = api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::api(format!(
            "writing the status of {namespace}/{name}"
        )))
    {
        report(&error);
    }
    let from_canary = object
        .metadata
        .labels
        .as_ref()
        .is_some_and(|labels| labels.contains_key(CANARY_LABEL));
    if from_canary
        && let Err(error) = canaries::refuse(&api.into_client(), &key_of(object), &reason).await
    {
        report(&error);
    }
}
