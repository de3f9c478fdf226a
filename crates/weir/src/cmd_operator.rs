//! `weir operator`: rollouts on Kubernetes. Watches `rollouts.weir.dev` objects and runs each
//! through the engine with the `kubernetes` target (weir-kube); the engine's state lives in each
//! rollout's status (weir-kube's `KubeStore`), written through the status subresource when a step
//! commits.

mod canaries;
mod catalog;
mod leading;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use futures_util::TryStreamExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::json;
use weir_engine::{Engine, EngineError, EngineHandle, EngineOptions};
use weir_kube::crd::{GROUP, VERSION};
use weir_kube::flagger::{CANARY_LABEL, canaries_resource};
use weir_kube::store::{KubeStore, apis, key_of, read_rollout, rollouts_resource};
use weir_kube::target::KubernetesTargets;
use weir_store::{RolloutKey, Store};

/// Arguments of `weir operator`.
#[derive(Debug, Args)]
pub struct OperatorArgs {
    /// Watch rollouts in this namespace only, e.g. `--namespace shop`; repeat it for several
    /// (`-n shop -n payments`). Default: every namespace.
    #[arg(long, short = 'n', value_name = "NS")]
    namespace: Vec<String>,
    /// Watch rollouts in every namespace: the default, said explicitly, e.g. `weir operator -A`
    /// in a manifest.
    #[arg(long, short = 'A', conflicts_with = "namespace")]
    all_namespaces: bool,
    /// Address of weir's HTTP API, for the client verbs (`weir status NAME --server URL`,
    /// `weir promote`, ...), e.g. `--listen 0.0.0.0:7979` in a pod. Port 0 picks a free port;
    /// the bound address is printed on start.
    #[arg(long, value_name = "ADDR", default_value = crate::cmd_serve::DEFAULT_LISTEN, env = "WEIR_LISTEN")]
    listen: SocketAddr,
    /// `text`: start-up lines on stderr; `json` (e.g. `-o json` for a script that starts it):
    /// also the addresses bound, as the first line on stdout: {"listening": {"api": "HOST:PORT"}}.
    #[arg(long, short, value_enum, default_value_t = crate::cmd_core::OutputFormat::Text)]
    output: crate::cmd_core::OutputFormat,
    #[command(flatten)]
    leader: leading::LeaderArgs,
    #[command(flatten)]
    integrations: crate::integrations::IntegrationArgs,
}

/// `weir operator`.
pub fn operator(args: &OperatorArgs) -> Result<ExitCode> {
    // A controller runs unattended: what the engine could not do (a provider's error, a refused
    // write) goes to its log, one line each.
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = kube::Client::try_default().await.context(
            "cannot reach the Kubernetes API: set KUBECONFIG (or run in a pod with a service account)",
        )?;
        let integrations = args.integrations.integrations(Vec::new())?;
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let bound = listener.local_addr().unwrap_or(args.listen);
        integrations.outbound.add_own(bound);
        crate::listening::announce(args.output, &[("api", bound)]);
        let Some(leading) = leading::Leading::acquire(&args.leader, &client, &listener).await?
        else {
            return Ok(ExitCode::SUCCESS);
        };
        let fence = leading.fence();
        let store = KubeStore::new(client.clone(), args.namespace.clone(), fence.clone());
        let mut targets = KubernetesTargets::new(client.clone());
        if let Some(fence) = fence {
            targets = targets.with_fence(fence);
        }
        let providers = targets.add_to(integrations.shared_providers());
        let (engine, handle) = Engine::new(store.clone(), providers, EngineOptions::default());
        let canaries = canaries::Canaries::default();
        tokio::spawn(publish(
            client.clone(),
            handle.clone(),
            canaries.clone(),
            store.clone(),
        ));
        // Templates and providers first, so no rollout is refused for naming one not read yet.
        catalog::follow(&client, &args.namespace, integrations.catalog.clone(), handle.clone())
            .await
            .wait()
            .await;
        let watching = Watching {
            handle: handle.clone(),
            targets,
            finalizing: Arc::default(),
        };
        for api in apis(&client, &args.namespace, &rollouts_resource()) {
            tokio::spawn(watch_rollouts(api, watching.clone()));
        }
        let canary_apis = apis(&client, &args.namespace, &canaries_resource());
        let flagger = canaries::installed(&canary_apis[0]).await;
        if flagger {
            for api in canary_apis {
                tokio::spawn(canaries::watch(api, canaries.clone()));
            }
        }
        eprintln!(
            "weir operator: watching rollouts.{GROUP}{} in {}; API at http://{bound}; state in each rollout's status; Ctrl-C stops",
            if flagger { " and Flagger's canaries.flagger.app" } else { " (Flagger's Canary CRD is not installed)" },
            if args.namespace.is_empty() {
                "every namespace".to_string()
            } else {
                args.namespace.join(", ")
            },
        );
        // In a cluster the API is reached by Service and pod names: no Host checks here
        // (docs/SECURITY.md); access is the cluster's network policy's to limit.
        let stopped =
            crate::cmd_serve::run_until_stopped(listener.into(), store, handle, engine, Default::default())
                .await;
        leading.release().await;
        stopped
    })
}

/// The finalizer weir puts on a rollout whose spec asks for `revertOnDeletion`: deleting it
/// then first restores the target (Flagger's semantics) and removes what weir created.
pub const REVERT_FINALIZER: &str = "weir.dev/revert-on-deletion";

/// What the watches share.
#[derive(Clone)]
struct Watching {
    handle: EngineHandle,
    targets: KubernetesTargets,
    /// Rollouts whose deletion is being finalised (a watch event per retry must not start a
    /// second one).
    finalizing: Arc<Mutex<HashSet<RolloutKey>>>,
}

/// Hands every rollout object the cluster holds to the engine, and its deletion too. The watch
/// restarts by itself after an error (with backoff), re-listing what it missed.
async fn watch_rollouts(api: Api<DynamicObject>, watching: Watching) {
    use kube::runtime::WatchStreamExt;
    let events = watcher(api.clone(), watcher::Config::default()).default_backoff();
    futures_util::pin_mut!(events);
    loop {
        match events.try_next().await {
            Ok(Some(watcher::Event::Apply(object) | watcher::Event::InitApply(object))) => {
                if object.metadata.deletion_timestamp.is_some() {
                    watching.finalize(&api, object);
                } else {
                    apply(&api, &watching.handle, &object).await;
                    keep_finalizer(&api, &object).await;
                }
            }
            Ok(Some(watcher::Event::Delete(object))) => {
                let key = key_of(&object);
                match watching.handle.delete(key.clone(), None).await {
                    // Forgotten already (a finalised rollout, or one weir refused).
                    Ok(()) | Err(EngineError::NotFound(_)) => {}
                    Err(error) => eprintln!("weir operator: deleting {key}: {error}"),
                }
            }
            Ok(Some(watcher::Event::Init | watcher::Event::InitDone)) => {}
            Ok(None) => return,
            Err(error) => eprintln!("weir operator: watching rollouts: {error}"),
        }
    }
}

/// Adds [`REVERT_FINALIZER`] to a rollout that asks for `revertOnDeletion`, and takes it off one
/// that no longer does.
async fn keep_finalizer(api: &Api<DynamicObject>, object: &DynamicObject) {
    let wanted = object
        .data
        .pointer("/spec/revertOnDeletion")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    let finalizers = object.metadata.finalizers.clone().unwrap_or_default();
    if wanted == finalizers.iter().any(|f| f == REVERT_FINALIZER) {
        return;
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
    set_finalizers(api, object, finalizers).await;
}

/// Writes a rollout's finalizers, if the object is still the one read (resourceVersion).
async fn set_finalizers(
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    finalizers: serde_json::Value,
) {
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
    if let Err(error) = api
        .patch(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        // A conflict means a newer object is on its way through the watch.
        eprintln!("weir operator: updating the finalizers of {key}: {error}");
    }
}

impl Watching {
    /// A rollout being deleted with [`REVERT_FINALIZER`]: the engine forgets it (routing all
    /// traffic to the primary), the target is restored (retried until its pods are ready), and
    /// then the finalizer goes, letting Kubernetes delete the object.
    fn finalize(&self, api: &Api<DynamicObject>, object: DynamicObject) {
        let has_ours = object
            .metadata
            .finalizers
            .as_ref()
            .is_some_and(|all| all.iter().any(|f| f == REVERT_FINALIZER));
        let key = key_of(&object);
        if !has_ours
            || !self
                .finalizing
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(key.clone())
        {
            return;
        }
        let (watching, api) = (self.clone(), api.clone());
        tokio::spawn(async move {
            match read_rollout(&object) {
                Ok(rollout) => {
                    match watching.handle.delete(key.clone(), None).await {
                        Ok(()) | Err(EngineError::NotFound(_)) => {}
                        Err(error) => eprintln!("weir operator: deleting {key}: {error}"),
                    }
                    let mut wait = Duration::from_millis(200);
                    while let Err(error) = watching.targets.revert(&key, &rollout).await {
                        eprintln!(
                            "weir operator: reverting {key} before its deletion: {error}; again in {wait:?}"
                        );
                        // A retry's backoff, not a synchronisation: the target's pods need time.
                        tokio::time::sleep(wait).await;
                        wait = (wait * 2).min(Duration::from_secs(10));
                    }
                    eprintln!("weir operator: {key} reverted: the target serves again");
                }
                // Nothing weir could have set up for a rollout it never read.
                Err(reason) => eprintln!("weir operator: {key} deleted unread ({reason})"),
            }
            let others: Vec<String> = object
                .metadata
                .finalizers
                .clone()
                .unwrap_or_default()
                .into_iter()
                .filter(|f| f != REVERT_FINALIZER)
                .collect();
            set_finalizers(&api, &object, json!(others)).await;
            watching
                .finalizing
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&key);
        });
    }
}

/// One rollout object, read as a weir document and applied; a refusal goes to its status.
async fn apply(api: &Api<DynamicObject>, handle: &EngineHandle, object: &DynamicObject) {
    let refusal = match read_rollout(object) {
        Ok(rollout) => match handle.apply(rollout, None).await {
            Ok(_) => None,
            Err(error) => Some(error.to_string()),
        },
        Err(reason) => Some(reason),
    };
    if let Some(reason) = refusal {
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
        {
            eprintln!("weir operator: writing the status of {namespace}/{name}: {error}");
        }
        let from_canary = object
            .metadata
            .labels
            .as_ref()
            .is_some_and(|labels| labels.contains_key(CANARY_LABEL));
        if from_canary {
            canaries::refuse(&api.into_client(), &key_of(object), &reason).await;
        }
    }
}

/// Every committed step's events also become Kubernetes Events, the status of a rollout
/// that runs a Canary is written onto the Canary, and that of a rollout with
/// `spec.target.statusTo` onto the object it names (the rollout's own status is written by the
/// store, in the commit).
async fn publish(
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
            let annotations = weir_kube::status_to::annotations(&change.key, status);
            if written.get(&change.key) != Some(&annotations) {
                match weir_kube::status_to::write(&client, &change.key, reference, status).await {
                    Ok(()) => {
                        written.insert(change.key.clone(), annotations);
                    }
                    Err(error) => eprintln!(
                        "weir operator: writing the status of {} to {} {}: {error}",
                        change.key,
                        reference.kind.as_deref().unwrap_or_default(),
                        reference.name
                    ),
                }
            }
        }
        let resource = if canaries.contains(&change.key) {
            if let Some(status) = &change.status {
                canaries::mirror(&client, &change.key, status).await;
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

/// Each event weir recorded for a rollout also becomes a Kubernetes Event on it, so `kubectl
/// describe` and `kubectl get events` show the steps (weir's history keeps them with their
/// evidence after the cluster's Events expire).
async fn record(
    client: &kube::Client,
    involved: &Api<DynamicObject>,
    key: &RolloutKey,
    events: &[weir_store::StoredEvent],
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
            Err(error) => {
                eprintln!("weir operator: an event of {key} cannot be written: {error}");
                continue;
            }
        };
        if let Err(error) = api.create(&kube::api::PostParams::default(), &event).await {
            eprintln!("weir operator: recording an event of {key}: {error}");
        }
    }
}
