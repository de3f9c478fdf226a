//! Argo Rollouts' objects, read as they are: `argoproj.io/v1alpha1` Rollout, AnalysisTemplate,
//! ClusterAnalysisTemplate, AnalysisRun and Experiment.
//!
//! [`read`] deserializes a document into its typed model ([`types`]), collecting every structural
//! error with its path (unknown fields are refused where Argo's CRD closes the schema), then holds
//! it to Argo's own validation rules and to what weir can run, refusing the rest by name with the
//! reason (`spec.strategy.canary.trafficRouting.alb: not supported: ...`). Conditions are parsed
//! with [`expr`], the subset of Argo's expression language the examples use.
//!
//! [`convert`] turns a canary Rollout whose steps are `setWeight` and `pause` into a weir Rollout
//! with the same plan. What has no typed place in weir but changes nothing about the run (Service
//! names, pod metadata, scale-down delays, ...) is kept in the [`UNMAPPED_ANNOTATION`] annotation
//! with a warning naming its path; what would change the run (analysis, experiments, header and
//! mirror routes, canary scaling, blue-green) refuses the conversion, naming the field.
//!
//! [`sync`] is one reconcile of a Rollout as a pure function: what `weir operator` does with its
//! ReplicaSets, Services and AnalysisRuns, and the status it writes in Argo's shape.

pub mod analysis;
mod convert;
pub mod experiment;
pub mod expr;
pub mod printer;
pub mod replicas;
pub mod sync;
pub mod types;
mod validate;

use serde_json::Value;

use crate::document::{deserialize_collecting, json_type_name};
use crate::error::{FieldError, Warning};
use crate::model::Rollout as WeirRollout;

/// Argo Rollouts' API group.
pub const API_GROUP: &str = "argoproj.io";

/// The one version of the group weir reads.
pub const API_VERSION: &str = "argoproj.io/v1alpha1";

/// The annotation of a converted Rollout holding the Argo fields weir keeps but does not act on:
/// compact JSON mapping each field's path in the Argo document to its value.
pub const UNMAPPED_ANNOTATION: &str = "weir.dev/argo-unmapped";

/// The annotation of an Argo Rollout that chooses what promotion of the converted Rollout needs:
/// `health` opts into weir's evidence rule (and the sequential judge), `noHarm` (the default)
/// keeps Argo's promotion at the end of the steps. The same as a Flagger Canary's.
pub const PROMOTE_ON_ANNOTATION: &str = "weir.dev/promote-on";

/// The kinds of the group weir reads.
pub const KINDS: &str =
    "Rollout, AnalysisTemplate, ClusterAnalysisTemplate, AnalysisRun, Experiment";

/// A typed Argo object.
#[derive(Debug, Clone, PartialEq)]
pub enum ArgoObject {
    /// A Rollout.
    Rollout(Box<types::Rollout>),
    /// An AnalysisTemplate.
    AnalysisTemplate(Box<types::AnalysisTemplate>),
    /// A ClusterAnalysisTemplate (the same shape, cluster-scoped).
    ClusterAnalysisTemplate(Box<types::AnalysisTemplate>),
    /// An AnalysisRun.
    AnalysisRun(Box<types::AnalysisRun>),
    /// An Experiment.
    Experiment(Box<types::Experiment>),
}

/// An Argo document that was read and validated: the typed object and the document as written.
#[derive(Debug, Clone, PartialEq)]
pub struct ArgoDocument {
    /// The typed object.
    pub object: ArgoObject,
    /// The document as written (JSON), for printing it back unchanged.
    pub source: Value,
}

impl ArgoDocument {
    /// The object's kind.
    pub fn kind(&self) -> &'static str {
        match self.object {
            ArgoObject::Rollout(_) => "Rollout",
            ArgoObject::AnalysisTemplate(_) => "AnalysisTemplate",
            ArgoObject::ClusterAnalysisTemplate(_) => "ClusterAnalysisTemplate",
            ArgoObject::AnalysisRun(_) => "AnalysisRun",
            ArgoObject::Experiment(_) => "Experiment",
        }
    }

    fn metadata(&self) -> &types::Metadata {
        match &self.object {
            ArgoObject::Rollout(rollout) => &rollout.metadata,
            ArgoObject::AnalysisTemplate(template)
            | ArgoObject::ClusterAnalysisTemplate(template) => &template.metadata,
            ArgoObject::AnalysisRun(run) => &run.metadata,
            ArgoObject::Experiment(experiment) => &experiment.metadata,
        }
    }

    /// `kind namespace/name` for messages (`Argo Rollout default/web`).
    pub fn describe(&self) -> String {
        let metadata = self.metadata();
        let name = metadata
            .name
            .clone()
            .or_else(|| {
                metadata
                    .generate_name
                    .as_ref()
                    .map(|prefix| format!("{prefix}*"))
            })
            .unwrap_or_default();
        match (&self.object, metadata.namespace.as_deref()) {
            (ArgoObject::ClusterAnalysisTemplate(_), _) => format!("Argo {} {name}", self.kind()),
            (_, namespace) => format!(
                "Argo {} {}/{name}",
                self.kind(),
                namespace
                    .filter(|namespace| !namespace.is_empty())
                    .unwrap_or("default")
            ),
        }
    }
}

/// A result and what is worth knowing about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Converted<T> {
    /// The result.
    pub value: T,
    /// Fields kept but not acted on.
    pub warnings: Vec<Warning>,
}

/// Reads an `argoproj.io` document: its typed model, Argo's validation rules and what weir runs,
/// with every error named by its path.
pub fn read(document: &Value) -> Result<Converted<ArgoDocument>, Vec<FieldError>> {
    let Value::Object(root) = document else {
        return Err(vec![FieldError::new(
            "(document)",
            format!(
                "is a {}: an Argo object is a mapping with apiVersion, kind, metadata and spec",
                json_type_name(document)
            ),
        )]);
    };
    let mut errors = Vec::new();
    match root.get("apiVersion") {
        Some(Value::String(version)) if version == API_VERSION => {}
        Some(other) => errors.push(FieldError::with_value(
            "apiVersion",
            other,
            format!("weir reads Argo Rollouts' {API_VERSION}"),
        )),
        None => errors.push(FieldError::missing("apiVersion", API_VERSION)),
    }
    let kind = root.get("kind").and_then(Value::as_str).unwrap_or("");
    let object = match kind {
        "Rollout" => {
            deserialize_collecting(document).map(|rollout| ArgoObject::Rollout(Box::new(rollout)))
        }
        "AnalysisTemplate" => deserialize_collecting(document)
            .map(|template| ArgoObject::AnalysisTemplate(Box::new(template))),
        "ClusterAnalysisTemplate" => deserialize_collecting(document)
            .map(|template| ArgoObject::ClusterAnalysisTemplate(Box::new(template))),
        "AnalysisRun" => {
            deserialize_collecting(document).map(|run| ArgoObject::AnalysisRun(Box::new(run)))
        }
        "Experiment" => deserialize_collecting(document)
            .map(|experiment| ArgoObject::Experiment(Box::new(experiment))),
        _ => {
            let shown = root
                .get("kind")
                .map_or_else(|| "(absent)".to_string(), ToString::to_string);
            errors.push(FieldError::with_value(
                "kind",
                shown,
                format!("weir reads the {API_GROUP} kinds {KINDS}"),
            ));
            return Err(errors);
        }
    };
    let object = match object {
        Ok(object) => object,
        Err(structural) => {
            errors.extend(structural);
            return Err(errors);
        }
    };
    let mut warnings = Vec::new();
    errors.extend(validate::object(&object, document, &mut warnings));
    if errors.is_empty() {
        Ok(Converted {
            value: ArgoDocument {
                object,
                source: document.clone(),
            },
            warnings,
        })
    } else {
        Err(dedup(errors))
    }
}

/// Converts a read Argo Rollout into a weir Rollout, or names every field that prevents it.
/// Other kinds are not converted: the error names `kind`.
pub fn convert(document: &ArgoDocument) -> Result<Converted<WeirRollout>, Vec<FieldError>> {
    match &document.object {
        ArgoObject::Rollout(rollout) => convert::rollout(rollout, &document.source),
        _ => Err(vec![FieldError::new(
            "kind",
            format!(
                "an Argo {} has no weir document of its own: it is read and validated, and \
                 weir will run it with the Rollouts that refer to it",
                document.kind()
            ),
        )]),
    }
}

/// Keeps the first error for each path and message, in order.
fn dedup(errors: Vec<FieldError>) -> Vec<FieldError> {
    let mut unique: Vec<FieldError> = Vec::new();
    for error in errors {
        if !unique
            .iter()
            .any(|seen| seen.path == error.path && seen.message == error.message)
        {
            unique.push(error);
        }
    }
    unique
}

#[cfg(test)]
mod tests;
