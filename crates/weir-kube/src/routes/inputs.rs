//! The user's objects a provider works from ([`super::Router::inputs`]), and the one place that
//! reads them from the cluster ([`fetch_inputs`]).

use std::collections::BTreeMap;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;
use weir_engine::ProviderError;

use super::plural;

/// A user's object a provider reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputRef {
    /// `group/version` (`v1` for the core group).
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// The namespace (the rollout's).
    pub namespace: String,
    /// The name.
    pub name: String,
    /// The rollout's field that names it, for messages (`spec.target.ingressRef`).
    pub field: &'static str,
    /// Without it the provider writes nothing (else it goes without, e.g. gloo's `upstreamRef`
    /// settings are optional extras).
    pub required: bool,
}

impl InputRef {
    /// The API resource to read it through.
    pub fn api_resource(&self) -> ApiResource {
        let (group, version) = self
            .api_version
            .split_once('/')
            .unwrap_or(("", &self.api_version));
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, version, &self.kind),
            &plural(&self.kind),
        )
    }
}

/// The user's objects read for a provider, by kind and name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inputs {
    objects: BTreeMap<(String, String), Value>,
}

impl Inputs {
    /// No objects.
    pub fn new() -> Inputs {
        Inputs::default()
    }

    /// Adds `object` (a full object as the API server returns it) under its kind and name.
    pub fn insert(&mut self, object: Value) {
        let kind = object["kind"].as_str().unwrap_or_default().to_string();
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        self.objects.insert((kind, name), object);
    }

    /// The same inputs with `object` added.
    pub fn with(mut self, object: Value) -> Inputs {
        self.insert(object);
        self
    }

    /// The object of `kind` named `name`, if it was read.
    pub fn get(&self, kind: &str, name: &str) -> Option<&Value> {
        self.objects.get(&(kind.to_string(), name.to_string()))
    }

    /// Whether nothing was read.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

/// Reads the objects `references` name (one GET each). A required one that does not exist is a
/// transient error naming it and the field that names it (it may be created later, as Flagger
/// waits for it); an optional one is left out.
pub async fn fetch_inputs(
    client: &kube::Client,
    references: &[InputRef],
) -> Result<Inputs, ProviderError> {
    let mut inputs = Inputs::new();
    for reference in references {
        let api: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            &reference.namespace,
            &reference.api_resource(),
        );
        let found = api.get_opt(&reference.name).await.map_err(|error| {
            ProviderError::transient(format!(
                "reading the {} {}/{} named by {}: {error}",
                reference.kind, reference.namespace, reference.name, reference.field
            ))
            .with_source(error)
        })?;
        match found {
            Some(object) => {
                let mut object = serde_json::to_value(&object).map_err(|error| {
                    ProviderError::permanent(format!(
                        "the {} {}/{} cannot be read as JSON: {error}",
                        reference.kind, reference.namespace, reference.name
                    ))
                })?;
                // A DynamicObject carries its type only when the server sent it: name it.
                object["apiVersion"] = Value::String(reference.api_version.clone());
                object["kind"] = Value::String(reference.kind.clone());
                inputs.insert(object);
            }
            None if reference.required => {
                return Err(ProviderError::transient(format!(
                    "the {} {}/{} named by {} does not exist (yet)",
                    reference.kind, reference.namespace, reference.name, reference.field
                )));
            }
            None => {}
        }
    }
    Ok(inputs)
}
