//! Argo Rollouts' custom resources (`argoproj.io/v1alpha1`) served by the in-memory API server,
//! so that tests can write Rollouts, AnalysisTemplates, ClusterAnalysisTemplates,
//! AnalysisRuns and Experiments as they would to a cluster with Argo Rollouts installed.
//!
//! The CustomResourceDefinitions are written here, not taken from Argo's release: they carry
//! what the server and `kubectl` use - names, short names, scope, the `status` subresource and
//! the printer columns `kubectl get` shows - and a schema that keeps every field
//! (`type: object` with `x-kubernetes-preserve-unknown-fields: true`). So nothing a test writes
//! is pruned or rejected for its shape: the stand-ins check no field, where Argo's own CRDs
//! would reject a misspelt one (weir's own validation is what tests of bad specs exercise).
//!
//! | Resource | Kind | Short name | Scope | Subresources | Columns |
//! |---|---|---|---|---|---|
//! | `rollouts` | Rollout | `ro` | Namespaced | status | Desired, Current, Up-to-date, Available, Age |
//! | `analysistemplates` | AnalysisTemplate | `at` | Namespaced | - | Age |
//! | `clusteranalysistemplates` | ClusterAnalysisTemplate | `cat` | Cluster | - | Age |
//! | `analysisruns` | AnalysisRun | `ar` | Namespaced | status | Status, Age |
//! | `experiments` | Experiment | `exp` | Namespaced | status | Status, Age |
//!
//! **No `scale` subresource on Rollouts.** Argo declares one (`specReplicasPath .spec.replicas`,
//! `statusReplicasPath .status.HPAReplicas`, `labelSelectorPath .status.selector`) so that an
//! HPA can target a Rollout, but the in-memory server serves `/scale` for built-in Deployments
//! only (see `crate::kube_server`, "What it leaves out"): declaring it would advertise a
//! subresource that answers 404. It is left out until the server serves CRDs' `/scale`.
//!
//! [`install_argo_crds`] creates them directly in the server; [`argo_crds_yaml`] gives the same
//! CRDs as a multi-document YAML for `kubectl apply -f`. Both come from [`argo_crds`], so the two
//! ways cannot drift apart.

use serde_json::{Value, json};

use crate::kube_cluster::Cluster;
use crate::kube_server::KubeServer;
use crate::wait::wait_until;

/// Argo Rollouts' API group.
pub const GROUP: &str = "argoproj.io";

/// Argo Rollouts' API version (`argoproj.io/v1alpha1`), the only one Argo serves.
pub const API_VERSION: &str = "argoproj.io/v1alpha1";

/// One printer column: name, OpenAPI type, JSON path.
type Column = (&'static str, &'static str, &'static str);

/// One of Argo's kinds, as its CRD declares it.
struct ArgoKind {
    plural: &'static str,
    kind: &'static str,
    short_name: &'static str,
    namespaced: bool,
    /// Has the `status` subresource (the controller writes status apart from the spec).
    status: bool,
    /// The columns between `Name` and `Age`.
    columns: &'static [Column],
}

/// Age, as every CRD with printer columns must declare it itself (the API server adds it only
/// to CRDs that declare no column at all).
const AGE: Column = ("Age", "date", ".metadata.creationTimestamp");

/// The five kinds, in the order they are installed.
const KINDS: [ArgoKind; 5] = [
    ArgoKind {
        plural: "rollouts",
        kind: "Rollout",
        short_name: "ro",
        namespaced: true,
        status: true,
        columns: &[
            ("Desired", "integer", ".spec.replicas"),
            ("Current", "integer", ".status.replicas"),
            ("Up-to-date", "integer", ".status.updatedReplicas"),
            ("Available", "integer", ".status.availableReplicas"),
        ],
    },
    ArgoKind {
        plural: "analysistemplates",
        kind: "AnalysisTemplate",
        short_name: "at",
        namespaced: true,
        status: false,
        columns: &[],
    },
    ArgoKind {
        plural: "clusteranalysistemplates",
        kind: "ClusterAnalysisTemplate",
        short_name: "cat",
        namespaced: false,
        status: false,
        columns: &[],
    },
    ArgoKind {
        plural: "analysisruns",
        kind: "AnalysisRun",
        short_name: "ar",
        namespaced: true,
        status: true,
        columns: &[("Status", "string", ".status.phase")],
    },
    ArgoKind {
        plural: "experiments",
        kind: "Experiment",
        short_name: "exp",
        namespaced: true,
        status: true,
        columns: &[("Status", "string", ".status.phase")],
    },
];

impl ArgoKind {
    /// The CustomResourceDefinition object.
    fn crd(&self) -> Value {
        let columns: Vec<Value> = self
            .columns
            .iter()
            .chain(std::iter::once(&AGE))
            .map(|(name, kind, path)| json!({"name": name, "type": kind, "jsonPath": path}))
            .collect();
        let mut version = json!({
            "name": "v1alpha1",
            "served": true,
            "storage": true,
            "additionalPrinterColumns": columns,
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
            }},
        });
        if self.status {
            version["subresources"] = json!({"status": {}});
        }
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{}.{GROUP}", self.plural)},
            "spec": {
                "group": GROUP,
                "names": {
                    "kind": self.kind,
                    "listKind": format!("{}List", self.kind),
                    "plural": self.plural,
                    "singular": self.kind.to_lowercase(),
                    "shortNames": [self.short_name],
                },
                "scope": if self.namespaced { "Namespaced" } else { "Cluster" },
                "versions": [version],
            },
        })
    }
}

/// The five CustomResourceDefinitions (`rollouts.argoproj.io`, `analysistemplates...`,
/// `clusteranalysistemplates...`, `analysisruns...`, `experiments...`) as objects.
pub fn argo_crds() -> Vec<Value> {
    KINDS.iter().map(ArgoKind::crd).collect()
}

/// Creates Argo's CRDs in `server` (serving their resources at once). Idempotent: a CRD that
/// already exists is left as it is, so a test may install them after another helper did.
///
/// # Panics
/// When the server rejects a CRD for another reason: the test's set-up failed, and the
/// message says why.
pub fn install_argo_crds(server: &KubeServer) {
    for crd in argo_crds() {
        let name = crd
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        match server.create(crd) {
            Ok(_) => {}
            Err(error) if error.reason == "AlreadyExists" => {}
            Err(error) => panic!("installing the Argo Rollouts CRD {name}: {error}"),
        }
    }
}

/// The same CRDs as [`argo_crds`], as one multi-document YAML (`---` between documents) for
/// `kubectl apply -f`.
pub fn argo_crds_yaml() -> String {
    argo_crds()
        .iter()
        .map(|crd| {
            // JSON is YAML too: should the YAML writer ever refuse a document, kubectl still
            // reads the JSON text.
            serde_saphyr::to_string(crd).unwrap_or_else(|_| format!("{crd}\n"))
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// [`Cluster::empty`] for `binary` (the weir under test, `env!("CARGO_BIN_EXE_weir")`) with
/// Argo's CRDs applied by the real kubectl from [`argo_crds_yaml`], as a user installs Argo
/// Rollouts.
pub fn argo_kube_cluster(binary: &str) -> Cluster {
    let cluster = Cluster::empty(binary);
    cluster.apply(&argo_crds_yaml());
    cluster
}

/// Rollout `name` in `namespace` as a user keeps it: `replicas`, pods labelled and selected
/// `app: NAME`, one container `NAME` running `image`; `strategy` is the YAML under `strategy:`,
/// indented by four spaces (`"    canary:\n      steps:\n        - setWeight: 50\n"`).
pub fn rollout_yaml(
    namespace: &str,
    name: &str,
    replicas: i64,
    image: &str,
    strategy: &str,
) -> String {
    format!(
        "apiVersion: {API_VERSION}
kind: Rollout
metadata:
  name: {name}
  namespace: {namespace}
spec:
  replicas: {replicas}
  selector:
    matchLabels:
      app: {name}
  template:
    metadata:
      labels:
        app: {name}
    spec:
      containers:
        - name: {name}
          image: {image}
  strategy:
{strategy}"
    )
}

/// The `status` of Rollout `name` in `namespace` (`Null` while it has none or is not there).
pub fn rollout_status(server: &KubeServer, namespace: &str, name: &str) -> Value {
    server
        .get(API_VERSION, "Rollout", namespace, name)
        .and_then(|rollout| rollout.get("status").cloned())
        .unwrap_or(Value::Null)
}

/// Waits until the status of Rollout `name` satisfies `check` (see [`wait_until`]); returns it.
pub fn wait_rollout_status(
    server: &KubeServer,
    namespace: &str,
    name: &str,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    wait_until(what, || {
        let status = rollout_status(server, namespace, name);
        check(&status).then_some(status)
    })
}

/// The ReplicaSets Rollout `name` in `namespace` controls (a controller ownerReference to its
/// uid), in the server's order.
pub fn replica_sets_of(server: &KubeServer, namespace: &str, name: &str) -> Vec<Value> {
    let Some(uid) = server
        .get(API_VERSION, "Rollout", namespace, name)
        .and_then(|rollout| rollout.pointer("/metadata/uid").cloned())
    else {
        return Vec::new();
    };
    server
        .list("apps/v1", "ReplicaSet", namespace)
        .into_iter()
        .filter(|rs| {
            rs.pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .is_some_and(|owners| {
                    owners
                        .iter()
                        .any(|owner| owner["uid"] == uid && owner["controller"] == json!(true))
                })
        })
        .collect()
}

/// Creates `count` pods of `replica_set` (the object as the server holds it) as the ReplicaSet
/// controller would (the in-memory server runs no pods): `generateName: RS-`, the template's
/// labels, annotations and spec, and a controller ownerReference to the ReplicaSet (`apps/v1`,
/// name, uid, `blockOwnerDeletion`); no status (no kubelet runs them). Returns them as
/// created.
///
/// # Panics
/// When the server refuses a pod: the test's set-up failed, and the message says why.
pub fn create_pods_of(server: &KubeServer, replica_set: &Value, count: usize) -> Vec<Value> {
    let name = replica_set
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let namespace = replica_set
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let template = replica_set
        .pointer("/spec/template")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let mut metadata = json!({
        "generateName": format!("{name}-"),
        "namespace": namespace,
        "ownerReferences": [{
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": name,
            "uid": replica_set.pointer("/metadata/uid").cloned().unwrap_or(Value::Null),
            "controller": true,
            "blockOwnerDeletion": true,
        }],
    });
    for field in ["labels", "annotations"] {
        if let Some(value) = template.pointer(&format!("/metadata/{field}")) {
            metadata[field] = value.clone();
        }
    }
    let spec = template.get("spec").cloned().unwrap_or_else(|| json!({}));
    (0..count)
        .map(|_| {
            let pod =
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec});
            server
                .create(pod)
                .unwrap_or_else(|error| panic!("creating a pod of ReplicaSet {name}: {error}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_yaml_holds_the_same_crds_as_the_objects() {
        let parsed: Vec<Value> = serde_saphyr::from_multiple(&argo_crds_yaml()).unwrap();
        assert_eq!(parsed, argo_crds());
        let names: Vec<&str> = parsed
            .iter()
            .filter_map(|crd| crd.pointer("/metadata/name").and_then(Value::as_str))
            .collect();
        assert_eq!(
            names,
            [
                "rollouts.argoproj.io",
                "analysistemplates.argoproj.io",
                "clusteranalysistemplates.argoproj.io",
                "analysisruns.argoproj.io",
                "experiments.argoproj.io"
            ]
        );
    }

    #[test]
    fn cluster_analysis_templates_are_cluster_scoped_and_the_rest_namespaced() {
        for crd in argo_crds() {
            let scope = crd.pointer("/spec/scope").and_then(Value::as_str);
            let cluster = crd.pointer("/spec/names/kind").and_then(Value::as_str)
                == Some("ClusterAnalysisTemplate");
            assert_eq!(
                scope,
                Some(if cluster { "Cluster" } else { "Namespaced" }),
                "{crd}"
            );
        }
    }
}
