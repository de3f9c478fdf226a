//! MetricTemplate (flagger.app) -> MetricTemplate (weir.dev).

use std::collections::BTreeMap;

use serde_json::Value;

use super::kept::{Kept, field};
use super::types::TemplateDocument;
use super::{Converted, check_name, check_version_and_kind, dedup, object_meta, root_object};
use crate::document::{deserialize_collecting, json_type_name};
use crate::error::FieldError;
use crate::model::{
    API_VERSION, METRIC_TEMPLATE_KIND, MetricProvider, MetricTemplate, MetricTemplateSpec,
    TemplateRef,
};

/// Flagger's metric provider when none is named.
const DEFAULT_PROVIDER: &str = "prometheus";

pub(super) fn convert(document: &Value) -> Result<Converted<MetricTemplate>, Vec<FieldError>> {
    let root = root_object(document, METRIC_TEMPLATE_KIND).map_err(|error| vec![error])?;
    let mut errors = Vec::new();
    let mut kept = Kept::default();
    check_version_and_kind(
        root,
        METRIC_TEMPLATE_KIND,
        &["v1alpha1"],
        &mut errors,
        &mut kept.warnings,
    );
    check_name(root, &mut errors);
    match root.get("spec") {
        None | Some(Value::Null) => errors.push(FieldError::missing(
            "spec",
            "the template's provider ({type, address}) and query",
        )),
        Some(Value::Object(_)) => {}
        Some(other) => errors.push(FieldError::new(
            "spec",
            format!(
                "is a {}: the spec is a mapping with provider and query",
                json_type_name(other)
            ),
        )),
    }
    let parsed: TemplateDocument = match deserialize_collecting(document) {
        Ok(parsed) => parsed,
        Err(structural) => {
            errors.extend(structural);
            TemplateDocument::default()
        }
    };
    if !errors.is_empty() {
        return Err(dedup(errors));
    }

    let raw_spec = field(Some(document), "spec");
    let raw_provider = field(raw_spec, "provider");
    kept.keep_unknown_keys(
        Some(document),
        "",
        &["apiVersion", "kind", "metadata", "spec", "status"],
    );
    kept.keep_unknown_keys(raw_spec, "spec", &["provider", "query"]);
    kept.keep_unknown_keys(
        raw_provider,
        "spec.provider",
        &[
            "type",
            "address",
            "secretRef",
            "headers",
            "insecureSkipVerify",
            "region",
        ],
    );

    let spec = parsed.spec.unwrap_or_default();
    let provider = spec.provider.unwrap_or_default();
    let provider_type = match provider.provider_type.filter(|kind| !kind.is_empty()) {
        Some(kind) => kind,
        None => {
            kept.warn(
                "spec.provider.type",
                format!("not set; read as {DEFAULT_PROVIDER}, Flagger's default"),
            );
            DEFAULT_PROVIDER.to_string()
        }
    };
    let secret_ref = match provider.secret_ref {
        Some(reference) => match reference.name.filter(|name| !name.is_empty()) {
            Some(name) => {
                kept.keep_unknown_keys(
                    field(raw_provider, "secretRef"),
                    "spec.provider.secretRef",
                    &["name", "namespace"],
                );
                Some(TemplateRef {
                    name,
                    namespace: reference
                        .namespace
                        .filter(|namespace| !namespace.is_empty()),
                })
            }
            None => {
                if let Some(raw) = field(raw_provider, "secretRef") {
                    kept.keep_because(
                        "spec.provider.secretRef",
                        raw,
                        "kept as an annotation; a secretRef without a name names no secret, so \
                         no credentials are used",
                    );
                }
                None
            }
        },
        None => None,
    };
    let mut headers = BTreeMap::new();
    for (name, values) in provider.headers.into_iter().flatten() {
        if values.0.len() > 1 {
            kept.warn(
                format!("spec.provider.headers.{name}"),
                "has several values; sent as one header, joined with \", \" as HTTP allows",
            );
        }
        headers.insert(name, values.0.join(", "));
    }
    let query = spec.query.filter(|query| !query.trim().is_empty());
    if query.is_none() {
        kept.warn(
            "spec.query",
            "is empty: this template cannot be evaluated until it has a query",
        );
    }

    let mut metadata = object_meta(parsed.metadata, field(Some(document), "metadata"));
    kept.write_annotation(&mut metadata.annotations);
    Ok(Converted {
        value: MetricTemplate {
            api_version: API_VERSION.to_string(),
            kind: METRIC_TEMPLATE_KIND.to_string(),
            metadata,
            spec: MetricTemplateSpec {
                provider: MetricProvider {
                    provider_type,
                    address: provider.address.filter(|address| !address.is_empty()),
                    secret_ref,
                    headers,
                    insecure_skip_verify: provider.insecure_skip_verify.unwrap_or(false),
                    region: provider.region.filter(|region| !region.is_empty()),
                },
                query,
            },
        },
        warnings: kept.warnings,
    })
}
