//! `kubernetes`: no route objects. Blue/green only: the apex Service selects the primary, and a
//! promotion switches everyone at once; a weight between 0 and 100% is refused when it is to be
//! applied. Without a router nothing can match requests, mirror or pin clients, so those are
//! refused at validation (Flagger drops A/B rules with a warning and runs the iterations with no
//! request reaching the canary).

use weir_core::FieldError;
use weir_core::machine::Route;
use weir_core::model::{KubernetesTarget, RolloutSpec};

use super::{
    Access, ObjectRef, PROVIDERS, RouteContext, RouteObjects, Router, refuse_ab_test,
    refuse_mirroring, refuse_session_affinity,
};

/// The `kubernetes` provider.
pub(super) struct Kubernetes;

impl Router for Kubernetes {
    fn name(&self) -> &'static str {
        "kubernetes"
    }

    fn validate(&self, spec: &RolloutSpec, _target: &KubernetesTarget) -> Vec<FieldError> {
        [
            refuse_ab_test(
                "kubernetes",
                spec,
                "without a router the apex Service sends every request to the same pods",
            ),
            refuse_mirroring("kubernetes", spec),
            refuse_session_affinity("kubernetes", spec),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    fn objects(&self, _ctx: &RouteContext<'_>, route: &Route) -> Result<RouteObjects, String> {
        let canary = route.canary_weight.basis_points();
        if canary > 0 && canary < 10_000 {
            return Err(format!(
                "provider kubernetes moves traffic only all at once (blue/green): a canary weight of {} needs a mesh or a gateway ({PROVIDERS})",
                route.canary_weight
            ));
        }
        Ok(RouteObjects::default())
    }

    fn owned(&self, _ctx: &RouteContext<'_>) -> Vec<ObjectRef> {
        Vec::new()
    }

    fn access(&self) -> Vec<Access> {
        Vec::new()
    }
}
