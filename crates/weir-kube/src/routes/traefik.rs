//! `traefik`: a TraefikService `NAME` (`traefik.io/v1alpha1`, Traefik v3's group), which the
//! user's IngressRoute names as its service (`kind: TraefikService`). Weighted round robin
//! between the primary's and canary's Services; the canary's entry is left out while it has no
//! traffic, as Flagger does. While the canary only gets a mirrored copy, the TraefikService
//! mirrors instead (`mirroring`, whole percent). A TraefikService matches no request (the
//! IngressRoute does, and it is the user's), so A/B tests and session affinity are refused.

use serde_json::json;
use weir_core::FieldError;
use weir_core::machine::Route;
use weir_core::model::{KubernetesTarget, RolloutSpec};

use super::{
    Access, ObjectRef, RouteContext, RouteObjects, Router, apex_metadata, refuse_ab_test,
    refuse_session_affinity, relative_split,
};

/// The `traefik` provider.
pub(super) struct Traefik;

const API_VERSION: &str = "traefik.io/v1alpha1";

impl Router for Traefik {
    fn name(&self) -> &'static str {
        "traefik"
    }

    fn validate(&self, spec: &RolloutSpec, _target: &KubernetesTarget) -> Vec<FieldError> {
        [
            refuse_ab_test(
                "traefik",
                spec,
                "a TraefikService splits by weight only; requests are matched by your \
                 IngressRoute",
            ),
            refuse_session_affinity("traefik", spec),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    fn objects(&self, ctx: &RouteContext<'_>, route: &Route) -> Result<RouteObjects, String> {
        let names = ctx.names;
        let (split, mut adjusted) = relative_split(route, ctx.resolution, "Traefik");
        let service =
            |name: &str| json!({"name": name, "namespace": names.namespace, "port": names.port});
        let spec = match route.mirror_weight {
            Some(mirror) if split.canary == 0 => {
                let percent = (mirror.basis_points() + 50) / 100;
                if !mirror.basis_points().is_multiple_of(100) {
                    adjusted = Some(format!(
                        "Traefik mirrors whole percentages: mirror weight {mirror} applied as {percent}%"
                    ));
                }
                let mut mirrored = service(&names.canary);
                mirrored["percent"] = json!(percent);
                let mut main = service(&names.primary);
                main["mirrors"] = json!([mirrored]);
                json!({"mirroring": main})
            }
            Some(_) => {
                return Err("provider traefik mirrors to a canary without traffic only".into());
            }
            None => {
                let mut primary = service(&names.primary);
                primary["weight"] = json!(split.primary);
                let mut services = vec![primary];
                if split.canary > 0 {
                    let mut canary = service(&names.canary);
                    canary["weight"] = json!(split.canary);
                    services.push(canary);
                }
                json!({"weighted": {"services": services}})
            }
        };
        Ok(RouteObjects {
            objects: vec![json!({
                "apiVersion": API_VERSION,
                "kind": "TraefikService",
                "metadata": apex_metadata(&names.apex, ctx),
                "spec": spec,
            })],
            edits: Vec::new(),
            adjusted,
        })
    }

    fn owned(&self, ctx: &RouteContext<'_>) -> Vec<ObjectRef> {
        vec![ObjectRef {
            api_version: API_VERSION.into(),
            kind: "TraefikService".into(),
            namespace: Some(ctx.names.namespace.clone()),
            name: ctx.names.apex.clone(),
        }]
    }

    fn access(&self) -> Vec<Access> {
        vec![Access::owned("traefik.io", "traefikservices")]
    }
}
