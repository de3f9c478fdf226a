//! The documents rollouts refer to by name - metric templates, alert providers and secrets - and
//! the check that every reference of a rollout resolves, so a typo is refused when the rollout
//! is applied rather than discovered at the first analysis tick.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, PoisonError, RwLock};

use crate::document::Document;
use crate::error::FieldError;
use crate::model::{AlertProvider, HMAC_SECRET_KEY, MetricTemplate, Rollout, Secret, TemplateRef};

/// `(namespace, name)`.
type Key = (String, String);

/// Metric templates, alert providers and secrets, by namespace and name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Catalog {
    templates: BTreeMap<Key, MetricTemplate>,
    alert_providers: BTreeMap<Key, AlertProvider>,
    secrets: BTreeMap<Key, Secret>,
}

fn key_of(namespace: Option<&str>, name: &str) -> Key {
    (namespace.unwrap_or("default").to_string(), name.to_string())
}

fn key_for(reference: &TemplateRef, rollout_namespace: &str) -> Key {
    (
        reference
            .namespace
            .clone()
            .unwrap_or_else(|| rollout_namespace.to_string()),
        reference.name.clone(),
    )
}

/// The templates and alert providers that name one secret, as `(namespace, name)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecretUsers {
    /// The metric templates whose `provider.secretRef` names it.
    pub templates: BTreeSet<Key>,
    /// The alert providers whose `secretRef` names it.
    pub alert_providers: BTreeSet<Key>,
}

/// A catalog that can change while it is in use (the operator's follows the cluster's
/// MetricTemplates and AlertProviders): readers take a [`SharedCatalog::snapshot`], which a
/// later change leaves as it was.
#[derive(Debug, Clone, Default)]
pub struct SharedCatalog(Arc<RwLock<Arc<Catalog>>>);

impl SharedCatalog {
    /// The catalog as it is now.
    pub fn snapshot(&self) -> Arc<Catalog> {
        // Writers replace the whole catalog, so a poisoned lock still holds a whole one.
        Arc::clone(&self.0.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Changes the catalog (readers holding a snapshot keep theirs).
    pub fn update(&self, change: impl FnOnce(&mut Catalog)) {
        let mut current = self.0.write().unwrap_or_else(PoisonError::into_inner);
        let mut next = Catalog::clone(&current);
        change(&mut next);
        *current = Arc::new(next);
    }
}

impl From<Catalog> for SharedCatalog {
    fn from(catalog: Catalog) -> SharedCatalog {
        SharedCatalog(Arc::new(RwLock::new(Arc::new(catalog))))
    }
}

impl From<Arc<Catalog>> for SharedCatalog {
    fn from(catalog: Arc<Catalog>) -> SharedCatalog {
        SharedCatalog(Arc::new(RwLock::new(catalog)))
    }
}

impl Catalog {
    /// Removes the metric template `namespace/name`, if it is there.
    pub fn remove_metric_template(&mut self, namespace: &str, name: &str) {
        self.templates
            .remove(&(namespace.to_string(), name.to_string()));
    }

    /// Removes the alert provider `namespace/name`, if it is there.
    pub fn remove_alert_provider(&mut self, namespace: &str, name: &str) {
        self.alert_providers
            .remove(&(namespace.to_string(), name.to_string()));
    }

    /// Removes the secret `namespace/name`, if it is there.
    pub fn remove_secret(&mut self, namespace: &str, name: &str) {
        self.secrets
            .remove(&(namespace.to_string(), name.to_string()));
    }

    /// The secrets the templates and alert providers name (`secretRef`), as `(namespace, name)`,
    /// each with the templates and the providers that name it.
    pub fn secrets_named(&self) -> BTreeMap<Key, SecretUsers> {
        let mut named: BTreeMap<Key, SecretUsers> = BTreeMap::new();
        for (key, template) in &self.templates {
            if let Some(reference) = &template.spec.provider.secret_ref {
                named
                    .entry(key_for(reference, &key.0))
                    .or_default()
                    .templates
                    .insert(key.clone());
            }
        }
        for (key, provider) in &self.alert_providers {
            if let Some(reference) = &provider.spec.secret_ref {
                named
                    .entry(key_for(reference, &key.0))
                    .or_default()
                    .alert_providers
                    .insert(key.clone());
            }
        }
        named
    }

    /// Adds a document the catalog keeps (replacing one of the same kind and name) and hands
    /// any other document (a rollout, a flag) back.
    pub fn add(&mut self, document: Document) -> Option<Document> {
        match document {
            Document::MetricTemplate(template) => {
                let key = key_of(
                    template.metadata.namespace.as_deref(),
                    &template.metadata.name,
                );
                self.templates.insert(key, *template);
                None
            }
            Document::AlertProvider(provider) => {
                let key = key_of(
                    provider.metadata.namespace.as_deref(),
                    &provider.metadata.name,
                );
                self.alert_providers.insert(key, *provider);
                None
            }
            Document::Secret(secret) => {
                let key = key_of(secret.metadata.namespace.as_deref(), &secret.metadata.name);
                self.secrets.insert(key, *secret);
                None
            }
            // Rollouts and flags are not catalog entries: they are applied on their own.
            other @ (Document::Rollout(_) | Document::Flag(_) | Document::Argo(_)) => Some(other),
        }
    }

    /// Whether the catalog holds nothing.
    pub fn is_empty(&self) -> bool {
        self.templates.is_empty() && self.alert_providers.is_empty() && self.secrets.is_empty()
    }

    /// How many templates, alert providers and secrets it holds.
    pub fn counts(&self) -> (usize, usize, usize) {
        (
            self.templates.len(),
            self.alert_providers.len(),
            self.secrets.len(),
        )
    }

    /// The metric template `reference` names (its namespace defaults to the rollout's).
    pub fn metric_template(
        &self,
        reference: &TemplateRef,
        rollout_namespace: &str,
    ) -> Option<&MetricTemplate> {
        self.templates.get(&key_for(reference, rollout_namespace))
    }

    /// The alert provider `reference` names.
    pub fn alert_provider(
        &self,
        reference: &TemplateRef,
        rollout_namespace: &str,
    ) -> Option<&AlertProvider> {
        self.alert_providers
            .get(&key_for(reference, rollout_namespace))
    }

    /// The secret `reference` names.
    pub fn secret(&self, reference: &TemplateRef, rollout_namespace: &str) -> Option<&Secret> {
        self.secrets.get(&key_for(reference, rollout_namespace))
    }

    /// The error for a reference that names nothing loaded, listing what is.
    fn unresolved<T>(
        path: String,
        what: &str,
        reference: &TemplateRef,
        rollout_namespace: &str,
        loaded: &BTreeMap<Key, T>,
    ) -> FieldError {
        let (namespace, name) = key_for(reference, rollout_namespace);
        FieldError::with_value(
            path,
            format!("{name:?}"),
            format!("no {what} {namespace}/{name} ({})", Self::known(loaded)),
        )
    }

    fn known<T>(map: &BTreeMap<Key, T>) -> String {
        if map.is_empty() {
            return "none are loaded".into();
        }
        let names: Vec<String> = map
            .keys()
            .map(|(namespace, name)| format!("{namespace}/{name}"))
            .collect();
        format!("loaded: {}", names.join(", "))
    }

    /// Every reference of `rollout` that does not resolve: metric templates, alert providers,
    /// the secrets those refer to, and webhooks' signing secrets (which must hold the key
    /// `hmacSecret`).
    pub fn check_rollout(&self, rollout: &Rollout) -> Vec<FieldError> {
        let namespace = rollout.metadata.namespace_or_default();
        let mut errors = Vec::new();
        for (index, metric) in rollout.spec.analysis.metrics.iter().enumerate() {
            let Some(reference) = &metric.template_ref else {
                continue;
            };
            let path = format!("spec.analysis.metrics[{index}].templateRef.name");
            match self.metric_template(reference, namespace) {
                None => errors.push(Self::unresolved(
                    path,
                    "MetricTemplate",
                    reference,
                    namespace,
                    &self.templates,
                )),
                Some(template) => {
                    let template_namespace = template.metadata.namespace_or_default();
                    if let Some(secret) = &template.spec.provider.secret_ref
                        && self.secret(secret, template_namespace).is_none()
                    {
                        errors.push(FieldError::with_value(
                            path,
                            format!("{:?}", reference.name),
                            format!(
                                "its provider.secretRef names Secret {}/{}, which is not loaded ({})",
                                key_for(secret, template_namespace).0,
                                secret.name,
                                Self::known(&self.secrets)
                            ),
                        ));
                    }
                }
            }
        }
        for (index, alert) in rollout.spec.analysis.alerts.iter().enumerate() {
            let path = format!("spec.analysis.alerts[{index}].providerRef.name");
            let reference = &alert.provider_ref;
            match self.alert_provider(reference, namespace) {
                None => errors.push(Self::unresolved(
                    path,
                    "AlertProvider",
                    reference,
                    namespace,
                    &self.alert_providers,
                )),
                Some(provider) => {
                    let provider_namespace = provider.metadata.namespace_or_default();
                    let secret = provider
                        .spec
                        .secret_ref
                        .as_ref()
                        .map(|secret| (secret, self.secret(secret, provider_namespace)));
                    let address = secret
                        .and_then(|(_, loaded)| loaded?.get("address"))
                        .or(provider.spec.address.as_deref());
                    let problem = match (address, secret) {
                        (Some(_), _) => None,
                        (None, Some((secret, None))) => Some(format!(
                            "its secretRef names Secret {}/{}, which is not loaded ({})",
                            key_for(secret, provider_namespace).0,
                            secret.name,
                            Self::known(&self.secrets)
                        )),
                        (None, Some((secret, Some(_)))) => Some(format!(
                            "Secret {}/{} has no `address` key and the AlertProvider no \
                             spec.address",
                            key_for(secret, provider_namespace).0,
                            secret.name
                        )),
                        (None, None) => Some(
                            "the AlertProvider has no address: set spec.address, or a secretRef \
                             to a Secret with an `address` key"
                                .to_string(),
                        ),
                    };
                    if let Some(problem) = problem {
                        errors.push(FieldError::with_value(
                            path,
                            format!("{:?}", reference.name),
                            problem,
                        ));
                    }
                }
            }
        }
        for (index, hook) in rollout.spec.analysis.webhooks.iter().enumerate() {
            let Some(reference) = &hook.secret_ref else {
                continue;
            };
            let path = format!("spec.analysis.webhooks[{index}].secretRef.name");
            match self.secret(reference, namespace) {
                None => errors.push(Self::unresolved(
                    path,
                    "Secret",
                    reference,
                    namespace,
                    &self.secrets,
                )),
                Some(secret) if secret.get(HMAC_SECRET_KEY).is_none_or(str::is_empty) => {
                    let keys: Vec<&str> = secret.string_data.keys().map(String::as_str).collect();
                    errors.push(FieldError::with_value(
                        path,
                        format!("{:?}", reference.name),
                        format!(
                            "Secret {}/{} has no `{HMAC_SECRET_KEY}` key, which holds the webhook's signing key (its keys: {})",
                            key_for(reference, namespace).0,
                            reference.name,
                            if keys.is_empty() { "none".to_string() } else { keys.join(", ") }
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        errors
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::document::load;

    fn catalog_and_rollout(yaml: &str) -> (Catalog, Vec<Rollout>) {
        let mut catalog = Catalog::default();
        let mut rollouts = Vec::new();
        for result in load(yaml.as_bytes()) {
            let loaded = result.unwrap_or_else(|refused| panic!("{refused:?}"));
            if let Some(Document::Rollout(rollout)) = catalog.add(loaded.document) {
                rollouts.push(*rollout);
            }
        }
        (catalog, rollouts)
    }

    const DOCUMENTS: &str = r#"
apiVersion: v1
kind: Secret
metadata: {name: prom-auth, namespace: shop}
data: {username: YWRtaW4=}
stringData: {password: hunter2}
---
apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {name: errors, namespace: shop}
spec:
  provider: {type: prometheus, address: "http://prom:9090", secretRef: {name: prom-auth}}
  query: sum(rate(x{ns="{{ namespace }}"}[{{ interval }}]))
---
apiVersion: flagger.app/v1beta1
kind: AlertProvider
metadata: {name: on-call, namespace: shop}
spec: {type: slack, channel: deploys, address: "https://hooks.slack.com/services/x", proxy: "http://p"}
---
apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {name: web, namespace: shop}
spec:
  target: {kind: flag}
  plan: {canary: {stepWeight: 10}}
  analysis:
    metrics:
      - {name: errors, templateRef: {name: errors}, thresholdRange: {max: 1}}
      - {name: latency, templateRef: {name: latency, namespace: other}, thresholdRange: {max: 500}}
    alerts:
      - {name: chat, severity: warn, providerRef: {name: on-call}}
      - {name: pager, providerRef: {name: pagerduty}}
"#;

    #[test]
    fn a_shared_catalog_changes_for_every_holder_and_leaves_snapshots_as_they_were() {
        let (catalog, rollouts) = catalog_and_rollout(DOCUMENTS);
        let shared = SharedCatalog::from(Catalog::default());
        let other_holder = shared.clone();
        let before = shared.snapshot();
        assert_eq!(before.check_rollout(&rollouts[0]).len(), 4);

        shared.update(|current| *current = catalog.clone());
        assert_eq!(other_holder.snapshot().counts(), (1, 1, 1));
        assert_eq!(other_holder.snapshot().check_rollout(&rollouts[0]).len(), 2);
        // A snapshot taken before is the catalog it was.
        assert!(before.is_empty());

        let during = other_holder.snapshot();
        other_holder.update(|current| {
            current.remove_metric_template("shop", "errors");
            current.remove_alert_provider("shop", "on-call");
            // Nothing there: no change.
            current.remove_metric_template("other", "errors");
        });
        assert_eq!(shared.snapshot().counts(), (0, 0, 1));
        assert_eq!(during.counts(), (1, 1, 1));
        assert_eq!(
            SharedCatalog::from(Arc::new(catalog)).snapshot().counts(),
            (1, 1, 1)
        );
    }

    #[test]
    fn the_secrets_named_are_those_of_templates_and_providers_in_their_namespace() {
        let (mut catalog, _) = catalog_and_rollout(&format!(
            "{DOCUMENTS}---
apiVersion: flagger.app/v1beta1
kind: AlertProvider
metadata: {{name: chat, namespace: ops}}
spec: {{type: slack, channel: deploys, secretRef: {{name: slack-url}}}}
"
        ));
        let named = catalog.secrets_named();
        let keys: Vec<&Key> = named.keys().collect();
        assert_eq!(
            keys,
            [
                &("ops".to_string(), "slack-url".to_string()),
                &("shop".to_string(), "prom-auth".to_string())
            ]
        );
        let users = &named[&("shop".to_string(), "prom-auth".to_string())];
        assert_eq!(
            users.templates,
            BTreeSet::from([("shop".to_string(), "errors".to_string())])
        );
        assert!(users.alert_providers.is_empty());
        let users = &named[&("ops".to_string(), "slack-url".to_string())];
        assert_eq!(
            users.alert_providers,
            BTreeSet::from([("ops".to_string(), "chat".to_string())])
        );

        catalog.remove_secret("shop", "prom-auth");
        catalog.remove_secret("shop", "nothing-there");
        assert_eq!(catalog.counts(), (1, 2, 0));
    }

    #[test]
    fn secrets_are_decoded_and_keep_their_values_out_of_debug_output() {
        let (catalog, _) = catalog_and_rollout(DOCUMENTS);
        let reference = TemplateRef {
            name: "prom-auth".into(),
            namespace: None,
        };
        let secret = catalog.secret(&reference, "shop").unwrap();
        assert_eq!(secret.get("username"), Some("admin"));
        assert_eq!(secret.get("password"), Some("hunter2"));
        let shown = format!("{secret:?}");
        assert!(
            shown.contains("password") && !shown.contains("hunter2"),
            "{shown}"
        );
        assert_eq!(catalog.counts(), (1, 1, 1));
    }

    #[test]
    fn unresolved_references_name_their_field_and_what_is_loaded() {
        let (catalog, rollouts) = catalog_and_rollout(DOCUMENTS);
        let errors = catalog.check_rollout(&rollouts[0]);
        let paths: Vec<&str> = errors.iter().map(|error| error.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "spec.analysis.metrics[1].templateRef.name",
                "spec.analysis.alerts[1].providerRef.name"
            ]
        );
        let text = errors[0].to_string();
        assert!(
            text.contains("no MetricTemplate other/latency") && text.contains("shop/errors"),
            "{text}"
        );
    }

    #[test]
    fn an_alert_providers_address_names_what_is_missing() {
        let (catalog, rollouts) = catalog_and_rollout(
            r#"
apiVersion: v1
kind: Secret
metadata: {name: keyless, namespace: shop}
stringData: {token: hunter2}
---
apiVersion: weir.dev/v1alpha1
kind: AlertProvider
metadata: {name: unloaded, namespace: shop}
spec: {type: slack, secretRef: {name: nowhere}}
---
apiVersion: weir.dev/v1alpha1
kind: AlertProvider
metadata: {name: keyless, namespace: shop}
spec: {type: slack, secretRef: {name: keyless}}
---
apiVersion: weir.dev/v1alpha1
kind: AlertProvider
metadata: {name: fallback, namespace: shop}
spec: {type: slack, address: "https://hooks.slack.com/services/x", secretRef: {name: keyless}}
---
apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {name: web, namespace: shop}
spec:
  target: {kind: flag}
  plan: {canary: {stepWeight: 10}}
  analysis:
    alerts:
      - {name: a, providerRef: {name: unloaded}}
      - {name: b, providerRef: {name: keyless}}
      - {name: c, providerRef: {name: fallback}}
"#,
        );
        let errors = catalog.check_rollout(&rollouts[0]);
        let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(texts.len(), 2, "{texts:#?}");
        assert!(
            texts[0].starts_with("spec.analysis.alerts[0].providerRef.name")
                && texts[0]
                    .contains("Secret shop/nowhere, which is not loaded (loaded: shop/keyless)"),
            "{}",
            texts[0]
        );
        assert!(
            texts[1].starts_with("spec.analysis.alerts[1].providerRef.name")
                && texts[1].contains("Secret shop/keyless has no `address` key"),
            "{}",
            texts[1]
        );
        assert!(!texts[1].contains("hunter2"), "{}", texts[1]);
    }

    #[test]
    fn webhook_signing_secrets_must_resolve_and_hold_the_hmac_key() {
        let (catalog, rollouts) = catalog_and_rollout(
            r#"
apiVersion: v1
kind: Secret
metadata: {name: signing, namespace: shop}
stringData: {hmacSecret: s3cret}
---
apiVersion: v1
kind: Secret
metadata: {name: prom-auth, namespace: shop}
stringData: {password: hunter2}
---
apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {name: web, namespace: shop}
spec:
  target: {kind: flag}
  plan: {canary: {stepWeight: 10}}
  analysis:
    webhooks:
      - {name: signed, url: "http://t/", secretRef: {name: signing}}
      - {name: missing, url: "http://t/", secretRef: {name: nowhere}}
      - {name: keyless, url: "http://t/", secretRef: {name: prom-auth}}
      - {name: elsewhere, url: "http://t/", secretRef: {name: signing, namespace: other}}
      - {name: plain, url: "http://t/"}
"#,
        );
        let errors = catalog.check_rollout(&rollouts[0]);
        let paths: Vec<&str> = errors.iter().map(|error| error.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "spec.analysis.webhooks[1].secretRef.name",
                "spec.analysis.webhooks[2].secretRef.name",
                "spec.analysis.webhooks[3].secretRef.name",
            ]
        );
        let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert!(
            texts[0].contains("no Secret shop/nowhere") && texts[0].contains("shop/signing"),
            "{}",
            texts[0]
        );
        assert!(
            texts[1].contains("no `hmacSecret` key") && texts[1].contains("password"),
            "{}",
            texts[1]
        );
        assert!(!texts[1].contains("hunter2"), "{}", texts[1]);
        assert!(texts[2].contains("no Secret other/signing"), "{}", texts[2]);
    }

    #[test]
    fn flagger_alert_providers_convert_and_unsupported_types_are_refused() {
        let results = load(DOCUMENTS.as_bytes());
        let loaded = results[2].as_ref().unwrap();
        assert!(
            loaded.warnings.iter().any(|w| w.path == "spec.proxy"),
            "{:?}",
            loaded.warnings
        );
        let refused = load(
            b"apiVersion: flagger.app/v1beta1\nkind: AlertProvider\nmetadata: {name: r}\nspec: {type: rocket, address: \"https://r\"}\n",
        );
        let error = refused[0].as_ref().unwrap_err();
        assert_eq!(error.errors[0].path, "spec.type");
        assert!(
            error.errors[0]
                .to_string()
                .contains("slack, msteams, discord, generic")
        );
    }
}
