//! Committed status changes, written outwards: each step's events as Kubernetes Events, the
//! status of a rollout that runs a Canary onto the Canary, and that of a rollout with
//! `spec.target.statusTo` onto the object it names (the rollout's own status is written by the
//! store, in the commit).

use std::collections::{BTreeMap, HashMap};

use kube::api::{Api, DynamicObject};
use serde_json::json;
use weir_engine::EngineHandle;
use weir_store::{RolloutKey, Store, StoredEvent};

use super::{Error, canaries, report};
use crate::crd::{GROUP, VERSION};
use crate::flagger::canaries_resource;
use crate::store::{KubeStore, rollouts_resource};

/// Publishes every status change the engine behind `handle` commits, until the engine stops.
pub(super) async fn publish(
    client: kube::Client,
    handle: EngineHandle,
    canaries: canaries::Canaries,
    store: KubeStore,
) {
    let mut changes = handle.subscribe();
    // What was last written to each statusTo object, so unchanged annotations are not rewritten.
    let mut written: HashMap<RolloutKey, BTreeMap<String, String>> = HashMap::new();
    loop {
        let change = match changes.recv().await {
            Ok(change) => change,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        if let Some(status) = &change.status
            && let Ok(Some(stored)) = store.get(&change.key).await
            && let Some(reference) = stored
                .rollout
                .spec
                .target
                .kubernetes()
                .and_then(|kubernetes| kubernetes.status_to.as_ref())
        {
            let annotations = crate::status_to::annotations(&change.key, status);
            if written.get(&change.key) != Some(&annotations) {
                match crate::status_to::write(&client, &change.key, reference, status).await {
                    Ok(()) => {
                        written.insert(change.key.clone(), annotations);
                    }
                    Err(source) => report(&Error::Api {
                        doing: format!(
                            "writing the status of {} to {} {}",
                            change.key,
                            reference.kind.as_deref().unwrap_or_default(),
                            reference.name
                        ),
                        source,
                    }),
                }
            }
        }
        let resource = if canaries.contains(&change.key) {
            if let Some(status) = &change.status
                && let Err(error) = canaries::mirror(&client, &change.key, status).await
            {
                report(&error);
            }
            canaries_resource()
        } else {
            rollouts_resource()
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &change.key.namespace, &resource);
        record(&client, &api, &change.key, &change.events).await;
    }
}

/// Each event weir recorded for a rollout also becomes a Kubernetes Event on `involved` (the
/// Rollout, or the Canary it runs), so `kubectl describe` and `kubectl get events` show the
/// steps (weir's history keeps them with their evidence after the cluster's Events expire).
async fn record(
    client: &kube::Client,
    involved: &Api<DynamicObject>,
    key: &RolloutKey,
    events: &[StoredEvent],
) {
    if events.is_empty() {
        return;
    }
    let (uid, api_version, kind) = match involved.get_opt(&key.name).await {
        Ok(Some(object)) => (
            object.metadata.uid,
            object.types.as_ref().map(|t| t.api_version.clone()),
            object.types.as_ref().map(|t| t.kind.clone()),
        ),
        _ => (None, None, None),
    };
    let api: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(client.clone(), &key.namespace);
    for stored in events {
        let event = &stored.event;
        let at = event.at.to_string();
        let object = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": format!("{}.{}", key.name, stored.seq), "namespace": key.namespace},
            "involvedObject": {
                "apiVersion": api_version.clone().unwrap_or_else(|| format!("{GROUP}/{VERSION}")),
                "kind": kind.clone().unwrap_or_else(|| "Rollout".into()),
                "name": key.name,
                "namespace": key.namespace,
                "uid": uid,
            },
            "reason": format!("{:?}", event.reason),
            "message": event.message,
            "type": if event.reason.is_warning() { "Warning" } else { "Normal" },
            "source": {"component": "weir-operator"},
            "firstTimestamp": at,
            "lastTimestamp": at,
            "count": 1,
        });
        let event: k8s_openapi::api::core::v1::Event = match serde_json::from_value(object) {
            Ok(event) => event,
            Err(source) => {
                report(&Error::Event {
                    key: key.clone(),
                    source,
                });
                continue;
            }
        };
        if let Err(source) = api.create(&kube::api::PostParams::default(), &event).await {
            report(&Error::Api {
                doing: format!("recording an event of {key}"),
                source,
            });
        }
    }
}
