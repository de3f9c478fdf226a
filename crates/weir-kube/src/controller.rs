//! The operator's controller: what `weir operator` runs once the engine is built. In kube-runtime's
//! shape, watch -> reconcile -> error policy:
//!
//! - **watch**: one watch per namespace (or one for all) of each resource, restarted by itself
//!   with backoff after an error, listing again what it missed ([`watch`]);
//! - **reconcile**: what one object's event means, per resource: `rollouts` (a Rollout applied
//!   to the engine, its finalizer kept, its deletion reverted and forgotten), `canaries`
//!   (Flagger's Canary as the Rollout it owns, and the Rollout's status mirrored back), and
//!   `catalog` (Flagger's MetricTemplates and AlertProviders followed into the catalog, and
//!   `secrets`, the Secrets they name);
//!   `publish` writes each committed status change outwards (Kubernetes Events, the Canary,
//!   `spec.target.statusTo`);
//! - Argo Rollouts' Rollouts and AnalysisRuns, when their CRD is installed, by
//!   [`crate::argo_rollouts`] and [`crate::argo_analysis`] (each a loop of its own: Argo's
//!   objects are not weir Rollouts and keep Argo's semantics);
//! - **error policy**: every failure is an [`Error`], and [`error_policy`] alone decides what
//!   follows it: try again after a backoff, or wait for the object's next change.
//!
//! The binary builds the engine, its providers and the store, and calls
//! [`Controller::start`].

mod canaries;
mod catalog;
mod publish;
mod rollouts;
mod secrets;

#[cfg(test)]
mod tests;

use std::future::Future;
use std::time::Duration;

use futures_util::TryStreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher;
use tokio::task::JoinSet;
use weir_core::catalog::SharedCatalog;
use weir_engine::{EngineError, EngineHandle, ProviderError};
use weir_store::RolloutKey;

use crate::flagger::canaries_resource;
use crate::store::{KubeStore, apis, rollouts_resource};
use crate::target::KubernetesTargets;

pub use rollouts::REVERT_FINALIZER;

/// The operator's watches, to be started on an engine (see the module's documentation).
pub struct Controller {
    client: kube::Client,
    handle: EngineHandle,
    targets: KubernetesTargets,
    store: KubeStore,
    namespaces: Vec<String>,
    catalog: SharedCatalog,
    default_provider: Option<String>,
}

impl Controller {
    /// A controller for the engine behind `handle`, which runs with `targets` (for reverting a
    /// deleted rollout's target) and `store` (read for `spec.target.statusTo`). It watches every
    /// namespace and follows Flagger's objects into an empty catalog until told otherwise.
    pub fn new(
        client: kube::Client,
        handle: EngineHandle,
        targets: KubernetesTargets,
        store: KubeStore,
    ) -> Controller {
        Controller {
            client,
            handle,
            targets,
            store,
            namespaces: Vec::new(),
            catalog: SharedCatalog::default(),
            default_provider: None,
        }
    }

    /// The provider of Canaries that name none (Flagger's `-mesh-provider`; unset: istio).
    pub fn default_provider(mut self, provider: Option<String>) -> Controller {
        self.default_provider = provider;
        self
    }

    /// Watches these namespaces only (empty: every namespace).
    pub fn namespaces(mut self, namespaces: Vec<String>) -> Controller {
        self.namespaces = namespaces;
        self
    }

    /// Follows Flagger's MetricTemplates and AlertProviders into `catalog` (the one the
    /// engine's providers read).
    pub fn catalog(mut self, catalog: SharedCatalog) -> Controller {
        self.catalog = catalog;
        self
    }

    /// Starts every watch on the current tokio runtime: the publishing of status changes, the
    /// catalog (whose first listing is awaited, so no rollout is refused for naming a template
    /// not read yet), the rollouts, and Flagger's Canaries when their CRD is installed.
    pub async fn start(self) -> Running {
        let mut tasks = JoinSet::new();
        let canaries = canaries::Canaries::new(self.default_provider.as_deref());
        tasks.spawn(publish::publish(
            self.client.clone(),
            self.handle.clone(),
            canaries.clone(),
            self.store,
        ));
        // Templates and providers first, so no rollout is refused for naming one not read yet.
        catalog::follow(
            &self.client,
            &self.namespaces,
            self.catalog,
            self.handle.clone(),
            &mut tasks,
        )
        .await
        .wait()
        .await;
        let reconciler = rollouts::Rollouts::new(self.handle, self.targets);
        for api in apis(&self.client, &self.namespaces, &rollouts_resource()) {
            tasks.spawn(watch(api, reconciler.clone()));
        }
        let canary_apis = apis(&self.client, &self.namespaces, &canaries_resource());
        let runs_canaries = canaries::installed(&canary_apis[0]).await;
        if runs_canaries {
            for api in canary_apis {
                tasks.spawn(watch(api, canaries.clone()));
            }
        }
        // Argo Rollouts' objects, when their CRD is installed: the Rollouts and the AnalysisRuns
        // they make.
        let runs_argo_rollouts =
            crate::argo_rollouts::installed(&self.client, &self.namespaces).await;
        if runs_argo_rollouts {
            tasks.spawn(crate::argo_rollouts::run(
                self.client.clone(),
                self.namespaces.clone(),
            ));
            tasks.spawn(crate::argo_analysis::run(
                self.client.clone(),
                self.namespaces.clone(),
            ));
            // The Experiments (by themselves or a Rollout's experiment step's): their own loop.
            tasks.spawn(crate::argo_experiments::run(
                self.client.clone(),
                self.namespaces.clone(),
            ));
        }
        Running {
            _tasks: tasks,
            runs_canaries,
            runs_argo_rollouts,
        }
    }
}

/// The started watches; dropping it stops them.
pub struct Running {
    _tasks: JoinSet<()>,
    runs_canaries: bool,
    runs_argo_rollouts: bool,
}

impl Running {
    /// Whether Flagger's Canary CRD is installed, so that Canaries are run too.
    pub fn runs_canaries(&self) -> bool {
        self.runs_canaries
    }

    /// Whether Argo Rollouts' Rollout CRD is installed, so that Argo Rollouts are run too.
    pub fn runs_argo_rollouts(&self) -> bool {
        self.runs_argo_rollouts
    }
}

/// What went wrong in a reconcile; [`error_policy`] says what follows.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// A watch failed; its stream starts again by itself (with backoff), listing again.
    #[error("watching {what}: {source}")]
    Watch {
        what: String,
        #[source]
        source: watcher::Error,
    },
    /// A request to the Kubernetes API failed; `doing` says what it was for.
    #[error("{doing}: {source}")]
    Api {
        doing: String,
        #[source]
        source: kube::Error,
    },
    /// The engine did not forget a deleted rollout.
    #[error("deleting {key}: {source}")]
    Forget {
        key: RolloutKey,
        #[source]
        source: EngineError,
    },
    /// The target of a rollout being deleted with `revertOnDeletion` is not restored yet.
    #[error("reverting {key} before its deletion: {source}")]
    Revert {
        key: RolloutKey,
        #[source]
        source: ProviderError,
    },
    /// A history event does not make a Kubernetes Event.
    #[error("an event of {key} cannot be written: {source}")]
    Event {
        key: RolloutKey,
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    /// A failed request to the Kubernetes API, for `doing`.
    pub(crate) fn api(doing: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let doing = doing.into();
        move |source| Error::Api { doing, source }
    }
}

/// What follows a failed reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Requeue {
    /// Try again after this long.
    After(Duration),
    /// Nothing until the object changes: its watch brings the change (a write refused for a
    /// conflict means a newer object is on its way; a restarted watch lists everything again).
    OnChange,
}

/// The first wait before trying a failed reconcile again; each further failure doubles it, up
/// to [`BACKOFF_MAX`].
const BACKOFF_FIRST: Duration = Duration::from_millis(200);
/// The longest wait between two tries.
const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// The controller's error policy, in one place: after the `failures`-th failure in a row (from
/// 1) of a reconcile with `error`, what to do.
pub(crate) fn error_policy(error: &Error, failures: u32) -> Requeue {
    match error {
        // The target's pods need time: again, waiting longer each time.
        Error::Revert { .. } => {
            let doubled =
                BACKOFF_FIRST.saturating_mul(2u32.saturating_pow(failures.saturating_sub(1)));
            Requeue::After(doubled.min(BACKOFF_MAX))
        }
        Error::Watch { .. } | Error::Api { .. } | Error::Forget { .. } | Error::Event { .. } => {
            Requeue::OnChange
        }
    }
}

/// Says what failed (a controller runs unattended: its log is where this goes, one line each).
pub(crate) fn report(error: &Error) {
    eprintln!("weir operator: {error}");
}

/// Runs `attempt` until it succeeds (true), or until [`error_policy`] says to wait for a change
/// (false); every failure is reported.
pub(crate) async fn retrying<F, A>(mut attempt: A) -> bool
where
    A: FnMut() -> F,
    F: Future<Output = Result<(), Error>>,
{
    let mut failures = 0;
    loop {
        let Err(error) = attempt().await else {
            return true;
        };
        failures += 1;
        match error_policy(&error, failures) {
            Requeue::After(wait) => {
                eprintln!("weir operator: {error}; again in {wait:?}");
                // A retry's backoff, not a synchronisation.
                tokio::time::sleep(wait).await;
            }
            Requeue::OnChange => {
                report(&error);
                return false;
            }
        }
    }
}

/// Reconciles one watched resource's objects.
pub(crate) trait Reconcile: Clone + Send + Sync + 'static {
    /// What is watched, for messages: `rollouts`.
    const WATCHED: &'static str;

    /// An object was created or changed (or listed, when the watch starts or restarts).
    fn applied(
        &self,
        api: &Api<DynamicObject>,
        object: DynamicObject,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// An object is gone.
    fn deleted(&self, object: DynamicObject) -> impl Future<Output = Result<(), Error>> + Send;
}

/// Hands every object of `api` to `reconciler`, one event at a time; a failure goes to the
/// error policy. The watch restarts by itself after an error (with backoff), re-listing what it
/// missed.
pub(crate) async fn watch<R: Reconcile>(api: Api<DynamicObject>, reconciler: R) {
    use kube::runtime::WatchStreamExt;
    let events = watcher(api.clone(), watcher::Config::default()).default_backoff();
    futures_util::pin_mut!(events);
    loop {
        let reconciled = match events.try_next().await {
            Ok(Some(watcher::Event::Apply(object) | watcher::Event::InitApply(object))) => {
                reconciler.applied(&api, object).await
            }
            Ok(Some(watcher::Event::Delete(object))) => reconciler.deleted(object).await,
            Ok(Some(watcher::Event::Init | watcher::Event::InitDone)) => Ok(()),
            Ok(None) => return,
            Err(source) => Err(Error::Watch {
                what: R::WATCHED.into(),
                source,
            }),
        };
        // What a reconcile from a watch returns waits for a change, which this watch brings (a
        // deletion's revert, tried again after a backoff, runs in a task of its own).
        if let Err(error) = reconciled {
            report(&error);
        }
    }
}
