//! Tables (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`), label and field selectors.

use serde_json::{Value, json};

use super::age_of;
use super::types::{Cell, ResourceType};

/// Reads a simple JSONPath (`.status.phase`, `{.status.phase}`, `.items[0].name`).
pub(crate) fn json_path<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut node = object;
    for part in path.split('.').filter(|part| !part.is_empty()) {
        let (field, indexes) = match part.find('[') {
            Some(at) => (&part[..at], &part[at..]),
            None => (part, ""),
        };
        if !field.is_empty() {
            node = node.get(field)?;
        }
        for index in indexes.split(['[', ']']).filter(|s| !s.is_empty()) {
            node = node.get(index.parse::<usize>().ok()?)?;
        }
    }
    Some(node)
}

fn cell(rt: &ResourceType, column: &super::types::Column, object: &Value) -> Value {
    match &column.cell {
        Cell::Name => json!(object.pointer("/metadata/name")),
        Cell::Age => object
            .pointer("/metadata/creationTimestamp")
            .and_then(Value::as_str)
            .map_or(json!("<unknown>"), |time| json!(age_of(time))),
        Cell::Computed(compute) => compute(object),
        Cell::Path(path) => match json_path(object, path) {
            None | Some(Value::Null) => Value::Null,
            Some(Value::String(text)) if column.kind == "date" => json!(age_of(text)),
            Some(value @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) => value.clone(),
            Some(value) if rt.custom => json!(value.to_string()),
            Some(value) => value.clone(),
        },
    }
}

fn partial(object: &Value) -> Value {
    let mut metadata = object.get("metadata").cloned().unwrap_or(json!({}));
    if let Some(map) = metadata.as_object_mut() {
        map.remove("managedFields");
    }
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata})
}

/// A Table of `objects`; `columns`: whether to include the column definitions.
pub(crate) fn table(
    rt: &ResourceType,
    objects: &[Value],
    resource_version: &str,
    columns: bool,
    include_object: &str,
) -> Value {
    let definitions: Vec<Value> = rt
        .columns
        .iter()
        .map(|column| {
            json!({
                "name": column.name,
                "type": column.kind,
                "format": column.format,
                "description": column.description,
                "priority": column.priority,
            })
        })
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|object| {
            let cells: Vec<Value> = rt.columns.iter().map(|c| cell(rt, c, object)).collect();
            let row_object = match include_object {
                "None" => Value::Null,
                "Object" => object.clone(),
                _ => partial(object),
            };
            json!({"cells": cells, "object": row_object})
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": if columns { json!(definitions) } else { Value::Null },
        "rows": rows,
    })
}

/// The object as `PartialObjectMetadata` (kube-rs metadata watchers ask for it).
pub(crate) fn partial_metadata(object: &Value) -> Value {
    partial(object)
}

#[derive(Debug, Clone)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector (`a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`).
#[derive(Debug, Clone, Default)]
pub(crate) struct LabelSelector(Vec<Requirement>);

fn split_terms(text: &str) -> Vec<String> {
    let mut terms = Vec::new();
    let mut depth = 0;
    let mut current = String::new();
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    terms.push(current);
    terms
        .into_iter()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
        .collect()
}

fn set_of(text: &str) -> Result<Vec<String>, String> {
    let inner = text
        .trim()
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesised set, found {text:?}"))?;
    Ok(inner.split(',').map(|v| v.trim().to_owned()).collect())
}

impl LabelSelector {
    pub(crate) fn parse(text: &str) -> Result<LabelSelector, String> {
        let mut requirements = Vec::new();
        for term in split_terms(text) {
            let requirement = if let Some((key, value)) = term.split_once("!=") {
                Requirement::NotEquals(key.trim().into(), value.trim().into())
            } else if let Some((key, value)) = term.split_once("==") {
                Requirement::Equals(key.trim().into(), value.trim().into())
            } else if let Some((key, value)) = term.split_once('=') {
                Requirement::Equals(key.trim().into(), value.trim().into())
            } else if let Some((key, set)) = term.split_once(" notin ") {
                Requirement::NotIn(key.trim().into(), set_of(set)?)
            } else if let Some((key, set)) = term.split_once(" in ") {
                Requirement::In(key.trim().into(), set_of(set)?)
            } else if let Some(key) = term.strip_prefix('!') {
                Requirement::NotExists(key.trim().into())
            } else if term.contains(char::is_whitespace) || term.contains('(') {
                return Err(format!("unable to parse requirement: {term:?}"));
            } else {
                Requirement::Exists(term)
            };
            requirements.push(requirement);
        }
        Ok(LabelSelector(requirements))
    }

    pub(crate) fn matches(&self, object: &Value) -> bool {
        let label = |key: &str| {
            object
                .pointer("/metadata/labels")
                .and_then(|labels| labels.get(key))
                .and_then(Value::as_str)
        };
        self.0.iter().all(|requirement| match requirement {
            Requirement::Equals(key, value) => label(key) == Some(value),
            Requirement::NotEquals(key, value) => label(key) != Some(value),
            Requirement::In(key, values) => {
                label(key).is_some_and(|v| values.iter().any(|x| x == v))
            }
            Requirement::NotIn(key, values) => {
                !label(key).is_some_and(|v| values.iter().any(|x| x == v))
            }
            Requirement::Exists(key) => label(key).is_some(),
            Requirement::NotExists(key) => label(key).is_none(),
        })
    }
}

/// A parsed field selector: `path=value`, `path==value`, `path!=value` over dotted paths
/// (`metadata.name`, `involvedObject.uid`, `spec.nodeName`...); a missing field reads as "".
#[derive(Debug, Clone, Default)]
pub(crate) struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    pub(crate) fn parse(text: &str) -> Result<FieldSelector, String> {
        let mut terms = Vec::new();
        for term in split_terms(text) {
            let (path, equal, value) = if let Some((path, value)) = term.split_once("!=") {
                (path, false, value)
            } else if let Some((path, value)) = term.split_once("==") {
                (path, true, value)
            } else if let Some((path, value)) = term.split_once('=') {
                (path, true, value)
            } else {
                return Err(format!(
                    "invalid selector: '{term}'; can't understand '{term}'"
                ));
            };
            terms.push((path.trim().to_owned(), equal, value.trim().to_owned()));
        }
        Ok(FieldSelector(terms))
    }

    pub(crate) fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(path, equal, value)| {
            let found = json_path(object, path).map_or_else(String::new, |found| match found {
                Value::String(text) => text.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            });
            (found == *value) == *equal
        })
    }
}
