//! Flagger's corpus of Canaries (`../shared/compat/flagger`, beside the project when it is
//! there) as a Flagger user runs them: each Canary with the user's objects it names (its target,
//! autoscaler, Ingress, ApisixRoute, Upstream), in a namespace of its own, and the provider that
//! the Flagger install it was written for sets when the Canary names none (`-mesh-provider`).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// One Canary of the corpus.
#[derive(Debug, Clone)]
pub struct CorpusCanary {
    /// The file's name without `.yaml` (`test-nginx-test-canary-2db93453`).
    pub stem: String,
    /// The folder it came from (`canaries` or `canaries-more`).
    pub folder: &'static str,
    /// The Canary as written.
    pub canary: Value,
}

impl CorpusCanary {
    /// A namespace of its own, from the file's hash (`c-2db93453`): stable, short, unique.
    pub fn namespace(&self) -> String {
        let hash = self.stem.rsplit('-').next().unwrap_or(&self.stem);
        format!("c-{hash}")
    }

    /// The Canary's name.
    pub fn name(&self) -> &str {
        self.canary["metadata"]["name"].as_str().unwrap_or_default()
    }

    /// The provider it runs with: its own `spec.provider`, else the one of the Flagger install
    /// its source was written for ([`install_provider`]).
    pub fn provider(&self) -> String {
        self.canary["spec"]["provider"]
            .as_str()
            .map_or_else(|| install_provider(&self.stem).to_string(), str::to_string)
    }

    /// Whether the Canary names its provider itself.
    pub fn names_provider(&self) -> bool {
        self.canary["spec"]["provider"].is_string()
    }
}

/// Every Canary of `dir` (the corpus's `flagger` folder): `canaries/`, then `canaries-more/`
/// when present, each sorted by file name. A file that is not one Canary is a broken corpus.
pub fn canaries(dir: &Path) -> Vec<CorpusCanary> {
    let mut found = Vec::new();
    for folder in ["canaries", "canaries-more"] {
        let Ok(entries) = std::fs::read_dir(dir.join(folder)) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
            .collect();
        files.sort();
        for file in files {
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|error| panic!("{}: {error}", file.display()));
            let canary: Value = serde_saphyr::from_str(&text)
                .unwrap_or_else(|error| panic!("{}: {error}", file.display()));
            assert_eq!(canary["kind"], "Canary", "{}", file.display());
            let stem = file
                .file_stem()
                .map(|stem| stem.to_string_lossy().into_owned())
                .unwrap_or_default();
            found.push(CorpusCanary {
                stem,
                folder,
                canary,
            });
        }
    }
    found
}

/// The provider the Flagger install of a corpus file's source sets with `-mesh-provider`
/// (the corpus names its files after their source: `test-<e2e suite>-...`,
/// `docs-gitbook-tutorials-<guide>-...`, `artifacts-examples-<mesh>-...`). Flagger's Linkerd
/// guide and e2e suite install Flagger with `gatewayapi:v1beta1` (GAMMA); the rest name their
/// mesh or controller; the default is Istio, as Flagger's.
pub fn install_provider(stem: &str) -> &'static str {
    let source = stem
        .strip_prefix("test-")
        .or_else(|| stem.strip_prefix("docs-gitbook-tutorials-"))
        .or_else(|| stem.strip_prefix("artifacts-examples-"))
        .unwrap_or("");
    let suite = source.split('-').next().unwrap_or("");
    match suite {
        "linkerd" => "gatewayapi:v1beta1",
        "gatewayapi" => "gatewayapi:v1",
        "kuma" => "kuma",
        "nginx" => "nginx",
        "contour" => "contour",
        "gloo" => "gloo",
        "skipper" => "skipper",
        "traefik" => "traefik",
        "apisix" => "apisix",
        "knative" => "knative",
        "kubernetes" | "keda" => "kubernetes",
        _ => "istio",
    }
}

/// The port the Canary's Services serve and the name of its target's container port.
fn ports(canary: &Value) -> (i64, String) {
    let service = &canary["spec"]["service"];
    let name = service["portName"]
        .as_str()
        .or_else(|| service["targetPort"].as_str())
        .unwrap_or("http");
    (service["port"].as_i64().unwrap_or(9898), name.to_string())
}

/// The user's objects a Canary names, as a Flagger user has them before applying it, in
/// `namespace`, with the target at `image`: the target Deployment or DaemonSet (`app: NAME`,
/// 2 replicas), its HorizontalPodAutoscaler or KEDA ScaledObject (`autoscalerRef`), an Ingress
/// (`ingressRef`) and an ApisixRoute (`routeRef`) sending `app.example.com` to the apex
/// Service, an Upstream (`upstreamRef`, in the reference's namespace when it names one) with
/// connection settings, and a Knative Service for a Knative target.
pub fn user_objects(canary: &Value, namespace: &str, image: &str) -> Vec<Value> {
    let spec = &canary["spec"];
    let target = &spec["targetRef"];
    let target_name = target["name"].as_str().unwrap_or_default();
    let target_kind = target["kind"].as_str().unwrap_or("Deployment");
    let apex = spec["service"]["name"].as_str().unwrap_or(target_name);
    let (port, port_name) = ports(canary);
    let container_port = spec["service"]["targetPort"].as_i64().unwrap_or(port);
    let container = json!({"name": "app", "image": image,
        "ports": [{"name": port_name, "containerPort": container_port}]});
    let mut objects = Vec::new();
    match target_kind {
        "Service" => objects.push(json!({
            "apiVersion": "serving.knative.dev/v1", "kind": "Service",
            "metadata": {"name": target_name, "namespace": namespace},
            "spec": {"template": {"spec": {"containers": [{"image": image,
                "ports": [{"containerPort": container_port}]}]}}}
        })),
        kind => {
            let mut workload = json!({
                "apiVersion": "apps/v1", "kind": kind,
                "metadata": {"name": target_name, "namespace": namespace},
                "spec": {
                    "selector": {"matchLabels": {"app": target_name}},
                    "template": {
                        "metadata": {"labels": {"app": target_name}},
                        "spec": {"containers": [container]}
                    }
                }
            });
            if kind == "Deployment" {
                workload["spec"]["replicas"] = json!(2);
            }
            objects.push(workload);
        }
    }
    let autoscaler = &spec["autoscalerRef"];
    if let Some(name) = autoscaler["name"].as_str() {
        objects.push(if autoscaler["kind"] == "ScaledObject" {
            scaled_object(name, namespace, target_name)
        } else {
            horizontal_pod_autoscaler(name, namespace, target_kind, target_name)
        });
    }
    if let Some(name) = spec["ingressRef"]["name"].as_str() {
        objects.push(ingress(name, namespace, apex, port));
    }
    if let Some(name) = spec["routeRef"]["name"].as_str() {
        objects.push(apisix_route(name, namespace, apex, port));
    }
    if let Some(name) = spec["upstreamRef"]["name"].as_str() {
        // Gloo's Upstreams usually live in `gloo-system`: where the reference says.
        let elsewhere = spec["upstreamRef"]["namespace"].as_str();
        objects.push(upstream(name, elsewhere.unwrap_or(namespace)));
    }
    objects
}

/// The target's HorizontalPodAutoscaler as a Flagger user has it (2 to 4 replicas on CPU).
pub fn horizontal_pod_autoscaler(
    name: &str,
    namespace: &str,
    target_kind: &str,
    target_name: &str,
) -> Value {
    json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": target_kind, "name": target_name},
            "minReplicas": 2,
            "maxReplicas": 4,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 99}}}]
        }
    })
}

/// The target's KEDA ScaledObject as the corpus's KEDA tutorial has it (a Prometheus trigger on
/// the target's requests).
pub fn scaled_object(name: &str, namespace: &str, target_name: &str) -> Value {
    json!({
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"name": target_name},
            "minReplicaCount": 1,
            "maxReplicaCount": 3,
            "triggers": [{"type": "prometheus", "metadata": {
                "serverAddress": "http://prometheus.monitoring:9090",
                "query": format!("sum(rate(http_requests_total{{app=\"{target_name}\"}}[30s]))"),
                "threshold": "10"
            }}]
        }
    })
}

/// An ingress-nginx Ingress sending `app.example.com` to the Service `apex` on `port`.
pub fn ingress(name: &str, namespace: &str, apex: &str, port: i64) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": namespace,
            "annotations": {"kubernetes.io/ingress.class": "nginx"}},
        "spec": {"rules": [{"host": "app.example.com", "http": {"paths": [{
            "path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": apex, "port": {"number": port}}}
        }]}}]}
    })
}

/// An ApisixRoute sending GETs for `app.example.com` to the Service `apex` on `port`.
pub fn apisix_route(name: &str, namespace: &str, apex: &str, port: i64) -> Value {
    json!({
        "apiVersion": "apisix.apache.org/v2", "kind": "ApisixRoute",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"http": [{
            "name": "method",
            "match": {"hosts": ["app.example.com"], "methods": ["GET"], "paths": ["/*"]},
            "backends": [{"serviceName": apex, "servicePort": port}]
        }]}
    })
}

/// A Gloo Upstream with connection settings (what `upstreamRef` copies into weir's).
pub fn upstream(name: &str, namespace: &str) -> Value {
    json!({
        "apiVersion": "gloo.solo.io/v1", "kind": "Upstream",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"connectionConfig": {"maxRequestsPerConnection": 51}}
    })
}

/// The Gateway API's HTTPRoute CRD as a stand-in (the corpus has no Gateway API CRDs): both
/// versions Flagger writes (`v1`, `v1beta1`) served, any fields kept.
pub fn http_route_crd() -> Value {
    let version = |name: &str, storage: bool| {
        json!({"name": name, "served": true, "storage": storage,
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            "subresources": {"status": {}}})
    };
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "httproutes.gateway.networking.k8s.io"},
        "spec": {
            "group": "gateway.networking.k8s.io",
            "names": {"kind": "HTTPRoute", "plural": "httproutes", "singular": "httproute", "listKind": "HTTPRouteList"},
            "scope": "Namespaced",
            "versions": [version("v1", true), version("v1beta1", false)]
        }
    })
}

/// The AlertProviders a Canary's `analysis.alerts` name (in the provider reference's namespace,
/// else `namespace`), as its user has them: each of the type its name says (Slack, Discord,
/// Microsoft Teams; else Slack) posting to `address`.
pub fn alert_providers(canary: &Value, namespace: &str, address: &str) -> Vec<Value> {
    let alerts = canary["spec"]["analysis"]["alerts"].as_array();
    alerts
        .into_iter()
        .flatten()
        .filter_map(|alert| {
            let reference = &alert["providerRef"];
            let name = reference["name"].as_str()?;
            let kind = ["discord", "msteams"]
                .into_iter()
                .find(|kind| name.contains(kind))
                .unwrap_or("slack");
            Some(json!({
                "apiVersion": "flagger.app/v1beta1", "kind": "AlertProvider",
                "metadata": {"name": name,
                    "namespace": reference["namespace"].as_str().unwrap_or(namespace)},
                "spec": {"type": kind, "address": address}
            }))
        })
        .collect()
}
