//! The cluster `weir argo` acts on: the kubeconfig flags, the kube client, and the few requests
//! the verbs make (get, list, merge patch, JSON patch) on Argo's and Kubernetes' kinds as JSON.
//!
//! The objects stay `serde_json::Value`s: the printer reads them as JSON, and the verbs patch
//! fields of Argo's status that no typed model here knows, so a round trip through types would
//! only lose fields.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::GroupVersionKind;
use serde_json::Value;

/// The flags that pick the cluster and the namespace, as `kubectl` (and so the plugin) reads
/// them. Global: they go before or after the verb (`weir argo -n shop promote web`,
/// `weir argo promote web -n shop`).
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// The kubeconfig file. Default: $KUBECONFIG, else ~/.kube/config (else, in a pod, its
    /// service account).
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use, e.g. `--context staging`. Default: its current context.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The namespace of the rollouts, e.g. `-n shop`. Default: the context's namespace, else
    /// `default`.
    #[arg(long, short = 'n', global = true, value_name = "NS")]
    pub namespace: Option<String>,
}

/// The kinds `weir argo` reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `rollouts.argoproj.io`.
    Rollout,
    /// `analysisruns.argoproj.io`.
    AnalysisRun,
    /// `experiments.argoproj.io`.
    Experiment,
    /// `replicasets.apps`.
    ReplicaSet,
    /// `deployments.apps` (an undo through a Rollout's workloadRef).
    Deployment,
    /// `pods`.
    Pod,
    /// `podtemplates` (an undo through a Rollout's workloadRef).
    PodTemplate,
}

impl Kind {
    fn resource(self) -> ApiResource {
        let (group, version, kind, plural) = match self {
            Kind::Rollout => ("argoproj.io", "v1alpha1", "Rollout", "rollouts"),
            Kind::AnalysisRun => ("argoproj.io", "v1alpha1", "AnalysisRun", "analysisruns"),
            Kind::Experiment => ("argoproj.io", "v1alpha1", "Experiment", "experiments"),
            Kind::ReplicaSet => ("apps", "v1", "ReplicaSet", "replicasets"),
            Kind::Deployment => ("apps", "v1", "Deployment", "deployments"),
            Kind::Pod => ("", "v1", "Pod", "pods"),
            Kind::PodTemplate => ("", "v1", "PodTemplate", "podtemplates"),
        };
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
    }

    /// The resource as kubectl and the API server's messages name it: `rollouts.argoproj.io`.
    pub fn resource_name(self) -> String {
        let resource = self.resource();
        if resource.group.is_empty() {
            resource.plural
        } else {
            format!("{}.{}", resource.plural, resource.group)
        }
    }
}

/// A request the API server answered 404: no such object (or no such kind: the CRD is not
/// installed). Kept apart from the other errors because each verb words it for the user.
#[derive(Debug)]
pub struct NotFound;

/// The client and the namespace the verbs act in.
pub struct Cluster {
    client: kube::Client,
    /// `-n`, else the kubeconfig context's namespace, else `default`.
    pub namespace: String,
}

impl Cluster {
    /// Reads the kubeconfig as kubectl would (the file, then the context) and builds the
    /// client as `weir operator` does (`kube::Client` over the inferred configuration).
    pub async fn connect(args: &ClusterArgs) -> Result<Cluster> {
        let options = KubeConfigOptions {
            context: args.context.clone(),
            cluster: None,
            user: None,
        };
        let config = match (&args.kubeconfig, &args.context) {
            (Some(path), _) => {
                let kubeconfig = Kubeconfig::read_from(path)
                    .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .with_context(|| match &args.context {
                        Some(context) => format!(
                            "cannot use context {context:?} of kubeconfig {}",
                            path.display()
                        ),
                        None => format!("cannot use kubeconfig {}", path.display()),
                    })?
            }
            (None, Some(context)) => kube::Config::from_kubeconfig(&options)
                .await
                .with_context(|| format!("cannot use context {context:?} of the kubeconfig"))?,
            (None, None) => kube::Config::infer().await.context(
                "cannot find a cluster: set KUBECONFIG (or --kubeconfig), or run in a pod with a service account",
            )?,
        };
        let namespace = args
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client =
            kube::Client::try_from(config).context("cannot build a client for the cluster")?;
        Ok(Cluster { client, namespace })
    }

    fn api(&self, kind: Kind) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.namespace, &kind.resource())
    }

    /// The object, or `None` when the server answers 404.
    pub async fn get(&self, kind: Kind, name: &str) -> Result<Option<Value>> {
        match self.api(kind).get(name).await {
            Ok(object) => Ok(Some(to_json(kind, &object)?)),
            Err(error) if is_not_found(&error) => Ok(None),
            Err(error) => Err(error).with_context(|| {
                format!(
                    "cannot read {} {name:?} in namespace {:?}",
                    kind.resource_name(),
                    self.namespace
                )
            }),
        }
    }

    /// The objects of the namespace (matching `selector`, a label selector as text, when
    /// given); none when the kind is not served (Argo's CRDs without Experiments, say), as
    /// `get rollout` has nothing to show of a kind the cluster lacks.
    pub async fn list(&self, kind: Kind, selector: Option<&str>) -> Result<Vec<Value>> {
        let mut params = ListParams::default();
        if let Some(selector) = selector.filter(|s| !s.is_empty()) {
            params = params.labels(selector);
        }
        match self.api(kind).list(&params).await {
            Ok(list) => list.items.iter().map(|item| to_json(kind, item)).collect(),
            Err(error) if is_not_found(&error) => Ok(Vec::new()),
            Err(error) => Err(error).with_context(|| {
                format!(
                    "cannot list {} in namespace {:?}",
                    kind.resource_name(),
                    self.namespace
                )
            }),
        }
    }

    /// A JSON merge patch on the object, or on its `status` subresource when `status`.
    /// `Ok(Err(NotFound))` when the server answers 404: for a status patch, that is how a
    /// cluster whose CRD has no status subresource answers (the plugin then patches the main
    /// resource).
    pub async fn merge_patch(
        &self,
        kind: Kind,
        name: &str,
        patch: &Value,
        status: bool,
    ) -> Result<Result<Value, NotFound>> {
        let api = self.api(kind);
        let params = PatchParams::default();
        let patch = Patch::Merge(patch);
        let answer = if status {
            api.patch_status(name, &params, &patch).await
        } else {
            api.patch(name, &params, &patch).await
        };
        match answer {
            Ok(object) => Ok(Ok(to_json(kind, &object)?)),
            Err(error) if is_not_found(&error) => Ok(Err(NotFound)),
            Err(error) => Err(error).with_context(|| {
                format!(
                    "cannot patch {}{} {name:?} in namespace {:?}",
                    kind.resource_name(),
                    if status { "/status" } else { "" },
                    self.namespace
                )
            }),
        }
    }

    /// A JSON patch (RFC 6902, `application/json-patch+json`) on the object.
    pub async fn json_patch(&self, kind: Kind, name: &str, patch: &Value) -> Result<Value> {
        let operations = serde_json::from_value(patch.clone())
            .context("a JSON patch is a list of operations")?;
        let object = self
            .api(kind)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::<()>::Json(operations),
            )
            .await
            .with_context(|| {
                format!(
                    "cannot patch {} {name:?} in namespace {:?}",
                    kind.resource_name(),
                    self.namespace
                )
            })?;
        to_json(kind, &object)
    }
}

fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// The object as JSON with its `apiVersion` and `kind`: list items come without them, and the
/// printer (like `kubectl get -o yaml`) keys on `kind`.
fn to_json(kind: Kind, object: &DynamicObject) -> Result<Value> {
    let mut value = serde_json::to_value(object).context("an object the server sent as JSON")?;
    if let Some(map) = value.as_object_mut() {
        let resource = kind.resource();
        map.insert("apiVersion".into(), Value::String(resource.api_version));
        map.insert("kind".into(), Value::String(resource.kind));
    }
    Ok(value)
}
