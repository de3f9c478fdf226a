//! `nginx` (ingress-nginx): an Ingress `INGRESS-canary`, a copy of the user's Ingress named by
//! `spec.target.ingressRef` whose backends `NAME` become `NAME-canary`, with ingress-nginx's
//! canary annotations (`nginx.ingress.kubernetes.io/canary: "true"`, `canary-weight`, and for an
//! A/B test `canary-by-header`, `canary-by-header-value` or `-pattern`, `canary-by-cookie`). The
//! user's Ingress is read, never written.
//!
//! Weights are whole percent of 100 as Flagger writes them; a plan with finer steps gets
//! `canary-weight-total: "10000"` and the weight in basis points (ingress-nginx 1.1.2 and later).
//! ingress-nginx evaluates its canary rules as alternatives (a header, else a cookie, else the
//! weight), so an A/B test can hold one header condition and one cookie condition, each in a
//! rule of its own; anything else is refused at validation.

use serde_json::{Map, Value, json};
use weir_core::FieldError;
use weir_core::machine::Route;
use weir_core::model::{KubernetesTarget, MatchRule, RolloutSpec, StringMatch};

use super::{
    Access, Condition, InputRef, Names, ObjectRef, Resolution, RouteContext, RouteObjects, Router,
    TOOLKIT_ANNOTATIONS, ab_rules, as_regex, input, percent_split, refuse_mirroring,
    refuse_session_affinity, require_reference,
};

/// The `nginx` provider.
pub(super) struct Nginx;

/// ingress-nginx's annotation prefix (Flagger's `-ingress-annotations-prefix` default).
const PREFIX: &str = "nginx.ingress.kubernetes.io";

/// The Ingress API.
pub(super) const INGRESS_API: &str = "networking.k8s.io/v1";

/// The example of an `ingressRef` in messages.
pub(super) const INGRESS_REF_EXAMPLE: &str =
    "{apiVersion: networking.k8s.io/v1, kind: Ingress, name: NAME}";

/// One canary annotation an A/B condition becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Rule {
    /// `canary-by-header` with `canary-by-header-value` (exact) or `-pattern`.
    Header {
        name: String,
        value: Option<String>,
        pattern: Option<String>,
    },
    /// `canary-by-cookie`: the cookie whose value `always` sends a request to the canary.
    Cookie(String),
}

/// The annotation one condition becomes, or why it cannot be written.
fn rule_of(condition: &Condition<'_>) -> Result<Rule, String> {
    let cookie_always = "ingress-nginx's canary-by-cookie sends a request to the canary when the \
                         named cookie's value is `always`";
    match condition {
        // Flagger's reading of a `cookie` header for nginx: the cookie named by the exact value.
        Condition::Header(name, condition) if name.eq_ignore_ascii_case("cookie") => {
            match &condition.exact {
                Some(cookie) => Ok(Rule::Cookie(cookie.clone())),
                None => Err(format!(
                    "reads a `cookie` header condition as Flagger does, `exact: NAME` for the \
                     cookie NAME set to `always` ({cookie_always}); other forms cannot be written"
                )),
            }
        }
        Condition::Header(name, condition) => Ok(Rule::Header {
            name: (*name).to_string(),
            value: condition.exact.clone(),
            pattern: condition.exact.is_none().then(|| as_regex(condition)),
        }),
        Condition::Cookie(
            name,
            StringMatch {
                exact: Some(value), ..
            },
        ) if value == "always" => Ok(Rule::Cookie((*name).to_string())),
        Condition::Cookie(..) => Err(format!(
            "matches a cookie only by `exact: always` ({cookie_always})"
        )),
        Condition::Query(..) => Err(
            "cannot match query parameters (ingress-nginx's canary annotations match one header \
             and one cookie)"
                .into(),
        ),
        Condition::Uri(_) => Err(
            "cannot match the path: the canary Ingress has the paths of yours (ingress-nginx's \
             canary annotations match one header and one cookie)"
                .into(),
        ),
        Condition::Method(_) => Err(
            "cannot match the method (ingress-nginx's canary annotations match one header and \
             one cookie)"
                .into(),
        ),
    }
}

/// The A/B rules as canary annotations, each error with its path under the plan.
fn rules_of(rules: &[MatchRule]) -> (Vec<Rule>, Vec<FieldError>) {
    let mut written = Vec::new();
    let mut errors = Vec::new();
    let (mut header, mut cookie) = (false, false);
    for (index, rule) in rules.iter().enumerate() {
        let conditions = Condition::of(rule);
        if conditions.len() > 1 {
            errors.push(FieldError::new(
                format!("spec.plan.abTest.match[{index}]"),
                "provider nginx cannot require two conditions at once: ingress-nginx's canary \
                 annotations are alternatives (a header, else a cookie); write one condition per \
                 rule",
            ));
            continue;
        }
        for (path, condition) in conditions {
            let path = format!("spec.plan.abTest.match[{index}].{path}");
            match rule_of(&condition) {
                Ok(rule) => {
                    let seen = match rule {
                        Rule::Header { .. } => &mut header,
                        Rule::Cookie(_) => &mut cookie,
                    };
                    if std::mem::replace(seen, true) {
                        errors.push(FieldError::new(
                            path,
                            "provider nginx writes one header condition (canary-by-header) and \
                             one cookie condition (canary-by-cookie): this is a second one",
                        ));
                    } else {
                        written.push(rule);
                    }
                }
                Err(why) => errors.push(FieldError::new(path, format!("provider nginx {why}"))),
            }
        }
    }
    (written, errors)
}

impl Router for Nginx {
    fn name(&self) -> &'static str {
        "nginx"
    }

    fn validate(&self, spec: &RolloutSpec, target: &KubernetesTarget) -> Vec<FieldError> {
        let mut errors = require_reference(
            "nginx",
            target,
            "ingressRef",
            "Ingress",
            INGRESS_REF_EXAMPLE,
        );
        errors.extend(refuse_mirroring("nginx", spec));
        errors.extend(refuse_session_affinity("nginx", spec));
        if let Some(rules) = ab_rules(spec) {
            errors.extend(rules_of(rules).1);
        }
        errors
    }

    fn inputs(&self, target: &KubernetesTarget, names: &Names) -> Vec<InputRef> {
        ingress_input(target, names)
    }

    fn objects(&self, ctx: &RouteContext<'_>, route: &Route) -> Result<RouteObjects, String> {
        let user = input(
            ctx,
            "nginx",
            "ingressRef",
            "Ingress",
            ctx.target.ingress_ref.as_ref(),
        )?;
        let names = ctx.names;
        let mut spec = user.get("spec").cloned().unwrap_or_else(|| json!({}));
        let renamed = rename_backends(&mut spec, &names.apex, |backend| {
            backend["service"]["name"] = json!(names.canary);
        });
        if renamed == 0 {
            return Err(no_backend("nginx", user, names));
        }
        let mut annotations =
            copied_annotations(user, |key| key.contains(&format!("{PREFIX}/canary")));
        annotations.insert(format!("{PREFIX}/canary"), json!("true"));
        let mut adjusted = None;
        if route.match_rules.is_empty() {
            let weight = match ctx.resolution {
                Resolution::Percent => {
                    let (split, note) = percent_split(route, "NGINX");
                    adjusted = note;
                    split.canary
                }
                Resolution::BasisPoints => {
                    annotations.insert(format!("{PREFIX}/canary-weight-total"), json!("10000"));
                    route.canary_weight.basis_points().min(10_000)
                }
            };
            annotations.insert(format!("{PREFIX}/canary-weight"), json!(weight.to_string()));
        } else {
            let (rules, errors) = rules_of(&route.match_rules);
            if let Some(error) = errors.first() {
                return Err(error.to_string());
            }
            // Only the matching requests: no share by weight.
            annotations.insert(format!("{PREFIX}/canary-weight"), json!("0"));
            for rule in rules {
                match rule {
                    Rule::Header {
                        name,
                        value,
                        pattern,
                    } => {
                        annotations.insert(format!("{PREFIX}/canary-by-header"), json!(name));
                        if let Some(value) = value {
                            annotations
                                .insert(format!("{PREFIX}/canary-by-header-value"), json!(value));
                        }
                        if let Some(pattern) = pattern {
                            annotations.insert(
                                format!("{PREFIX}/canary-by-header-pattern"),
                                json!(pattern),
                            );
                        }
                    }
                    Rule::Cookie(cookie) => {
                        annotations.insert(format!("{PREFIX}/canary-by-cookie"), json!(cookie));
                    }
                }
            }
        }
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

// === shared with skipper ===

/// The user's Ingress named by `ingressRef`.
pub(super) fn ingress_input(target: &KubernetesTarget, names: &Names) -> Vec<InputRef> {
    target
        .ingress_ref
        .iter()
        .map(|reference| InputRef {
            api_version: INGRESS_API.into(),
            kind: "Ingress".into(),
            namespace: names.namespace.clone(),
            name: reference.name.clone(),
            field: "spec.target.ingressRef",
            required: true,
        })
        .collect()
}

/// The canary Ingress `INGRESS-canary`.
pub(super) fn canary_ingress_ref(ctx: &RouteContext<'_>) -> Vec<ObjectRef> {
    ctx.target
        .ingress_ref
        .iter()
        .map(|reference| ObjectRef {
            api_version: INGRESS_API.into(),
            kind: "Ingress".into(),
            namespace: Some(ctx.names.namespace.clone()),
            name: format!("{}-canary", reference.name),
        })
        .collect()
}

/// The user's annotations minus `kubectl`'s last applied configuration and those `drop` says,
/// plus the toolkit annotations.
pub(super) fn copied_annotations(user: &Value, drop: impl Fn(&str) -> bool) -> Map<String, Value> {
    let mut annotations: Map<String, Value> = user["metadata"]["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(key, _)| {
            key.as_str() != "kubectl.kubernetes.io/last-applied-configuration" && !drop(key)
        })
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    for (key, value) in TOOLKIT_ANNOTATIONS {
        annotations.insert(key.into(), json!(value));
    }
    annotations
}

/// The canary Ingress: the user's labels, `annotations`, `spec`, owned by the rollout.
pub(super) fn canary_ingress(
    ctx: &RouteContext<'_>,
    user: &Value,
    annotations: Map<String, Value>,
    spec: Value,
) -> Value {
    let name = format!(
        "{}-canary",
        user["metadata"]["name"].as_str().unwrap_or_default()
    );
    let mut metadata = super::metadata(&name, ctx.names, ctx.owner);
    if let Some(labels) = user["metadata"]["labels"]
        .as_object()
        .filter(|labels| !labels.is_empty())
    {
        metadata["labels"] = Value::Object(labels.clone());
    }
    metadata["annotations"] = Value::Object(annotations);
    json!({
        "apiVersion": INGRESS_API,
        "kind": "Ingress",
        "metadata": metadata,
        "spec": spec,
    })
}

/// Calls `rename` on every backend of `spec` (the default backend and each path's) whose Service
/// is `apex`; the number of them.
pub(super) fn rename_backends(
    spec: &mut Value,
    apex: &str,
    mut rename: impl FnMut(&mut Value),
) -> usize {
    let mut renamed = 0;
    let mut visit = |backend: &mut Value| {
        if backend["service"]["name"].as_str() == Some(apex) {
            rename(backend);
            renamed += 1;
        }
    };
    if let Some(backend) = spec.get_mut("defaultBackend") {
        visit(backend);
    }
    for rule in spec
        .get_mut("rules")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        for path in rule
            .pointer_mut("/http/paths")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(backend) = path.get_mut("backend") {
                visit(backend);
            }
        }
    }
    renamed
}

/// The error for a user's Ingress that routes to no backend `NAME`.
pub(super) fn no_backend(provider: &str, user: &Value, names: &Names) -> String {
    format!(
        "provider {provider}: the Ingress {}/{} named by spec.target.ingressRef has no backend \
         Service {}: its paths must route to the apex Service for a canary copy to split them",
        names.namespace,
        user["metadata"]["name"].as_str().unwrap_or_default(),
        names.apex
    )
}
