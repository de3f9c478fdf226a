//! `knative`: no copy and no object of weir's. The target is a Knative Service
//! (`serving.knative.dev/v1`, `targetRef.kind: Service`); its revisions are the versions. The
//! route is an edit of the user's Service (server-side apply of weir's fields only, field manager
//! `weir`): its `spec.traffic` sends the canary's share to the latest revision
//! (`latestRevision: true`, which Knative resolves to the latest *ready* revision) and the rest to
//! the primary's revision (`revisionName`), and the annotation `flagger.app/primary-revision`
//! names that revision, as Flagger keeps it. Every edit carries both fields: server-side apply
//! removes a field its manager applied before and now omits. Knative's percentages are integers
//! summing to 100. Knative matches no request, does not mirror and pins no client: A/B tests,
//! mirroring and session affinity are refused.
//!
//! The target flow around it (set-up, which revision is primary and when it is ready, promotion,
//! reverting) is `target/knative.rs`: the route needs [`RouteContext::primary_revision`], which
//! that module reads and checks before every write.

use serde_json::json;
use weir_core::FieldError;
use weir_core::machine::Route;
use weir_core::model::{KubernetesTarget, RolloutSpec};

use super::{
    Access, ObjectRef, RouteContext, RouteObjects, Router, percent_split, refuse_ab_test,
    refuse_mirroring, refuse_session_affinity,
};

/// The `knative` provider.
pub(super) struct Knative;

/// The Knative Service API.
pub(super) const API_VERSION: &str = "serving.knative.dev/v1";

/// The Knative Service annotation naming the primary's revision (Flagger's).
pub const PRIMARY_REVISION_ANNOTATION: &str = "flagger.app/primary-revision";

impl Router for Knative {
    fn name(&self) -> &'static str {
        "knative"
    }

    fn validate(&self, spec: &RolloutSpec, target: &KubernetesTarget) -> Vec<FieldError> {
        let mut errors: Vec<FieldError> = [
            refuse_ab_test(
                "knative",
                spec,
                "a Knative Service splits traffic between revisions by percentage only",
            ),
            refuse_mirroring("knative", spec),
            refuse_session_affinity("knative", spec),
        ]
        .into_iter()
        .flatten()
        .collect();
        let expected = "provider knative rolls out a Knative Service: \
                        {apiVersion: serving.knative.dev/v1, kind: Service, name: NAME}";
        match &target.target_ref {
            None => errors.push(FieldError::missing("spec.target.targetRef", expected)),
            Some(reference) => {
                if reference.kind.as_deref() != Some("Service") {
                    errors.push(FieldError::with_value(
                        "spec.target.targetRef.kind",
                        reference.kind.clone().unwrap_or_default(),
                        expected,
                    ));
                }
                if reference.api_version.as_deref() != Some(API_VERSION) {
                    errors.push(FieldError::with_value(
                        "spec.target.targetRef.apiVersion",
                        reference.api_version.clone().unwrap_or_default(),
                        expected,
                    ));
                }
            }
        }
        errors
    }

    fn objects(&self, ctx: &RouteContext<'_>, route: &Route) -> Result<RouteObjects, String> {
        let Some(reference) = &ctx.target.target_ref else {
            return Err("provider knative needs spec.target.targetRef: the Knative Service".into());
        };
        let Some(primary) = ctx.primary_revision else {
            return Err(format!(
                "provider knative: the primary revision of the Knative Service {}/{} is not \
                 known yet",
                ctx.names.namespace, reference.name
            ));
        };
        let (split, adjusted) = percent_split(route, "Knative");
        Ok(RouteObjects {
            objects: Vec::new(),
            edits: vec![json!({
                "apiVersion": API_VERSION,
                "kind": "Service",
                "metadata": {
                    "name": reference.name,
                    "namespace": ctx.names.namespace,
                    "annotations": {PRIMARY_REVISION_ANNOTATION: primary},
                },
                "spec": {"traffic": [
                    {"latestRevision": true, "percent": split.canary},
                    {"revisionName": primary, "percent": split.primary},
                ]},
            })],
            adjusted,
        })
    }

    fn owned(&self, _ctx: &RouteContext<'_>) -> Vec<ObjectRef> {
        Vec::new()
    }

    fn access(&self) -> Vec<Access> {
        vec![
            Access {
                group: "serving.knative.dev",
                resource: "services",
                verbs: &["get", "patch"],
            },
            // Whether a revision other than the latest ready one (the primary during a run)
            // is ready: its Revision's Ready condition, as Flagger reads it.
            Access {
                group: "serving.knative.dev",
                resource: "revisions",
                verbs: &["get"],
            },
        ]
    }
}
