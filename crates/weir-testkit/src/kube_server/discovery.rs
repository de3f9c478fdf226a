//! Discovery documents (legacy and aggregated) and the OpenAPI v3 documents kubectl checks
//! before it asks the server to validate fields.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use serde_json::{Value, json};

use super::types::{Fields, ResourceType, api_version};

impl ResourceType {
    fn verbs() -> Value {
        json!([
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch"
        ])
    }

    fn scope(&self) -> &'static str {
        if self.namespaced {
            "Namespaced"
        } else {
            "Cluster"
        }
    }

    /// The entry in an aggregated discovery version.
    fn aggregated(&self) -> Value {
        let kind = json!({"group": self.group, "version": self.version, "kind": self.kind});
        let mut entry = json!({
            "resource": self.plural,
            "responseKind": kind,
            "scope": self.scope(),
            "singularResource": self.singular,
            "verbs": Self::verbs(),
        });
        if !self.short_names.is_empty() {
            entry["shortNames"] = json!(self.short_names);
        }
        if !self.categories.is_empty() {
            entry["categories"] = json!(self.categories);
        }
        let mut subresources = Vec::new();
        if self.evictable() {
            subresources.push(json!({
                "subresource": "eviction",
                "responseKind": {"group": "policy", "version": "v1", "kind": "Eviction"},
                "verbs": ["create"],
            }));
        }
        if self.scale() {
            subresources.push(json!({
                "subresource": "scale",
                "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
                "verbs": ["get", "patch", "update"],
            }));
        }
        if self.status {
            subresources.push(json!({
                "subresource": "status",
                "responseKind": kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if !subresources.is_empty() {
            entry["subresources"] = json!(subresources);
        }
        entry
    }

    /// The entries (the resource, then its subresources in alphabetical order, as the real
    /// server lists them) in a legacy APIResourceList.
    fn legacy(&self) -> Vec<Value> {
        let mut entry = json!({
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": Self::verbs(),
        });
        if !self.short_names.is_empty() {
            entry["shortNames"] = json!(self.short_names);
        }
        if !self.categories.is_empty() {
            entry["categories"] = json!(self.categories);
        }
        let mut entries = vec![entry];
        if self.evictable() {
            entries.push(json!({
                "name": format!("{}/eviction", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "group": "policy",
                "version": "v1",
                "kind": "Eviction",
                "verbs": ["create"],
            }));
        }
        if self.scale() {
            entries.push(json!({
                "name": format!("{}/scale", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
        if self.status {
            entries.push(json!({
                "name": format!("{}/status", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": self.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        entries
    }
}

/// Kubernetes version priority: GA before beta before alpha, higher numbers first, the rest
/// alphabetically after.
pub(crate) fn version_order(a: &str, b: &str) -> std::cmp::Ordering {
    fn rank(version: &str) -> (u8, i64, i64, String) {
        let Some(rest) = version.strip_prefix('v') else {
            return (3, 0, 0, version.to_owned());
        };
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let Ok(major) = digits.parse::<i64>() else {
            return (3, 0, 0, version.to_owned());
        };
        let tail = &rest[digits.len()..];
        let (level, minor) = if tail.is_empty() {
            (0, "0")
        } else if let Some(n) = tail.strip_prefix("beta") {
            (1, n)
        } else if let Some(n) = tail.strip_prefix("alpha") {
            (2, n)
        } else {
            return (3, 0, 0, version.to_owned());
        };
        match minor.parse::<i64>() {
            Ok(minor) => (level, -major, -minor, String::new()),
            Err(_) => (3, 0, 0, version.to_owned()),
        }
    }
    rank(a).cmp(&rank(b))
}

/// A group's versions, preferred first, each with its resources.
pub(crate) type Versions<'a> = Vec<(String, Vec<&'a ResourceType>)>;

/// Groups in discovery order (core first, then by name), each with its versions, preferred first.
pub(crate) fn groups(types: &[ResourceType]) -> Vec<(String, Versions<'_>)> {
    let mut by_group: BTreeMap<&str, BTreeMap<&str, Vec<&ResourceType>>> = BTreeMap::new();
    for rt in types {
        by_group
            .entry(&rt.group)
            .or_default()
            .entry(&rt.version)
            .or_default()
            .push(rt);
    }
    by_group
        .into_iter()
        .map(|(group, versions)| {
            let mut versions: Versions<'_> = versions
                .into_iter()
                .map(|(version, types)| (version.to_owned(), types))
                .collect();
            versions.sort_by(|a, b| version_order(&a.0, &b.0));
            (group.to_owned(), versions)
        })
        .collect()
}

/// `/api` or `/apis` as an aggregated `APIGroupDiscoveryList` (`core`: only the core group).
pub(crate) fn aggregated(types: &[ResourceType], core: bool, discovery_version: &str) -> Value {
    let items: Vec<Value> = groups(types)
        .into_iter()
        .filter(|(group, _)| group.is_empty() == core)
        .map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|(version, types)| {
                    json!({
                        "version": version,
                        "resources": types.iter().map(|rt| rt.aggregated()).collect::<Vec<_>>(),
                        "freshness": "Current",
                    })
                })
                .collect();
            json!({"metadata": {"name": group, "creationTimestamp": null}, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{discovery_version}"),
        "metadata": {},
        "items": items,
    })
}

/// One `APIGroup` of the legacy `/apis` list.
pub(crate) fn api_group(group: &str, versions: &[(String, Vec<&ResourceType>)]) -> Value {
    let entries: Vec<Value> = versions
        .iter()
        .map(
            |(version, _)| json!({"groupVersion": api_version(group, version), "version": version}),
        )
        .collect();
    let preferred = entries.first().cloned().unwrap_or(Value::Null);
    json!({"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": entries, "preferredVersion": preferred})
}

/// `/apis` (legacy): an `APIGroupList`.
pub(crate) fn api_group_list(types: &[ResourceType]) -> Value {
    let groups: Vec<Value> = groups(types)
        .into_iter()
        .filter(|(group, _)| !group.is_empty())
        .map(|(group, versions)| {
            let mut entry = api_group(&group, &versions);
            if let Some(map) = entry.as_object_mut() {
                map.remove("kind");
                map.remove("apiVersion");
            }
            entry
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/api/v1` or `/apis/G/V`: an `APIResourceList`, or `None` when nothing is served there.
pub(crate) fn resource_list(types: &[ResourceType], group: &str, version: &str) -> Option<Value> {
    let resources: Vec<Value> = types
        .iter()
        .filter(|rt| rt.group == group && rt.version == version)
        .flat_map(ResourceType::legacy)
        .collect();
    (!resources.is_empty()).then(|| {
        json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": api_version(group, version),
            "resources": resources,
        })
    })
}

/// The OpenAPI v3 document of one group/version: a PATCH operation per kind carrying its
/// group-version-kind and the `fieldValidation` parameter (what kubectl looks for).
pub(crate) fn openapi_document(
    types: &[ResourceType],
    group: &str,
    version: &str,
) -> Option<Value> {
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    for rt in types
        .iter()
        .filter(|rt| rt.group == group && rt.version == version)
    {
        let prefix = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let item = if rt.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", rt.plural)
        } else {
            format!("{prefix}/{}/{{name}}", rt.plural)
        };
        let gvk = json!({"group": group, "version": version, "kind": rt.kind});
        let query = |name: &str| json!({"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": true}});
        let operation = |suffix: &str| {
            json!({"patch": {
                "operationId": format!("patch{}{}", rt.kind, suffix),
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
                "parameters": [query("dryRun"), query("fieldManager"), query("fieldValidation"),
                    {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": true}}],
                "responses": {"200": {"description": "OK"}, "201": {"description": "Created"}},
            }})
        };
        paths.insert(item.clone(), operation(""));
        if rt.status {
            paths.insert(format!("{item}/status"), operation("Status"));
        }
        if let Fields::Schema(schema) = &rt.fields {
            let mut schema = schema.clone();
            schema["x-kubernetes-group-version-kind"] = json!([gvk]);
            let name = format!("{}.{}.{}", reverse_domain(group), version, rt.kind);
            schemas.insert(name, schema);
        }
    }
    (!paths.is_empty()).then(|| {
        json!({
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": "v1.32.0"},
            "paths": paths,
            "components": {"schemas": schemas},
        })
    })
}

fn reverse_domain(group: &str) -> String {
    group.split('.').rev().collect::<Vec<_>>().join(".")
}

/// `/openapi/v3`: the index, each document's URL carrying a hash of its content (kubectl caches
/// by URL).
pub(crate) fn openapi_index(types: &[ResourceType]) -> Value {
    let mut paths = serde_json::Map::new();
    for (group, versions) in groups(types) {
        for (version, _) in versions {
            let Some(document) = openapi_document(types, &group, &version) else {
                continue;
            };
            let key = if group.is_empty() {
                format!("api/{version}")
            } else {
                format!("apis/{group}/{version}")
            };
            let url = format!("/openapi/v3/{key}?hash={}", content_hash(&document));
            paths.insert(key, json!({"serverRelativeURL": url}));
        }
    }
    json!({"paths": paths})
}

/// A stable hash of a document's text, upper-case hex as the real server writes it.
pub(crate) fn content_hash(document: &Value) -> String {
    let mut hasher = std::hash::DefaultHasher::new();
    document.to_string().hash(&mut hasher);
    format!("{:016X}", hasher.finish())
}
