//! The objects, the global resourceVersion, the bounded event history watches read, and every
//! write: create, replace, the patch types, server-side apply, delete with finalizers, and
//! ownerReference garbage collection.

use std::collections::{BTreeMap, VecDeque};

use serde_json::{Value, json};
use tokio::sync::watch;

use super::fields::{self, Entry, Scope};
use super::types::{self, ResourceType};
use super::validate::prune_unknown;
use super::{ApiError, now};

mod apply;
mod create;
mod delete;
mod evict;
mod scale;

/// How many events a watch can resume from; older resourceVersions get 410 Expired.
pub(crate) const HISTORY: usize = 10_000;

const CRD_GROUP: &str = "apiextensions.k8s.io";
const CRD_PLURAL: &str = "customresourcedefinitions";

/// Which objects: `(group, plural)`.
pub(crate) type ResKey = (String, String);
/// Which object of a kind: `(namespace or "", name)`.
type ObjKey = (String, String);

/// A watch event kept in the history.
#[derive(Clone, Debug)]
pub(crate) struct Event {
    pub rv: u64,
    pub kind: &'static str,
    pub key: ResKey,
    pub object: Value,
}

/// Which changes a subscriber gets: `(group, plural, object)`; asked under the server's lock.
pub(crate) type ChangeFilter = Box<dyn Fn(&str, &str, &Value) -> bool + Send>;

/// An in-process subscriber to the change feed: every event it asks for, in order.
pub(crate) struct Subscriber {
    pub filter: ChangeFilter,
    pub sender: std::sync::mpsc::Sender<super::Change>,
}

/// What `fieldValidation` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Validation {
    Strict,
    Warn,
    Ignore,
}

/// Who writes and how.
#[derive(Clone, Debug)]
pub(crate) struct WriteCtx {
    pub manager: String,
    pub validation: Validation,
    pub force: bool,
}

/// The outcome of a write.
#[derive(Debug)]
pub(crate) struct Written {
    pub object: Value,
    pub created: bool,
    pub warnings: Vec<String>,
}

/// Everything the server holds.
pub(crate) struct State {
    pub rv: u64,
    pub types: Vec<ResourceType>,
    objects: BTreeMap<ResKey, BTreeMap<ObjKey, Value>>,
    pub history: VecDeque<Event>,
    /// Events at or below this resourceVersion have left the history.
    pub floor: u64,
    pub writes: BTreeMap<String, u64>,
    /// Every request over HTTP, by `VERB RESOURCE` (see [`super::KubeServer::request_counts`]).
    pub requests: BTreeMap<String, u64>,
    serial: u64,
    notify: watch::Sender<u64>,
    /// In-process subscribers to every event ([`super::KubeServer::subscribe`]).
    pub subscribers: Vec<Subscriber>,
    /// The External Metrics API, once a test enables it.
    pub external_metrics: Option<super::external_metrics::ExternalMetrics>,
}

fn key(rt: &ResourceType) -> ResKey {
    (rt.group.clone(), rt.plural.clone())
}

fn meta<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

fn set_meta(object: &mut Value, field: &str, value: Value) {
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = json!({});
    }
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        if value.is_null() {
            metadata.remove(field);
        } else {
            metadata.insert(field.to_owned(), value);
        }
    }
}

fn finalizers(object: &Value) -> usize {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len)
}

/// `{name, group?, kind: plural}` as Status details carry them.
pub(crate) fn details(rt: &ResourceType, name: &str) -> Value {
    let mut details = json!({"name": name, "kind": rt.plural});
    if !rt.group.is_empty() {
        details["group"] = json!(rt.group);
    }
    details
}

pub(crate) fn not_found(rt: &ResourceType, name: &str) -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        format!("{} \"{name}\" not found", rt.resource_name()),
    )
    .with_details(details(rt, name))
}

fn conflict(rt: &ResourceType, name: &str) -> ApiError {
    ApiError::new(
        409,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
            rt.resource_name()
        ),
    )
    .with_details(details(rt, name))
}

fn invalid(rt: &ResourceType, name: &str, field: &str, problem: &str) -> ApiError {
    let qualified = if rt.group.is_empty() {
        rt.kind.clone()
    } else {
        format!("{}.{}", rt.kind, rt.group)
    };
    let mut details = details(rt, name);
    details["kind"] = json!(rt.kind);
    details["causes"] =
        json!([{"reason": "FieldValueInvalid", "message": problem, "field": field}]);
    ApiError::new(
        422,
        "Invalid",
        format!("{qualified} \"{name}\" is invalid: {field}: {problem}"),
    )
    .with_details(details)
}

fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError::new(400, "BadRequest", message.into())
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// The object without what a no-op write may change: the resourceVersion and managed times.
fn comparable(object: &Value) -> Value {
    let mut object = object.clone();
    set_meta(&mut object, "resourceVersion", Value::Null);
    if let Some(items) = object
        .pointer_mut("/metadata/managedFields")
        .and_then(Value::as_array_mut)
    {
        for item in items {
            if let Some(item) = item.as_object_mut() {
                item.remove("time");
            }
        }
    }
    object
}

/// What `metadata.generation` follows: everything but metadata (and status when it is a
/// subresource).
fn generation_part(rt: &ResourceType, object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut() {
        map.remove("metadata");
        if rt.status {
            map.remove("status");
        }
    }
    object
}

impl State {
    pub(crate) fn new(notify: watch::Sender<u64>) -> State {
        let mut state = State {
            rv: 0,
            types: types::builtins(),
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            floor: 0,
            writes: BTreeMap::new(),
            requests: BTreeMap::new(),
            serial: 0,
            notify,
            subscribers: Vec::new(),
            external_metrics: None,
        };
        let namespaces = state
            .find("", "v1", "namespaces")
            .expect("namespaces are built in");
        let ctx = WriteCtx {
            manager: "kube-apiserver".into(),
            validation: Validation::Strict,
            force: false,
        };
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
            state
                .create(&namespaces, "", body, &ctx)
                .expect("the initial namespaces are valid");
        }
        state
    }

    /// The served type at `group/version` named `plural` (or its kind, singular or short name).
    pub(crate) fn find(&self, group: &str, version: &str, name: &str) -> Option<ResourceType> {
        let lower = name.to_lowercase();
        self.types
            .iter()
            .find(|rt| {
                rt.group == group
                    && rt.version == version
                    && (rt.plural == lower
                        || rt.singular == lower
                        || rt.kind.to_lowercase() == lower
                        || rt.short_names.contains(&lower))
            })
            .cloned()
    }

    /// Counts a write request to `rt`.
    pub(crate) fn count_write(&mut self, rt: &ResourceType) {
        *self.writes.entry(rt.resource_name()).or_default() += 1;
    }

    /// Counts a request: `verb` and what it names (`deployments.apps`, `rollouts.weir.dev/status`,
    /// or a discovery path).
    pub(crate) fn count_request(&mut self, verb: &str, what: &str) {
        *self.requests.entry(format!("{verb} {what}")).or_default() += 1;
    }

    pub(super) fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    pub(super) fn emit(&mut self, kind: &'static str, key: ResKey, object: Value) {
        if !self.subscribers.is_empty() {
            let rv = self.rv;
            self.subscribers.retain(|subscriber| {
                if !(subscriber.filter)(&key.0, &key.1, &object) {
                    return true;
                }
                let change = super::Change {
                    resource_version: rv,
                    kind: super::ChangeKind::from_event(kind),
                    group: key.0.clone(),
                    resource: key.1.clone(),
                    object: object.clone(),
                };
                // A subscriber that hung up is dropped.
                subscriber.sender.send(change).is_ok()
            });
        }
        self.history.push_back(Event {
            rv: self.rv,
            kind,
            key,
            object,
        });
        while self.history.len() > HISTORY {
            if let Some(event) = self.history.pop_front() {
                self.floor = event.rv;
            }
        }
        self.notify.send_replace(self.rv);
    }

    /// `object` as served at `rt`'s version.
    pub(crate) fn at_version(rt: &ResourceType, mut object: Value) -> Value {
        object["apiVersion"] = json!(rt.api_version());
        object
    }

    pub(crate) fn get(&self, rt: &ResourceType, namespace: &str, name: &str) -> Option<Value> {
        let ns = if rt.namespaced { namespace } else { "" };
        self.objects
            .get(&key(rt))?
            .get(&(ns.to_owned(), name.to_owned()))
            .map(|object| Self::at_version(rt, object.clone()))
    }

    /// Objects of `rt` in `namespace` (all namespaces when `None`), by namespace and name.
    pub(crate) fn list(&self, rt: &ResourceType, namespace: Option<&str>) -> Vec<Value> {
        let Some(objects) = self.objects.get(&key(rt)) else {
            return Vec::new();
        };
        objects
            .iter()
            .filter(|((ns, _), _)| !rt.namespaced || namespace.is_none_or(|wanted| wanted == ns))
            .map(|(_, object)| Self::at_version(rt, object.clone()))
            .collect()
    }

    /// The objects of `rt` in `namespace` whose resourceVersion is above `since`: cloning only
    /// what changed, for a test controller over many objects.
    pub(crate) fn list_changed_since(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        since: u64,
    ) -> Vec<Value> {
        let Some(objects) = self.objects.get(&key(rt)) else {
            return Vec::new();
        };
        objects
            .iter()
            .filter(|((ns, _), _)| !rt.namespaced || namespace.is_none_or(|wanted| wanted == ns))
            .filter(|(_, object)| {
                meta(object, "resourceVersion")
                    .and_then(|rv| rv.parse::<u64>().ok())
                    .is_none_or(|rv| rv > since)
            })
            .map(|(_, object)| Self::at_version(rt, object.clone()))
            .collect()
    }

    /// Every stored object `filter` takes, as `(group, plural, object)`.
    pub(crate) fn snapshot(&self, filter: &ChangeFilter) -> Vec<(String, String, Value)> {
        self.objects
            .iter()
            .flat_map(|((group, plural), objects)| {
                objects
                    .values()
                    .filter(|object| filter(group, plural, object))
                    .map(|object| (group.clone(), plural.clone(), object.clone()))
            })
            .collect()
    }

    fn namespace_exists(&self, name: &str) -> bool {
        self.objects
            .get(&(String::new(), "namespaces".to_owned()))
            .is_some_and(|namespaces| namespaces.contains_key(&(String::new(), name.to_owned())))
    }

    pub(super) fn check_fields(
        rt: &ResourceType,
        object: &mut Value,
        ctx: &WriteCtx,
    ) -> Result<Vec<String>, ApiError> {
        let unknown = prune_unknown(rt, object);
        if unknown.is_empty() {
            return Ok(Vec::new());
        }
        let listed: Vec<String> = unknown
            .iter()
            .map(|field| format!("unknown field \"{field}\""))
            .collect();
        match ctx.validation {
            Validation::Strict => Err(bad_request(format!(
                "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
                listed.join(", "),
                kind = rt.kind,
                version = rt.version,
            ))),
            Validation::Warn => Ok(listed),
            Validation::Ignore => Ok(Vec::new()),
        }
    }

    pub(super) fn entry(
        rt: &ResourceType,
        ctx: &WriteCtx,
        operation: &str,
        sub: Option<&str>,
    ) -> Entry {
        Entry {
            manager: ctx.manager.clone(),
            operation: operation.to_owned(),
            api_version: rt.api_version(),
            time: now(),
            subresource: sub.map(str::to_owned),
            fields: Default::default(),
        }
    }

    pub(super) fn scope(rt: &ResourceType, sub: Option<&str>) -> Scope {
        match sub {
            Some(_) => Scope::Status,
            None if rt.status => Scope::NotStatus,
            None => Scope::All,
        }
    }

    /// POST: a new object in `namespace`.
    pub(crate) fn create(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        mut body: Value,
        ctx: &WriteCtx,
    ) -> Result<Written, ApiError> {
        if !body.is_object() {
            return Err(bad_request("the body of a create must be a JSON object"));
        }
        let warnings = Self::check_fields(rt, &mut body, ctx)?;
        let entry = Self::entry(rt, ctx, "Update", None);
        self.insert_new(rt, namespace, body, None, entry)
            .map(|object| Written {
                object,
                created: true,
                warnings,
            })
    }

    pub(super) fn stored(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        self.get(rt, namespace, name)
            .ok_or_else(|| not_found(rt, name))
    }

    /// PUT (`sub`: `Some("status")` for the status subresource).
    pub(crate) fn replace(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        mut body: Value,
        sub: Option<&str>,
        ctx: &WriteCtx,
    ) -> Result<Written, ApiError> {
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
        let warnings = Self::check_fields(rt, &mut body, ctx)?;
        self.update_to(rt, &old, body, sub, ctx, warnings)
    }

    /// Checks the precondition a body's resourceVersion carries, keeps what the write may not
    /// change, records the update and commits.
    pub(super) fn update_to(
        &mut self,
        rt: &ResourceType,
        old: &Value,
        mut new: Value,
        sub: Option<&str>,
        ctx: &WriteCtx,
        warnings: Vec<String>,
    ) -> Result<Written, ApiError> {
        let name = meta(old, "name").unwrap_or("").to_owned();
        if let Some(given) = meta(&new, "resourceVersion").filter(|rv| !rv.is_empty())
            && Some(given) != meta(old, "resourceVersion")
        {
            return Err(conflict(rt, &name));
        }
        new = Self::scoped(rt, old, new, sub);
        new["apiVersion"] = json!(rt.api_version());
        new["kind"] = json!(rt.kind);
        if rt.group == CRD_GROUP && rt.plural == CRD_PLURAL && sub.is_none() {
            types::from_crd(&new).map_err(|problem| {
                let (field, problem) = problem.split_once(": ").unwrap_or(("spec", &problem));
                invalid(rt, &name, field, problem)
            })?;
        }
        let entries = fields::record_update(
            old,
            &new,
            Self::entry(rt, ctx, "Update", sub),
            Self::scope(rt, sub),
        );
        let object = self.commit(rt, old, new, entries);
        Ok(Written {
            object,
            created: false,
            warnings,
        })
    }

    /// What a write to the main resource or to `/status` may change.
    pub(super) fn scoped(
        rt: &ResourceType,
        old: &Value,
        mut new: Value,
        sub: Option<&str>,
    ) -> Value {
        if sub.is_some() {
            let status = new.get("status").cloned();
            new = old.clone();
            match status {
                Some(status) => new["status"] = status,
                None => {
                    if let Some(map) = new.as_object_mut() {
                        map.remove("status");
                    }
                }
            }
        } else if rt.status {
            match old.get("status") {
                Some(status) => new["status"] = status.clone(),
                None => {
                    if let Some(map) = new.as_object_mut() {
                        map.remove("status");
                    }
                }
            }
        }
        new
    }

    /// Keeps identity, bumps generation, skips no-ops, removes a terminating object whose last
    /// finalizer went, stores and emits.
    pub(super) fn commit(
        &mut self,
        rt: &ResourceType,
        old: &Value,
        mut new: Value,
        entries: Vec<Entry>,
    ) -> Value {
        for field in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "resourceVersion",
        ] {
            set_meta(
                &mut new,
                field,
                old.get("metadata")
                    .and_then(|m| m.get(field))
                    .cloned()
                    .unwrap_or(Value::Null),
            );
        }
        fields::store_entries(&mut new, &entries);
        if rt.generation && generation_part(rt, old) != generation_part(rt, &new) {
            let generation = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            set_meta(&mut new, "generation", json!(generation + 1));
        }
        if comparable(old) == comparable(&new) {
            return old.clone();
        }
        let rv = self.next_rv();
        set_meta(&mut new, "resourceVersion", json!(rv.to_string()));
        let object_key = (
            meta(&new, "namespace").unwrap_or("").to_owned(),
            meta(&new, "name").unwrap_or("").to_owned(),
        );
        if meta(&new, "deletionTimestamp").is_some() && finalizers(&new) == 0 {
            self.remove(&key(rt), &object_key, new.clone());
            return new;
        }
        self.objects
            .entry(key(rt))
            .or_default()
            .insert(object_key, new.clone());
        self.emit("MODIFIED", key(rt), new.clone());
        if rt.group == CRD_GROUP && rt.plural == CRD_PLURAL {
            self.register_crd(&new);
        }
        new
    }
}
