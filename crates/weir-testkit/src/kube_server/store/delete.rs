//! DELETE: finalizers, garbage collection of dependents, orphaning, CRD and namespace contents.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::super::now;
use super::super::types::{self, ResourceType};
use super::{
    ApiError, CRD_GROUP, CRD_PLURAL, ObjKey, ResKey, State, conflict, details, finalizers, key,
    meta, not_found, set_meta,
};

impl State {
    /// DELETE with its options (`preconditions`, `propagationPolicy`): the answer body.
    pub(crate) fn delete(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        options: &Value,
    ) -> Result<Value, ApiError> {
        let old = self.stored(rt, namespace, name)?;
        if let Some(uid) = options
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            && Some(uid) != meta(&old, "uid")
        {
            return Err(ApiError::new(
                    409,
                    "Conflict",
                    format!(
                        "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        rt.resource_name(),
                        meta(&old, "uid").unwrap_or("")
                    ),
                )
                .with_details(details(rt, name)));
        }
        if let Some(rv) = options
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            && Some(rv) != meta(&old, "resourceVersion")
        {
            return Err(conflict(rt, name));
        }
        let orphan = options.get("propagationPolicy").and_then(Value::as_str) == Some("Orphan")
            || options.get("orphanDependents").and_then(Value::as_bool) == Some(true);
        if orphan && let Some(uid) = meta(&old, "uid") {
            self.orphan(uid);
        }
        let object_key = (
            meta(&old, "namespace").unwrap_or("").to_owned(),
            name.to_owned(),
        );
        let gone = self.delete_object(&key(rt), &object_key);
        match gone {
            Some(object)
                if meta(&object, "deletionTimestamp").is_some()
                    && self.get(rt, namespace, name).is_some() =>
            {
                Ok(Self::at_version(rt, object))
            }
            Some(object) if rt.custom => Ok(Self::at_version(rt, object)),
            Some(object) => {
                let mut details = details(rt, name);
                details["uid"] = json!(meta(&object, "uid"));
                Ok(
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}),
                )
            }
            None => Err(not_found(rt, name)),
        }
    }

    /// Deletes one object: a finalizer makes it terminating, else it goes at once (with its
    /// dependents). Returns its last state.
    fn delete_object(&mut self, res: &ResKey, object_key: &ObjKey) -> Option<Value> {
        let old = self.objects.get(res)?.get(object_key)?.clone();
        if finalizers(&old) > 0 {
            if meta(&old, "deletionTimestamp").is_some() {
                return Some(old);
            }
            let mut new = old;
            set_meta(&mut new, "deletionTimestamp", json!(now()));
            set_meta(&mut new, "deletionGracePeriodSeconds", json!(0));
            if let Some(generation) = new.pointer("/metadata/generation").and_then(Value::as_i64) {
                set_meta(&mut new, "generation", json!(generation + 1));
            }
            let rv = self.next_rv();
            set_meta(&mut new, "resourceVersion", json!(rv.to_string()));
            self.objects
                .entry(res.clone())
                .or_default()
                .insert(object_key.clone(), new.clone());
            self.emit("MODIFIED", res.clone(), new.clone());
            return Some(new);
        }
        let rv = self.next_rv();
        let mut gone = old;
        set_meta(&mut gone, "resourceVersion", json!(rv.to_string()));
        self.remove(res, object_key, gone.clone());
        Some(gone)
    }

    /// Takes an object out (its resourceVersion already set), emits DELETED, then collects
    /// what depended on it: custom resources of a CRD, objects in a namespace, and objects whose
    /// owners are all gone.
    pub(super) fn remove(&mut self, res: &ResKey, object_key: &ObjKey, last: Value) {
        if let Some(objects) = self.objects.get_mut(res) {
            objects.remove(object_key);
        }
        self.emit("DELETED", res.clone(), last.clone());
        if res.0 == CRD_GROUP
            && res.1 == CRD_PLURAL
            && let Ok(served) = types::from_crd(&last)
            && let Some(first) = served.first()
        {
            let custom = (first.group.clone(), first.plural.clone());
            let keys: Vec<ObjKey> = self
                .objects
                .get(&custom)
                .map(|objects| objects.keys().cloned().collect())
                .unwrap_or_default();
            for object_key in keys {
                if let Some(mut object) = self
                    .objects
                    .get_mut(&custom)
                    .and_then(|objects| objects.remove(&object_key))
                {
                    let rv = self.next_rv();
                    set_meta(&mut object, "resourceVersion", json!(rv.to_string()));
                    self.emit("DELETED", custom.clone(), object);
                }
            }
            self.types
                .retain(|rt| !(rt.custom && rt.group == custom.0 && rt.plural == custom.1));
        }
        if res.0.is_empty() && res.1 == "namespaces" {
            let inside: Vec<(ResKey, ObjKey)> = self
                .objects
                .iter()
                .flat_map(|(res, objects)| {
                    objects
                        .keys()
                        .filter(|(ns, _)| *ns == object_key.1)
                        .map(move |object_key| (res.clone(), object_key.clone()))
                })
                .collect();
            for (res, object_key) in inside {
                self.delete_object(&res, &object_key);
            }
        }
        self.collect_garbage();
    }

    fn uids(&self) -> BTreeSet<String> {
        self.objects
            .values()
            .flat_map(BTreeMap::values)
            .filter_map(|object| meta(object, "uid").map(str::to_owned))
            .collect()
    }

    /// Background deletion of every object all of whose owners are gone.
    pub(super) fn collect_garbage(&mut self) {
        let uids = self.uids();
        let orphans: Vec<(ResKey, ObjKey)> = self
            .objects
            .iter()
            .flat_map(|(res, objects)| {
                objects.iter().filter_map(|(object_key, object)| {
                    let owners: Vec<&str> = object
                        .pointer("/metadata/ownerReferences")
                        .and_then(Value::as_array)?
                        .iter()
                        .filter_map(|owner| owner.get("uid").and_then(Value::as_str))
                        .collect();
                    let collect = !owners.is_empty()
                        && owners.iter().all(|uid| !uids.contains(*uid))
                        && meta(object, "deletionTimestamp").is_none();
                    collect.then(|| (res.clone(), object_key.clone()))
                })
            })
            .collect();
        for (res, object_key) in orphans {
            self.delete_object(&res, &object_key);
        }
    }

    /// Orphan propagation: dependents lose their ownerReferences to `uid`.
    fn orphan(&mut self, uid: &str) {
        let dependents: Vec<(ResKey, ObjKey)> = self
            .objects
            .iter()
            .flat_map(|(res, objects)| {
                objects
                    .iter()
                    .filter(|(_, object)| {
                        object
                            .pointer("/metadata/ownerReferences")
                            .and_then(Value::as_array)
                            .is_some_and(|owners| {
                                owners.iter().any(|owner| {
                                    owner.get("uid").and_then(Value::as_str) == Some(uid)
                                })
                            })
                    })
                    .map(move |(object_key, _)| (res.clone(), object_key.clone()))
            })
            .collect();
        for (res, object_key) in dependents {
            let Some(mut object) = self
                .objects
                .get(&res)
                .and_then(|o| o.get(&object_key))
                .cloned()
            else {
                continue;
            };
            if let Some(owners) = object
                .pointer_mut("/metadata/ownerReferences")
                .and_then(Value::as_array_mut)
            {
                owners.retain(|owner| owner.get("uid").and_then(Value::as_str) != Some(uid));
                if owners.is_empty() {
                    set_meta(&mut object, "ownerReferences", Value::Null);
                }
            }
            let rv = self.next_rv();
            set_meta(&mut object, "resourceVersion", json!(rv.to_string()));
            self.objects
                .entry(res.clone())
                .or_default()
                .insert(object_key, object.clone());
            self.emit("MODIFIED", res, object);
        }
    }

    /// DELETE on a collection: each object of `objects` (already selected) is deleted.
    pub(crate) fn delete_collection(&mut self, rt: &ResourceType, objects: &[Value]) -> Vec<Value> {
        objects
            .iter()
            .filter_map(|object| {
                let object_key = (
                    meta(object, "namespace").unwrap_or("").to_owned(),
                    meta(object, "name").unwrap_or("").to_owned(),
                );
                self.delete_object(&key(rt), &object_key)
                    .map(|object| Self::at_version(rt, object))
            })
            .collect()
    }
}
