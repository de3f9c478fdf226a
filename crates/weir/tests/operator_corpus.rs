//! Every Canary of Flagger's corpus (`../shared/compat/flagger/canaries` and `canaries-more`)
//! runs through `weir operator` to promotion, against the in-memory API server with the
//! providers' real CRDs installed (`../shared/compat/crds`, and Flagger's own Canary CRD), as a
//! Flagger user runs it: the user's objects it names (target, autoscaler, Ingress, ApisixRoute,
//! Upstream, Knative Service) applied with kubectl, then the Canary, then a new image.
//!
//! Each Canary gets a namespace of its own; the Canaries that name no provider run under an
//! operator started with the provider of the Flagger install their source was written for
//! (`--provider`, Flagger's `-mesh-provider`). What the harness changes in each Canary, and why:
//! - `analysis.interval` is 1s, so 74 Canaries run in a minute;
//! - `analysis.metrics` are left out: they query a mesh's or controller's telemetry, which no
//!   traffic here produces (the metric path runs against a real Prometheus in
//!   `operator_prometheus.rs` and the judges' own tests);
//! - every webhook's URL points at this test's receiver (path `/NAMESPACE/TYPE/NAME`), which
//!   answers 200 - the load tester's `rollout` calls, pre/post-rollout checks, and the
//!   confirm-rollout / confirm-promotion gates, all called by weir as Flagger calls them.
//!
//! Every write to the objects of each Canary's namespace, in order (the server's change feed,
//! never polled), gives the states each object went through (status and bookkeeping left out,
//! repeats folded): they are compared with `tests/snapshots/operator_corpus__<file>.snap`
//! (update with `INSTA_UPDATE=always` and review the diff). App Mesh and OSM Canaries
//! (`canaries-more/`) are refused, saying why. Without the corpus (a fresh clone) the test says
//! that it skipped and passes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{Map, Value, json};
use weir_testkit::fixtures::{compat_dir, runtime};
use weir_testkit::flagger_corpus::{self, CorpusCanary};
use weir_testkit::knative_controller::KnativeController;
use weir_testkit::kube_cluster::{Cluster, Readiness, text};
use weir_testkit::kube_server::{Change, ChangeKind};
use weir_testkit::receiver::{Receiver, Reply};
use weir_testkit::wait::wait_until_within;

/// How long the whole corpus may take to promote on a loaded two-core machine.
const CORPUS_DEADLINE: Duration = Duration::from_secs(600);

/// The image the user's targets start with, and the one each run promotes.
const STABLE: &str = "podinfo:6.0.0";
const NEW: &str = "podinfo:6.0.1";

/// A Canary as the harness applies it (see the module's documentation).
fn as_applied(corpus: &CorpusCanary, receiver: &Receiver) -> Value {
    let namespace = corpus.namespace();
    let mut canary = corpus.canary.clone();
    canary["metadata"]["namespace"] = json!(namespace);
    let analysis = &mut canary["spec"]["analysis"];
    analysis["interval"] = json!("1s");
    if let Some(analysis) = analysis.as_object_mut() {
        analysis.remove("metrics");
    }
    if let Some(hooks) = analysis["webhooks"].as_array_mut() {
        for hook in hooks {
            let kind = hook["type"].as_str().unwrap_or("rollout").to_string();
            // Names may hold spaces ("load test"): a path segment of their letters and digits.
            let name = hook["name"]
                .as_str()
                .unwrap_or_default()
                .replace(|c: char| !c.is_ascii_alphanumeric(), "-");
            hook["url"] = json!(receiver.url(&format!("/{namespace}/{kind}/{name}")));
        }
    }
    canary
}

/// The Canary's status in namespace `namespace`.
fn canary_status(cluster: &Cluster, corpus: &CorpusCanary) -> Value {
    cluster
        .server
        .get(
            "flagger.app/v1beta1",
            "Canary",
            &corpus.namespace(),
            corpus.name(),
        )
        .map(|canary| canary["status"].clone())
        .unwrap_or(Value::Null)
}

/// Whether the Canary names a mesh that is gone (App Mesh, OSM): weir refuses it.
fn names_a_retired_mesh(corpus: &CorpusCanary) -> bool {
    let provider = corpus.provider();
    provider.starts_with("appmesh") || provider == "osm"
}

/// The resources whose writes are the Canary's traffic story: not the harness's inputs (the
/// Canary, whose status is checked instead, and its AlertProviders: both hold the receiver's
/// port), nor status-only and bookkeeping kinds.
fn snapshotted(resource: &str) -> bool {
    !matches!(
        resource,
        "events" | "leases" | "pods" | "canaries" | "alertproviders" | "rollouts" | "namespaces"
    )
}

/// The namespace an object belongs to: its own, or for a cluster-scoped route (Kuma's
/// TrafficRoute, named `NAME.NAMESPACE`) the one its name ends with.
fn namespace_of(object: &Value) -> Option<String> {
    let metadata = &object["metadata"];
    metadata["namespace"]
        .as_str()
        .map(str::to_string)
        .or_else(|| {
            let name = metadata["name"].as_str()?;
            name.rsplit_once('.')
                .map(|(_, namespace)| namespace.to_string())
        })
        .filter(|namespace| namespace.starts_with("c-"))
}

/// What an object says, without what the server and kubectl add: `spec` (and the other
/// top-level fields but `status`), labels, annotations and owners.
fn said(object: &Value) -> Value {
    let mut said = object.as_object().cloned().unwrap_or_default();
    for key in ["apiVersion", "kind", "status", "metadata"] {
        said.remove(key);
    }
    if let Some(spec) = said.get_mut("spec").and_then(Value::as_object_mut) {
        // Assigned by the server, not written by anyone.
        spec.remove("clusterIP");
        spec.remove("clusterIPs");
    }
    let metadata = &object["metadata"];
    let mut kept = Map::new();
    if let Some(labels) = metadata["labels"].as_object().filter(|m| !m.is_empty()) {
        kept.insert("labels".into(), Value::Object(labels.clone()));
    }
    if let Some(annotations) = metadata["annotations"].as_object() {
        let annotations: Map<String, Value> = annotations
            .iter()
            .filter(|(key, _)| key.as_str() != "kubectl.kubernetes.io/last-applied-configuration")
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        if !annotations.is_empty() {
            kept.insert("annotations".into(), Value::Object(annotations));
        }
    }
    if let Some(owners) = metadata["ownerReferences"].as_array() {
        let owners: Vec<String> = owners
            .iter()
            .map(|owner| {
                format!(
                    "{}/{}",
                    owner["kind"].as_str().unwrap_or_default(),
                    owner["name"].as_str().unwrap_or_default()
                )
            })
            .collect();
        kept.insert("owners".into(), json!(owners));
    }
    if !kept.is_empty() {
        said.insert("metadata".into(), Value::Object(kept));
    }
    masked(Value::Object(said))
}

/// `value` with the random part of session-affinity cookies (`NAME=` then 16 hex digits, new
/// for each run, as Flagger's) written `NAME=(random)`.
fn masked(value: Value) -> Value {
    match value {
        Value::String(text) => {
            let mut out = String::with_capacity(text.len());
            let mut rest = text.as_str();
            while let Some(at) = rest.find('=') {
                let (before, after) = rest.split_at(at + 1);
                out.push_str(before);
                let hex = after.chars().take_while(char::is_ascii_hexdigit).count();
                if hex == 16 {
                    out.push_str("(random)");
                    rest = &after[16..];
                } else {
                    rest = after;
                }
            }
            out.push_str(rest);
            Value::String(out)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(masked).collect()),
        Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (k, masked(v))).collect()),
        other => other,
    }
}

/// The states each object of each namespace went through, in order, repeats folded.
type Histories = BTreeMap<String, BTreeMap<String, Vec<Value>>>;

fn record(histories: &mut Histories, change: &Change) {
    let Some(namespace) = namespace_of(&change.object).filter(|_| snapshotted(&change.resource))
    else {
        return;
    };
    let name = change.object["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    let resource = if change.group.is_empty() {
        change.resource.clone()
    } else {
        format!("{}.{}", change.resource, change.group)
    };
    let state = match change.kind {
        ChangeKind::Deleted => json!("(deleted)"),
        _ => said(&change.object),
    };
    let states = histories
        .entry(namespace)
        .or_default()
        .entry(format!("{resource}/{name}"))
        .or_default();
    if states.last() != Some(&state) {
        states.push(state);
    }
}

/// The canary weights a Canary's status showed, in order.
fn weights_seen(changes: &[Change], namespace: &str) -> Vec<i64> {
    let mut weights: Vec<i64> = Vec::new();
    for change in changes {
        if change.resource == "canaries"
            && change.object["metadata"]["namespace"] == namespace
            && let Some(weight) = change.object["status"]["canaryWeight"].as_i64()
            && weights.last() != Some(&weight)
        {
            weights.push(weight);
        }
    }
    weights
}

#[test]
fn every_corpus_canary_runs_to_promotion_through_the_operator() {
    let Some(dir) = compat_dir() else {
        println!("compat corpus not found (../shared/compat or WEIR_COMPAT_DIR): skipped");
        return;
    };
    let corpus = flagger_corpus::canaries(&dir);
    assert!(
        corpus.len() >= 65,
        "{} Canaries in {}",
        corpus.len(),
        dir.display()
    );
    let cluster = Cluster::empty(env!("CARGO_BIN_EXE_weir"));
    let server = &cluster.server;
    println!("with {}", cluster.install_flagger_crd());
    // The providers' real CRDs, as their installs bring them; the Gateway API's HTTPRoute (not
    // in the corpus) as a stand-in that keeps any field.
    let crds = dir.join("../crds");
    let applied = cluster.kubectl(&["apply", "-R", "-f", &crds.display().to_string()]);
    assert!(applied.status.success(), "{}", text(&applied.stderr));
    server.create(flagger_corpus::http_route_crd()).unwrap();

    let runtime = runtime();
    let receiver = runtime.block_on(Receiver::start(|_, _| Reply::new(200, "{\"ok\": true}")));
    let _knative = {
        let _entered = runtime.enter();
        KnativeController::spawn(server.clone(), "", Readiness::Instant)
    };

    // The user's objects, then the Canaries, each applied with kubectl as a user does.
    let mut objects = Vec::new();
    let mut canaries = Vec::new();
    for canary in &corpus {
        let namespace = canary.namespace();
        objects.extend(flagger_corpus::user_objects(
            &canary.canary,
            &namespace,
            STABLE,
        ));
        let alerts = receiver.url(&format!("/{namespace}/alert"));
        objects.extend(flagger_corpus::alert_providers(
            &canary.canary,
            &namespace,
            &alerts,
        ));
        canaries.push(as_applied(canary, &receiver));
    }
    // Namespaces first: the Canaries' own and those their references name (`gloo-system`).
    let namespaces: BTreeSet<String> = corpus
        .iter()
        .map(CorpusCanary::namespace)
        .chain(
            objects
                .iter()
                .filter_map(|object| object["metadata"]["namespace"].as_str().map(str::to_string)),
        )
        .collect();
    let objects: Vec<Value> = namespaces
        .iter()
        .map(|name| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))
        .chain(objects)
        .collect();
    // The Canaries' writes too: their status gives the weights seen.
    let feed = server.subscribe(|_, resource, object| {
        namespace_of(object).is_some() && (snapshotted(resource) || resource == "canaries")
    });
    cluster.apply(&documents(&objects));
    cluster.apply(&documents(&canaries));

    // One operator per Flagger install: Canaries that name their provider run under the
    // default one (istio, as Flagger's default).
    let mut installs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for canary in &corpus {
        let install = if canary.names_provider() {
            "istio".to_string()
        } else {
            canary.provider()
        };
        let watched = installs.entry(install).or_default();
        watched.insert(canary.namespace());
        // The AlertProviders it names may live elsewhere (`flagger`): watched too.
        for provider in flagger_corpus::alert_providers(&canary.canary, &canary.namespace(), "") {
            watched.insert(
                provider["metadata"]["namespace"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
        }
    }
    let _operators: Vec<_> = installs
        .iter()
        .map(|(provider, namespaces)| {
            let namespaces: Vec<&str> = namespaces.iter().map(String::as_str).collect();
            cluster.start_operator_in(&namespaces, &["--provider", provider])
        })
        .collect();

    let (retired, running): (Vec<&CorpusCanary>, Vec<&CorpusCanary>) = corpus
        .iter()
        .partition(|canary| names_a_retired_mesh(canary));
    wait_for_phase(&cluster, &running, "Initialized");

    // A new image for every target: a run each.
    for canary in &running {
        let namespace = canary.namespace();
        let new = flagger_corpus::user_objects(&canary.canary, &namespace, NEW).remove(0);
        let (api_version, kind) = (
            new["apiVersion"].as_str().unwrap(),
            new["kind"].as_str().unwrap(),
        );
        let name = new["metadata"]["name"].as_str().unwrap();
        server
            .merge_patch(
                api_version,
                kind,
                &namespace,
                name,
                &json!({"spec": {"template": new["spec"]["template"]}}),
                false,
            )
            .unwrap();
    }
    wait_for_phase(&cluster, &running, "Succeeded");

    // Refused, saying why, and nothing written for them.
    for canary in &retired {
        let condition = &canary_status(&cluster, canary)["conditions"][0];
        assert_eq!(
            condition["reason"], "Refused",
            "{}: {condition}",
            canary.stem
        );
        let message = condition["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("App Mesh") && message.contains("archived"),
            "{}: {message}",
            canary.stem
        );
    }

    let mut changes = feed.initial.clone();
    changes.extend(feed.take());
    let mut histories = Histories::new();
    for change in &changes {
        record(&mut histories, change);
    }
    let mut per_provider: BTreeMap<String, usize> = BTreeMap::new();
    for canary in &running {
        let namespace = canary.namespace();
        let status = canary_status(&cluster, canary);
        assert_eq!(
            status["conditions"][0]["type"], "Promoted",
            "{}",
            canary.stem
        );
        assert_eq!(status["conditions"][0]["status"], "True", "{}", canary.stem);
        let target = &canary.canary["spec"]["targetRef"];
        if target["kind"] == "Service" {
            let service = server
                .get(
                    "serving.knative.dev/v1",
                    "Service",
                    &namespace,
                    target["name"].as_str().unwrap(),
                )
                .unwrap();
            assert!(
                service["metadata"]["annotations"]["flagger.app/primary-revision"]
                    .as_str()
                    .is_some_and(|revision| revision.ends_with("00002")),
                "{}: {service:#}",
                canary.stem
            );
        } else {
            let primary = format!("{}-primary", target["name"].as_str().unwrap());
            let workload = server
                .get(
                    "apps/v1",
                    target["kind"].as_str().unwrap(),
                    &namespace,
                    &primary,
                )
                .unwrap_or_else(|| panic!("{}: no {primary}", canary.stem));
            assert_eq!(
                workload["spec"]["template"]["spec"]["containers"][0]["image"], NEW,
                "{}",
                canary.stem
            );
        }
        let weights = weights_seen(&changes, &namespace);
        *per_provider.entry(canary.provider()).or_default() += 1;
        println!(
            "{} ({}): promoted; canary weights {weights:?}",
            canary.stem,
            canary.provider()
        );
        let snapshot = json!({
            "file": format!("{}/{}.yaml", canary.folder, canary.stem),
            "provider": canary.provider(),
            "objects": histories.get(&namespace).cloned().unwrap_or_default(),
        });
        insta::assert_yaml_snapshot!(canary.stem.clone(), snapshot);
    }
    let calls: BTreeSet<String> = receiver
        .received()
        .iter()
        .filter_map(|call| call.path.split('/').nth(2).map(str::to_string))
        .collect();
    println!(
        "{} of {} corpus Canaries promoted ({per_provider:?}); {} refused (App Mesh, OSM); webhook types called: {calls:?}",
        running.len(),
        corpus.len(),
        retired.len()
    );
}

/// `objects` as one file of several JSON documents, one after another. (Not a `v1 List`:
/// kubectl validates a List against `/openapi/v2`, which the in-memory server does not serve.)
fn documents(objects: &[Value]) -> String {
    objects
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Waits until every Canary of `canaries` shows `phase` (printing who is still waiting as it
/// changes, so a hang says where).
fn wait_for_phase(cluster: &Cluster, canaries: &[&CorpusCanary], phase: &str) {
    let mut last = String::new();
    wait_until_within(
        CORPUS_DEADLINE,
        &format!("every corpus Canary {phase}"),
        || {
            let pending: Vec<String> = canaries
                .iter()
                .filter_map(|canary| {
                    let status = canary_status(cluster, canary);
                    (status["phase"] != phase).then(|| {
                        format!(
                            "{} ({}): {} {}",
                            canary.stem,
                            canary.provider(),
                            status["phase"],
                            status["conditions"][0]["message"]
                        )
                    })
                })
                .collect();
            let now = pending.join("\n  ");
            if now != last {
                eprintln!("waiting for {phase}: {} left\n  {now}", pending.len());
                last = now;
            }
            pending.is_empty().then_some(())
        },
    );
}
