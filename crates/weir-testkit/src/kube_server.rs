//! A strict in-memory Kubernetes API server for tests: the stand-in for kube-apiserver (which
//! cannot be installed here) that the real `kubectl` and kube-rs clients talk to over plain
//! HTTP/1.1 on `127.0.0.1:0`. What it implements behaves as the real server does
//! (`/work/shared/reference/kubectl-wire.md` lists what kubectl 1.32 sends and expects).
//!
//! # What it implements
//! - **Kinds.** Built in: core `v1` `namespaces` (cluster-scoped; `default`, `kube-system`,
//!   `kube-public`, `kube-node-lease` exist from the start), `services`, `configmaps`, `secrets`,
//!   `events`, `pods` (storage only: nothing runs); `apps/v1` `deployments` and `daemonsets`
//!   (status subresource; nothing runs pods: tests play their controllers, see
//!   [`crate::deployment_controller`]); `autoscaling/v2`
//!   `horizontalpodautoscalers`; `networking.k8s.io/v1` `ingresses` (storage only);
//!   `coordination.k8s.io/v1` `leases`; `apiextensions.k8s.io/v1`
//!   `customresourcedefinitions`. Creating a CRD serves its custom resources at once (group,
//!   served versions, names, shortNames, categories, scope, `subresources.status`,
//!   `additionalPrinterColumns`, `openAPIV3Schema`); the CRD gets `Established` and
//!   `NamesAccepted` conditions; deleting it deletes its objects.
//! - **Routes.** `/api/v1/...`, `/apis/G/V/...`: namespaced collections, objects and `/status`;
//!   cluster-scoped ones; lists and watches across all namespaces (`/apis/G/V/PLURAL`).
//! - **Objects.** `uid`, `resourceVersion` (one global counter, as text), `creationTimestamp`,
//!   `generation` (kept for deployments, daemonsets, HPAs, CRDs and custom resources; bumped
//!   by changes outside metadata and status, and when a deletion starts), `managedFields`. A
//!   write that changes nothing is a no-op (same resourceVersion, no event). Defaults filled in: a
//!   namespace's `status.phase: Active`, a service's `spec.type: ClusterIP` and a `clusterIP`.
//!   Names must be lowercase RFC 1123 subdomains; `generateName` works; a namespaced object needs
//!   its namespace to exist.
//! - **Verbs.** create (201; duplicate: 409 AlreadyExists; no name: 422 Invalid), get (404
//!   NotFound Status), list (`kind: XList`, `metadata.resourceVersion`; `labelSelector` with
//!   `=`, `==`, `!=`, `in`, `notin`, exists, `!`; `fieldSelector` with `=`, `==`, `!=` over any
//!   dotted path, so `metadata.name` and `involvedObject.*` work), update (a stale
//!   `metadata.resourceVersion`: 409 Conflict), patch (`application/merge-patch+json`,
//!   `application/json-patch+json` with add/remove/replace/move/copy/test), server-side apply,
//!   delete (preconditions, Background/Orphan propagation), deletecollection.
//! - **Server-side apply** (`application/apply-patch+yaml`, JSON body): creates when absent
//!   (201), records `metadata.managedFields` per manager and operation (`FieldsV1`), a field
//!   owned by another manager with a different value gives 409 Conflict with
//!   `details.causes[{reason: FieldManagerConflict, message, field}]` unless `force=true` (then
//!   the other manager loses it); fields the manager applied before and now omits are removed
//!   (unless another manager owns them); re-applying the same body is a no-op. Non-apply writes
//!   record an `Update` entry taking the fields they changed (the manager is `fieldManager`, else
//!   the User-Agent's product, else `unknown`).
//! - **Status subresource.** Writes to `/status` change only `.status`; writes to the main
//!   resource ignore `.status` (and a create drops it) when the kind has the subresource.
//! - **Scale subresource** of Deployments (`kubectl scale`): `GET`/`PUT`/`PATCH` (merge, JSON
//!   patch; strategic merge read as merge) on `.../deployments/NAME/scale` with an
//!   `autoscaling/v1` `Scale` (`spec.replicas`; `status.replicas` from the Deployment's status,
//!   `status.selector` its selector as text, `app=podinfo`); a write sets `spec.replicas` (a
//!   change bumps `generation`; the managedFields entry has `subresource: scale`), a
//!   `metadata.resourceVersion` in a PUT is a precondition, replicas below 0 are 422 Invalid;
//!   listed in discovery as `deployments/scale` (kind `Scale`, group `autoscaling`, version
//!   `v1`, verbs get, patch, update).
//! - **Eviction subresource** of Pods (`kube::Api::<Pod>::evict`):
//!   `POST .../pods/NAME/eviction` with a `policy/v1` (or `v1beta1`) `Eviction` whose
//!   `metadata.name` is NAME (else 400 BadRequest `name in URL does not match name in Eviction
//!   object`; an absent `apiVersion`/`kind` is taken as the endpoint's, as kube-rs sends none,
//!   and its `delete_options` is an unknown field, pruned with a warning; another kind or
//!   version, or another `metadata.namespace`, is 400) deletes the pod as a
//!   DELETE with the Eviction's `deleteOptions` would (preconditions, propagation; watch event,
//!   garbage collection) and answers 201 with a `Success` Status carrying `code: 201`, as the
//!   real server does; a missing pod is 404 NotFound. Other verbs are 405. Listed in discovery
//!   as `pods/eviction` (kind `Eviction`, group `policy`, version `v1`, verb create).
//!   PodDisruptionBudgets are not honoured (see below).
//! - **Protobuf creates** of `v1` Namespaces and ConfigMaps: `kubectl create namespace NAME`
//!   and `kubectl create configmap NAME --from-literal=...` POST
//!   `Content-Type: application/vnd.kubernetes.protobuf` with
//!   `Accept: application/vnd.kubernetes.protobuf,application/json`; the body (`k8s\0` and a
//!   `runtime.Unknown`) is decoded (metadata's name, generateName, namespace, labels,
//!   annotations, finalizers; a Namespace's `spec.finalizers`; a ConfigMap's `data`,
//!   `binaryData`, `immutable`), created as a JSON body would be and answered in JSON (406 if
//!   the Accept header does not allow JSON).
//! - **Deletion.** With finalizers the object gets `deletionTimestamp` (answer 200 with it) and
//!   goes (DELETED event) when an update removes the last finalizer. Without, it goes at once:
//!   custom resources answer with the object, built-in kinds with a `Success` Status. Then
//!   garbage collection: every object whose ownerReferences name only owners that are gone is
//!   deleted in turn (background); so is an object created with ownerReferences that name
//!   only owners that are gone (the real collector takes it shortly after its creation).
//!   Deleting a namespace deletes what is in it.
//! - **Watch** (`watch=true`): newline-delimited JSON events after `resourceVersion`
//!   (`ADDED`/`MODIFIED`/`DELETED`; absent or `0`: the current objects as `ADDED` first; with
//!   `sendInitialEvents=true` a `BOOKMARK` annotated `k8s.io/initial-events-end` after them),
//!   `BOOKMARK`s every 5 s with `allowWatchBookmarks=true`, `timeoutSeconds`, both selectors;
//!   every object carries `metadata.resourceVersion`; the last 10,000 events are kept and an
//!   older resourceVersion gets an `ERROR` event with a 410 Expired Status.
//! - **Tables** when Accept asks `as=Table`: lists, single objects and watch events (column
//!   definitions in the first event only); columns `Name`, the CRD's
//!   `additionalPrinterColumns` (simple `.a.b` / `.a[0].b` paths; `date` columns as ages), `Age`
//!   computed by the server; built-in kinds have the real server's main columns (deployments
//!   READY/UP-TO-DATE/AVAILABLE, daemonsets DESIRED/CURRENT/READY/UP-TO-DATE/AVAILABLE/NODE
//!   SELECTOR, replicasets DESIRED/CURRENT/READY, jobs STATUS/COMPLETIONS, services TYPE/CLUSTER-IP/EXTERNAL-IP/PORT(S), events LAST
//!   SEEN/TYPE/REASON/OBJECT/MESSAGE, leases HOLDER, ...); `row.object` is
//!   PartialObjectMetadata (`includeObject=None|Object` honoured). `as=PartialObjectMetadata`
//!   (kube-rs metadata watches) is served too.
//! - **Discovery.** `/version` (1.32, which keeps the kubectl dispatcher on its built-in
//!   client), `/api` and `/apis` both legacy and aggregated (`v2` or `v2beta1`, whichever the
//!   Accept header asks first, with the matching Content-Type), `/api/v1`, `/apis/G`,
//!   `/apis/G/V` (subresources as separate entries without shortNames).
//! - **OpenAPI.** `/openapi/v3` (index with content hashes) and one document per group/version
//!   whose PATCH operations carry `x-kubernetes-group-version-kind` and the `fieldValidation`
//!   parameter, so kubectl validates on the server; `/openapi/v2` is 404 (so kubectl cannot
//!   validate a file of `kind: List`, which it checks against v2: apply several documents).
//! - **Field validation.** `fieldValidation=Strict`: unknown fields are rejected with a 400
//!   BadRequest naming them, worded as the real server's strict decoding error
//!   (`Canary in version "v1beta1" cannot be handled as a Canary: strict decoding error: unknown
//!   field "foo"`) - the real server answers 400 here, not 422. `Warn` (the default) and
//!   `Ignore` prune them (with a `Warning` header for `Warn`). Known fields: custom resources,
//!   the structural `openAPIV3Schema` (honouring `x-kubernetes-preserve-unknown-fields`,
//!   `additionalProperties`, `x-kubernetes-embedded-resource`); built-in kinds, the top level
//!   and `metadata` only.
//! - **External Metrics API** (`external.metrics.k8s.io/v1beta1`) once a test enables it
//!   ([`KubeServer::serve_external_metrics`], [`KubeServer::set_external_metric`]): discovery
//!   and `GET .../namespaces/NS/METRIC?labelSelector=` answered as a metrics adapter behind
//!   kube-apiserver answers (an `ExternalMetricValueList`; an unknown metric 404).
//! - **Direct access for tests**: [`KubeServer::get`], [`KubeServer::list`],
//!   [`KubeServer::create`], [`KubeServer::merge_patch`], [`KubeServer::delete`], write
//!   counts per resource ([`KubeServer::writes`]), every request by verb and resource
//!   ([`KubeServer::request_counts`]), what changed since a resourceVersion
//!   ([`KubeServer::list_changed_since`]), and the change feed ([`KubeServer::subscribe`]):
//!   every write in resourceVersion order, delivered in-process without loss (what the
//!   traffic audit, `crate::traffic_audit`, reads).
//!
//! # What it leaves out
//! Authentication and authorization (no credentials are checked; kubectl sends none over
//! plain http), admission (webhooks, quotas, limit ranges; so no `kubernetes.io/metadata.name`
//! label on namespaces), TLS, HTTP/2, protobuf request bodies other than the creates of
//! Namespaces and ConfigMaps above, CBOR and YAML request bodies (answered 415
//! UnsupportedMediaType with a message; client-go does not fall back to JSON, so kubectl's
//! other typed generators such as `kubectl create secret` or `kubectl create deployment` fail:
//! use manifests with `create -f` / `apply -f`), protobuf responses (always JSON), pagination (`limit` is accepted, everything is returned, no
//! `continue`), `resourceVersion`/`resourceVersionMatch` on lists (always the latest),
//! `dryRun` (rejected with 400), strategic merge semantics (for built-in kinds a strategic
//! merge patch is applied as a JSON merge patch; custom resources get 415 as from the real
//! server), list semantics in server-side apply (every list is atomic: no
//! `x-kubernetes-list-type: map/set`, no built-in merge keys; `finalizers` and
//! `ownerReferences` included), value validation (types, formats, enums, CEL, required
//! fields) and defaulting beyond the few listed above, version conversion (all served versions
//! of a CRD share the objects, only `apiVersion` changes), the `scale` subresource of other
//! kinds (CRDs' `subresources.scale`, ReplicaSets, StatefulSets) and other subresources
//! (`/log`, `/exec`, ...), server-side apply on `/scale`, PodDisruptionBudgets (not served;
//! an eviction never consults one, so it is never refused with 429 TooManyRequests: every
//! eviction of an existing pod deletes it), controllers (no pods, no replica sets
//! made from Deployments, no endpoints, no status updates by the server itself:
//! `crate::deployment_controller` plays the Deployment, DaemonSet and ReplicaSet controllers and
//! `crate::job_controller` the Job controller for tests that want them; the namespace lifecycle
//! is immediate), foreground deletion (treated as
//! background), the rule that no finalizer may be added to a terminating object, graceful
//! deletion periods, field selectors restricted per kind (any dotted path is accepted), the
//! deprecated `/watch/` routes, watches on a single object's URL, events.k8s.io, and
//! `kubectl explain` (the OpenAPI documents carry no schemas for built-in kinds).

mod discovery;
mod external_metrics;
mod fields;
mod protobuf;
mod serve;
mod store;
mod table;
mod types;
mod validate;
mod watching;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;

use serve::Shared;
use store::{State, Validation, WriteCtx};

/// An error as the server answers it: a `Status` with a code and a reason.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// The HTTP status code.
    pub code: u16,
    /// `NotFound`, `AlreadyExists`, `Conflict`, `Invalid`, `BadRequest`, ...
    pub reason: String,
    /// The human-readable message kubectl prints.
    pub message: String,
    /// `details` of the Status, if any.
    pub details: Option<Value>,
}

impl ApiError {
    pub(crate) fn new(code: u16, reason: &str, message: String) -> ApiError {
        ApiError {
            code,
            reason: reason.to_owned(),
            message,
            details: None,
        }
    }

    pub(crate) fn with_details(mut self, details: Value) -> ApiError {
        self.details = Some(details);
        self
    }

    /// The `Status` body.
    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

/// What a write did to an object, as watch events name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    /// Created (or, in [`ChangeFeed::initial`], there when the feed started).
    Added,
    /// Changed.
    Modified,
    /// Gone.
    Deleted,
}

impl ChangeKind {
    pub(crate) fn from_event(kind: &str) -> ChangeKind {
        match kind {
            "ADDED" => ChangeKind::Added,
            "DELETED" => ChangeKind::Deleted,
            _ => ChangeKind::Modified,
        }
    }
}

/// One write on the server's change feed: one resourceVersion, one object.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// The resourceVersion the write produced: the state after it is the state at this version.
    pub resource_version: u64,
    /// What the write did.
    pub kind: ChangeKind,
    /// The API group (`""` for core kinds, `apps`, `networking.istio.io`...).
    pub group: String,
    /// The resource (plural): `services`, `deployments`, `virtualservices`...
    pub resource: String,
    /// The object after the write (its last state for [`ChangeKind::Deleted`]).
    pub object: Value,
}

/// An in-process subscription to the server's writes ([`KubeServer::subscribe`]).
pub struct ChangeFeed {
    /// The resourceVersion when the feed started: [`ChangeFeed::initial`] is the state then.
    pub resource_version: u64,
    /// The objects the filter took when the feed started, as [`ChangeKind::Added`] changes at
    /// [`ChangeFeed::resource_version`].
    pub initial: Vec<Change>,
    receiver: std::sync::mpsc::Receiver<Change>,
}

impl ChangeFeed {
    /// Every change since the last call (or since the feed started), in order; never blocks.
    pub fn take(&self) -> Vec<Change> {
        self.receiver.try_iter().collect()
    }

    /// The next change, waiting at most `timeout` for it.
    pub fn next_within(&self, timeout: std::time::Duration) -> Option<Change> {
        self.receiver.recv_timeout(timeout).ok()
    }
}

/// Now, to the second, as Kubernetes writes times.
pub(crate) fn now() -> String {
    let now = jiff::Timestamp::now();
    jiff::Timestamp::from_second(now.as_second())
        .unwrap_or(now)
        .to_string()
}

/// How long ago `timestamp` was, as kubectl prints ages (`5s`, `3m12s`, `4h`, `2d3h`...).
pub(crate) fn age_of(timestamp: &str) -> String {
    let Ok(then) = timestamp.parse::<jiff::Timestamp>() else {
        return "<invalid>".to_owned();
    };
    let seconds = jiff::Timestamp::now().as_second() - then.as_second();
    human_duration(seconds)
}

fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    let seconds = seconds.max(0);
    let minutes = seconds / 60;
    let hours = seconds / 3600;
    let days = hours / 24;
    let years = days / 365;
    if seconds < 120 {
        format!("{seconds}s")
    } else if minutes < 10 {
        match seconds % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        }
    } else if minutes < 180 {
        format!("{minutes}m")
    } else if hours < 8 {
        match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        }
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        match hours % 24 {
            0 => format!("{days}d"),
            h => format!("{days}d{h}h"),
        }
    } else if days < 365 * 2 {
        format!("{days}d")
    } else if days < 365 * 8 {
        match days % 365 {
            0 => format!("{years}y"),
            d => format!("{years}y{d}d"),
        }
    } else {
        format!("{years}y")
    }
}

/// The server: serves on `127.0.0.1:<port 0>` in the runtime that started it until dropped.
pub struct KubeServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for KubeServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl KubeServer {
    /// Binds `127.0.0.1:0` and serves on the current tokio runtime.
    pub async fn start() -> KubeServer {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding 127.0.0.1:0 for the test API server");
        let addr = listener
            .local_addr()
            .expect("a bound listener has an address");
        let (sender, changes) = watch::channel(0);
        let shared = Arc::new(Shared {
            state: Mutex::new(State::new(sender)),
            changes,
            watches: Default::default(),
        });
        let serving = shared.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let shared = serving.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| serve::handle(shared.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        KubeServer {
            shared,
            addr,
            accept,
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Writes `dir/kubeconfig` (cluster `weir-test` at [`KubeServer::url`], a user with a dummy
    /// token, a context with namespace `default`, made current) and returns its path, for
    /// `kubectl --kubeconfig` or `KUBECONFIG`.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1
kind: Config
clusters:
- name: weir-test
  cluster:
    server: {url}
users:
- name: weir-test
  user:
    token: weir-test-dummy-token
contexts:
- name: weir-test
  context:
    cluster: weir-test
    user: weir-test
    namespace: default
current-context: weir-test
preferences: {{}}
",
            url = self.url()
        );
        std::fs::write(&path, text).expect("writing the test kubeconfig");
        path
    }

    fn resolve(state: &State, api_version: &str, kind: &str) -> Option<types::ResourceType> {
        let (group, version) = types::split_api_version(api_version);
        state.find(group, version, kind)
    }

    /// The object `name` of `kind` (kind, plural, singular or short name) at `api_version`
    /// (`v1`, `apps/v1`...); `namespace` is ignored for cluster-scoped kinds.
    pub fn get(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let state = self.shared.lock();
        let rt = Self::resolve(&state, api_version, kind)?;
        state.get(&rt, namespace, name)
    }

    /// Serves the External Metrics API (`external.metrics.k8s.io/v1beta1`) from now on, as a
    /// cluster with a metrics adapter registered does (see `kube_server/external_metrics.rs`).
    pub fn serve_external_metrics(&self) {
        let mut state = self.shared.lock();
        if state.external_metrics.is_none() {
            state.external_metrics = Some(external_metrics::ExternalMetrics::default());
        }
    }

    /// Sets the series of external metric `name` in `namespace` with `labels` to `value`, a
    /// Quantity as text (`"42"`, `"1500m"`, `"2k"`); serves the API if it was not yet.
    pub fn set_external_metric(
        &self,
        namespace: &str,
        name: &str,
        labels: &[(&str, &str)],
        value: &str,
    ) {
        self.serve_external_metrics();
        let labels = labels
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect();
        if let Some(metrics) = self.shared.lock().external_metrics.as_mut() {
            metrics.set(namespace, name, labels, value);
        }
    }

    /// Forgets external metric `name` in `namespace`: asked for, it is a 404 again.
    pub fn remove_external_metric(&self, namespace: &str, name: &str) {
        if let Some(metrics) = self.shared.lock().external_metrics.as_mut() {
            metrics.remove(namespace, name);
        }
    }

    /// Every request for an external metric so far, as `PATH?QUERY`, in order.
    pub fn external_metric_requests(&self) -> Vec<String> {
        self.shared
            .lock()
            .external_metrics
            .as_ref()
            .map(|metrics| metrics.requests.clone())
            .unwrap_or_default()
    }

    /// The objects of `kind` in `namespace` (`""`: all namespaces), by namespace and name.
    pub fn list(&self, api_version: &str, kind: &str, namespace: &str) -> Vec<Value> {
        let state = self.shared.lock();
        let Some(rt) = Self::resolve(&state, api_version, kind) else {
            return Vec::new();
        };
        state.list(&rt, (!namespace.is_empty()).then_some(namespace))
    }

    /// Write requests (POST, PUT, PATCH, DELETE over HTTP) received for `resource`, named as
    /// kubectl names it: `deployments.apps`, `services`, `canaries.flagger.app`.
    pub fn writes(&self, resource: &str) -> u64 {
        self.shared
            .lock()
            .writes
            .get(resource)
            .copied()
            .unwrap_or(0)
    }

    /// Every write count, by resource.
    pub fn write_counts(&self) -> BTreeMap<String, u64> {
        self.shared.lock().writes.clone()
    }

    /// Every request received over HTTP so far, by `VERB RESOURCE`: verbs `get`, `list`,
    /// `watch`, `create`, `update`, `patch`, `delete`; resources as [`KubeServer::writes`] names
    /// them, with `/status` for the subresource (`update rollouts.weir.dev/status`). Requests
    /// outside resources (discovery, OpenAPI, `/version`) count as
    /// `METHOD (discovery and other paths)`. A failed request counts too, except one naming a
    /// resource the server does not serve.
    pub fn request_counts(&self) -> BTreeMap<String, u64> {
        self.shared.lock().requests.clone()
    }

    /// The objects of `kind` in `namespace` (`""`: all) whose resourceVersion is above `since`
    /// (see [`KubeServer::resource_version`]): what changed, without cloning the rest.
    pub fn list_changed_since(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        since: u64,
    ) -> Vec<Value> {
        let state = self.shared.lock();
        let Some(rt) = Self::resolve(&state, api_version, kind) else {
            return Vec::new();
        };
        state.list_changed_since(&rt, (!namespace.is_empty()).then_some(namespace), since)
    }

    /// Subscribes to the server's change feed in this process: the objects `filter` takes now
    /// (`filter(group, plural, object)`, e.g. `("apps", "deployments", ..)`; core kinds have
    /// group `""`), then every later write to such an object, in resourceVersion order, each
    /// exactly once (what a watch sees, but with nothing ever expired and no polling). The
    /// filter runs under the server's lock: keep it cheap. Dropping the feed unsubscribes.
    pub fn subscribe(
        &self,
        filter: impl Fn(&str, &str, &Value) -> bool + Send + 'static,
    ) -> ChangeFeed {
        let filter: store::ChangeFilter = Box::new(filter);
        let (sender, receiver) = std::sync::mpsc::channel();
        let mut state = self.shared.lock();
        let initial = state
            .snapshot(&filter)
            .into_iter()
            .map(|(group, resource, object)| Change {
                resource_version: state.rv,
                kind: ChangeKind::Added,
                group,
                resource,
                object,
            })
            .collect();
        let resource_version = state.rv;
        state.subscribers.push(store::Subscriber { filter, sender });
        ChangeFeed {
            resource_version,
            initial,
            receiver,
        }
    }

    /// Watch requests received so far (a test can wait for a client to start watching).
    pub fn watch_requests(&self) -> u64 {
        self.shared
            .watches
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The current (latest) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.lock().rv
    }

    fn ctx(manager: &str) -> WriteCtx {
        WriteCtx {
            manager: manager.to_owned(),
            validation: Validation::Strict,
            force: false,
        }
    }

    fn target(&self, api_version: &str, kind: &str) -> Result<types::ResourceType, ApiError> {
        Self::resolve(&self.shared.lock(), api_version, kind).ok_or_else(|| {
            ApiError::new(
                404,
                "NotFound",
                format!("the server doesn't have a resource type \"{kind}\" in {api_version}"),
            )
        })
    }

    /// Creates `object` (namespace from its metadata, else `default`) as manager `weir-testkit`,
    /// with strict field validation; watchers see it as over HTTP.
    pub fn create(&self, object: Value) -> Result<Value, ApiError> {
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
        let rt = self.target(api_version, kind)?;
        let namespace = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_owned();
        let mut state = self.shared.lock();
        state
            .create(&rt, &namespace, object, &Self::ctx("weir-testkit"))
            .map(|written| written.object)
    }

    /// Applies a JSON merge patch to the object, or to its `/status` when `status`, as manager
    /// `weir-testkit`.
    pub fn merge_patch(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        patch: &Value,
        status: bool,
    ) -> Result<Value, ApiError> {
        let rt = self.target(api_version, kind)?;
        let body = patch.to_string();
        let mut state = self.shared.lock();
        state
            .patch(
                &rt,
                namespace,
                name,
                "application/merge-patch+json",
                body.as_bytes(),
                status.then_some("status"),
                &Self::ctx("weir-testkit"),
            )
            .map(|written| written.object)
    }

    /// Deletes the object (background propagation) and returns the server's answer body.
    pub fn delete(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        let rt = self.target(api_version, kind)?;
        let mut state = self.shared.lock();
        state.delete(
            &rt,
            namespace,
            name,
            &json!({"propagationPolicy": "Background"}),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(192), "3m12s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(4 * 3600 + 60), "4h1m");
        assert_eq!(human_duration(51 * 3600), "2d3h");
    }
}
