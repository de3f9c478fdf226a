//! Knative Services run by the real `weir operator` (`provider: knative`, Flagger's way: no
//! primary copy) against the in-memory API server with Knative's own CRDs (when the corpus is
//! beside the project) and the testkit's Knative Serving stand-in, whose new revisions become
//! ready 2 s after their template changes. Every state the Knative Service goes through is
//! checked: `spec.traffic` never sends a share to a revision that is not ready (a `revisionName`
//! whose Revision is not Ready, or `latestRevision: true` while the latest created revision is
//! not the latest ready one). A Flagger Canary is set up (the annotation
//! `flagger.app/primary-revision` and all traffic on the first revision, once ready), run
//! 10..50% and promoted; a weir Rollout is aborted mid-run (all traffic back on the primary
//! revision) and, deleted with `revertOnDeletion`, gives the Service back to Knative's default;
//! an A/B Canary is refused naming the provider and the field.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use weir_testkit::knative_controller::{
    self, KnativeController, Readiness, SERVING, unready_targets,
};
use weir_testkit::kube_cluster::{Cluster, NAMESPACE, rollout_status, text};
use weir_testkit::kube_server::{ChangeFeed, KubeServer};
use weir_testkit::wait::{wait_until, wait_until_within};

/// How long a new revision takes to become ready in these tests.
const REVISION_START: Duration = Duration::from_secs(2);

const ANNOTATION: &str = "flagger.app/primary-revision";

/// The Flagger Canary of Knative Service `podinfo`: 10% steps to 50%, no metrics, every 10 s -
/// Flagger's shortest interval (weir raises a Canary's 1s to it, with a warning).
const CANARY: &str = "apiVersion: flagger.app/v1beta1
kind: Canary
metadata: {name: podinfo, namespace: shop}
spec:
  provider: knative
  targetRef: {apiVersion: serving.knative.dev/v1, kind: Service, name: podinfo}
  progressDeadlineSeconds: 60
  analysis: {interval: 10s, threshold: 2, maxWeight: 50, stepWeight: 10}
";

/// How long a Canary run of [`CANARY`] may take: about ten 10 s ticks, with room for a loaded
/// machine.
const CANARY_RUN: Duration = Duration::from_secs(600);

/// A weir Rollout of Knative Service `podinfo` that waits at 50% to be resumed, and gives the
/// Service back when deleted.
const ROLLOUT: &str = "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {name: podinfo, namespace: shop}
spec:
  target:
    kind: kubernetes
    provider: knative
    targetRef: {apiVersion: serving.knative.dev/v1, kind: Service, name: podinfo}
  plan: {canary: {steps: [{weight: 20}, {weight: 50, pause: {}}]}}
  analysis: {interval: 1s, threshold: 2, progressDeadline: 2m}
  revertOnDeletion: true
";

/// The cluster with Knative's CRDs, Knative Serving played (revisions ready after
/// [`REVISION_START`]) on `runtime`, a feed of every write to Knative's objects, and Knative
/// Service `podinfo` at podinfo:6.0.0 applied with kubectl.
struct Knative {
    _controller: KnativeController,
    feed: ChangeFeed,
    cluster: Cluster,
    // Last: the controller runs on it.
    _runtime: tokio::runtime::Runtime,
}

impl Knative {
    fn start() -> Knative {
        let cluster = Cluster::empty(env!("CARGO_BIN_EXE_weir"));
        println!("with {}", knative_controller::install_crds(&cluster.server));
        let runtime = weir_testkit::fixtures::runtime();
        let controller = {
            let _entered = runtime.enter();
            KnativeController::spawn(
                cluster.server.clone(),
                NAMESPACE,
                Readiness::After(REVISION_START),
            )
        };
        let feed = cluster
            .server
            .subscribe(|group, _resource, _object| group == "serving.knative.dev");
        let service = knative_controller::service(NAMESPACE, "podinfo", "podinfo:6.0.0");
        cluster.apply(&serde_json::to_string(&service).unwrap());
        Knative {
            cluster,
            feed,
            _controller: controller,
            _runtime: runtime,
        }
    }

    fn server(&self) -> &KubeServer {
        &self.cluster.server
    }

    /// Knative Service `podinfo` now.
    fn service(&self) -> Value {
        self.server()
            .get(SERVING, "Service", NAMESPACE, "podinfo")
            .unwrap()
    }

    /// `kubectl patch` of the image, as Flagger's end-to-end test does it: a new revision.
    fn set_image(&self, image: &str) {
        let patch = json!([{"op": "replace", "path": "/spec/template/spec/containers/0/image",
            "value": image}])
        .to_string();
        let patched = self.cluster.kubectl(&[
            "patch",
            "services.serving.knative.dev/podinfo",
            "-n",
            NAMESPACE,
            "--type=json",
            "-p",
            &patch,
        ]);
        assert!(patched.status.success(), "{}", text(&patched.stderr));
    }
}

/// The annotation naming the primary revision, if any.
fn annotated(service: &Value) -> Option<&str> {
    service["metadata"]["annotations"][ANNOTATION].as_str()
}

/// `spec.traffic` sending everything to `revision` (Flagger's shape).
fn all_on(revision: &str) -> Value {
    json!([{"latestRevision": true, "percent": 0}, {"revisionName": revision, "percent": 100}])
}

/// The canary's share in `spec.traffic` (the `latestRevision` entry), if there is one.
fn canary_percent(service: &Value) -> Option<i64> {
    service["spec"]["traffic"]
        .as_array()?
        .iter()
        .find(|entry| entry["latestRevision"] == true)?["percent"]
        .as_i64()
}

fn canary_status(server: &KubeServer) -> Value {
    server
        .get("flagger.app/v1beta1", "Canary", NAMESPACE, "podinfo")
        .map(|canary| canary["status"].clone())
        .unwrap_or(Value::Null)
}

/// What the audit saw of the Knative Service over a test.
#[derive(Default)]
struct Audit {
    /// Revisions whose Ready condition was True (they stay ready).
    ready: BTreeSet<String>,
    /// States of the Service checked.
    moments: usize,
    /// The canary shares (`latestRevision` percent) seen, in order, without repeats.
    weights: Vec<i64>,
    violations: Vec<String>,
}

impl Audit {
    /// Every write since the last call, in order: each Revision's readiness, and each state of
    /// the Service checked against it.
    fn take(&mut self, feed: &ChangeFeed) {
        for change in feed.take() {
            let object = &change.object;
            match change.resource.as_str() {
                "revisions" => {
                    let ready = object["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|condition| {
                            condition["type"] == "Ready" && condition["status"] == "True"
                        });
                    if ready && let Some(name) = object["metadata"]["name"].as_str() {
                        self.ready.insert(name.to_string());
                    }
                }
                "services" => {
                    self.moments += 1;
                    for violation in unready_targets(object, &self.ready) {
                        self.violations.push(format!(
                            "at resourceVersion {}: {violation}",
                            change.resource_version
                        ));
                    }
                    if let Some(percent) = canary_percent(object)
                        && self.weights.last() != Some(&percent)
                    {
                        self.weights.push(percent);
                    }
                }
                _ => {}
            }
        }
    }

    fn assert_clean(&self) {
        assert!(
            self.violations.is_empty(),
            "traffic went to revisions that were not ready:\n{}",
            self.violations.join("\n")
        );
    }
}

#[test]
fn a_flagger_canary_of_a_knative_service_is_set_up_run_and_promoted_on_ready_revisions_only() {
    let started = std::time::Instant::now();
    let knative = Knative::start();
    let server = knative.server();
    let cluster = &knative.cluster;
    let mut audit = Audit::default();
    println!("with {}", cluster.install_flagger_crd());
    cluster.apply(CANARY);
    let operator = cluster.start_operator(&[]);

    // Set-up: once podinfo-00001 is ready, the annotation names it and it takes all traffic.
    let service = wait_until_within(
        CANARY_RUN,
        "the Canary initialised on podinfo-00001",
        || {
            audit.take(&knative.feed);
            let service = knative.service();
            (canary_status(server)["phase"] == "Initialized"
                && annotated(&service) == Some("podinfo-00001")
                && service["spec"]["traffic"] == all_on("podinfo-00001"))
            .then_some(service)
        },
    );
    println!("initialised after {:?}", started.elapsed());
    assert!(
        audit.ready.contains("podinfo-00001"),
        "set-up waited for the revision: {:?}",
        audit.ready
    );
    let history = cluster.history(&operator, "podinfo");
    let reasons: Vec<&str> = history
        .iter()
        .map(|event| event["reason"].as_str().unwrap_or_default())
        .collect();
    let waited = reasons
        .iter()
        .position(|reason| *reason == "WaitingForPrimary");
    let done = reasons.iter().position(|reason| *reason == "Initialized");
    assert!(
        waited.is_some() && waited < done,
        "set-up waits for the revision, then reports Initialized: {reasons:?}"
    );
    // Nothing created, nothing owned: the user's Service only gets weir's two fields.
    assert!(server.list("apps/v1", "Deployment", NAMESPACE).is_empty());
    assert!(server.list("v1", "Service", NAMESPACE).is_empty());
    assert!(
        service["metadata"]["ownerReferences"].is_null(),
        "{service:#}"
    );
    let weirs: Vec<&Value> = service["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|entry| entry["manager"] == "weir")
        .collect();
    assert_eq!(weirs.len(), 1, "{service:#}");
    let fields = &weirs[0]["fieldsV1"];
    assert_eq!(
        fields["f:spec"],
        json!({"f:traffic": {}}),
        "weir owns spec.traffic, not the template: {fields:#}"
    );
    assert_eq!(
        fields["f:metadata"]["f:annotations"],
        json!({"f:flagger.app/primary-revision": {}}),
        "{fields:#}"
    );
    assert_eq!(rollout_status(server)["run"].as_u64().unwrap_or(0), 0);

    // A new image: podinfo-00002, judged 10..50% once ready, then promoted.
    knative.set_image("podinfo:6.0.1");
    let mut phases: Vec<String> = Vec::new();
    let service = wait_until_within(CANARY_RUN, "the Canary promoted to podinfo-00002", || {
        audit.take(&knative.feed);
        let status = canary_status(server);
        if let Some(phase) = status["phase"].as_str()
            && phases.last().map(String::as_str) != Some(phase)
        {
            phases.push(phase.to_string());
        }
        let service = knative.service();
        (status["phase"] == "Succeeded"
            && annotated(&service) == Some("podinfo-00002")
            && service["spec"]["traffic"] == all_on("podinfo-00002"))
        .then_some(service)
    });
    println!("promoted after {:?}", started.elapsed());
    audit.take(&knative.feed);
    assert_eq!(
        audit.weights,
        [0, 10, 20, 30, 40, 50, 0],
        "the canary's shares along the run"
    );
    assert!(phases.contains(&"Progressing".to_string()), "{phases:?}");
    assert_eq!(
        service["spec"]["template"]["spec"]["containers"][0]["image"], "podinfo:6.0.1",
        "the user's template is theirs"
    );
    assert_eq!(
        service["status"]["traffic"],
        json!([
            {"revisionName": "podinfo-00002", "latestRevision": true, "percent": 0},
            {"revisionName": "podinfo-00002", "latestRevision": false, "percent": 100},
        ])
    );
    let status = canary_status(server);
    assert_eq!(status["conditions"][0]["type"], "Promoted", "{status:#}");
    assert_eq!(status["conditions"][0]["status"], "True", "{status:#}");
    // As a Knative user sees it.
    let listed = cluster.kubectl(&["get", "ksvc", "-n", NAMESPACE]);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    println!("{}", text(&listed.stdout));

    println!(
        "phases: {phases:?}; canary shares seen: {:?}; {} states of the Knative Service checked, {} violations",
        audit.weights,
        audit.moments,
        audit.violations.len()
    );
    assert!(audit.moments > 10, "the audit saw the whole story");
    audit.assert_clean();
}

#[test]
fn an_aborted_run_goes_back_to_the_primary_revision_and_deletion_gives_the_service_back() {
    let knative = Knative::start();
    let server = knative.server();
    let cluster = &knative.cluster;
    let mut audit = Audit::default();
    cluster.apply(ROLLOUT);
    let operator = cluster.start_operator(&[]);
    wait_until("set-up on podinfo-00001", || {
        audit.take(&knative.feed);
        let service = knative.service();
        (rollout_status(server)["phase"] == "Initialized"
            && service["spec"]["traffic"] == all_on("podinfo-00001"))
        .then_some(())
    });

    knative.set_image("podinfo:6.0.1");
    wait_until("the run at 50%, waiting to be resumed", || {
        audit.take(&knative.feed);
        (canary_percent(&knative.service()) == Some(50)
            && rollout_status(server)["waitingForResume"] == true)
            .then_some(())
    });
    let aborted = cluster.weir(&operator, &["abort", "podinfo"]);
    assert!(aborted.status.success(), "{}", text(&aborted.stderr));
    let service = wait_until("rolled back: all traffic on podinfo-00001", || {
        audit.take(&knative.feed);
        let service = knative.service();
        (rollout_status(server)["phase"] == "Failed"
            && service["spec"]["traffic"] == all_on("podinfo-00001"))
        .then_some(service)
    });
    assert_eq!(annotated(&service), Some("podinfo-00001"));
    assert_eq!(
        service["status"]["latestReadyRevisionName"], "podinfo-00002",
        "the rolled-back revision stays, with no traffic"
    );

    // Deleted with revertOnDeletion: the Service is Knative's again.
    let deleted = cluster.kubectl(&[
        "delete",
        "rollouts.weir.dev/podinfo",
        "-n",
        NAMESPACE,
        "--timeout=90s",
    ]);
    assert!(deleted.status.success(), "{}", text(&deleted.stderr));
    let service = wait_until("the Service given back", || {
        audit.take(&knative.feed);
        let service = knative.service();
        (server
            .get("weir.dev/v1alpha1", "Rollout", NAMESPACE, "podinfo")
            .is_none()
            && service["spec"]["traffic"] == json!([{"latestRevision": true, "percent": 100}]))
        .then_some(service)
    });
    assert_eq!(annotated(&service), None, "{service:#}");
    audit.take(&knative.feed);
    println!(
        "canary shares seen: {:?}; {} states of the Knative Service checked, {} violations",
        audit.weights,
        audit.moments,
        audit.violations.len()
    );
    assert_eq!(audit.weights, [0, 20, 50, 0, 100]);
    audit.assert_clean();
}

#[test]
fn an_ab_canary_of_a_knative_service_is_refused_naming_the_provider_and_the_field() {
    let knative = Knative::start();
    let server = knative.server();
    let cluster = &knative.cluster;
    cluster.install_flagger_crd();
    cluster.apply(&CANARY.replace(
        "analysis: {interval: 10s, threshold: 2, maxWeight: 50, stepWeight: 10}",
        "analysis: {interval: 10s, threshold: 2, iterations: 3, match: [{headers: {x-canary: {exact: insider}}}]}",
    ));
    let _operator = cluster.start_operator(&[]);
    let message = wait_until("the refusal, in the rollout's status", || {
        rollout_status(server)["message"]
            .as_str()
            .filter(|message| message.starts_with("refused"))
            .map(str::to_string)
    });
    println!("{message}");
    assert!(
        message.contains("provider knative") && message.contains("match"),
        "{message}"
    );
    let on_canary = wait_until("the refusal, on the Canary", || {
        canary_status(server)["conditions"][0]["message"]
            .as_str()
            .map(str::to_string)
    });
    println!("{on_canary}");
    // Nothing was written to the user's Service.
    let service = knative.service();
    assert_eq!(annotated(&service), None);
    assert!(service["spec"]["traffic"].is_null(), "{service:#}");
}
