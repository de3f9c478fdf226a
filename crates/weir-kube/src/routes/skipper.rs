//! `skipper`: an Ingress `INGRESS-canary`, a copy of the user's Ingress named by
//! `spec.target.ingressRef` in which each path to `NAME` goes to `NAME-primary` and a copy of it
//! to `NAME-canary`, weighted by `zalando.org/backend-weights`. Its
//! `zalando.org/skipper-predicate` starts with `Weight(100)` so that it wins over the user's
//! Ingress, or `False()` while the canary has no traffic (the user's Ingress serves then). The
//! user's Ingress is read, never written.
//!
//! An A/B test (Flagger has none on skipper) is one rule: its conditions join the predicate
//! (`Header`, `HeaderRegexp`, `Cookie`, `QueryParam`, `PathRegexp`, `Method`) and the canary
//! gets all of the matching requests; the others find the user's Ingress. One Ingress carries one
//! predicate, so rules that are alternatives are refused.

use serde_json::{Value, json};
use weir_core::FieldError;
use weir_core::machine::Route;
use weir_core::model::{KubernetesTarget, MatchRule, RolloutSpec, StringMatch};

use super::nginx::{
    INGRESS_REF_EXAMPLE, canary_ingress, canary_ingress_ref, copied_annotations, ingress_input,
    no_backend,
};
use super::{
    Access, Condition, InputRef, Names, ObjectRef, RouteContext, RouteObjects, Router, ab_rules,
    as_regex, check_conditions, input, refuse_mirroring, refuse_session_affinity, relative_split,
    require_reference,
};

/// The `skipper` provider.
pub(super) struct Skipper;

const WEIGHTS: &str = "zalando.org/backend-weights";
const PREDICATE: &str = "zalando.org/skipper-predicate";

impl Router for Skipper {
    fn name(&self) -> &'static str {
        "skipper"
    }

    fn validate(&self, spec: &RolloutSpec, target: &KubernetesTarget) -> Vec<FieldError> {
        let mut errors = require_reference(
            "skipper",
            target,
            "ingressRef",
            "Ingress",
            INGRESS_REF_EXAMPLE,
        );
        errors.extend(refuse_mirroring("skipper", spec));
        errors.extend(refuse_session_affinity("skipper", spec));
        if ab_rules(spec).is_some_and(|rules| rules.len() > 1) {
            errors.push(FieldError::new(
                "spec.plan.abTest.match",
                "provider skipper puts one predicate on the canary Ingress, so it holds one rule: \
                 rules that are alternatives cannot be written (write one rule, whose conditions \
                 all hold)",
            ));
        }
        errors.extend(check_conditions(
            "skipper",
            spec,
            |condition| match condition {
                Condition::Method(method) if method.exact.is_none() => {
                    Some("matches a method exactly only (the Method predicate)".into())
                }
                _ => None,
            },
        ));
        errors
    }

    fn inputs(&self, target: &KubernetesTarget, names: &Names) -> Vec<InputRef> {
        ingress_input(target, names)
    }

    fn objects(&self, ctx: &RouteContext<'_>, route: &Route) -> Result<RouteObjects, String> {
        let user = input(
            ctx,
            "skipper",
            "ingressRef",
            "Ingress",
            ctx.target.ingress_ref.as_ref(),
        )?;
        let names = ctx.names;
        let mut spec = user.get("spec").cloned().unwrap_or_else(|| json!({}));
        if split_paths(&mut spec, names) == 0 {
            return Err(no_backend("skipper", user, names));
        }
        let (split, adjusted) = relative_split(route, ctx.resolution, "Skipper");
        let (primary, canary, lead) = match route.match_rules.as_slice() {
            [] if split.canary == 0 => (split.primary, 0, "False()".to_string()),
            [] => (split.primary, split.canary, "Weight(100)".to_string()),
            [rule] => (
                0,
                split.total,
                format!("Weight(100) && {}", predicates(rule)?),
            ),
            _ => {
                return Err(
                    "provider skipper holds one A/B rule (one predicate per Ingress)".into(),
                );
            }
        };
        let mut annotations = copied_annotations(user, |key| key == WEIGHTS);
        let predicate = match user["metadata"]["annotations"][PREDICATE].as_str() {
            Some(own) if !own.trim().is_empty() => format!("{lead} && {own}"),
            _ => lead,
        };
        annotations.insert(PREDICATE.into(), json!(predicate));
        // Keys in order, as Flagger writes them (Go sorts map keys).
        annotations.insert(
            WEIGHTS.into(),
            json!(format!(
                "{{{}:{canary},{}:{primary}}}",
                json!(names.canary),
                json!(names.primary)
            )),
        );
        Ok(RouteObjects {
            objects: vec![canary_ingress(ctx, user, annotations, spec)],
            edits: Vec::new(),
            adjusted,
        })
    }

    fn owned(&self, ctx: &RouteContext<'_>) -> Vec<ObjectRef> {
        canary_ingress_ref(ctx)
    }

    fn access(&self) -> Vec<Access> {
        vec![Access::owned("networking.k8s.io", "ingresses")]
    }
}

/// Sends each path to `NAME` to `NAME-primary` and appends a copy of it to `NAME-canary`; the
/// number of paths split.
fn split_paths(spec: &mut Value, names: &Names) -> usize {
    let mut split = 0;
    for rule in spec
        .get_mut("rules")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        let Some(paths) = rule
            .pointer_mut("/http/paths")
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        let mut copies = Vec::new();
        for path in paths.iter_mut() {
            if path["backend"]["service"]["name"].as_str() == Some(names.apex.as_str()) {
                path["backend"]["service"]["name"] = json!(names.primary);
                let mut copy = path.clone();
                copy["backend"]["service"]["name"] = json!(names.canary);
                copies.push(copy);
                split += 1;
            }
        }
        paths.extend(copies);
    }
    split
}

/// An eskip string literal.
fn quoted(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A rule's conditions as skipper predicates joined by `&&`.
fn predicates(rule: &MatchRule) -> Result<String, String> {
    let regex = |condition: &StringMatch| quoted(&as_regex(condition));
    let mut predicates = Vec::new();
    for (_, condition) in Condition::of(rule) {
        predicates.push(match condition {
            Condition::Header(
                name,
                StringMatch {
                    exact: Some(value), ..
                },
            ) => {
                format!("Header({}, {})", quoted(name), quoted(value))
            }
            Condition::Header(name, condition) => {
                format!("HeaderRegexp({}, {})", quoted(name), regex(condition))
            }
            Condition::Cookie(name, condition) => {
                format!("Cookie({}, {})", quoted(name), regex(condition))
            }
            Condition::Query(name, condition) => {
                format!("QueryParam({}, {})", quoted(name), regex(condition))
            }
            Condition::Uri(condition) => format!("PathRegexp({})", regex(condition)),
            Condition::Method(StringMatch {
                exact: Some(method),
                ..
            }) => format!("Method({})", quoted(method)),
            Condition::Method(_) => {
                return Err(
                    "provider skipper matches a method exactly only (the Method predicate)".into(),
                );
            }
        });
    }
    Ok(predicates.join(" && "))
}
