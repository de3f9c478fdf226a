//! The `eviction` subresource of Pods: a POST of a `policy/v1` `Eviction` deletes the pod as a
//! DELETE with the Eviction's `deleteOptions` would, answered with a `Success` Status of code
//! 201 as the real server's eviction handler answers. PodDisruptionBudgets are not consulted.

use serde_json::{Value, json};

use super::super::types::{self, ResourceType};
use super::{ApiError, State, WriteCtx, bad_request, meta};

/// The API versions the real server takes an Eviction in.
const EVICTION_VERSIONS: [&str; 2] = ["policy/v1", "policy/v1beta1"];

impl State {
    /// POST `.../pods/NAME/eviction` with `body`: the answer (a `Success` Status, code 201) and
    /// the warnings of unknown fields.
    pub(crate) fn evict(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        mut body: Value,
        ctx: &WriteCtx,
    ) -> Result<(Value, Vec<String>), ApiError> {
        if !body.is_object() {
            return Err(bad_request("the body of an eviction must be a JSON object"));
        }
        // As the real decoder: an absent apiVersion or kind is the endpoint's (policy/v1
        // Eviction); kube-rs sends neither.
        let api_version = body
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("policy/v1")
            .to_owned();
        let kind = body
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("Eviction")
            .to_owned();
        if kind != "Eviction" {
            let (_, version) = types::split_api_version(&api_version);
            return Err(bad_request(format!(
                "{kind} in version \"{version}\" cannot be handled as a Eviction: the body of a pods/eviction request must be an Eviction"
            )));
        }
        if !EVICTION_VERSIONS.contains(&api_version.as_str()) {
            return Err(bad_request(format!(
                "the API version in the data ({api_version}) does not match the expected API version (policy/v1)"
            )));
        }
        let eviction = types::eviction();
        let warnings = Self::check_fields(&eviction, &mut body, ctx)?;
        if let Some(theirs) = meta(&body, "namespace").filter(|theirs| !theirs.is_empty())
            && theirs != namespace
        {
            return Err(bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        if meta(&body, "name").unwrap_or("") != name {
            return Err(bad_request(
                "name in URL does not match name in Eviction object",
            ));
        }
        let options = match body.get("deleteOptions") {
            None | Some(Value::Null) => json!({}),
            Some(options) if options.is_object() => options.clone(),
            Some(_) => {
                return Err(bad_request(
                    "Eviction in version \"v1\" cannot be handled as a Eviction: deleteOptions must be an object",
                ));
            }
        };
        if options
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|dry_run| !dry_run.is_empty())
        {
            return Err(bad_request("dryRun is not supported by this test server"));
        }
        // No disruption budget is consulted: the pod goes as a DELETE with the Eviction's
        // options (preconditions, propagation) would take it (404 when it is not there).
        self.delete(rt, namespace, name, &options)?;
        Ok((
            json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "code": 201,
            }),
            warnings,
        ))
    }
}
