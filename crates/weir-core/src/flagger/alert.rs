//! AlertProvider (flagger.app) -> AlertProvider (weir.dev).

use serde_json::{Map, Value};

use super::{Converted, check_name, check_version_and_kind, root_object};
use crate::document::deserialize_collecting;
use crate::error::{FieldError, Warning};
use crate::model::{ALERT_PROVIDER_KIND, API_VERSION, AlertProvider, AlertProviderType};

/// The spec fields weir reads; Flagger's others (`proxy`) are dropped with a warning.
const READ: [&str; 5] = ["type", "channel", "username", "address", "secretRef"];

pub(super) fn convert(document: &Value) -> Result<Converted<AlertProvider>, Vec<FieldError>> {
    let root = root_object(document, ALERT_PROVIDER_KIND).map_err(|error| vec![error])?;
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    check_version_and_kind(root, ALERT_PROVIDER_KIND, &[], &mut errors, &mut warnings);
    check_name(root, &mut errors);
    let mut spec = Map::new();
    match root.get("spec") {
        Some(Value::Object(fields)) => {
            for (key, value) in fields {
                if READ.contains(&key.as_str()) {
                    spec.insert(key.clone(), value.clone());
                } else {
                    warnings.push(Warning::new(
                        format!("spec.{key}"),
                        "is not used by weir and was dropped",
                    ));
                }
            }
        }
        _ => errors.push(FieldError::missing(
            "spec",
            "the provider's type and address (or secretRef)",
        )),
    }
    if let Some(Value::String(kind)) = spec.get("type")
        && !AlertProviderType::NAMES.contains(&kind.as_str())
    {
        errors.push(FieldError::with_value(
            "spec.type",
            format!("{kind:?}"),
            format!(
                "weir sends to {}; rocket and gchat are not supported yet",
                AlertProviderType::NAMES.join(", ")
            ),
        ));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let mut converted = Map::new();
    converted.insert("apiVersion".into(), API_VERSION.into());
    converted.insert("kind".into(), ALERT_PROVIDER_KIND.into());
    converted.insert(
        "metadata".into(),
        root.get("metadata").cloned().unwrap_or(Value::Null),
    );
    converted.insert("spec".into(), Value::Object(spec));
    let value = deserialize_collecting(&Value::Object(converted))?;
    Ok(Converted { value, warnings })
}
