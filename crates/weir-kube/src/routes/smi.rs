//! `smi` (`smi:v1alpha1`, `smi:v1alpha2`, `smi:v1alpha3`, with or without Flagger's `:MESH`): a
//! TrafficSplit `NAME`. SMI splits by weight only: no A/B, no mirroring, no session affinity.
//! `v1alpha1` weights are Kubernetes Quantities, written as strings as Flagger writes them (the
//! `linkerd` provider's shape); later versions take numbers.

use serde_json::{Value, json};
use weir_core::FieldError;
use weir_core::machine::Route;
use weir_core::model::{KubernetesTarget, RolloutSpec};

use super::{
    Access, ObjectRef, RouteContext, RouteObjects, Router, metadata, refuse_ab_test,
    refuse_mirroring, refuse_session_affinity, relative_split,
};

/// The SMI provider at one API version.
pub(super) struct Smi {
    name: &'static str,
    api_version: &'static str,
}

/// `smi:v1alpha1`: Linkerd's shape.
pub(super) static SMI_V1ALPHA1: Smi = Smi {
    name: "smi:v1alpha1",
    api_version: "split.smi-spec.io/v1alpha1",
};

/// `smi`, `smi:v1alpha2`.
pub(super) static SMI_V1ALPHA2: Smi = Smi {
    name: "smi",
    api_version: "split.smi-spec.io/v1alpha2",
};

/// `smi:v1alpha3`.
pub(super) static SMI_V1ALPHA3: Smi = Smi {
    name: "smi:v1alpha3",
    api_version: "split.smi-spec.io/v1alpha3",
};

/// What an SMI-based provider cannot express.
pub(super) fn validate(provider: &str, spec: &RolloutSpec) -> Vec<FieldError> {
    [
        refuse_ab_test(
            provider,
            spec,
            "a TrafficSplit splits by weight only and matches no request",
        ),
        refuse_mirroring(provider, spec),
        refuse_session_affinity(provider, spec),
    ]
    .into_iter()
    .flatten()
    .collect()
}

impl Router for Smi {
    fn name(&self) -> &'static str {
        self.name
    }

    fn validate(&self, spec: &RolloutSpec, _target: &KubernetesTarget) -> Vec<FieldError> {
        validate(self.name, spec)
    }

    fn objects(&self, ctx: &RouteContext<'_>, route: &Route) -> Result<RouteObjects, String> {
        if self.api_version.ends_with("v1alpha1") {
            return Ok(quantity_split(self.api_version, ctx, route));
        }
        let (split, adjusted) = relative_split(route, ctx.resolution, "SMI");
        let names = ctx.names;
        Ok(RouteObjects {
            objects: vec![json!({
                "apiVersion": self.api_version,
                "kind": "TrafficSplit",
                "metadata": metadata(&names.apex, names, ctx.owner),
                "spec": {
                    "service": names.apex,
                    "backends": [
                        {"service": names.primary, "weight": split.primary},
                        {"service": names.canary, "weight": split.canary},
                    ],
                },
            })],
            edits: Vec::new(),
            adjusted,
        })
    }

    fn owned(&self, ctx: &RouteContext<'_>) -> Vec<ObjectRef> {
        owned(self.api_version, ctx)
    }

    fn access(&self) -> Vec<Access> {
        vec![Access::owned("split.smi-spec.io", "trafficsplits")]
    }
}

/// The TrafficSplit `NAME`.
pub(super) fn owned(api_version: &str, ctx: &RouteContext<'_>) -> Vec<ObjectRef> {
    vec![ObjectRef {
        api_version: api_version.into(),
        kind: "TrafficSplit".into(),
        namespace: Some(ctx.names.namespace.clone()),
        name: ctx.names.apex.clone(),
    }]
}

/// A `v1alpha1` TrafficSplit as Flagger writes it for Linkerd: `spec.service` is the first of
/// `service.hosts` (else `NAME`), the backends are the canary then the primary, and the weights
/// are Quantities written as strings (`"90"`).
pub(super) fn quantity_split(
    api_version: &str,
    ctx: &RouteContext<'_>,
    route: &Route,
) -> RouteObjects {
    let (split, adjusted) = relative_split(route, ctx.resolution, "Linkerd's TrafficSplit");
    let names = ctx.names;
    let service = ctx
        .service
        .hosts
        .as_ref()
        .and_then(|hosts| hosts.get(0))
        .and_then(Value::as_str)
        .unwrap_or(&names.apex);
    RouteObjects {
        objects: vec![json!({
            "apiVersion": api_version,
            "kind": "TrafficSplit",
            "metadata": metadata(&names.apex, names, ctx.owner),
            "spec": {
                "service": service,
                "backends": [
                    {"service": names.canary, "weight": split.canary.to_string()},
                    {"service": names.primary, "weight": split.primary.to_string()},
                ],
            },
        })],
        edits: Vec::new(),
        adjusted,
    }
}
