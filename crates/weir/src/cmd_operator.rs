//! `weir operator`: rollouts on Kubernetes. Watches `rollouts.weir.dev` objects and runs each
//! through the engine with the `kubernetes` target (weir-kube); the engine's state lives in each
//! rollout's status (weir-kube's `KubeStore`), written through the status subresource when a step
//! commits.

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use futures_util::TryStreamExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::json;
use weir_engine::{Engine, EngineHandle, EngineOptions};
use weir_kube::crd::{GROUP, VERSION};
use weir_kube::store::{KubeStore, read_rollout, rollouts_resource};
use weir_kube::target::KubernetesTargets;
use weir_store::RolloutKey;

/// Arguments of `weir operator`.
#[derive(Debug, Args)]
pub struct OperatorArgs {
    /// Watch rollouts in this namespace only, e.g. `--namespace shop`; repeat it for several
    /// (`-n shop -n payments`). Default: every namespace.
    #[arg(long, short = 'n', value_name = "NS")]
    namespace: Vec<String>,
    /// Watch rollouts in every namespace (the default; says so explicitly in a manifest).
    #[arg(long, short = 'A', conflicts_with = "namespace")]
    all_namespaces: bool,
    /// Address of weir's HTTP API, for the client verbs (`weir status NAME --server URL`,
    /// `weir promote`, ...), e.g. `--listen 0.0.0.0:7878` in a pod. Port 0 picks a free port;
    /// the bound address is printed on start.
    #[arg(long, value_name = "ADDR", default_value = crate::cmd_serve::DEFAULT_LISTEN, env = "WEIR_LISTEN")]
    listen: SocketAddr,
    /// `text`: start-up lines on stderr; `json`: also the addresses bound, as the first line on
    /// stdout: {"listening": {"api": "HOST:PORT"}}.
    #[arg(long, short, value_enum, default_value_t = crate::cmd_core::OutputFormat::Text)]
    output: crate::cmd_core::OutputFormat,
    #[command(flatten)]
    integrations: crate::integrations::IntegrationArgs,
}

/// `weir operator`.
pub fn operator(args: &OperatorArgs) -> Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = kube::Client::try_default().await.context(
            "cannot reach the Kubernetes API: set KUBECONFIG (or run in a pod with a service account)",
        )?;
        let store = KubeStore::new(client.clone(), args.namespace.clone(), None);
        let integrations = args.integrations.integrations(Vec::new())?;
        let providers =
            KubernetesTargets::new(client.clone()).add_to(integrations.shared_providers());
        let (engine, handle) = Engine::new(store.clone(), providers, EngineOptions::default());
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        tokio::spawn(record_events(client.clone(), handle.clone()));
        if args.namespace.is_empty() {
            let api = Api::all_with(client.clone(), &rollouts_resource());
            tokio::spawn(watch_rollouts(api, handle.clone()));
        }
        for namespace in &args.namespace {
            let api = Api::namespaced_with(client.clone(), namespace, &rollouts_resource());
            tokio::spawn(watch_rollouts(api, handle.clone()));
        }
        let bound = listener.local_addr().unwrap_or(args.listen);
        crate::listening::announce(args.output, &[("api", bound)]);
        eprintln!(
            "weir operator: watching rollouts.{GROUP} in {}; API at http://{bound}; state in each rollout's status; Ctrl-C stops",
            if args.namespace.is_empty() {
                "every namespace".to_string()
            } else {
                args.namespace.join(", ")
            },
        );
        crate::cmd_serve::run_until_stopped(listener, store, handle, engine).await
    })
}

/// Hands every rollout object the cluster holds to the engine, and its deletion too. The watch
/// restarts by itself after an error (with backoff), re-listing what it missed.
async fn watch_rollouts(api: Api<DynamicObject>, handle: EngineHandle) {
    use kube::runtime::WatchStreamExt;
    let events = watcher(api.clone(), watcher::Config::default()).default_backoff();
    futures_util::pin_mut!(events);
    loop {
        match events.try_next().await {
            Ok(Some(watcher::Event::Apply(object) | watcher::Event::InitApply(object))) => {
                apply(&api, &handle, object).await;
            }
            Ok(Some(watcher::Event::Delete(object))) => {
                let key = RolloutKey {
                    namespace: object
                        .metadata
                        .namespace
                        .clone()
                        .unwrap_or_else(|| "default".into()),
                    name: object.metadata.name.clone().unwrap_or_default(),
                };
                if let Err(error) = handle.delete(key.clone(), None).await {
                    eprintln!("weir operator: deleting {key}: {error}");
                }
            }
            Ok(Some(watcher::Event::Init | watcher::Event::InitDone)) => {}
            Ok(None) => return,
            Err(error) => eprintln!("weir operator: watching rollouts: {error}"),
        }
    }
}

/// One rollout object, read as a weir document and applied; a refusal goes to its status.
async fn apply(api: &Api<DynamicObject>, handle: &EngineHandle, object: DynamicObject) {
    let refusal = match read_rollout(&object) {
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
    }
}

/// Every committed step's events also become Kubernetes Events (the status itself is written
/// by the store, in the commit).
async fn record_events(client: kube::Client, handle: EngineHandle) {
    let mut changes = handle.subscribe();
    loop {
        let change = match changes.recv().await {
            Ok(change) => change,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &change.key.namespace, &rollouts_resource());
        record(&client, &api, &change.key, &change.events).await;
    }
}

/// Each event weir recorded for a rollout also becomes a Kubernetes Event on it, so `kubectl
/// describe` and `kubectl get events` show the steps (weir's history keeps them with their
/// evidence after the cluster's Events expire).
async fn record(
    client: &kube::Client,
    rollouts: &Api<DynamicObject>,
    key: &RolloutKey,
    events: &[weir_store::StoredEvent],
) {
    if events.is_empty() {
        return;
    }
    let uid = match rollouts.get_opt(&key.name).await {
        Ok(Some(rollout)) => rollout.metadata.uid,
        _ => None,
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
                "apiVersion": format!("{GROUP}/{VERSION}"),
                "kind": "Rollout",
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
