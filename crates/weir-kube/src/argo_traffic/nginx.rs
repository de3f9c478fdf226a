//! `trafficRouting.nginx`: ingress-nginx splits by a second, "canary" Ingress for the same host
//! and path. For each stable Ingress (`stableIngress` or `stableIngresses[]`) Argo keeps an
//! Ingress `<rollout>-<stableIngress>-canary`, controlled by the Rollout: the stable Ingress's
//! rules that send some path to the stable Service, with those backends sent to the canary
//! Service instead (rules without such a path are left out; none left is invalid), its `tls`
//! and `ingressClassName`, its `kubernetes.io/ingress.class` annotation (ingress-nginx ignores
//! the canary's other non-canary annotations), `additionalIngressAnnotations` with the prefix
//! put in front of keys that lack it (`canary-by-header: X-Canary`), `canaryIngressAnnotations`
//! as written, and always `<prefix>/canary: "true"` and `<prefix>/canary-weight: "<canary
//! weight>"` (plus `<prefix>/canary-weight-total: "<maxTrafficWeight>"` when that is set), where
//! `<prefix>` is `annotationPrefix` (default `nginx.ingress.kubernetes.io`). A canary Ingress of
//! that name controlled by another object is refused; otherwise its annotations, labels and spec
//! are brought to the desired ones by a merge patch (what it has beyond them is removed, as
//! Argo's patch does).

use serde_json::{Map, Value, json};
use weir_core::argo::types::NginxRouting;

use super::{Ctx, Routed, api, create, get, not_found, owned_by, resource, write_changes};

const FIELD: &str = "spec.strategy.canary.trafficRouting.nginx";
const DEFAULT_PREFIX: &str = "nginx.ingress.kubernetes.io";
const CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";

/// The canary Ingress's name for a stable Ingress.
pub(crate) fn canary_ingress_name(rollout: &str, stable_ingress: &str) -> String {
    format!("{rollout}-{stable_ingress}-canary")
}

/// Creates or updates the canary Ingress of every stable Ingress.
pub(super) async fn route(ctx: &Ctx<'_>, nginx: &NginxRouting) -> Routed {
    // Argo takes `stableIngresses` when it is set, else `stableIngress`.
    let stables: Vec<(String, &String)> = match (&nginx.stable_ingress, &nginx.stable_ingresses) {
        (_, Some(names)) if !names.is_empty() => names
            .iter()
            .enumerate()
            .map(|(i, name)| (format!("{FIELD}.stableIngresses[{i}]"), name))
            .collect(),
        (Some(name), _) if !name.is_empty() => vec![(format!("{FIELD}.stableIngress"), name)],
        _ => {
            return Ok(Err(format!(
                "{FIELD}: Invalid value: \"\": nginx needs stableIngress or stableIngresses"
            )));
        }
    };
    let ingresses = api(
        ctx.client,
        ctx.namespace,
        &resource("networking.k8s.io", "v1", "Ingress", "ingresses"),
    );
    for (field, stable_name) in stables {
        let Some(stable) = get(&ingresses, stable_name).await? else {
            return Ok(Err(not_found(
                &field,
                stable_name,
                "ingresses.networking.k8s.io",
            )));
        };
        let name = canary_ingress_name(ctx.rollout, stable_name);
        let (annotations, spec) = match desired(ctx, nginx, &stable) {
            Ok(desired) => desired,
            Err(reason) => {
                return Ok(Err(format!(
                    "{field}: Invalid value: \"{stable_name}\": {reason}"
                )));
            }
        };
        let Some(before) = get(&ingresses, &name).await? else {
            let mut metadata =
                json!({"name": name, "namespace": ctx.namespace, "annotations": annotations});
            if let Some(owner) = ctx.owner {
                metadata["ownerReferences"] = json!([owner]);
            }
            create(
                &ingresses,
                json!({
                    "apiVersion": "networking.k8s.io/v1",
                    "kind": "Ingress",
                    "metadata": metadata,
                    "spec": spec,
                }),
            )
            .await?;
            continue;
        };
        if !owned_by(&before, ctx.owner) {
            return Ok(Err(format!(
                "{field}: Invalid value: \"{stable_name}\": canary ingress `{name}` controlled by \
                 different object"
            )));
        }
        let mut after = before.clone();
        after["metadata"]["annotations"] = annotations;
        if let Some(metadata) = after.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.remove("labels");
        }
        after["spec"] = spec;
        write_changes(&ingresses, &name, &before, &after).await?;
    }
    Ok(Ok(()))
}

/// The canary Ingress's annotations and spec, from the stable Ingress.
fn desired(ctx: &Ctx<'_>, nginx: &NginxRouting, stable: &Value) -> Result<(Value, Value), String> {
    let prefix = nginx
        .annotation_prefix
        .as_deref()
        .filter(|prefix| !prefix.is_empty())
        .unwrap_or(DEFAULT_PREFIX);
    let mut rules = Vec::new();
    for rule in stable
        .pointer("/spec/rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let mut rule = rule.clone();
        let mut uses_stable = false;
        let paths = rule
            .pointer_mut("/http/paths")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten();
        for path in paths {
            if let Some(service) = path.pointer_mut("/backend/service/name")
                && service.as_str() == Some(ctx.stable)
            {
                *service = json!(ctx.canary);
                uses_stable = true;
            }
        }
        if uses_stable {
            rules.push(rule);
        }
    }
    if rules.is_empty() {
        return Err(format!(
            "ingress `{}` has no rules using service {} backend",
            stable
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default(),
            ctx.stable
        ));
    }
    let mut spec = Map::new();
    for field in ["tls", "ingressClassName"] {
        if let Some(value) = stable.get("spec").and_then(|spec| spec.get(field)) {
            spec.insert(field.into(), value.clone());
        }
    }
    spec.insert("rules".into(), Value::Array(rules));
    let mut annotations = Map::new();
    if let Some(class) = stable.pointer(&format!(
        "/metadata/annotations/{}",
        CLASS_ANNOTATION.replace('/', "~1")
    )) {
        annotations.insert(CLASS_ANNOTATION.into(), class.clone());
    }
    for (key, value) in nginx.additional_ingress_annotations.iter().flatten() {
        let key = if key.starts_with(prefix) {
            key.clone()
        } else {
            format!("{prefix}/{key}")
        };
        annotations.insert(key, json!(value));
    }
    for (key, value) in nginx.canary_ingress_annotations.iter().flatten() {
        annotations.insert(key.clone(), json!(value));
    }
    annotations.insert(format!("{prefix}/canary"), json!("true"));
    annotations.insert(
        format!("{prefix}/canary-weight"),
        json!(ctx.weights.canary.to_string()),
    );
    if let Some(total) = ctx.max_traffic_weight {
        annotations.insert(
            format!("{prefix}/canary-weight-total"),
            json!(total.to_string()),
        );
    }
    Ok((Value::Object(annotations), Value::Object(spec)))
}
