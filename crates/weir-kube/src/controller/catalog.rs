//! Flagger's `MetricTemplate` and `AlertProvider` objects on the cluster, followed into the
//! operator's catalog (the one every provider reads), so rollouts and Canaries that name them
//! (`templateRef`, `providerRef`) run as they would under Flagger.
//!
//! - At start, [`follow`] lists them before the rollout watches start ([`Ready::wait`]): a
//!   rollout is never refused because its template had not been read yet.
//! - A change or a deletion changes the catalog at once; the engine sees the catalog as it is
//!   when it applies a rollout or runs a check.
//! - A template or provider that arrives (or is fixed) later: the rollouts that reference it are
//!   applied again ([`Following::reapply_referencing`]), so one refused for naming it when it was
//!   not there yet is now run.
//! - A refused object (say, an AlertProvider of a type weir does not send to) is one stderr line
//!   naming it and why; it is not in the catalog until it is fixed.
//!
//! - The Secrets they name (`secretRef`) are followed too, each by a watch of its own
//!   ([`super::secrets`]), listed before the rollout watches start as well.

use std::collections::HashSet;
use std::sync::Arc;

use futures_util::TryStreamExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::runtime::watcher;
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use weir_core::catalog::SharedCatalog;
use weir_core::document::{self, Document};
use weir_core::model::Rollout;
use weir_engine::EngineHandle;

use super::secrets::SecretWatches;
use super::{Error, report, rollouts};
use crate::flagger::{alert_providers_resource, authored, metric_templates_resource};
use crate::store::{read_rollout, rollouts_resource};

/// `(namespace, name)` of a template or provider.
type Key = (String, String);

/// The kinds of Flagger objects the catalog follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    MetricTemplate,
    AlertProvider,
}

impl Kind {
    const ALL: [Kind; 2] = [Kind::MetricTemplate, Kind::AlertProvider];

    fn name(self) -> &'static str {
        match self {
            Kind::MetricTemplate => "MetricTemplate",
            Kind::AlertProvider => "AlertProvider",
        }
    }

    fn resource(self) -> ApiResource {
        match self {
            Kind::MetricTemplate => metric_templates_resource(),
            Kind::AlertProvider => alert_providers_resource(),
        }
    }

    /// `metrictemplates.flagger.app`, for messages.
    fn plural(self) -> String {
        let resource = self.resource();
        format!("{}.{}", resource.plural, resource.group)
    }
}

fn key_of(object: &DynamicObject) -> Key {
    (
        object
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        object.metadata.name.clone().unwrap_or_default(),
    )
}

/// What the catalog's watches share: where rollouts are watched (to apply them again), the
/// catalog, and the engine.
#[derive(Clone)]
pub(super) struct Following {
    pub(super) client: kube::Client,
    namespaces: Vec<String>,
    pub(super) catalog: SharedCatalog,
    handle: EngineHandle,
}

/// Resolves once every catalog watch has put its first listing into the catalog (or failed to
/// list: the operator then starts without waiting, and rollouts refused meanwhile are applied
/// again when the objects they name arrive).
pub(super) struct Ready(Vec<oneshot::Receiver<()>>, Arc<SecretWatches>);

impl Ready {
    /// Waits for every watch's first listing, then for the first listing of every Secret the
    /// templates and providers listed name.
    pub(super) async fn wait(self) {
        for listed in self.0 {
            // An error: the watch ended, which is not waited for either.
            let _ = listed.await;
        }
        self.1.listed().await;
    }
}

/// Starts following Flagger's MetricTemplates and AlertProviders (each whose CRD is installed)
/// in `namespaces` (empty: every namespace) into `catalog`, its watches among `tasks`. Await
/// [`Ready::wait`] before starting the rollout watches.
pub(super) async fn follow(
    client: &kube::Client,
    namespaces: &[String],
    catalog: SharedCatalog,
    handle: EngineHandle,
    tasks: &mut JoinSet<()>,
) -> Ready {
    let following = Following {
        client: client.clone(),
        namespaces: namespaces.to_vec(),
        catalog,
        handle,
    };
    let secrets = SecretWatches::new(following.clone());
    // Secrets named by templates given with `--catalog`, too.
    secrets.sync();
    let mut listed = Vec::new();
    let mut followed = Vec::new();
    for kind in Kind::ALL {
        let apis = following.apis(&kind.resource());
        if !installed(kind, &apis[0]).await {
            continue;
        }
        followed.push(kind.plural());
        for api in apis {
            let (done, ready) = oneshot::channel();
            listed.push(ready);
            tasks.spawn(watch(
                api,
                kind,
                following.clone(),
                Arc::clone(&secrets),
                done,
            ));
        }
    }
    if !followed.is_empty() {
        eprintln!(
            "weir operator: following Flagger's {} into the catalog",
            followed.join(" and ")
        );
    }
    // The Secret watches live as long as the operator's tasks.
    let kept = Arc::clone(&secrets);
    tasks.spawn(async move {
        let _kept = kept;
        std::future::pending::<()>().await;
    });
    Ready(listed, secrets)
}

/// Whether the CRD of `kind` is installed.
async fn installed(kind: Kind, api: &Api<DynamicObject>) -> bool {
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => true,
        Err(kube::Error::Api(status)) if status.code == 404 => false,
        Err(source) => {
            report(&Error::Api {
                doing: format!(
                    "cannot tell whether Flagger's {} CRD is installed",
                    kind.name()
                ),
                source,
            });
            false
        }
    }
}

/// Follows the objects of `api` into the catalog; `ready` is told once the first listing is in.
/// A restarted watch lists again: what is no longer listed leaves the catalog, and rollouts
/// referencing what is listed are applied again.
async fn watch(
    api: Api<DynamicObject>,
    kind: Kind,
    following: Following,
    secrets: Arc<SecretWatches>,
    ready: oneshot::Sender<()>,
) {
    use kube::runtime::WatchStreamExt;
    let events = watcher(api, watcher::Config::default()).default_backoff();
    futures_util::pin_mut!(events);
    let mut ready = Some(ready);
    // What this watch put into the catalog, and what a listing in progress has seen.
    let mut held: HashSet<Key> = HashSet::new();
    let mut listing: Option<HashSet<Key>> = None;
    loop {
        let event = events.try_next().await;
        // What the templates and providers name may change with any event: the Secret
        // watches follow once the catalog has the change.
        let changes = matches!(
            event,
            Ok(Some(
                watcher::Event::InitApply(_)
                    | watcher::Event::InitDone
                    | watcher::Event::Apply(_)
                    | watcher::Event::Delete(_)
            ))
        );
        match event {
            Ok(Some(watcher::Event::Init)) => listing = Some(HashSet::new()),
            Ok(Some(watcher::Event::InitApply(object))) => {
                let key = key_of(&object);
                if following.add(kind, &object) {
                    held.insert(key.clone());
                } else {
                    held.remove(&key);
                }
                if let Some(seen) = &mut listing {
                    seen.insert(key);
                }
            }
            Ok(Some(watcher::Event::InitDone)) => {
                let seen = listing.take().unwrap_or_default();
                let gone: Vec<Key> = held.difference(&seen).cloned().collect();
                for (namespace, name) in gone {
                    following.remove(kind, &namespace, &name);
                }
                held.retain(|key| seen.contains(key));
                match ready.take() {
                    Some(ready) => {
                        // The rollout watches start after this: nothing to apply again.
                        let _ = ready.send(());
                    }
                    None => following.reapply_referencing(kind, &held).await,
                }
            }
            Ok(Some(watcher::Event::Apply(object))) => {
                let key = key_of(&object);
                if following.add(kind, &object) {
                    held.insert(key.clone());
                    following
                        .reapply_referencing(kind, &HashSet::from([key]))
                        .await;
                } else {
                    held.remove(&key);
                }
            }
            Ok(Some(watcher::Event::Delete(object))) => {
                let (namespace, name) = key_of(&object);
                following.remove(kind, &namespace, &name);
                held.remove(&(namespace, name));
            }
            Ok(None) => return,
            Err(source) => {
                report(&Error::Watch {
                    what: kind.plural(),
                    source,
                });
                if let Some(ready) = ready.take() {
                    eprintln!(
                        "weir operator: starting the rollouts without waiting for the {}s (a \
                         rollout refused for naming one is applied again when it is read)",
                        kind.name()
                    );
                    let _ = ready.send(());
                }
            }
        }
        if changes {
            secrets.sync();
        }
    }
}

impl Following {
    /// One Api per watched namespace (one for all when none is given).
    fn apis(&self, resource: &ApiResource) -> Vec<Api<DynamicObject>> {
        crate::store::apis(&self.client, &self.namespaces, resource)
    }

    /// Puts `object` into the catalog; a refused one is taken out (and said why). Whether it is
    /// in the catalog now.
    fn add(&self, kind: Kind, object: &DynamicObject) -> bool {
        let (namespace, name) = key_of(object);
        let subject = format!("{} {namespace}/{name}", kind.name());
        if object.metadata.deletion_timestamp.is_some() {
            self.remove(kind, &namespace, &name);
            return false;
        }
        match document::load_value(&authored(object, kind.name())) {
            Ok(loaded) => {
                for warning in &loaded.warnings {
                    eprintln!("weir operator: {subject}: warning: {warning}");
                }
                match loaded.document {
                    document @ (Document::MetricTemplate(_) | Document::AlertProvider(_)) => {
                        self.catalog.update(move |catalog| {
                            catalog.add(document);
                        });
                        true
                    }
                    other => {
                        eprintln!(
                            "weir operator: {subject} refused: it reads as {}",
                            other.describe()
                        );
                        self.remove(kind, &namespace, &name);
                        false
                    }
                }
            }
            Err(refused) => {
                let reasons: Vec<String> = refused.errors.iter().map(ToString::to_string).collect();
                eprintln!(
                    "weir operator: {subject} refused (rollouts naming it are refused until it is fixed): {}",
                    reasons.join("; ")
                );
                self.remove(kind, &namespace, &name);
                false
            }
        }
    }

    fn remove(&self, kind: Kind, namespace: &str, name: &str) {
        self.catalog.update(|catalog| match kind {
            Kind::MetricTemplate => catalog.remove_metric_template(namespace, name),
            Kind::AlertProvider => catalog.remove_alert_provider(namespace, name),
        });
    }

    /// Applies again every watched rollout that names one of `changed` (objects of `kind`), the
    /// same way the rollout watch applies it: one refused because it was missing is run now;
    /// for one already running, applying its unchanged spec again changes nothing.
    pub(super) async fn reapply_referencing(&self, kind: Kind, changed: &HashSet<Key>) {
        if changed.is_empty() {
            return;
        }
        for api in self.apis(&rollouts_resource()) {
            let rollouts = match api.list(&ListParams::default()).await {
                Ok(rollouts) => rollouts,
                Err(source) => {
                    report(&Error::Api {
                        doing: format!("listing the rollouts that name a changed {}", kind.name()),
                        source,
                    });
                    continue;
                }
            };
            for object in rollouts.items {
                if object.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                // One that cannot be read is refused for that, whatever the catalog holds.
                let Ok(rollout) = read_rollout(&object) else {
                    continue;
                };
                if references(&rollout, kind, changed) {
                    rollouts::apply(&api, &self.handle, &object).await;
                }
            }
        }
    }
}

/// Whether `rollout` names one of `keys` (objects of `kind`); a reference without a namespace
/// is in the rollout's.
fn references(rollout: &Rollout, kind: Kind, keys: &HashSet<Key>) -> bool {
    let namespace = rollout.metadata.namespace_or_default();
    let analysis = &rollout.spec.analysis;
    let mut named: Box<dyn Iterator<Item = &weir_core::model::TemplateRef>> = match kind {
        Kind::MetricTemplate => Box::new(
            analysis
                .metrics
                .iter()
                .filter_map(|metric| metric.template_ref.as_ref()),
        ),
        Kind::AlertProvider => Box::new(analysis.alerts.iter().map(|alert| &alert.provider_ref)),
    };
    named.any(|reference| {
        let key = (
            reference
                .namespace
                .clone()
                .unwrap_or_else(|| namespace.to_string()),
            reference.name.clone(),
        );
        keys.contains(&key)
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    fn rollout(yaml: &str) -> Rollout {
        match document::load(yaml.as_bytes()).remove(0) {
            Ok(loaded) => match loaded.document {
                Document::Rollout(rollout) => *rollout,
                other => panic!("{other:?}"),
            },
            Err(refused) => panic!("{refused:?}"),
        }
    }

    fn keys(keys: &[(&str, &str)]) -> HashSet<Key> {
        keys.iter()
            .map(|(namespace, name)| (namespace.to_string(), name.to_string()))
            .collect()
    }

    #[test]
    fn a_rollout_references_templates_and_providers_in_its_namespace_unless_told_otherwise() {
        let rollout = rollout(
            r#"
apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {name: web, namespace: shop}
spec:
  target: {kind: flag}
  plan: {canary: {stepWeight: 10}}
  analysis:
    metrics:
      - {name: errors, templateRef: {name: errors}, thresholdRange: {max: 1}}
      - {name: latency, templateRef: {name: latency, namespace: ops}, thresholdRange: {max: 500}}
    alerts:
      - {name: chat, providerRef: {name: on-call}}
"#,
        );
        let template = Kind::MetricTemplate;
        assert!(references(&rollout, template, &keys(&[("shop", "errors")])));
        assert!(references(&rollout, template, &keys(&[("ops", "latency")])));
        assert!(!references(
            &rollout,
            template,
            &keys(&[("shop", "latency")])
        ));
        assert!(!references(
            &rollout,
            template,
            &keys(&[("shop", "on-call")])
        ));
        let provider = Kind::AlertProvider;
        assert!(references(
            &rollout,
            provider,
            &keys(&[("shop", "on-call")])
        ));
        assert!(!references(
            &rollout,
            provider,
            &keys(&[("shop", "errors")])
        ));
        assert!(!references(&rollout, provider, &HashSet::new()));
    }
}
