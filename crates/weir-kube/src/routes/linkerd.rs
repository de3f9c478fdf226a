//! `linkerd`: an SMI TrafficSplit `NAME` at `split.smi-spec.io/v1alpha1`, as Flagger writes it
//! (Quantity weights as strings, the canary first; Linkerd 2.12 and later serve it through the
//! `linkerd-smi` extension). No A/B, no mirroring, no session affinity: Linkerd users who want
//! those use `gatewayapi:v1beta1` with `gatewayRefs` naming the Service, as Flagger's Linkerd
//! guide does.

use weir_core::FieldError;
use weir_core::machine::Route;
use weir_core::model::{KubernetesTarget, RolloutSpec};

use super::{Access, ObjectRef, RouteContext, RouteObjects, Router, smi};

/// The `linkerd` provider.
pub(super) struct Linkerd;

const API_VERSION: &str = "split.smi-spec.io/v1alpha1";

impl Router for Linkerd {
    fn name(&self) -> &'static str {
        "linkerd"
    }

    fn validate(&self, spec: &RolloutSpec, _target: &KubernetesTarget) -> Vec<FieldError> {
        smi::validate("linkerd", spec)
    }

    fn objects(&self, ctx: &RouteContext<'_>, route: &Route) -> Result<RouteObjects, String> {
        Ok(smi::quantity_split(API_VERSION, ctx, route))
    }

    fn owned(&self, ctx: &RouteContext<'_>) -> Vec<ObjectRef> {
        smi::owned(API_VERSION, ctx)
    }

    fn access(&self) -> Vec<Access> {
        vec![Access::owned("split.smi-spec.io", "trafficsplits")]
    }
}
