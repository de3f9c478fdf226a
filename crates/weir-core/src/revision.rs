//! Revision identity: a stable hash of a canary's definition.
//!
//! A run is one attempt to move from the primary to a new canary *revision*, so the revision must
//! change exactly when the version changes. The hash is over canonical JSON (object keys sorted,
//! no insignificant whitespace), so key order and formatting never matter, and it leaves out what
//! does not change the version: for Kubernetes workloads, the replica count (which autoscalers
//! and people change all the time) and the rollout strategy, as Flagger does by hashing only
//! the pod template.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The revision of an arbitrary definition (a local version's URL or command, a flag variation).
pub fn of_definition(definition: &Value) -> String {
    let mut canonical = String::new();
    write_canonical(definition, &mut canonical);
    let digest = Sha256::digest(canonical.as_bytes());
    let mut hex = String::with_capacity(16);
    for byte in digest.iter().take(8) {
        hex.push_str(&format!("{byte:02x}"));
    }
    hex
}

/// The revision of a Kubernetes workload (Deployment, DaemonSet, ...): its pod template when it
/// has one, otherwise its spec without `replicas` and `strategy`. Metadata and status never count.
pub fn of_kubernetes_workload(workload: &Value) -> String {
    let spec = workload.get("spec").unwrap_or(&Value::Null);
    if let Some(template) = spec.get("template") {
        return of_definition(template);
    }
    let mut spec = spec.clone();
    if let Value::Object(fields) = &mut spec {
        fields.remove("replicas");
        fields.remove("strategy");
    }
    of_definition(&spec)
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(fields) => {
            let mut keys: Vec<&String> = fields.keys().collect();
            keys.sort();
            out.push('{');
            for (position, key) in keys.into_iter().enumerate() {
                if position > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(&fields[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (position, item) in items.iter().enumerate() {
                if position > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(replicas: u32, image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "podinfo", "resourceVersion": replicas.to_string()},
            "spec": {
                "replicas": replicas,
                "strategy": {"type": "RollingUpdate"},
                "template": {"spec": {"containers": [{"name": "app", "image": image}]}}
            },
            "status": {"readyReplicas": replicas}
        })
    }

    #[test]
    fn replicas_and_metadata_do_not_change_a_workload_revision() {
        assert_eq!(
            of_kubernetes_workload(&deployment(1, "podinfo:6.0.0")),
            of_kubernetes_workload(&deployment(7, "podinfo:6.0.0"))
        );
    }

    #[test]
    fn the_pod_template_changes_a_workload_revision() {
        assert_ne!(
            of_kubernetes_workload(&deployment(1, "podinfo:6.0.0")),
            of_kubernetes_workload(&deployment(1, "podinfo:6.0.1"))
        );
    }

    #[test]
    fn key_order_does_not_matter_and_the_hash_is_stable() {
        let a: Value =
            serde_json::from_str(r#"{"url":"http://a","command":["x","y"]}"#).unwrap_or_default();
        let b: Value =
            serde_json::from_str(r#"{"command":["x","y"],"url":"http://a"}"#).unwrap_or_default();
        assert_eq!(of_definition(&a), of_definition(&b));
        // Pinned: a change in the hash would start a new run for every existing rollout.
        assert_eq!(
            of_definition(&json!({"url": "http://127.0.0.1:8081"})).len(),
            16
        );
        assert_eq!(of_definition(&json!(null)), "74234e98afe7498f");
    }

    #[test]
    fn a_spec_without_template_ignores_replicas_and_strategy() {
        let one = json!({"spec": {"replicas": 1, "strategy": "x", "image": "a"}});
        let two = json!({"spec": {"replicas": 3, "image": "a"}});
        let other = json!({"spec": {"replicas": 3, "image": "b"}});
        assert_eq!(of_kubernetes_workload(&one), of_kubernetes_workload(&two));
        assert_ne!(of_kubernetes_workload(&two), of_kubernetes_workload(&other));
    }
}
