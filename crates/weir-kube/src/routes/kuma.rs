//! `kuma`: a TrafficRoute (`kuma.io/v1alpha1`, cluster-scoped, Kuma's legacy policy) from every
//! service to the apex's, split between the primary's and canary's (`NAME_NS_svc_PORT` tags), in
//! the mesh the rollout's `kuma.io/mesh` annotation names (else `default`).
//!
//! Flagger names it `NAME`, so two rollouts of the same name in two namespaces take turns
//! overwriting one object. weir names it `NAME.NAMESPACE`: neither a Service's name nor a
//! namespace's can hold a dot, so no two rollouts share one. Being cluster-scoped it can have no
//! owner (as in Flagger): reverting deletes it. Split by weight only: A/B tests, mirroring and
//! session affinity are refused (Kuma's Gateway API support does them: `gatewayapi:v1`).

use serde_json::{Map, Value, json};
use weir_core::FieldError;
use weir_core::machine::Route;
use weir_core::model::{KubernetesTarget, RolloutSpec};

use super::{
    Access, Names, ObjectRef, RouteContext, RouteObjects, Router, TOOLKIT_ANNOTATIONS,
    refuse_ab_test, refuse_mirroring, refuse_session_affinity, relative_split,
};

/// The `kuma` provider.
pub(super) struct Kuma;

const API_VERSION: &str = "kuma.io/v1alpha1";

/// The rollout annotation that names the mesh (Flagger's).
pub const MESH_ANNOTATION: &str = "kuma.io/mesh";

/// The TrafficRoute's name: unique across namespaces.
fn name(names: &Names) -> String {
    format!("{}.{}", names.apex, names.namespace)
}

/// A Service's Kuma tag.
fn tag(service: &str, names: &Names) -> String {
    format!("{service}_{}_svc_{}", names.namespace, names.port)
}

impl Router for Kuma {
    fn name(&self) -> &'static str {
        "kuma"
    }

    fn validate(&self, spec: &RolloutSpec, _target: &KubernetesTarget) -> Vec<FieldError> {
        [
            refuse_ab_test(
                "kuma",
                spec,
                "a TrafficRoute splits by weight only; Kuma matches requests with the Gateway \
                 API (gatewayapi:v1)",
            ),
            refuse_mirroring("kuma", spec),
            refuse_session_affinity("kuma", spec),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    fn objects(&self, ctx: &RouteContext<'_>, route: &Route) -> Result<RouteObjects, String> {
        let names = ctx.names;
        let (split, adjusted) = relative_split(route, ctx.resolution, "Kuma");
        let apex = ctx.service.apex.clone().unwrap_or_default();
        let mut annotations: Map<String, Value> = apex
            .annotations
            .into_iter()
            .map(|(key, value)| (key, Value::String(value)))
            .collect();
        for (key, value) in TOOLKIT_ANNOTATIONS {
            annotations.insert(key.into(), json!(value));
        }
        let mut metadata = json!({"name": name(names), "annotations": annotations});
        if !apex.labels.is_empty() {
            metadata["labels"] = json!(apex.labels);
        }
        let mesh = ctx
            .annotations
            .get(MESH_ANNOTATION)
            .map_or("default", String::as_str);
        Ok(RouteObjects {
            objects: vec![json!({
                "apiVersion": API_VERSION,
                "kind": "TrafficRoute",
                "mesh": mesh,
                "metadata": metadata,
                "spec": {
                    "sources": [{"match": {"kuma.io/service": "*"}}],
                    "destinations": [{"match": {"kuma.io/service": tag(&names.apex, names)}}],
                    "conf": {"split": [
                        {"weight": split.primary, "destination": {"kuma.io/service": tag(&names.primary, names)}},
                        {"weight": split.canary, "destination": {"kuma.io/service": tag(&names.canary, names)}},
                    ]},
                },
            })],
            edits: Vec::new(),
            adjusted,
        })
    }

    fn owned(&self, ctx: &RouteContext<'_>) -> Vec<ObjectRef> {
        vec![ObjectRef {
            api_version: API_VERSION.into(),
            kind: "TrafficRoute".into(),
            namespace: None,
            name: name(ctx.names),
        }]
    }

    fn access(&self) -> Vec<Access> {
        vec![Access::owned("kuma.io", "trafficroutes")]
    }
}
