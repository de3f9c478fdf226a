//! What a new object gets: name checks, identity, defaults; and the kinds a CRD serves.

use serde_json::{Value, json};

use super::super::fields::{self, Entry};
use super::super::types::{self, ResourceType};
use super::super::{ApiError, now};
use super::{
    CRD_GROUP, CRD_PLURAL, State, bad_request, details, invalid, key, meta, not_found, set_meta,
    valid_name,
};

impl State {
    /// Stores a new object; `entries` given by apply, else `entry` takes every field.
    pub(super) fn insert_new(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        mut body: Value,
        entries: Option<Vec<Entry>>,
        entry: Entry,
    ) -> Result<Value, ApiError> {
        let ns = if rt.namespaced { namespace } else { "" };
        if let Some(given) = meta(&body, "namespace").filter(|given| !given.is_empty())
            && rt.namespaced
            && given != ns
        {
            return Err(bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let mut name = meta(&body, "name").unwrap_or("").to_owned();
        if name.is_empty() {
            let Some(prefix) = meta(&body, "generateName").filter(|p| !p.is_empty()) else {
                return Err(invalid(
                    rt,
                    "",
                    "metadata.name",
                    "Required value: name or generateName is required",
                ));
            };
            self.serial += 1;
            name = format!("{prefix}{:05x}", (self.serial * 7919) % 0xfffff);
        }
        if !valid_name(&name) {
            return Err(invalid(
                rt,
                &name,
                "metadata.name",
                &format!(
                    "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
                ),
            ));
        }
        if rt.namespaced && !self.namespace_exists(ns) {
            let namespaces = self
                .find("", "v1", "namespaces")
                .expect("namespaces are built in");
            return Err(not_found(&namespaces, ns));
        }
        let object_key = (ns.to_owned(), name.clone());
        if self
            .objects
            .get(&key(rt))
            .is_some_and(|objects| objects.contains_key(&object_key))
        {
            return Err(ApiError::new(
                409,
                "AlreadyExists",
                format!("{} \"{name}\" already exists", rt.resource_name()),
            )
            .with_details(details(rt, &name)));
        }
        if rt.group == CRD_GROUP && rt.plural == CRD_PLURAL {
            body["metadata"]["name"] = json!(name);
            types::from_crd(&body).map_err(|problem| {
                let (field, problem) = problem.split_once(": ").unwrap_or(("spec", &problem));
                invalid(rt, &name, field, problem)
            })?;
        }
        body["apiVersion"] = json!(rt.api_version());
        body["kind"] = json!(rt.kind);
        if rt.status
            && let Some(map) = body.as_object_mut()
        {
            map.remove("status");
        }
        set_meta(&mut body, "name", json!(name));
        set_meta(
            &mut body,
            "namespace",
            if rt.namespaced {
                json!(ns)
            } else {
                Value::Null
            },
        );
        self.serial += 1;
        let uid = format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            self.serial.wrapping_mul(2_654_435_761) & 0xffff_ffff,
            self.serial & 0xffff,
            (self.rv + 1) & 0xfff,
            self.serial & 0xfff,
            self.serial
        );
        set_meta(&mut body, "uid", json!(uid));
        set_meta(&mut body, "creationTimestamp", json!(now()));
        set_meta(&mut body, "deletionTimestamp", Value::Null);
        set_meta(&mut body, "deletionGracePeriodSeconds", Value::Null);
        set_meta(
            &mut body,
            "generation",
            if rt.generation { json!(1) } else { Value::Null },
        );
        self.defaults(rt, &mut body);
        let entries = match entries {
            Some(entries) => entries,
            None => fields::record_update(&json!({}), &body, entry, Self::scope(rt, None)),
        };
        fields::store_entries(&mut body, &entries);
        let rv = self.next_rv();
        set_meta(&mut body, "resourceVersion", json!(rv.to_string()));
        self.objects
            .entry(key(rt))
            .or_default()
            .insert(object_key, body.clone());
        self.emit("ADDED", key(rt), body.clone());
        if rt.group == CRD_GROUP && rt.plural == CRD_PLURAL {
            self.register_crd(&body);
        }
        // Created for owners that are gone already: the garbage collector takes it (the real
        // one shortly after, here at once).
        if body
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .is_some_and(|owners| !owners.is_empty())
        {
            self.collect_garbage();
        }
        Ok(body)
    }

    /// What the real server fills in that clients read back.
    fn defaults(&mut self, rt: &ResourceType, object: &mut Value) {
        match (rt.group.as_str(), rt.plural.as_str()) {
            ("", "namespaces") => object["status"] = json!({"phase": "Active"}),
            ("", "services") => {
                if !object.get("spec").is_some_and(Value::is_object) {
                    object["spec"] = json!({});
                }
                if object.pointer("/spec/type").is_none() {
                    object["spec"]["type"] = json!("ClusterIP");
                }
                if object.pointer("/spec/clusterIP").is_none() {
                    self.serial += 1;
                    let ip = format!(
                        "10.96.{}.{}",
                        (self.serial / 250) % 250,
                        self.serial % 250 + 1
                    );
                    object["spec"]["clusterIP"] = json!(ip);
                    object["spec"]["clusterIPs"] = json!([ip]);
                }
            }
            (CRD_GROUP, CRD_PLURAL) => {
                let names = object.pointer("/spec/names").cloned().unwrap_or(json!({}));
                let stored: Vec<Value> = object
                    .pointer("/spec/versions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                    .filter_map(|v| v.get("name").cloned())
                    .collect();
                let time = now();
                object["status"] = json!({
                    "acceptedNames": names,
                    "storedVersions": stored,
                    "conditions": [
                        {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                         "message": "no conflicts found", "lastTransitionTime": time},
                        {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                         "message": "the initial names have been accepted", "lastTransitionTime": time},
                    ],
                });
            }
            _ => {}
        }
    }

    pub(super) fn register_crd(&mut self, crd: &Value) {
        let Ok(served) = types::from_crd(crd) else {
            return;
        };
        let Some(first) = served.first() else {
            return;
        };
        let (group, plural) = (first.group.clone(), first.plural.clone());
        self.types
            .retain(|rt| !(rt.custom && rt.group == group && rt.plural == plural));
        self.types.extend(served);
    }
}
