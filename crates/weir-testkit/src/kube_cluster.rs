//! A namespace in the in-memory API server set up as the operator's end-to-end tests need it:
//! the Istio CRDs, weir's CRD applied with the real kubectl, Deployment `podinfo` (2 replicas)
//! with its HorizontalPodAutoscaler, and [`DeploymentController`] playing the Deployment
//! controller (new pods available at once by default, or after a delay, or never: see
//! [`Readiness`] and [`Cluster::with_readiness`]). Tests start `weir operator` (one or several)
//! against it and drive it as a user would.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

pub use crate::deployment_controller::{DeploymentController, PlayedController, Readiness};
use crate::fixtures::{TempDb, runtime};
use crate::kube_server::KubeServer;
use crate::process::Weir;
use crate::wait::wait_until;

/// The namespace of the tests.
pub const NAMESPACE: &str = "shop";

/// The real kubectl with `kubeconfig` and its own cache directory.
pub fn kubectl(kubeconfig: &Path, cache: &Path, args: &[&str]) -> Output {
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("kubectl is installed on every machine of this project")
}

/// Bytes a command printed, as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Deployment `podinfo` with `image` and `replicas`, selecting `app: podinfo`.
pub fn deployment(image: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "podinfo", "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "podinfo"}},
            "template": {
                "metadata": {"labels": {"app": "podinfo"}},
                "spec": {"containers": [{"name": "podinfod", "image": image,
                    "ports": [{"name": "http", "containerPort": 9898}]}]}
            }
        }
    })
}

/// A CRD for a router kind weir writes (the mesh's own CRD would be installed with the mesh).
pub fn router_crd(group: &str, kind: &str, plural: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    })
}

/// Plays the Deployment controller once, for tests that drive the target without one running:
/// Deployment `name` of `namespace` is rolled out and available ([`report_rolled_out`]).
pub fn roll_out(server: &KubeServer, namespace: &str, name: &str) {
    let deployment = server
        .get("apps/v1", "Deployment", namespace, name)
        .unwrap_or_else(|| panic!("no Deployment {namespace}/{name} to roll out"));
    report_rolled_out(server, &deployment);
}

/// What the Deployment controller does for `deployment` when nothing runs pods: reports what
/// its spec asks for as updated and available at once.
pub fn report_rolled_out(server: &KubeServer, deployment: &Value) {
    let name = deployment["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = deployment["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default();
    let replicas = deployment["spec"]["replicas"].as_i64().unwrap_or(1);
    let generation = deployment["metadata"]["generation"].as_i64().unwrap_or(1);
    let status = json!({
        "observedGeneration": generation,
        "replicas": replicas,
        "updatedReplicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
    });
    if deployment["status"] != status {
        // A Deployment deleted meanwhile has nothing to report.
        let _ = server.merge_patch(
            "apps/v1",
            "Deployment",
            namespace,
            name,
            &json!({"status": status}),
            true,
        );
    }
}

/// Plays the Deployment controller: whatever a Deployment's spec asks for is up to date and
/// available at once.
pub fn run_deployment_controller(runtime: &tokio::runtime::Runtime, server: &Arc<KubeServer>) {
    let server = Arc::clone(server);
    runtime.spawn(async move {
        loop {
            for deployment in server.list("apps/v1", "Deployment", NAMESPACE) {
                report_rolled_out(&server, &deployment);
            }
            // A controller's resync period, not a synchronisation: the test waits on conditions.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

/// The canary's weight on VirtualService `podinfo`'s default route (the last: A/B and
/// session-affinity routes with a `match` come first), once it exists.
pub fn canary_weight(server: &KubeServer) -> Option<i64> {
    let service = server.get(
        "networking.istio.io/v1",
        "VirtualService",
        NAMESPACE,
        "podinfo",
    )?;
    service["spec"]["http"].as_array()?.last()?["route"]
        .as_array()?
        .iter()
        .find(|route| route["destination"]["host"] == "podinfo-canary")?["weight"]
        .as_i64()
}

/// The weights of VirtualService `podinfo`'s default route (the last), by destination host.
pub fn route_weights(server: &KubeServer) -> BTreeMap<String, i64> {
    let Some(service) = server.get(
        "networking.istio.io/v1",
        "VirtualService",
        NAMESPACE,
        "podinfo",
    ) else {
        return BTreeMap::new();
    };
    service["spec"]["http"]
        .as_array()
        .and_then(|http| http.last())
        .and_then(|default| default["route"].as_array())
        .into_iter()
        .flatten()
        .map(|route| {
            (
                route["destination"]["host"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                route["weight"].as_i64().unwrap_or(-1),
            )
        })
        .collect()
}

/// Rollout `podinfo`'s status (null before it has one).
pub fn rollout_status(server: &KubeServer) -> Value {
    server
        .get("weir.dev/v1alpha1", "Rollout", NAMESPACE, "podinfo")
        .map(|rollout| rollout["status"].clone())
        .unwrap_or(Value::Null)
}

/// The image of Deployment `name`'s first container.
pub fn image_of(server: &KubeServer, name: &str) -> String {
    server
        .get("apps/v1", "Deployment", NAMESPACE, name)
        .unwrap()["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Deployment `name`'s replicas (-1 when unset).
pub fn replicas_of(server: &KubeServer, name: &str) -> i64 {
    server
        .get("apps/v1", "Deployment", NAMESPACE, name)
        .unwrap()["spec"]["replicas"]
        .as_i64()
        .unwrap_or(-1)
}

/// What weir creates for Deployment `podinfo` with the `istio` provider and its autoscaler:
/// (apiVersion, kind, name).
pub const CREATED_FOR_PODINFO: [(&str, &str, &str); 7] = [
    ("apps/v1", "Deployment", "podinfo-primary"),
    ("v1", "Service", "podinfo-primary"),
    ("v1", "Service", "podinfo-canary"),
    (
        "autoscaling/v2",
        "HorizontalPodAutoscaler",
        "podinfo-primary",
    ),
    ("networking.istio.io/v1", "VirtualService", "podinfo"),
    (
        "networking.istio.io/v1",
        "DestinationRule",
        "podinfo-primary",
    ),
    (
        "networking.istio.io/v1",
        "DestinationRule",
        "podinfo-canary",
    ),
];

/// HorizontalPodAutoscaler `podinfo`: 2 to 4 replicas of Deployment `podinfo`.
pub fn autoscaler() -> Value {
    json!({
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "podinfo", "namespace": NAMESPACE},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "podinfo"},
            "minReplicas": 2,
            "maxReplicas": 4
        }
    })
}

/// The API server, the files kubectl uses, and the `weir` binary under test.
pub struct Cluster {
    /// The in-memory API server.
    pub server: Arc<KubeServer>,
    /// The kubeconfig that reaches it.
    pub kubeconfig: PathBuf,
    cache: PathBuf,
    binary: String,
    dir: TempDb,
    controller: DeploymentController,
    // Last: the API server's tasks run on it.
    _runtime: tokio::runtime::Runtime,
}

impl Cluster {
    /// The namespace with the Istio CRDs, weir's CRDs (`deploy/crds.yaml`, applied with kubectl),
    /// Deployment `podinfo` at podinfo:6.0.0 with 2 replicas and its autoscaler; `binary` is the
    /// weir under test (`env!("CARGO_BIN_EXE_weir")`).
    pub fn new(binary: &str) -> Cluster {
        Cluster::with_readiness(binary, Readiness::Instant)
    }

    /// [`Cluster::new`] with the Deployment controller making new pods available as
    /// `readiness` says (`podinfo` itself included: with a delay it serves once the delay has
    /// passed).
    pub fn with_readiness(binary: &str, readiness: Readiness) -> Cluster {
        let cluster = Cluster::empty_with_readiness(binary, readiness);
        cluster
            .server
            .create(deployment("podinfo:6.0.0", 2))
            .unwrap();
        cluster.server.create(autoscaler()).unwrap();
        cluster
    }

    /// The namespace with the Istio CRDs and weir's CRDs, and no workload yet.
    pub fn empty(binary: &str) -> Cluster {
        Cluster::empty_with_readiness(binary, Readiness::Instant)
    }

    /// [`Cluster::empty`] with the Deployment controller making new pods available as
    /// `readiness` says.
    pub fn empty_with_readiness(binary: &str, readiness: Readiness) -> Cluster {
        let runtime = runtime();
        let server = Arc::new(runtime.block_on(KubeServer::start()));
        let dir = TempDb::new();
        std::fs::create_dir_all(dir.file("kube")).unwrap();
        let kubeconfig = server.kubeconfig(&dir.file("kube"));
        let cache = dir.file("kube-cache");
        let controller = {
            let _entered = runtime.enter();
            // Every namespace: tests that spread over several (the corpus) need it too.
            DeploymentController::spawn(server.clone(), "", readiness)
        };
        server
            .create(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
            )
            .unwrap();
        for (group, kind, plural) in [
            ("networking.istio.io", "VirtualService", "virtualservices"),
            ("networking.istio.io", "DestinationRule", "destinationrules"),
        ] {
            server.create(router_crd(group, kind, plural)).unwrap();
        }
        let cluster = Cluster {
            server,
            kubeconfig,
            cache,
            binary: binary.to_string(),
            dir,
            controller,
            _runtime: runtime,
        };
        // The CRDs as a user installs them.
        let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds.yaml");
        let applied = cluster.kubectl(&["apply", "-f", &crds.display().to_string()]);
        assert!(applied.status.success(), "{}", text(&applied.stderr));
        cluster
    }

    /// Installs Flagger's CRDs (`canaries`, `metrictemplates` and `alertproviders.flagger.app`):
    /// Flagger's own (from the corpus, with its strict status schema) when the corpus is there,
    /// else stand-ins that keep any fields. Returns which.
    pub fn install_flagger_crd(&self) -> &'static str {
        if let Some(dir) = crate::fixtures::compat_dir() {
            let crds = dir.join("crd.yaml");
            let applied = self.kubectl(&["apply", "-f", &crds.display().to_string()]);
            assert!(applied.status.success(), "{}", text(&applied.stderr));
            return "Flagger's own CRDs";
        }
        for (kind, plural) in [
            ("Canary", "canaries"),
            ("MetricTemplate", "metrictemplates"),
            ("AlertProvider", "alertproviders"),
        ] {
            let mut crd = router_crd("flagger.app", kind, plural);
            crd["spec"]["versions"][0]["name"] = json!("v1beta1");
            crd["spec"]["versions"][0]["subresources"] = json!({"status": {}});
            self.server.create(crd).unwrap();
        }
        "stand-in Canary, MetricTemplate and AlertProvider CRDs (no corpus)"
    }

    /// The Deployment controller, to change how long new pods take from now on
    /// ([`PlayedController::set_readiness`], [`PlayedController::set_readiness_of`]).
    pub fn deployment_controller(&self) -> &DeploymentController {
        &self.controller
    }

    /// The real kubectl against this cluster.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        kubectl(&self.kubeconfig, &self.cache, args)
    }

    /// `kubectl apply -f` of `yaml` (written to a file first, as a user would keep it).
    pub fn apply(&self, yaml: &str) {
        let file = self.dir.file("applied.yaml");
        std::fs::write(&file, yaml).unwrap();
        let applied = self.kubectl(&["apply", "-f", &file.display().to_string()]);
        assert!(applied.status.success(), "{}", text(&applied.stderr));
    }

    /// `weir operator --namespace shop` with `extra` arguments, reaching this cluster.
    pub fn start_operator(&self, extra: &[&str]) -> Weir {
        self.start_operator_in(&[NAMESPACE], extra)
    }

    /// `weir operator` watching `namespaces` (`--namespace` each), with `extra` arguments.
    pub fn start_operator_in(&self, namespaces: &[&str], extra: &[&str]) -> Weir {
        let kubeconfig = self.kubeconfig.display().to_string();
        let mut args = vec!["operator", "--listen", "127.0.0.1:0", "--output", "json"];
        for namespace in namespaces {
            args.extend(["--namespace", namespace]);
        }
        args.extend_from_slice(extra);
        Weir::start_with_env(&self.binary, &args, &[("KUBECONFIG", kubeconfig.as_str())])
    }

    /// `weir` (a client verb) against `operator`'s API, in the tests' namespace.
    pub fn weir(&self, operator: &Weir, args: &[&str]) -> Output {
        Command::new(&self.binary)
            .args(args)
            .args(["-n", NAMESPACE, "--server", &operator.url("api")])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Rollout `name`'s history as `operator` serves it, one JSON object per event.
    pub fn history(&self, operator: &Weir, name: &str) -> Vec<Value> {
        let listed = self.weir(operator, &["history", name, "--output", "json"]);
        assert!(listed.status.success(), "{}", text(&listed.stderr));
        text(&listed.stdout)
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap())
            .collect()
    }

    /// Waits for the initialisation of `podinfo`: the primary serves, the Services exist, the
    /// target waits at zero.
    pub fn wait_initialised(&self) {
        let server = &self.server;
        wait_until("the primary, its Services and the target at zero", || {
            let primary = server.get("apps/v1", "Deployment", NAMESPACE, "podinfo-primary")?;
            let services = ["podinfo", "podinfo-primary", "podinfo-canary"]
                .iter()
                .filter_map(|name| server.get("v1", "Service", NAMESPACE, name))
                .count();
            (services == 3 && replicas_of(server, "podinfo") == 0).then_some(primary)
        });
    }

    /// `podinfo` runs `image`: a new revision.
    pub fn set_image(&self, image: &str) {
        self.server
            .merge_patch(
                "apps/v1",
                "Deployment",
                NAMESPACE,
                "podinfo",
                &json!({"spec": {"template": {"spec": {"containers": [{"name": "podinfod", "image": image,
                    "ports": [{"name": "http", "containerPort": 9898}]}]}}}}),
                false,
            )
            .unwrap();
    }

    /// A new pod template for `podinfo` (an annotation `release: N`): a new revision.
    pub fn new_revision(&self, release: &str) {
        self.server
            .merge_patch(
                "apps/v1",
                "Deployment",
                NAMESPACE,
                "podinfo",
                &json!({"spec": {"template": {"metadata": {"annotations": {"release": release}}}}}),
                false,
            )
            .unwrap();
    }
}

/// A weir Rollout of `podinfo` through Istio with `plan` (YAML flow style), analysis every second.
pub fn rollout_yaml(plan: &str) -> String {
    rollout_yaml_with_analysis(plan, "{interval: 1s, threshold: 2}")
}

/// A weir Rollout of `podinfo` through Istio with `plan` and `analysis` (both YAML flow style).
pub fn rollout_yaml_with_analysis(plan: &str, analysis: &str) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {{name: podinfo, namespace: {NAMESPACE}}}\nspec:\n  target:\n    kind: kubernetes\n    targetRef: {{apiVersion: apps/v1, kind: Deployment, name: podinfo}}\n    provider: istio\n    autoscalerRef: {{apiVersion: autoscaling/v2, kind: HorizontalPodAutoscaler, name: podinfo}}\n    service: {{port: 9898}}\n  plan: {plan}\n  analysis: {analysis}\n"
    )
}
