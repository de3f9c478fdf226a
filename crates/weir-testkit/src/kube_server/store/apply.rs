//! PATCH: JSON merge patch, JSON patch, and server-side apply with field managers.

use serde_json::{Value, json};

use super::super::fields;
use super::{
    ApiError, ResourceType, State, WriteCtx, Written, bad_request, conflict, details, meta,
    not_found, set_meta,
};

impl State {
    /// PATCH of any type (`content_type` without parameters).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn patch(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        content_type: &str,
        body: &[u8],
        sub: Option<&str>,
        ctx: &WriteCtx,
    ) -> Result<Written, ApiError> {
        let parse = || {
            serde_json::from_slice::<Value>(body)
                .map_err(|error| bad_request(format!("error decoding patch: {error}")))
        };
        match content_type {
            "application/apply-patch+yaml" => {
                return self.apply(rt, namespace, name, parse()?, sub, ctx);
            }
            "application/merge-patch+json" => {}
            "application/json-patch+json" => {}
            "application/strategic-merge-patch+json" if !rt.custom => {}
            _ => {
                let accepted = "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml";
                let message = if content_type == "application/strategic-merge-patch+json" {
                    format!(
                        "the body of the request was in an unknown format - accepted media types include: {accepted}"
                    )
                } else {
                    format!(
                        "the server does not support media type {content_type:?} - accepted media types include: {accepted}"
                    )
                };
                return Err(ApiError::new(415, "UnsupportedMediaType", message));
            }
        }
        let patch = parse()?;
        let old = self.stored(rt, namespace, name)?;
        let mut new = old.clone();
        if content_type == "application/json-patch+json" {
            fields::json_patch(&mut new, &patch).map_err(|problem| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!(
                        "the server rejected our request due to an error in our request: {problem}"
                    ),
                )
            })?;
        } else {
            fields::merge_patch(&mut new, &patch);
        }
        if meta(&new, "name") != Some(name) {
            return Err(bad_request("metadata.name cannot be changed by a patch"));
        }
        let warnings = Self::check_fields(rt, &mut new, ctx)?;
        self.update_to(rt, &old, new, sub, ctx, warnings)
    }

    /// Server-side apply: creates when absent, else merges with field ownership.
    fn apply(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        mut config: Value,
        sub: Option<&str>,
        ctx: &WriteCtx,
    ) -> Result<Written, ApiError> {
        if ctx.manager.is_empty() {
            return Err(bad_request(
                "PATCH /apply requires fieldManager: fieldManager is required for apply requests",
            ));
        }
        if !config.is_object() {
            return Err(bad_request("an apply configuration must be a JSON object"));
        }
        let api_version = config
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let kind = config.get("kind").and_then(Value::as_str).unwrap_or("");
        if api_version != rt.api_version() || kind != rt.kind {
            return Err(bad_request(format!(
                "the API version in the data ({api_version}) does not match the expected API version ({})",
                rt.api_version()
            )));
        }
        match meta(&config, "name") {
            Some(given) if given != name => {
                return Err(bad_request(format!(
                    "the name of the object ({given}) does not match the name on the URL ({name})"
                )));
            }
            Some(_) => {}
            None => set_meta(&mut config, "name", json!(name)),
        }
        let warnings = Self::check_fields(rt, &mut config, ctx)?;
        let scope = Self::scope(rt, sub);
        let me = Self::entry(rt, ctx, "Apply", sub);
        let old = self.get(rt, namespace, name);
        let live = old.clone().unwrap_or_else(
            || json!({"apiVersion": rt.api_version(), "kind": rt.kind, "metadata": {"name": name}}),
        );
        let (merged, entries) =
            fields::apply(&live, &config, me, scope, ctx.force).map_err(|conflicts| {
                let causes: Vec<Value> = conflicts
                    .iter()
                    .map(|c| {
                        json!({
                            "reason": "FieldManagerConflict",
                            "message": format!("conflict with \"{}\" using {}", c.manager, c.api_version),
                            "field": c.field,
                        })
                    })
                    .collect();
                let listed: Vec<String> = conflicts
                    .iter()
                    .map(|c| format!("conflict with \"{}\" using {}: {}", c.manager, c.api_version, c.field))
                    .collect();
                let message = if listed.len() == 1 {
                    format!("Apply failed with 1 conflict: {}", listed.join(""))
                } else {
                    format!("Apply failed with {} conflicts: {}", listed.len(), listed.join("\n"))
                };
                let mut details = details(rt, name);
                details["causes"] = json!(causes);
                ApiError::new(409, "Conflict", message).with_details(details)
            })?;
        match old {
            None => {
                if sub.is_some() {
                    return Err(not_found(rt, name));
                }
                let entry = Self::entry(rt, ctx, "Apply", None);
                let object = self.insert_new(rt, namespace, merged, Some(entries), entry)?;
                Ok(Written {
                    object,
                    created: true,
                    warnings,
                })
            }
            Some(old) => {
                if let Some(given) = meta(&config, "resourceVersion").filter(|rv| !rv.is_empty())
                    && Some(given) != meta(&old, "resourceVersion")
                {
                    return Err(conflict(rt, name));
                }
                let merged = Self::scoped(rt, &old, merged, sub);
                let object = self.commit(rt, &old, merged, entries);
                Ok(Written {
                    object,
                    created: false,
                    warnings,
                })
            }
        }
    }
}
