//! The Secrets that the followed MetricTemplates and AlertProviders name (`secretRef`), read
//! from the cluster into the catalog, so a Flagger user's existing Secrets work as they are.
//!
//! - Only Secrets a template or provider in the catalog names are read: one watch per Secret,
//!   in the template's (or provider's) namespace, selecting it by name
//!   (`fieldSelector=metadata.name=NAME`). Other Secrets are never listed.
//! - A changed Secret replaces the catalog's copy at once, so the next query uses it; a deleted
//!   one is forgotten (a query that needs it then fails, saying the Secret is not loaded, and a
//!   rollout applied meanwhile is refused naming it).
//! - A Secret that arrives (or is fixed) later: the rollouts naming a template or provider that
//!   names it are applied again, as when a template arrives.
//! - When no template or provider names a Secret any longer, its watch stops and the catalog
//!   forgets it.
//! - Values never leave the catalog: messages name the Secret and its keys only.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::TryStreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::watcher;
use serde_json::{Map, Value, json};
use tokio::sync::watch;
use tokio::task::AbortHandle;
use weir_core::document::{self, Document};

use super::catalog::{Following, Kind};
use super::{Error, report};

/// `(namespace, name)` of a Secret.
type Key = (String, String);

/// A running watch of one Secret.
struct Watched {
    task: AbortHandle,
    /// True once its first listing is in the catalog (or failed).
    listed: watch::Receiver<bool>,
}

/// The watches of the Secrets the catalog's templates and providers name; dropping it stops them.
pub(super) struct SecretWatches {
    following: Following,
    running: Mutex<BTreeMap<Key, Watched>>,
}

impl SecretWatches {
    pub(super) fn new(following: Following) -> Arc<SecretWatches> {
        Arc::new(SecretWatches {
            following,
            running: Mutex::new(BTreeMap::new()),
        })
    }

    /// Watches every Secret the catalog's templates and providers name now, and stops watching
    /// (and forgets) those no longer named. Call it after every change of templates or providers.
    pub(super) fn sync(&self) {
        let named = self.following.catalog.snapshot().secrets_named();
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        running.retain(|key, watched| {
            if named.contains_key(key) {
                return true;
            }
            watched.task.abort();
            self.following
                .catalog
                .update(|catalog| catalog.remove_secret(&key.0, &key.1));
            false
        });
        for key in named.keys() {
            if running.contains_key(key) {
                continue;
            }
            let (done, listed) = watch::channel(false);
            let task = tokio::spawn(watch_secret(self.following.clone(), key.clone(), done));
            running.insert(
                key.clone(),
                Watched {
                    task: task.abort_handle(),
                    listed,
                },
            );
        }
    }

    /// Waits until every Secret watched now has had its first listing (or failed to list).
    pub(super) async fn listed(&self) {
        let receivers: Vec<watch::Receiver<bool>> = {
            let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
            running
                .values()
                .map(|watched| watched.listed.clone())
                .collect()
        };
        for mut listed in receivers {
            // An error: the watch ended (stopped), which is not waited for either.
            let _ = listed.wait_for(|listed| *listed).await;
        }
    }
}

impl Drop for SecretWatches {
    fn drop(&mut self) {
        let running = self
            .running
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        for watched in running.values() {
            watched.task.abort();
        }
    }
}

/// Follows Secret `key` into the catalog; `listed` is told once the first listing is in.
async fn watch_secret(following: Following, key: Key, listed: watch::Sender<bool>) {
    use kube::runtime::WatchStreamExt;
    let (namespace, name) = &key;
    let api: Api<Secret> = Api::namespaced(following.client.clone(), namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let events = watcher(api, config).default_backoff();
    futures_util::pin_mut!(events);
    // Whether the catalog holds this watch's copy, and whether a listing in progress saw it.
    let mut held = false;
    let mut seen = false;
    loop {
        match events.try_next().await {
            Ok(Some(watcher::Event::Init)) => seen = false,
            Ok(Some(watcher::Event::InitApply(secret))) => {
                seen = true;
                held = add(&following, &key, &secret);
            }
            Ok(Some(watcher::Event::InitDone)) => {
                if !seen {
                    if held {
                        forget(&following, &key);
                        held = false;
                    }
                    eprintln!(
                        "weir operator: Secret {namespace}/{name} does not exist (rollouts whose \
                         templates or alert providers name it are refused until it does)"
                    );
                }
                listed.send_replace(true);
                if held {
                    reapply(&following, &key).await;
                }
            }
            Ok(Some(watcher::Event::Apply(secret))) => {
                held = add(&following, &key, &secret);
                if held {
                    reapply(&following, &key).await;
                }
            }
            Ok(Some(watcher::Event::Delete(_))) => {
                forget(&following, &key);
                held = false;
                eprintln!("weir operator: Secret {namespace}/{name} was deleted: forgotten");
            }
            Ok(None) => return,
            Err(source) => {
                report(&Error::Watch {
                    what: format!("Secret {namespace}/{name}"),
                    source,
                });
                listed.send_replace(true);
            }
        }
    }
}

/// Puts `secret` into the catalog (one being deleted, or one that cannot be read, is taken out).
/// Whether the catalog holds it now.
fn add(following: &Following, key: &Key, secret: &Secret) -> bool {
    let (namespace, name) = key;
    if secret.metadata.deletion_timestamp.is_some() {
        forget(following, key);
        return false;
    }
    // Plain text values only, as the providers read them; a binary value (a certificate's
    // DER, say) is left out and named.
    let mut values = Map::new();
    let mut binary = Vec::new();
    for (entry, bytes) in secret.data.iter().flatten() {
        match std::str::from_utf8(&bytes.0) {
            Ok(text) => {
                values.insert(entry.clone(), Value::String(text.to_string()));
            }
            Err(_) => binary.push(entry.as_str()),
        }
    }
    for (entry, text) in secret.string_data.iter().flatten() {
        values
            .entry(entry.clone())
            .or_insert_with(|| Value::String(text.clone()));
    }
    if !binary.is_empty() {
        eprintln!(
            "weir operator: Secret {namespace}/{name}: keys {} are not UTF-8 text and are not read",
            binary.join(", ")
        );
    }
    let document = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "stringData": values,
    });
    match document::load_value(&document) {
        Ok(loaded) => match loaded.document {
            document @ Document::Secret(_) => {
                following.catalog.update(move |catalog| {
                    catalog.add(document);
                });
                true
            }
            other => {
                eprintln!(
                    "weir operator: Secret {namespace}/{name} refused: it reads as {}",
                    other.describe()
                );
                forget(following, key);
                false
            }
        },
        Err(refused) => {
            // The errors name fields and keys, never values.
            let reasons: Vec<String> = refused.errors.iter().map(ToString::to_string).collect();
            eprintln!(
                "weir operator: Secret {namespace}/{name} refused: {}",
                reasons.join("; ")
            );
            forget(following, key);
            false
        }
    }
}

fn forget(following: &Following, (namespace, name): &Key) {
    following
        .catalog
        .update(|catalog| catalog.remove_secret(namespace, name));
}

/// Applies again the rollouts naming a template or provider that names Secret `key`.
async fn reapply(following: &Following, key: &Key) {
    let Some(users) = following.catalog.snapshot().secrets_named().remove(key) else {
        return;
    };
    let templates: HashSet<Key> = users.templates.into_iter().collect();
    let providers: HashSet<Key> = users.alert_providers.into_iter().collect();
    following
        .reapply_referencing(Kind::MetricTemplate, &templates)
        .await;
    following
        .reapply_referencing(Kind::AlertProvider, &providers)
        .await;
}
