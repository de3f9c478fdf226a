//! What the shells of the Argo Rollouts and Argo Experiment controllers share: the loop that
//! looks at every object of a kind (woken by its watch, and at least every [`LOOK_AGAIN`]), the
//! objects an owner controls, and requests that a repeated pass may make twice (a create that
//! finds the object there, a delete that finds it gone).

use std::future::Future;
use std::time::Duration;

use futures_util::TryStreamExt;
use jiff::Timestamp;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams,
};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use weir_core::argo::analysis::Phase;
use weir_core::argo::sync::{RunView, SCALE_DOWN_DEADLINE_ANNOTATION};

/// The longest an object waits before it is looked at again while something may change by
/// itself (pods becoming available, a run's phase, a pause's or a delay's end): a deadline for
/// looking, not a synchronisation.
pub const LOOK_AGAIN: Duration = Duration::from_millis(500);

/// A resource of `group`/`version` (the core group is `""`).
pub(crate) fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// The APIs of `resource` in `namespaces`, or across every namespace when there are none.
pub(crate) fn apis(
    client: &kube::Client,
    namespaces: &[String],
    resource: &ApiResource,
) -> Vec<Api<DynamicObject>> {
    if namespaces.is_empty() {
        vec![Api::all_with(client.clone(), resource)]
    } else {
        namespaces
            .iter()
            .map(|namespace| Api::namespaced_with(client.clone(), namespace, resource))
            .collect()
    }
}

/// What failed in a pass.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PassError {
    /// A request to the Kubernetes API; `doing` says what it was for.
    #[error("{doing}: {source}")]
    Api {
        doing: String,
        #[source]
        source: kube::Error,
    },
}

/// A failed request, for `doing`.
pub(crate) fn api_error(doing: impl Into<String>) -> impl FnOnce(kube::Error) -> PassError {
    let doing = doing.into();
    move |source| PassError::Api { doing, source }
}

/// Reconciles every `kind` object of `resource` in `namespaces` (empty: every namespace) with
/// `reconcile`, again whenever one changes and at least every [`LOOK_AGAIN`]; never returns. A
/// failed pass is reported and tried again on the next look.
pub(crate) async fn reconcile_each<F, Fut>(
    client: kube::Client,
    namespaces: Vec<String>,
    resource: ApiResource,
    kind: &'static str,
    reconcile: F,
) where
    F: Fn(kube::Client, DynamicObject) -> Fut,
    Fut: Future<Output = Result<(), PassError>>,
{
    let (wake, mut woken) = mpsc::unbounded_channel::<()>();
    let apis = apis(&client, &namespaces, &resource);
    for api in &apis {
        tokio::spawn(watch_changes(api.clone(), wake.clone(), kind));
    }
    // Kept, so that the loop still waits LOOK_AGAIN between looks should every watch end.
    let _keep = wake;
    loop {
        for api in &apis {
            let objects = match api.list(&ListParams::default()).await {
                Ok(list) => list.items,
                Err(error) => {
                    eprintln!("weir operator: listing Argo {kind}s: {error}");
                    Vec::new()
                }
            };
            for object in objects {
                if object.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let name = format!(
                    "{}/{}",
                    object.metadata.namespace.as_deref().unwrap_or_default(),
                    object.metadata.name.as_deref().unwrap_or_default()
                );
                if let Err(error) = reconcile(client.clone(), object).await {
                    eprintln!("weir operator: Argo {kind} {name}: {error}");
                }
            }
        }
        // Woken by a change, or after a while for what changes by itself.
        let _ = tokio::time::timeout(LOOK_AGAIN, woken.recv()).await;
        while woken.try_recv().is_ok() {}
    }
}

/// Sends a wake-up for every change of the watched objects (the watch restarts by itself).
async fn watch_changes(api: Api<DynamicObject>, wake: mpsc::UnboundedSender<()>, kind: &str) {
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    futures_util::pin_mut!(stream);
    loop {
        match stream.try_next().await {
            Ok(Some(_)) => {
                if wake.send(()).is_err() {
                    return;
                }
            }
            Ok(None) => return,
            Err(error) => eprintln!("weir operator: watching Argo {kind}s: {error}"),
        }
    }
}

/// The objects of `resource` in `namespace` whose controller is `uid`.
pub(crate) async fn owned(
    client: &kube::Client,
    namespace: &str,
    uid: &str,
    resource: &ApiResource,
) -> Result<Vec<DynamicObject>, PassError> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(api_error(format!(
            "listing {} in {namespace}",
            resource.plural
        )))?;
    Ok(list
        .items
        .into_iter()
        .filter(|object| {
            object
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|owner| owner.uid == uid && owner.controller == Some(true))
        })
        .collect())
}

/// An AnalysisRun or an Experiment as a reconcile sees it: name, phase, message, whether it was
/// asked to terminate, when it was created.
pub(crate) fn run_view(object: &DynamicObject) -> RunView {
    RunView {
        name: object.metadata.name.clone().unwrap_or_default(),
        phase: object
            .data
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .and_then(Phase::parse),
        message: object
            .data
            .pointer("/status/message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        terminating: object.data.pointer("/spec/terminate") == Some(&json!(true)),
        created: object
            .metadata
            .creation_timestamp
            .as_ref()
            .and_then(|time| time.0.to_string().parse::<Timestamp>().ok()),
    }
}

/// Creates `object` in `api`; one that exists already is left as it is (a pass repeated after
/// a crash, or a create that raced another).
pub(crate) async fn create_unless_present(
    api: &Api<DynamicObject>,
    object: Value,
) -> Result<(), PassError> {
    let kind = object["kind"].as_str().unwrap_or_default().to_string();
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let object: DynamicObject = serde_json::from_value(object).map_err(|error| PassError::Api {
        doing: format!("building {kind} {name}"),
        source: kube::Error::SerdeError(error),
    })?;
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(source) => Err(PassError::Api {
            doing: format!("creating {kind} {name}"),
            source,
        }),
    }
}

/// Deletes `name` from `api`; one that is gone already is fine.
pub(crate) async fn delete_if_present(
    api: &Api<DynamicObject>,
    name: &str,
    what: &str,
) -> Result<(), PassError> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(PassError::Api {
            doing: format!("deleting {what} {name}"),
            source,
        }),
    }
}

/// A ReplicaSet's sizes as a reconcile reads them.
pub(crate) struct ReplicaCounts {
    /// `spec.replicas` (1 when absent, as Kubernetes defaults it).
    pub(crate) replicas: i64,
    /// `status.replicas`.
    pub(crate) status_replicas: i64,
    /// `status.readyReplicas`.
    pub(crate) ready: i64,
    /// `status.availableReplicas`.
    pub(crate) available: i64,
    /// Its scale-down deadline annotation, if set.
    pub(crate) scale_down_deadline: Option<Timestamp>,
}

/// The sizes of ReplicaSet `object` (absent counts are 0, as the API server omits them).
pub(crate) fn replica_counts(object: &DynamicObject) -> ReplicaCounts {
    let int = |pointer: &str| {
        object
            .data
            .pointer(pointer)
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    ReplicaCounts {
        replicas: object
            .data
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1),
        status_replicas: int("/status/replicas"),
        ready: int("/status/readyReplicas"),
        available: int("/status/availableReplicas"),
        scale_down_deadline: object
            .metadata
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get(SCALE_DOWN_DEADLINE_ANNOTATION))
            .and_then(|deadline| deadline.parse().ok()),
    }
}
