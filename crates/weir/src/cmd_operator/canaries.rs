//! Flagger's Canaries on the operator: each Canary is converted into a weir Rollout it owns
//! (weir-kube's `flagger` module), and the Rollout's status and events are mirrored back onto
//! the Canary in Flagger's shape.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::TryStreamExt;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::json;
use weir_core::model::RolloutStatus;
use weir_kube::flagger::{canaries_resource, canary_status, rollout_for};
use weir_kube::store::{key_of, rollouts_resource};
use weir_kube::target::FIELD_MANAGER;
use weir_store::RolloutKey;

/// The rollouts that run a Canary (same namespace and name).
#[derive(Clone, Default)]
pub(super) struct Canaries(Arc<Mutex<HashSet<RolloutKey>>>);

impl Canaries {
    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<RolloutKey>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether rollout `key` runs a Canary.
    pub(super) fn contains(&self, key: &RolloutKey) -> bool {
        self.set().contains(key)
    }
}

/// Whether Flagger's Canary CRD is installed (weir then runs Canaries too).
pub(super) async fn installed(api: &Api<DynamicObject>) -> bool {
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => true,
        Err(kube::Error::Api(status)) if status.code == 404 => false,
        Err(error) => {
            eprintln!(
                "weir operator: cannot tell whether Flagger's Canary CRD is installed: {error}"
            );
            false
        }
    }
}

/// Converts every Canary of `api` into its Rollout (server-side apply: a Canary read again
/// unchanged writes nothing); a Canary weir cannot run gets the reason in its `Promoted`
/// condition. Deleting a Canary deletes its Rollout through the owner reference.
pub(super) async fn watch(api: Api<DynamicObject>, canaries: Canaries) {
    use kube::runtime::WatchStreamExt;
    let events = watcher(api.clone(), watcher::Config::default()).default_backoff();
    futures_util::pin_mut!(events);
    loop {
        match events.try_next().await {
            Ok(Some(watcher::Event::Apply(canary) | watcher::Event::InitApply(canary))) => {
                if canary.metadata.deletion_timestamp.is_none() {
                    canaries.set().insert(key_of(&canary));
                    run(&api, &canary).await;
                }
            }
            Ok(Some(watcher::Event::Delete(canary))) => {
                canaries.set().remove(&key_of(&canary));
            }
            Ok(Some(watcher::Event::Init | watcher::Event::InitDone)) => {}
            Ok(None) => return,
            Err(error) => eprintln!("weir operator: watching canaries: {error}"),
        }
    }
}

async fn run(api: &Api<DynamicObject>, canary: &DynamicObject) {
    let key = key_of(canary);
    let client = api.clone().into_client();
    match rollout_for(canary) {
        Ok((rollout, _warnings)) => {
            let rollouts: Api<DynamicObject> =
                Api::namespaced_with(client, &key.namespace, &rollouts_resource());
            if let Err(error) = rollouts
                .patch(
                    &key.name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&rollout),
                )
                .await
            {
                eprintln!("weir operator: writing the rollout of canary {key}: {error}");
            }
        }
        Err(reason) => {
            eprintln!("weir operator: canary {key} refused: {reason}");
            refuse(&client, &key, &reason).await;
        }
    }
}

/// Says on Canary `key` why weir does not run it.
pub(super) async fn refuse(client: &kube::Client, key: &RolloutKey, reason: &str) {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &key.namespace, &canaries_resource());
    let patch = json!({"status": {"conditions": [{
        "type": "Promoted",
        "status": "Unknown",
        "reason": "Refused",
        "message": format!("weir cannot run this Canary: {reason}"),
    }]}});
    if let Err(error) = api
        .patch_status(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        eprintln!("weir operator: writing the status of canary {key}: {error}");
    }
}

/// Writes a committed status onto Canary `key`, in Flagger's shape.
pub(super) async fn mirror(client: &kube::Client, key: &RolloutKey, status: &RolloutStatus) {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &key.namespace, &canaries_resource());
    let patch = json!({"status": canary_status(status)});
    if let Err(error) = api
        .patch_status(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        eprintln!("weir operator: writing the status of canary {key}: {error}");
    }
}
