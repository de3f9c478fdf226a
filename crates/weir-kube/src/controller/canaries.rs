//! Flagger's Canaries: each Canary is converted into a weir Rollout it owns (the `flagger`
//! module), and the Rollout's status and events are mirrored back onto the Canary in Flagger's
//! shape.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::json;
use weir_core::model::RolloutStatus;
use weir_store::RolloutKey;

use super::{Error, Reconcile, report};
use crate::flagger::{canaries_resource, canary_status, rollout_for};
use crate::store::{key_of, rollouts_resource};
use crate::target::FIELD_MANAGER;

/// The rollouts that run a Canary (same namespace and name), and the provider of Canaries that
/// name none.
#[derive(Clone, Default)]
pub(super) struct Canaries {
    running: Arc<Mutex<HashSet<RolloutKey>>>,
    default_provider: Option<Arc<str>>,
}

impl Canaries {
    /// Canaries that name no provider get `default_provider` (else istio, as with Flagger).
    pub(super) fn new(default_provider: Option<&str>) -> Canaries {
        Canaries {
            running: Arc::default(),
            default_provider: default_provider.map(Arc::from),
        }
    }

    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<RolloutKey>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether rollout `key` runs a Canary.
    pub(super) fn contains(&self, key: &RolloutKey) -> bool {
        self.set().contains(key)
    }
}

/// Converts every Canary watched into its Rollout (server-side apply: a Canary read again
/// unchanged writes nothing); a Canary weir cannot run gets the reason in its `Promoted`
/// condition. Deleting a Canary deletes its Rollout through the owner reference.
impl Reconcile for Canaries {
    const WATCHED: &'static str = "canaries";

    async fn applied(&self, api: &Api<DynamicObject>, canary: DynamicObject) -> Result<(), Error> {
        if canary.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        self.set().insert(key_of(&canary));
        run(api, &canary, self.default_provider.as_deref()).await
    }

    async fn deleted(&self, canary: DynamicObject) -> Result<(), Error> {
        self.set().remove(&key_of(&canary));
        Ok(())
    }
}

/// Whether Flagger's Canary CRD is installed (weir then runs Canaries too).
pub(super) async fn installed(api: &Api<DynamicObject>) -> bool {
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => true,
        Err(kube::Error::Api(status)) if status.code == 404 => false,
        Err(source) => {
            report(&Error::Api {
                doing: "cannot tell whether Flagger's Canary CRD is installed".into(),
                source,
            });
            false
        }
    }
}

/// Writes the Rollout of `canary`, or says on it why weir does not run it.
async fn run(
    api: &Api<DynamicObject>,
    canary: &DynamicObject,
    default_provider: Option<&str>,
) -> Result<(), Error> {
    let key = key_of(canary);
    let client = api.clone().into_client();
    match rollout_for(canary, default_provider) {
        Ok((rollout, _warnings)) => {
            let rollouts: Api<DynamicObject> =
                Api::namespaced_with(client, &key.namespace, &rollouts_resource());
            rollouts
                .patch(
                    &key.name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&rollout),
                )
                .await
                .map_err(Error::api(format!("writing the rollout of canary {key}")))?;
            Ok(())
        }
        Err(reason) => {
            eprintln!("weir operator: canary {key} refused: {reason}");
            refuse(&client, &key, &reason).await
        }
    }
}

/// Says on Canary `key` why weir does not run it.
pub(super) async fn refuse(
    client: &kube::Client,
    key: &RolloutKey,
    reason: &str,
) -> Result<(), Error> {
    let patch = json!({"status": {"conditions": [{
        "type": "Promoted",
        "status": "Unknown",
        "reason": "Refused",
        "message": format!("weir cannot run this Canary: {reason}"),
    }]}});
    patch_status(client, key, &patch).await
}

/// Writes a committed status onto Canary `key`, in Flagger's shape.
pub(super) async fn mirror(
    client: &kube::Client,
    key: &RolloutKey,
    status: &RolloutStatus,
) -> Result<(), Error> {
    patch_status(client, key, &json!({"status": canary_status(status)})).await
}

async fn patch_status(
    client: &kube::Client,
    key: &RolloutKey,
    patch: &serde_json::Value,
) -> Result<(), Error> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &key.namespace, &canaries_resource());
    api.patch_status(&key.name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(Error::api(format!("writing the status of canary {key}")))?;
    Ok(())
}
