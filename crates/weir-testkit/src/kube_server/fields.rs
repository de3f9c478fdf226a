//! JSON merge patch (RFC 7386), JSON patch (RFC 6902), and field ownership for server-side
//! apply: field sets as leaf paths, `metadata.managedFields` in `FieldsV1` form.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

/// A field path: the object keys from the root to a leaf.
pub(crate) type FieldPath = Vec<String>;
/// The fields a manager owns.
pub(crate) type FieldSet = BTreeSet<FieldPath>;

/// RFC 7386: `null` removes, objects merge, anything else replaces.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(target) = target else {
        return;
    };
    for (key, value) in patch {
        if value.is_null() {
            target.remove(key);
        } else {
            merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn split_pointer(pointer: &str) -> Result<(String, String), String> {
    if pointer.is_empty() {
        return Err("the root cannot be the target of this operation".into());
    }
    let Some((parent, last)) = pointer.rsplit_once('/') else {
        return Err(format!("invalid JSON pointer {pointer:?}"));
    };
    Ok((parent.to_owned(), unescape(last)))
}

fn add_at(doc: &mut Value, pointer: &str, value: Value) -> Result<(), String> {
    if pointer.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = split_pointer(pointer)?;
    match doc.pointer_mut(&parent) {
        Some(Value::Object(map)) => {
            map.insert(last, value);
            Ok(())
        }
        Some(Value::Array(items)) => {
            let index = if last == "-" {
                items.len()
            } else {
                last.parse::<usize>()
                    .ok()
                    .filter(|index| *index <= items.len())
                    .ok_or_else(|| format!("invalid index {last:?} in {pointer}"))?
            };
            items.insert(index, value);
            Ok(())
        }
        _ => Err(format!("doc is missing path: \"{pointer}\"")),
    }
}

fn remove_at(doc: &mut Value, pointer: &str) -> Result<Value, String> {
    let (parent, last) = split_pointer(pointer)?;
    let missing = || format!("Unable to remove nonexistent key: {last}: missing value");
    match doc.pointer_mut(&parent) {
        Some(Value::Object(map)) => map.remove(&last).ok_or_else(missing),
        Some(Value::Array(items)) => match last.parse::<usize>() {
            Ok(index) if index < items.len() => Ok(items.remove(index)),
            _ => Err(missing()),
        },
        _ => Err(missing()),
    }
}

/// RFC 6902: `add`, `remove`, `replace`, `move`, `copy`, `test`.
pub(crate) fn json_patch(doc: &mut Value, patch: &Value) -> Result<(), String> {
    let operations = patch
        .as_array()
        .ok_or("a JSON patch must be an array of operations")?;
    for operation in operations {
        let field = |key: &str| operation.get(key).and_then(Value::as_str);
        let op = field("op").ok_or("an operation needs \"op\"")?;
        let path = field("path").ok_or("an operation needs \"path\"")?;
        let value = || {
            operation
                .get("value")
                .cloned()
                .ok_or_else(|| format!("operation {op} needs \"value\""))
        };
        match op {
            "add" => add_at(doc, path, value()?)?,
            "remove" => {
                remove_at(doc, path)?;
            }
            "replace" => {
                let target = doc
                    .pointer_mut(path)
                    .ok_or_else(|| format!("replace operation does not apply: doc is missing key: {path}: missing value"))?;
                *target = value()?;
            }
            "test" => {
                if doc.pointer(path) != Some(&value()?) {
                    return Err(format!("testing value {path} failed: test failed"));
                }
            }
            "move" | "copy" => {
                let from = field("from").ok_or("move and copy need \"from\"")?;
                let moved = if op == "move" {
                    remove_at(doc, from)?
                } else {
                    doc.pointer(from)
                        .cloned()
                        .ok_or_else(|| format!("copy from {from}: missing value"))?
                };
                add_at(doc, path, moved)?;
            }
            other => return Err(format!("Unexpected kind: {other}")),
        }
    }
    Ok(())
}

/// The value at `path`, if any.
pub(crate) fn get_path<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(value, |value, key| value.get(key))
}

/// Removes the field at `path`, then parents left empty (never the root or a top-level field).
pub(crate) fn remove_path(value: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut node = &mut *value;
    for key in parents {
        match node.get_mut(key) {
            Some(next) => node = next,
            None => return,
        }
    }
    if let Some(map) = node.as_object_mut() {
        map.remove(last);
    }
    for depth in (2..path.len()).rev() {
        let parent = &path[..depth];
        if get_path(value, parent).is_some_and(|v| v.as_object().is_some_and(Map::is_empty)) {
            remove_path_only(value, parent);
        } else {
            break;
        }
    }
}

fn remove_path_only(value: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut node = value;
    for key in parents {
        match node.get_mut(key) {
            Some(next) => node = next,
            None => return,
        }
    }
    if let Some(map) = node.as_object_mut() {
        map.remove(last);
    }
}

/// Merges an applied configuration into the live object: objects merge key by key, anything
/// else (lists included: they are atomic here) replaces.
pub(crate) fn deep_merge(live: &mut Value, config: &Value) {
    match (live, config) {
        (Value::Object(live), Value::Object(config)) => {
            for (key, value) in config {
                match live.get_mut(key) {
                    Some(existing) if existing.is_object() && value.is_object() => {
                        deep_merge(existing, value);
                    }
                    _ => {
                        live.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (live, config) => *live = config.clone(),
    }
}

/// Fields no manager owns: identity and bookkeeping kept by the server.
fn ignored(path: &[String]) -> bool {
    match path {
        [top] => top == "apiVersion" || top == "kind",
        [meta, field, ..] if meta == "metadata" => matches!(
            field.as_str(),
            "name"
                | "namespace"
                | "uid"
                | "resourceVersion"
                | "generation"
                | "creationTimestamp"
                | "deletionTimestamp"
                | "deletionGracePeriodSeconds"
                | "managedFields"
                | "selfLink"
        ),
        _ => false,
    }
}

/// The owned leaves of an object: scalars, lists (atomic) and empty objects, minus identity and
/// bookkeeping fields; `scope` restricts them (`Some("status")` for the status subresource,
/// `Some("!status")` for the main resource of a kind with one).
pub(crate) fn leaf_paths(object: &Value, scope: Scope) -> FieldSet {
    fn walk(value: &Value, path: &mut FieldPath, out: &mut FieldSet) {
        match value {
            Value::Object(map) if !map.is_empty() => {
                for (key, child) in map {
                    path.push(key.clone());
                    walk(child, path, out);
                    path.pop();
                }
            }
            _ => {
                out.insert(path.clone());
            }
        }
    }
    let mut out = FieldSet::new();
    walk(object, &mut Vec::new(), &mut out);
    out.retain(|path| !ignored(path) && scope.covers(path));
    out
}

/// Which part of an object a write may touch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Everything.
    All,
    /// Everything but `.status` (the main resource of a kind with a status subresource).
    NotStatus,
    /// Only `.status`.
    Status,
}

impl Scope {
    fn covers(self, path: &[String]) -> bool {
        let status = path.first().is_some_and(|top| top == "status");
        match self {
            Scope::All => true,
            Scope::NotStatus => !status,
            Scope::Status => status,
        }
    }
}

/// `.spec.analysis.threshold`, as conflict messages name a field.
pub(crate) fn path_text(path: &[String]) -> String {
    path.iter().map(|key| format!(".{key}")).collect()
}

/// One `metadata.managedFields` entry.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Entry {
    pub manager: String,
    pub operation: String,
    pub api_version: String,
    pub time: String,
    pub subresource: Option<String>,
    pub fields: FieldSet,
}

impl Entry {
    fn same_owner(&self, other: &Entry) -> bool {
        self.manager == other.manager
            && self.operation == other.operation
            && self.subresource == other.subresource
    }
}

fn fields_from_v1(value: &Value, path: &mut FieldPath, out: &mut FieldSet) {
    let Some(map) = value.as_object() else {
        return;
    };
    if map.is_empty() && !path.is_empty() {
        out.insert(path.clone());
    }
    for (key, child) in map {
        if let Some(field) = key.strip_prefix("f:") {
            path.push(field.to_owned());
            fields_from_v1(child, path, out);
            path.pop();
        }
    }
}

fn fields_to_v1(fields: &FieldSet) -> Value {
    let mut root = Value::Object(Map::new());
    for path in fields {
        let mut node = &mut root;
        for key in path {
            node = node
                .as_object_mut()
                .map(|map| map.entry(format!("f:{key}")).or_insert_with(|| json!({})))
                .expect("field set nodes are objects");
        }
    }
    root
}

/// The entries recorded on an object.
pub(crate) fn entries(object: &Value) -> Vec<Entry> {
    let Some(items) = object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    items
        .iter()
        .map(|item| {
            let text = |key: &str| {
                item.get(key)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned()
            };
            let mut fields = FieldSet::new();
            if let Some(v1) = item.get("fieldsV1") {
                fields_from_v1(v1, &mut Vec::new(), &mut fields);
            }
            Entry {
                manager: text("manager"),
                operation: text("operation"),
                api_version: text("apiVersion"),
                time: text("time"),
                subresource: item
                    .get("subresource")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                fields,
            }
        })
        .collect()
}

/// Writes `entries` into `metadata.managedFields` (removed when none are left).
pub(crate) fn store_entries(object: &mut Value, entries: &[Entry]) {
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let items: Vec<Value> = entries
        .iter()
        .filter(|entry| !entry.fields.is_empty())
        .map(|entry| {
            let mut item = json!({
                "manager": entry.manager,
                "operation": entry.operation,
                "apiVersion": entry.api_version,
                "time": entry.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": fields_to_v1(&entry.fields),
            });
            if let Some(sub) = &entry.subresource {
                item["subresource"] = json!(sub);
            }
            item
        })
        .collect();
    if items.is_empty() {
        metadata.remove("managedFields");
    } else {
        metadata.insert("managedFields".into(), Value::Array(items));
    }
}

/// Drops entries' fields that no longer exist in `object` and the entries left empty.
fn drop_missing(entries: &mut Vec<Entry>, object: &Value) {
    for entry in entries.iter_mut() {
        entry.fields.retain(|path| get_path(object, path).is_some());
    }
    entries.retain(|entry| !entry.fields.is_empty());
}

/// Records an `Update` by `me`: it takes every field whose value it changed.
pub(crate) fn record_update(old: &Value, new: &Value, mut me: Entry, scope: Scope) -> Vec<Entry> {
    let mut entries = entries(old);
    let changed: FieldSet = leaf_paths(new, scope)
        .into_iter()
        .filter(|path| get_path(old, path) != get_path(new, path))
        .collect();
    for entry in entries.iter_mut().filter(|entry| !entry.same_owner(&me)) {
        entry
            .fields
            .retain(|owned| !changed.iter().any(|path| overlaps(owned, path)));
    }
    if let Some(mine) = entries.iter_mut().find(|entry| entry.same_owner(&me)) {
        mine.fields.extend(changed);
        mine.time = me.time;
        mine.api_version = me.api_version;
    } else {
        me.fields = changed;
        entries.push(me);
    }
    drop_missing(&mut entries, new);
    entries
}

fn overlaps(a: &[String], b: &[String]) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// A field another manager owns with another value.
#[derive(Clone, Debug)]
pub(crate) struct Conflict {
    pub manager: String,
    pub api_version: String,
    pub field: String,
}

/// Server-side apply of `config` (already reduced to what `scope` lets it touch) by `me` onto
/// `live`: the merged object and its entries, or the conflicts (unless `force`).
pub(crate) fn apply(
    live: &Value,
    config: &Value,
    mut me: Entry,
    scope: Scope,
    force: bool,
) -> Result<(Value, Vec<Entry>), Vec<Conflict>> {
    let mut entries = entries(live);
    let applied = leaf_paths(config, scope);
    let mut conflicts = Vec::new();
    for entry in entries.iter_mut().filter(|entry| !entry.same_owner(&me)) {
        let mut lost = Vec::new();
        for owned in &entry.fields {
            for path in &applied {
                if !overlaps(owned, path) {
                    continue;
                }
                let at = if owned.len() < path.len() {
                    owned
                } else {
                    path
                };
                if get_path(live, at) != get_path(config, at) {
                    lost.push(owned.clone());
                    conflicts.push(Conflict {
                        manager: entry.manager.clone(),
                        api_version: entry.api_version.clone(),
                        field: path_text(at),
                    });
                    break;
                }
            }
        }
        if force {
            for owned in lost {
                entry.fields.remove(&owned);
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    let mut merged = live.clone();
    let previous = entries
        .iter()
        .find(|entry| entry.same_owner(&me))
        .map(|entry| entry.fields.clone())
        .unwrap_or_default();
    for path in previous.difference(&applied) {
        let shared = entries
            .iter()
            .filter(|entry| !entry.same_owner(&me))
            .any(|entry| entry.fields.iter().any(|owned| overlaps(owned, path)));
        if !shared {
            remove_path(&mut merged, path);
        }
    }
    let mut filtered = config.clone();
    for path in leaf_paths(config, Scope::All) {
        if ignored(&path) || !scope.covers(&path) {
            remove_path_only(&mut filtered, &path);
        }
    }
    deep_merge(&mut merged, &filtered);
    me.fields = applied;
    match entries.iter_mut().find(|entry| entry.same_owner(&me)) {
        Some(mine) => *mine = me,
        None => entries.push(me),
    }
    drop_missing(&mut entries, &merged);
    Ok((merged, entries))
}
