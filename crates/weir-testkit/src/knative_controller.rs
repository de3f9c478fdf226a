//! Plays Knative Serving against the in-memory API server, where nothing runs: what Knative's
//! controllers would report for each Knative Service (`serving.knative.dev/v1`, kind `Service`)
//! once the revisions of its templates take a while (or forever) to become ready.
//!
//! Per Knative Service (tracked by uid, with tokio's clock), on each pass (every 20 ms):
//! - a new `spec.template` (the first one, or one that differs from the latest revision's) is a
//!   new revision, named `NAME-0000N` with N counting templates from 1 (Knative's names: the
//!   Configuration's generation), or `spec.template.metadata.name` when the user names it; a
//!   change elsewhere in the spec (`spec.traffic`) bumps `metadata.generation` but makes no
//!   revision, as in Knative. The revision is created as a `Revision` object (owned by the
//!   Service, labelled `serving.knative.dev/service`, `.../configuration` and
//!   `.../configurationGeneration`, its spec the template's) when that kind is served;
//! - `status.latestCreatedRevisionName` names the newest revision at once; once the readiness
//!   delay has passed since its creation ([`Readiness`], as for Deployments, per Service name
//!   or for all) the revision is ready: its Revision's `Ready` condition turns `True` (written
//!   before the Service's status) and `status.latestReadyRevisionName` names it;
//! - `status.observedGeneration` follows `metadata.generation` at once (Knative's reconciler
//!   records every generation it has seen, ready or not);
//! - `status.traffic` is `spec.traffic` resolved as Knative's Route does it: `latestRevision:
//!   true` becomes the latest *ready* revision (with `latestRevision: true` kept), a missing
//!   `spec.traffic` is `[{latestRevision: true, percent: 100}]` (Knative's webhook default).
//!   While an entry names a revision that is not ready (or none is ready), the previous
//!   `status.traffic` stays - Knative keeps serving the last routable configuration - and
//!   `RoutesReady` is `False` (reason `RevisionMissing`);
//! - `conditions`: `ConfigurationsReady` (the latest created revision is ready), `RoutesReady`
//!   and `Ready` (both), each `True`, `Unknown` or `False` with a reason, and `url`
//!   `http://NAME.NAMESPACE.example.com`.
//!
//! No Configuration or Route objects, no pods, no scaling, no `address`; revisions never become
//! unready once ready. [`install_crds`] installs Knative's own CRDs from the compatibility corpus
//! (its `crds/knative/`, beside the Flagger corpus), else stand-ins for Service and Revision that
//! keep any field, with a status subresource. [`unready_targets`] says what a Service's
//! `spec.traffic` sends to revisions that are not ready.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::time::Instant;

pub use crate::deployment_controller::Readiness;
use crate::deployment_controller::{PlayedController, Readinesses};
use crate::kube_server::KubeServer;

/// Knative Serving's API version.
pub const SERVING: &str = "serving.knative.dev/v1";

/// Whether `readiness` has passed since `since`.
fn due(readiness: Readiness, since: Instant, now: Instant) -> bool {
    match readiness {
        Readiness::Instant => true,
        Readiness::After(delay) => now.saturating_duration_since(since) >= delay,
        Readiness::Never => false,
    }
}

/// Knative's own CRDs in the compatibility corpus (`crds/knative/` beside the Flagger corpus),
/// when it is there.
fn corpus_crds() -> Option<PathBuf> {
    let dir = crate::fixtures::compat_dir()?.join("../crds/knative");
    dir.is_dir().then_some(dir)
}

/// A stand-in CRD for Knative's `kind` that keeps any field, with a status subresource.
fn stand_in_crd(kind: &str, plural: &str, short: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.serving.knative.dev")},
        "spec": {
            "group": "serving.knative.dev",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                "listKind": format!("{kind}List"), "shortNames": [short]},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    })
}

/// Installs Knative Serving's CRDs (`services`, `revisions`, `configurations`, `routes`):
/// Knative's own from the corpus when it is there (their structural schemas check what is
/// written), else stand-ins for Service and Revision that keep any field. Returns which.
pub fn install_crds(server: &KubeServer) -> &'static str {
    if let Some(dir) = corpus_crds() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| {
                path.extension()
                    .is_some_and(|extension| extension == "yaml")
            })
            .collect();
        files.sort();
        for file in files {
            let crds = weir_core::document::parse_values(&std::fs::read(&file).unwrap())
                .unwrap_or_else(|error| panic!("{}: {error}", file.display()));
            for crd in crds {
                server
                    .create(crd)
                    .unwrap_or_else(|error| panic!("{}: {error}", file.display()));
            }
        }
        return "Knative Serving's own CRDs";
    }
    for (kind, plural, short) in [
        ("Service", "services", "ksvc"),
        ("Revision", "revisions", "rev"),
    ] {
        server.create(stand_in_crd(kind, plural, short)).unwrap();
    }
    "stand-in Knative Service and Revision CRDs (no corpus)"
}

/// Knative Service `name` in `namespace` running `image`, as Flagger's end-to-end test has it.
pub fn service(namespace: &str, name: &str, image: &str) -> Value {
    json!({
        "apiVersion": SERVING,
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"template": {"spec": {"containers": [{
            "image": image,
            "ports": [{"containerPort": 9898, "protocol": "TCP"}],
            "command": ["./podinfo", "--port=9898", "--port-metrics=9797", "--grpc-port=9999",
                "--grpc-service-name=podinfo", "--level=info"]
        }]}}}
    })
}

/// What `service`'s `spec.traffic` sends to revisions that are not ready, in words (empty:
/// nothing). `ready` is the revisions whose Ready condition is True. An entry with a share
/// counts: `revisionName` must be ready, and `latestRevision: true` - which Knative resolves to
/// the latest *ready* revision - must resolve to the latest created revision, ready (else the
/// share meant for it silently goes elsewhere, or nowhere).
pub fn unready_targets(service: &Value, ready: &BTreeSet<String>) -> Vec<String> {
    let status = &service["status"];
    let latest_created = status["latestCreatedRevisionName"].as_str();
    let latest_ready = status["latestReadyRevisionName"].as_str();
    let mut found = Vec::new();
    for entry in service["spec"]["traffic"].as_array().into_iter().flatten() {
        if entry["percent"].as_i64().unwrap_or(0) == 0 {
            continue;
        }
        if entry["latestRevision"] == true {
            let reaches = latest_created.is_some()
                && latest_created == latest_ready
                && latest_created.is_some_and(|name| ready.contains(name));
            if !reaches {
                found.push(format!(
                    "{entry}: the latest revision {latest_created:?} is not ready (latest ready {latest_ready:?})"
                ));
            }
        } else if let Some(revision) = entry["revisionName"].as_str() {
            if !ready.contains(revision) {
                found.push(format!("{entry}: revision {revision} is not ready"));
            }
        } else {
            found.push(format!("{entry}: names no revision"));
        }
    }
    found
}

/// One revision of a Service, as the controller knows it.
#[derive(Clone, Debug, PartialEq)]
struct Revision {
    name: String,
    /// When it was created.
    since: Instant,
    ready: bool,
}

/// What the controller knows of one Knative Service between two passes.
#[derive(Clone, Debug, PartialEq)]
struct Tracked {
    /// The template of the latest revision.
    template: Value,
    /// Oldest first.
    revisions: Vec<Revision>,
}

/// One pass over `service` from what the controller knew (`None`: a Service it has not seen
/// yet) at `now`: what it knows now, the revisions created by this pass, and the status to
/// report (conditions without their times).
fn observe(
    known: Option<Tracked>,
    service: &Value,
    readiness: Readiness,
    now: Instant,
) -> (Tracked, Vec<Revision>, Map<String, Value>) {
    let name = service["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = service["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default();
    let template = service
        .pointer("/spec/template")
        .cloned()
        .unwrap_or(Value::Null);
    let mut tracked = known.unwrap_or(Tracked {
        template: Value::Null,
        revisions: Vec::new(),
    });
    let mut created = Vec::new();
    if tracked.revisions.is_empty() || tracked.template != template {
        let number = tracked.revisions.len() + 1;
        let revision = Revision {
            name: template["metadata"]["name"]
                .as_str()
                .map_or_else(|| format!("{name}-{number:05}"), str::to_owned),
            since: now,
            ready: false,
        };
        created.push(revision.clone());
        tracked.revisions.push(revision);
        tracked.template = template;
    }
    for revision in &mut tracked.revisions {
        revision.ready |= due(readiness, revision.since, now);
    }
    let ready: BTreeSet<&str> = tracked
        .revisions
        .iter()
        .filter(|revision| revision.ready)
        .map(|revision| revision.name.as_str())
        .collect();
    let latest_created = tracked
        .revisions
        .last()
        .map(|revision| revision.name.clone());
    let latest_ready = tracked
        .revisions
        .iter()
        .rev()
        .find(|revision| revision.ready)
        .map(|revision| revision.name.clone());

    let default_traffic = json!([{"latestRevision": true, "percent": 100}]);
    let spec_traffic = service
        .pointer("/spec/traffic")
        .filter(|traffic| {
            traffic
                .as_array()
                .is_some_and(|entries| !entries.is_empty())
        })
        .unwrap_or(&default_traffic);
    let mut routable = true;
    let mut resolved = Vec::new();
    for entry in spec_traffic.as_array().into_iter().flatten() {
        let latest = entry["latestRevision"] == true || entry.get("revisionName").is_none();
        let target = if latest {
            latest_ready.clone()
        } else {
            entry["revisionName"].as_str().map(str::to_owned)
        };
        match target {
            Some(target) if ready.contains(target.as_str()) => {
                let mut status_entry = json!({
                    "revisionName": target,
                    "latestRevision": latest,
                    "percent": entry["percent"].as_i64().unwrap_or(0),
                });
                if let Some(tag) = entry.get("tag") {
                    status_entry["tag"] = tag.clone();
                }
                resolved.push(status_entry);
            }
            _ => routable = false,
        }
    }
    let traffic = if routable {
        Value::Array(resolved)
    } else {
        service["status"]["traffic"].clone()
    };
    let condition = |kind: &str, state: &str, reason: Option<&str>| {
        let mut condition = json!({"type": kind, "status": state});
        if let Some(reason) = reason {
            condition["reason"] = json!(reason);
        }
        condition
    };
    let configured = latest_created.is_some() && latest_created == latest_ready;
    let configurations = if configured {
        condition("ConfigurationsReady", "True", None)
    } else {
        condition("ConfigurationsReady", "Unknown", Some("RevisionMissing"))
    };
    let routes = if routable {
        condition("RoutesReady", "True", None)
    } else {
        condition("RoutesReady", "False", Some("RevisionMissing"))
    };
    let whole = match (configured, routable) {
        (true, true) => condition("Ready", "True", None),
        (_, false) => condition("Ready", "False", Some("RevisionMissing")),
        (false, true) => condition("Ready", "Unknown", Some("RevisionMissing")),
    };
    let mut status = Map::new();
    status.insert(
        "observedGeneration".into(),
        service["metadata"]["generation"].clone(),
    );
    status.insert("latestCreatedRevisionName".into(), json!(latest_created));
    status.insert("latestReadyRevisionName".into(), json!(latest_ready));
    status.insert("traffic".into(), traffic);
    status.insert(
        "url".into(),
        json!(format!("http://{name}.{namespace}.example.com")),
    );
    status.insert("conditions".into(), json!([configurations, whole, routes]));
    // What is not known yet is left out, as Knative's `omitempty` does.
    status.retain(|_, value| !value.is_null());
    (tracked, created, status)
}

/// `status` without the conditions' times (what a pass compares).
fn without_times(status: &Value) -> Value {
    let mut status = status.clone();
    for condition in status
        .get_mut("conditions")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(condition) = condition.as_object_mut() {
            condition.remove("lastTransitionTime");
        }
    }
    status
}

/// `status` with the conditions stamped `now`.
fn with_times(mut status: Value) -> Value {
    let now = crate::kube_server::now();
    for condition in status
        .get_mut("conditions")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        condition["lastTransitionTime"] = json!(now);
    }
    status
}

/// Knative Serving played in the background of a test, over the Knative Services of one
/// namespace (or all); its readiness settings (per Knative Service name) through
/// [`PlayedController`].
pub struct KnativeController(PlayedController);

impl std::ops::Deref for KnativeController {
    type Target = PlayedController;

    fn deref(&self) -> &PlayedController {
        &self.0
    }
}

impl KnativeController {
    /// Starts the controller on the current tokio runtime for the Knative Services of
    /// `namespace` (`""`: every namespace), new revisions taking `readiness` to become ready.
    /// The CRDs must be installed ([`install_crds`]).
    pub fn spawn(
        server: Arc<KubeServer>,
        namespace: &str,
        readiness: Readiness,
    ) -> KnativeController {
        let namespace = namespace.to_owned();
        KnativeController(PlayedController::start(readiness, |readinesses| {
            run(server, namespace, readinesses)
        }))
    }
}

/// Creates Revision `revision` of `service` (when the kind is served; one there already is
/// left as it is).
fn create_revision(server: &KubeServer, service: &Value, revision: &Revision, number: usize) {
    let name = service["metadata"]["name"].as_str().unwrap_or_default();
    let mut template = service["spec"]["template"].clone();
    let mut labels = template["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.insert("serving.knative.dev/service".into(), json!(name));
    labels.insert("serving.knative.dev/configuration".into(), json!(name));
    labels.insert(
        "serving.knative.dev/configurationGeneration".into(),
        json!(number.to_string()),
    );
    let mut metadata = json!({
        "name": revision.name,
        "namespace": service["metadata"]["namespace"],
        "labels": labels,
        "ownerReferences": [{
            "apiVersion": SERVING, "kind": "Service", "name": name,
            "uid": service["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true
        }],
    });
    if let Some(annotations) = template["metadata"].get("annotations") {
        metadata["annotations"] = annotations.clone();
    }
    let spec = template
        .get_mut("spec")
        .map(Value::take)
        .unwrap_or_else(|| json!({}));
    // Not served (no CRD) or there already: nothing to create.
    let _ = server.create(json!({
        "apiVersion": SERVING, "kind": "Revision", "metadata": metadata, "spec": spec,
    }));
}

/// Reports `revision`'s readiness on its Revision object, when it says otherwise.
fn report_revision(server: &KubeServer, namespace: &str, revision: &Revision) {
    let Some(object) = server.get(SERVING, "Revision", namespace, &revision.name) else {
        return;
    };
    let (state, reason) = if revision.ready {
        ("True", None)
    } else {
        ("Unknown", Some("Deploying"))
    };
    let mut conditions = Vec::new();
    for kind in ["ResourcesAvailable", "ContainerHealthy", "Ready"] {
        let mut condition = json!({"type": kind, "status": state});
        if let Some(reason) = reason {
            condition["reason"] = json!(reason);
        }
        conditions.push(condition);
    }
    let status = json!({
        "observedGeneration": object["metadata"]["generation"],
        "conditions": conditions,
    });
    if without_times(&object["status"]) != status {
        // A Revision deleted meanwhile has nothing to report.
        let _ = server.merge_patch(
            SERVING,
            "Revision",
            namespace,
            &revision.name,
            &json!({"status": with_times(status)}),
            true,
        );
    }
}

async fn run(server: Arc<KubeServer>, namespace: String, readinesses: Readinesses) {
    let mut known: BTreeMap<String, Tracked> = BTreeMap::new();
    loop {
        let now = Instant::now();
        let mut seen = BTreeMap::new();
        for service in server.list(SERVING, "Service", &namespace) {
            let Some(uid) = service["metadata"]["uid"].as_str().map(str::to_owned) else {
                continue;
            };
            let name = service["metadata"]["name"].as_str().unwrap_or_default();
            let in_namespace = service["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default();
            let readiness = readinesses.of(name);
            let (tracked, created, status) = observe(known.remove(&uid), &service, readiness, now);
            for revision in &created {
                let number = tracked
                    .revisions
                    .iter()
                    .position(|known| known.name == revision.name)
                    .map_or(1, |index| index + 1);
                create_revision(&server, &service, revision, number);
            }
            // The Revisions first: a Service never names a revision ready before its Revision
            // says so.
            for revision in &tracked.revisions {
                report_revision(&server, in_namespace, revision);
            }
            let status = Value::Object(status);
            if without_times(&service["status"]) != status {
                // A Service deleted meanwhile has nothing to report.
                let _ = server.merge_patch(
                    SERVING,
                    "Service",
                    in_namespace,
                    name,
                    &json!({"status": with_times(status)}),
                    true,
                );
            }
            seen.insert(uid, tracked);
        }
        // Services gone are forgotten (a new one with the same name has another uid).
        known = seen;
        // A controller's resync period, not a synchronisation: tests wait on conditions.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn knative_service(generation: i64, image: &str, traffic: Value, status: Value) -> Value {
        json!({
            "metadata": {"name": "app", "namespace": "shop", "generation": generation},
            "spec": {"template": {"spec": {"containers": [{"image": image}]}}, "traffic": traffic},
            "status": status,
        })
    }

    fn field(status: &Map<String, Value>, name: &str) -> Value {
        status.get(name).cloned().unwrap_or(Value::Null)
    }

    fn names(status: &Map<String, Value>) -> (Value, Value) {
        (
            field(status, "latestCreatedRevisionName"),
            field(status, "latestReadyRevisionName"),
        )
    }

    fn condition<'a>(status: &'a Map<String, Value>, kind: &str) -> &'a Value {
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|condition| condition["type"] == kind)
            .map(|condition| &condition["status"])
            .unwrap()
    }

    #[test]
    fn a_new_template_is_a_new_revision_ready_after_the_delay() {
        let start = Instant::now();
        let delay = Readiness::After(Duration::from_secs(5));
        let service = knative_service(1, "a", Value::Null, Value::Null);
        let (tracked, created, status) = observe(None, &service, delay, start);
        assert_eq!(created.len(), 1);
        assert_eq!(names(&status), (json!("app-00001"), Value::Null));
        assert_eq!(status["observedGeneration"], 1);
        assert_eq!(condition(&status, "Ready"), "False");
        assert_eq!(
            field(&status, "traffic"),
            Value::Null,
            "nothing routable yet"
        );
        let later = start + Duration::from_secs(5);
        let (tracked, created, status) = observe(Some(tracked), &service, delay, later);
        assert!(created.is_empty());
        assert_eq!(names(&status), (json!("app-00001"), json!("app-00001")));
        assert_eq!(condition(&status, "Ready"), "True");
        assert_eq!(
            status["traffic"],
            json!([{"revisionName": "app-00001", "latestRevision": true, "percent": 100}])
        );

        // A new image: revision 2, created at once, ready after the delay; the latest ready
        // revision keeps the traffic meanwhile.
        let service = knative_service(2, "b", Value::Null, Value::Object(status));
        let (tracked, created, status) = observe(Some(tracked), &service, delay, later);
        assert_eq!(created[0].name, "app-00002");
        assert_eq!(names(&status), (json!("app-00002"), json!("app-00001")));
        assert_eq!(condition(&status, "ConfigurationsReady"), "Unknown");
        assert_eq!(status["traffic"][0]["revisionName"], "app-00001");
        let (_, _, status) = observe(
            Some(tracked),
            &service,
            delay,
            later + Duration::from_secs(5),
        );
        assert_eq!(names(&status), (json!("app-00002"), json!("app-00002")));
        assert_eq!(status["traffic"][0]["revisionName"], "app-00002");
    }

    #[test]
    fn traffic_changes_make_no_revision_and_resolve_latest_to_the_latest_ready() {
        let start = Instant::now();
        let service = knative_service(1, "a", Value::Null, Value::Null);
        let (tracked, _, _) = observe(None, &service, Readiness::Instant, start);
        let service = knative_service(2, "b", Value::Null, Value::Null);
        let (tracked, _, _) = observe(Some(tracked), &service, Readiness::Never, start);
        let traffic = json!([
            {"latestRevision": true, "percent": 10},
            {"revisionName": "app-00001", "percent": 90},
        ]);
        let service = knative_service(3, "b", traffic, Value::Null);
        let (tracked, created, status) = observe(Some(tracked), &service, Readiness::Never, start);
        assert!(created.is_empty(), "a traffic change is no new template");
        assert_eq!(tracked.revisions.len(), 2);
        assert_eq!(status["observedGeneration"], 3);
        // The latest ready revision is 00001: latestRevision resolves to it.
        assert_eq!(
            status["traffic"],
            json!([
                {"revisionName": "app-00001", "latestRevision": true, "percent": 10},
                {"revisionName": "app-00001", "latestRevision": false, "percent": 90},
            ])
        );
        // Naming the revision that is not ready: not routable, the previous traffic stays.
        let previous = json!({"traffic": status["traffic"].clone()});
        let traffic = json!([{"revisionName": "app-00002", "percent": 100}]);
        let service = knative_service(4, "b", traffic, previous.clone());
        let (_, _, status) = observe(Some(tracked), &service, Readiness::Never, start);
        assert_eq!(status["traffic"], previous["traffic"]);
        assert_eq!(condition(&status, "RoutesReady"), "False");
    }

    #[test]
    fn unready_targets_name_shares_that_miss_a_ready_revision() {
        let ready: BTreeSet<String> = ["app-00001".to_string()].into();
        let status = json!({"latestCreatedRevisionName": "app-00002",
            "latestReadyRevisionName": "app-00001"});
        let at = |traffic: Value| knative_service(1, "a", traffic, status.clone());
        assert!(
            unready_targets(
                &at(json!([{"latestRevision": true, "percent": 0},
                    {"revisionName": "app-00001", "percent": 100}])),
                &ready
            )
            .is_empty()
        );
        assert_eq!(
            unready_targets(
                &at(json!([{"latestRevision": true, "percent": 10},
                    {"revisionName": "app-00001", "percent": 90}])),
                &ready
            )
            .len(),
            1
        );
        assert_eq!(
            unready_targets(
                &at(json!([{"revisionName": "app-00002", "percent": 100}])),
                &ready
            )
            .len(),
            1
        );
    }
}
