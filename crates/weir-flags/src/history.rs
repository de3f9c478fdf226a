//! What a change of a flag changed, as a readable diff: the paths of the fields that differ
//! (`spec.enabled`, `spec.variations[1].value`) with their values before and after.

use serde_json::Value;
use weir_core::model::Flag;
use weir_store::FieldChange;

/// The fields that differ between `before` and `after` (either absent: created or deleted, every
/// field of the other one's `spec`), in document order.
pub fn diff(before: Option<&Flag>, after: Option<&Flag>) -> Vec<FieldChange> {
    let value = |flag: Option<&Flag>| flag.and_then(|flag| serde_json::to_value(flag).ok());
    let mut changes = Vec::new();
    walk(
        "",
        value(before).as_ref(),
        value(after).as_ref(),
        &mut changes,
    );
    changes
}

fn walk(path: &str, before: Option<&Value>, after: Option<&Value>, out: &mut Vec<FieldChange>) {
    if before == after {
        return;
    }
    let field = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    match (before, after) {
        (Some(Value::Object(old)), Some(Value::Object(new))) => {
            for (key, value) in old {
                walk(&field(key), Some(value), new.get(key), out);
            }
            for (key, value) in new {
                if !old.contains_key(key) {
                    walk(&field(key), None, Some(value), out);
                }
            }
        }
        (Some(Value::Array(old)), Some(Value::Array(new))) => {
            for index in 0..old.len().max(new.len()) {
                walk(
                    &format!("{path}[{index}]"),
                    old.get(index),
                    new.get(index),
                    out,
                );
            }
        }
        // A whole document created or deleted: its fields one by one, so the history shows
        // what the flag was.
        (None, Some(Value::Object(new))) if path.is_empty() || path == "spec" => {
            for (key, value) in new {
                walk(&field(key), None, Some(value), out);
            }
        }
        (Some(Value::Object(old)), None) if path.is_empty() || path == "spec" => {
            for (key, value) in old {
                walk(&field(key), Some(value), None, out);
            }
        }
        _ => out.push(FieldChange {
            path: path.to_string(),
            before: before.cloned(),
            after: after.cloned(),
        }),
    }
}

/// The action a change of `before` into `after` is recorded as: `created`, `deleted`, `enabled`
/// or `disabled` (when only `spec.enabled` changed), else `updated`.
pub fn action(before: Option<&Flag>, after: Option<&Flag>, changes: &[FieldChange]) -> String {
    match (before, after) {
        (None, _) => "created",
        (_, None) => "deleted",
        (Some(_), Some(after))
            if changes.len() == 1 && changes.first().is_some_and(|c| c.path == "spec.enabled") =>
        {
            if after.spec.enabled {
                "enabled"
            } else {
                "disabled"
            }
        }
        _ => "updated",
    }
    .to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    fn flag(yaml: &str) -> Flag {
        let mut loaded = weir_core::document::load(yaml.as_bytes());
        match loaded.remove(0).map(|loaded| loaded.document) {
            Ok(weir_core::document::Document::Flag(flag)) => *flag,
            other => panic!("not a flag: {other:?}"),
        }
    }

    const BASE: &str = "apiVersion: weir.dev/v1alpha1\nkind: Flag\nmetadata: {name: f}\nspec:\n  \
        variations: [{name: a, value: a}, {name: b, value: b}]\n  defaultStrategy: {variation: a}\n";

    #[test]
    fn changes_are_listed_by_path_with_before_and_after() {
        let before = flag(BASE);
        let mut after = before.clone();
        after.spec.enabled = false;
        after.spec.variations[1].value = Value::from("c");
        let changes = diff(Some(&before), Some(&after));
        let text: Vec<String> = changes.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "spec.enabled: true -> false",
                "spec.variations[1].value: \"b\" -> \"c\""
            ]
        );
        assert_eq!(action(Some(&before), Some(&after), &changes), "updated");
        let mut off = before.clone();
        off.spec.enabled = false;
        let changes = diff(Some(&before), Some(&off));
        assert_eq!(action(Some(&before), Some(&off), &changes), "disabled");
        assert!(diff(Some(&before), Some(&before)).is_empty());
    }

    #[test]
    fn a_created_flag_lists_its_fields() {
        let created = flag(BASE);
        let changes = diff(None, Some(&created));
        assert!(
            changes
                .iter()
                .any(|change| change.path == "spec.defaultStrategy"
                    && change.after == Some(serde_json::json!({"variation": "a"})))
        );
        assert_eq!(action(None, Some(&created), &changes), "created");
    }
}
