//! The `scale` subresource of Deployments: an `autoscaling/v1` `Scale` read from and written to
//! `spec.replicas` (GET, PUT, and PATCH as merge or JSON patch).

use serde_json::{Value, json};

use super::super::fields;
use super::{ApiError, ResourceType, State, WriteCtx, bad_request, conflict, meta};

/// A label selector (`matchLabels`, `matchExpressions`) as the text a Scale's
/// `status.selector` carries: requirements sorted by key, values sorted, as
/// `metav1.LabelSelectorAsSelector(..).String()` writes them.
pub(crate) fn selector_text(selector: &Value) -> String {
    let mut requirements: Vec<(String, String)> = Vec::new();
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        for (key, value) in labels {
            let value = value.as_str().unwrap_or_default();
            requirements.push((key.clone(), format!("{key}={value}")));
        }
    }
    for expression in selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = expression
            .get("key")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut values: Vec<&str> = expression
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        values.sort_unstable();
        values.dedup();
        let text = match expression.get("operator").and_then(Value::as_str) {
            Some("In") => format!("{key} in ({})", values.join(",")),
            Some("NotIn") => format!("{key} notin ({})", values.join(",")),
            Some("Exists") => key.to_owned(),
            Some("DoesNotExist") => format!("!{key}"),
            _ => continue,
        };
        requirements.push((key.to_owned(), text));
    }
    requirements.sort_by(|a, b| a.0.cmp(&b.0));
    requirements
        .into_iter()
        .map(|(_, text)| text)
        .collect::<Vec<_>>()
        .join(",")
}

/// The `Scale` of a Deployment.
fn scale_of(object: &Value) -> Value {
    let mut metadata = json!({});
    for field in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(value) = object.pointer(&format!("/metadata/{field}")) {
            metadata[field] = value.clone();
        }
    }
    let replicas = object
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let current = object
        .pointer("/status/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let selector = object
        .pointer("/spec/selector")
        .map(selector_text)
        .unwrap_or_default();
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": {"replicas": replicas},
        "status": {"replicas": current, "selector": selector},
    })
}

fn invalid_scale(name: &str, field: &str, problem: &str) -> ApiError {
    ApiError::new(
        422,
        "Invalid",
        format!("Scale.autoscaling \"{name}\" is invalid: {field}: {problem}"),
    )
    .with_details(json!({
        "name": name, "group": "autoscaling", "kind": "Scale",
        "causes": [{"reason": "FieldValueInvalid", "message": problem, "field": field}],
    }))
}

impl State {
    /// GET `.../NAME/scale`.
    pub(crate) fn scale(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        self.stored(rt, namespace, name)
            .map(|object| scale_of(&object))
    }

    /// PUT `.../NAME/scale`: `spec.replicas` of the body (absent: 0, as the real server reads
    /// an omitted field) becomes the Deployment's; a `metadata.resourceVersion` in the body is
    /// a precondition.
    pub(crate) fn update_scale(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        body: Value,
        ctx: &WriteCtx,
    ) -> Result<Value, ApiError> {
        if !body.is_object() {
            return Err(bad_request("the body of an update must be a JSON object"));
        }
        if let Some(given) = meta(&body, "name")
            && given != name
        {
            return Err(bad_request(format!(
                "the name of the object ({given}) does not match the name on the URL ({name})"
            )));
        }
        let old = self.stored(rt, namespace, name)?;
        if let Some(given) = meta(&body, "resourceVersion").filter(|rv| !rv.is_empty())
            && Some(given) != meta(&old, "resourceVersion")
        {
            return Err(conflict(rt, name));
        }
        let replicas = match body.pointer("/spec/replicas") {
            None | Some(Value::Null) => 0,
            Some(value) => match value.as_i64() {
                Some(n) if n >= 0 => n,
                Some(n) => {
                    return Err(invalid_scale(
                        name,
                        "spec.replicas",
                        &format!("Invalid value: {n}: must be greater than or equal to 0"),
                    ));
                }
                None => {
                    return Err(bad_request(format!(
                        "Scale in version \"v1\" cannot be handled as a Scale: spec.replicas: {value} is not an integer"
                    )));
                }
            },
        };
        let mut new = old.clone();
        if !new.get("spec").is_some_and(Value::is_object) {
            new["spec"] = json!({});
        }
        new["spec"]["replicas"] = json!(replicas);
        let entries = fields::record_update(
            &old,
            &new,
            Self::entry(rt, ctx, "Update", Some("scale")),
            Self::scope(rt, None),
        );
        let object = self.commit(rt, &old, new, entries);
        Ok(scale_of(&object))
    }

    /// PATCH `.../NAME/scale`: a merge patch (strategic merge is the same here) or a JSON patch
    /// applied to the current Scale, then written as a PUT would.
    pub(crate) fn patch_scale(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        content_type: &str,
        body: &[u8],
        ctx: &WriteCtx,
    ) -> Result<Value, ApiError> {
        let patch: Value = serde_json::from_slice(body)
            .map_err(|error| bad_request(format!("error decoding patch: {error}")))?;
        let mut scale = self.scale(rt, namespace, name)?;
        match content_type {
            "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
                fields::merge_patch(&mut scale, &patch);
            }
            "application/json-patch+json" => {
                fields::json_patch(&mut scale, &patch).map_err(|problem| {
                    ApiError::new(
                        422,
                        "Invalid",
                        format!(
                            "the server rejected our request due to an error in our request: {problem}"
                        ),
                    )
                })?;
            }
            _ => {
                return Err(ApiError::new(
                    415,
                    "UnsupportedMediaType",
                    format!(
                        "the server does not support media type {content_type:?} on the scale subresource - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json"
                    ),
                ));
            }
        }
        self.update_scale(rt, namespace, name, scale, ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_read_as_the_real_server_writes_them() {
        let selector = json!({
            "matchLabels": {"app": "podinfo", "tier": "web"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "canary"]},
                {"key": "zone", "operator": "DoesNotExist"},
                {"key": "b", "operator": "Exists"},
            ],
        });
        assert_eq!(
            selector_text(&selector),
            "app=podinfo,b,env in (canary,prod),tier=web,!zone"
        );
        assert_eq!(selector_text(&json!({})), "");
    }
}
