//! The documents a rollout refers to by name: where notifications go (`AlertProvider`) and the
//! credentials of providers (`Secret`, in Kubernetes' shape so existing manifests load as they
//! are).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ObjectMeta, TemplateRef};

/// The kind of an alert provider document.
pub const ALERT_PROVIDER_KIND: &str = "AlertProvider";
/// The kind of a secret document (`apiVersion: v1`, as in Kubernetes).
pub const SECRET_KIND: &str = "Secret";

/// Where a rollout's notifications go (Flagger's AlertProvider, in weir's group).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AlertProvider {
    /// Always `weir.dev/v1alpha1`.
    pub api_version: String,
    /// Always `AlertProvider`.
    pub kind: String,
    /// Name and namespace.
    pub metadata: ObjectMeta,
    /// The chat or webhook service.
    pub spec: AlertProviderSpec,
}

/// The service and address of an alert provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AlertProviderSpec {
    /// Which service, which decides the message format.
    #[serde(rename = "type")]
    pub provider_type: AlertProviderType,
    /// The incoming-webhook URL. Either this or a secret's `address` key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The channel (Slack), when the webhook does not fix it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// The sender's name (Slack, Discord).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// A secret whose `address` key holds the URL (so the URL, which is a credential, can live
    /// apart from the rollout's files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<TemplateRef>,
}

/// The notification services weir formats messages for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AlertProviderType {
    /// Slack incoming webhooks.
    Slack,
    /// Microsoft Teams incoming webhooks (MessageCard).
    Msteams,
    /// Discord webhooks.
    Discord,
    /// A JSON document with every field, for any receiver.
    Generic,
}

impl AlertProviderType {
    /// Every type, by the name documents use.
    pub const NAMES: [&'static str; 4] = ["slack", "msteams", "discord", "generic"];
}

/// Credentials, by key. Kubernetes' shape: `stringData` holds plain text, `data` base64; both
/// are merged into `string_data` when the document is loaded.
#[derive(Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Secret {
    /// Always `v1`.
    pub api_version: String,
    /// Always `Secret`.
    pub kind: String,
    /// Name and namespace.
    pub metadata: ObjectMeta,
    /// Kubernetes' secret type; read, not used.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub secret_type: Option<String>,
    /// Base64-encoded values (moved into `string_data` at load).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub data: BTreeMap<String, String>,
    /// Plain values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub string_data: BTreeMap<String, String>,
}

impl Secret {
    /// The value of `key`, if the secret has it.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.string_data.get(key).map(String::as_str)
    }
}

// Values stay out of logs and error messages: Debug shows the keys only.
impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secret")
            .field("metadata", &self.metadata)
            .field("keys", &self.string_data.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}
