//! [`KubeStore`]: the engine's state kept in the cluster, in each Rollout object's status.
//!
//! On Kubernetes the rollout object is the source of truth, so a restarted operator, or another
//! replica after a failover, resumes every run at its committed step without a local file. Each
//! commit is one `PUT .../status` of the whole status:
//!
//! - the fields `kubectl get rollouts` and dashboards read (phase, canaryWeight, ...), plus the
//!   `Promoted` condition;
//! - `status.store`: what only weir reads: the store version (the optimistic-concurrency token),
//!   the spec generation, the one-shot effects still to deliver, and the rollout's history (its
//!   last [`HISTORY_KEPT`] events with their evidence, as Kubernetes Events expire after an hour).
//!
//! The spec is the object's own. Reads are served from an in-memory copy that this process keeps
//! up to date with its own writes (it is the only writer while it holds the lease). A write
//! carries the object's resourceVersion; when the object changed meanwhile (a user edited the
//! spec), the store re-reads it and writes again only if `status.store.version` is still the one
//! this process wrote last. Any other value means another replica wrote: [`StoreError::Conflict`],
//! and nothing is written. That, and the [`Fence`] checked before every write, is the fencing
//! that keeps a replica which lost its lease from applying a step twice.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use jiff::Timestamp;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use weir_core::document::{self, Document};
use weir_core::machine::Effect;
use weir_core::model::{Rollout, RolloutStatus};
use weir_store::{
    ApplyOutcome, CommitItem, DEFAULT_PAGE, ListQuery, MAX_PAGE, Page, RolloutKey, Store,
    StoreError, StoredEvent, StoredRollout,
};

use crate::crd::{GROUP, VERSION, promoted_condition};

/// How many events of its history a rollout's status keeps (older ones are dropped, oldest
/// first; the Kubernetes Events of each step outlive them by an hour).
pub const HISTORY_KEPT: usize = 100;

/// How often a status write is retried after the object changed under it (a spec edit).
const WRITE_ATTEMPTS: usize = 5;

/// The `rollouts.weir.dev` resource.
pub fn rollouts_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, VERSION, "Rollout"),
        "rollouts",
    )
}

/// One Api of `resource` per namespace of `namespaces`, or one for every namespace when it is
/// empty: how the operator's watches and listings cover what it was told to watch.
pub fn apis(
    client: &kube::Client,
    namespaces: &[String],
    resource: &ApiResource,
) -> Vec<Api<DynamicObject>> {
    if namespaces.is_empty() {
        return vec![Api::all_with(client.clone(), resource)];
    }
    namespaces
        .iter()
        .map(|namespace| Api::namespaced_with(client.clone(), namespace, resource))
        .collect()
}

/// Whether this process may still write (e.g. it holds the leader lease).
pub type Fence = Arc<dyn Fn() -> bool + Send + Sync>;

/// Reads a Rollout object as weir's document: its metadata (only what the user wrote: the
/// server's bookkeeping changes with every status write and must not look like a new spec) and
/// its spec, validated as `weir validate` would.
pub fn read_rollout(object: &DynamicObject) -> Result<Rollout, String> {
    let name = object.metadata.name.clone().unwrap_or_default();
    let namespace = object
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let mut metadata = json!({"name": name, "namespace": namespace});
    for (field, value) in [
        ("labels", serde_json::to_value(&object.metadata.labels)),
        (
            "annotations",
            serde_json::to_value(&object.metadata.annotations),
        ),
        ("uid", serde_json::to_value(&object.metadata.uid)),
    ] {
        if let Ok(value) = value
            && !value.is_null()
        {
            metadata[field] = value;
        }
    }
    let document = json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "Rollout",
        "metadata": metadata,
        "spec": object.data.get("spec").cloned().unwrap_or(Value::Null),
    });
    match document::load_value(&document) {
        Ok(loaded) => match loaded.document {
            Document::Rollout(rollout) => Ok(*rollout),
            other => Err(format!("{} is not a Rollout", other.describe())),
        },
        Err(refused) => Err(refused
            .errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")),
    }
}

/// `status.store`: what weir keeps for itself in a rollout's status.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Kept {
    version: u64,
    generation: u64,
    last_event_seq: u64,
    #[serde(default)]
    pending_effects: Vec<Effect>,
    created_at: Timestamp,
    updated_at: Timestamp,
    #[serde(default)]
    history: VecDeque<StoredEvent>,
}

/// One rollout as this process knows it.
#[derive(Debug, Clone)]
struct Entry {
    stored: StoredRollout,
    history: VecDeque<StoredEvent>,
    /// The object's resourceVersion after this process's last read or write.
    resource_version: String,
    /// The store version last written to (or read from) the cluster.
    persisted: u64,
}

impl Entry {
    /// The entry a Rollout object's status holds, if weir ever wrote one.
    fn from_object(object: &DynamicObject) -> Option<Result<Entry, StoreError>> {
        let kept = object.data.get("status")?.get("store")?;
        Some(Entry::decode(object, kept))
    }

    fn decode(object: &DynamicObject, kept: &Value) -> Result<Entry, StoreError> {
        let key = key_of(object);
        let corrupt = |detail: String| StoreError::Corrupt {
            key: key.clone(),
            detail,
        };
        let kept: Kept = serde_json::from_value(kept.clone())
            .map_err(|error| corrupt(format!("status.store: {error}")))?;
        let mut status = object.data.get("status").cloned().unwrap_or(Value::Null);
        if let Some(map) = status.as_object_mut() {
            map.remove("store");
            map.remove("conditions");
        }
        let status: RolloutStatus =
            serde_json::from_value(status).map_err(|error| corrupt(format!("status: {error}")))?;
        let rollout = read_rollout(object).map_err(corrupt)?;
        Ok(Entry {
            stored: StoredRollout {
                key,
                rollout,
                status,
                version: kept.version,
                generation: kept.generation,
                pending_effects: kept.pending_effects,
                last_event_seq: kept.last_event_seq,
                created_at: kept.created_at,
                updated_at: kept.updated_at,
            },
            history: kept.history,
            resource_version: object.metadata.resource_version.clone().unwrap_or_default(),
            persisted: kept.version,
        })
    }

    /// The whole status subresource for this entry.
    fn status_body(&self) -> Value {
        let stored = &self.stored;
        let mut status = serde_json::to_value(&stored.status).unwrap_or_else(|_| json!({}));
        status["conditions"] = json!([promoted_condition(&stored.status)]);
        let kept = Kept {
            version: stored.version,
            generation: stored.generation,
            last_event_seq: stored.last_event_seq,
            pending_effects: stored.pending_effects.clone(),
            created_at: stored.created_at,
            updated_at: stored.updated_at,
            history: self.history.clone(),
        };
        status["store"] = serde_json::to_value(kept).unwrap_or(Value::Null);
        status
    }
}

/// The key of a rollout (or Canary) object: its namespace (`default` when it has none) and name.
pub fn key_of(object: &DynamicObject) -> RolloutKey {
    RolloutKey::new(
        object
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        object.metadata.name.clone().unwrap_or_default(),
    )
}

struct Inner {
    client: kube::Client,
    /// Empty: every namespace.
    namespaces: Vec<String>,
    entries: Mutex<BTreeMap<RolloutKey, Entry>>,
    fence: Option<Fence>,
}

/// The engine's [`Store`] on Kubernetes: see the module documentation.
#[derive(Clone)]
pub struct KubeStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for KubeStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeStore")
            .field("namespaces", &self.inner.namespaces)
            .finish_non_exhaustive()
    }
}

fn database(what: &str, key: &RolloutKey, error: impl std::fmt::Display) -> StoreError {
    StoreError::Database(format!("{what} {key}: {error}"))
}

fn api_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

impl KubeStore {
    /// A store for the rollouts of `namespaces` (empty: every namespace) that writes only
    /// while `fence` says so (e.g. while this replica holds the leader lease; `None`: always).
    pub fn new(client: kube::Client, namespaces: Vec<String>, fence: Option<Fence>) -> KubeStore {
        KubeStore {
            inner: Arc::new(Inner {
                client,
                namespaces,
                entries: Mutex::new(BTreeMap::new()),
                fence,
            }),
        }
    }

    fn entries(&self) -> MutexGuard<'_, BTreeMap<RolloutKey, Entry>> {
        // A panic while holding the lock cannot leave an entry half-written: entries are
        // replaced whole. So a poisoned lock's data is still good.
        self.inner
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn entry(&self, key: &RolloutKey) -> Option<Entry> {
        self.entries().get(key).cloned()
    }

    fn api(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.inner.client.clone(), namespace, &rollouts_resource())
    }

    fn check_fence(&self, key: &RolloutKey) -> Result<(), StoreError> {
        match &self.inner.fence {
            Some(fence) if !fence() => Err(StoreError::Database(format!(
                "not writing {key}: this replica no longer holds the leader lease"
            ))),
            _ => Ok(()),
        }
    }

    /// Writes `entry`'s status to its object and returns the entry as written. See the module
    /// documentation for what happens when the object changed meanwhile.
    async fn write(&self, mut entry: Entry) -> Result<Entry, StoreError> {
        let key = entry.stored.key.clone();
        self.check_fence(&key)?;
        let api = self.api(&key.namespace);
        let status = entry.status_body();
        for _ in 0..WRITE_ATTEMPTS {
            let body = json!({
                "apiVersion": format!("{GROUP}/{VERSION}"),
                "kind": "Rollout",
                "metadata": {
                    "name": key.name,
                    "namespace": key.namespace,
                    "resourceVersion": entry.resource_version,
                },
                "status": status,
            });
            let object: DynamicObject =
                serde_json::from_value(body).map_err(|e| database("encoding", &key, e))?;
            match api
                .replace_status(&key.name, &PostParams::default(), &object)
                .await
            {
                Ok(written) => {
                    entry.resource_version = written.metadata.resource_version.unwrap_or_default();
                    entry.persisted = entry.stored.version;
                    return Ok(entry);
                }
                Err(error) if api_code(&error) == Some(409) => {
                    let current = api
                        .get_opt(&key.name)
                        .await
                        .map_err(|e| database("re-reading", &key, e))?
                        .ok_or_else(|| StoreError::NotFound(key.clone()))?;
                    let found = current
                        .data
                        .get("status")
                        .and_then(|status| status.get("store"))
                        .and_then(|kept| kept.get("version"))
                        .and_then(Value::as_u64)
                        .unwrap_or(0);
                    if found != entry.persisted {
                        return Err(StoreError::Conflict {
                            key,
                            expected: entry.persisted,
                            actual: found,
                        });
                    }
                    entry.resource_version = current.metadata.resource_version.unwrap_or_default();
                }
                Err(error) if api_code(&error) == Some(404) => {
                    return Err(StoreError::NotFound(key));
                }
                Err(error) => return Err(database("writing the status of", &key, error)),
            }
        }
        Err(database(
            "writing the status of",
            &key,
            format!("the object kept changing ({WRITE_ATTEMPTS} attempts)"),
        ))
    }

    /// The object of a rollout this process does not know yet: what its status holds (another
    /// replica's or an earlier run's state), or a fresh entry.
    async fn adopt(&self, key: &RolloutKey) -> Result<Entry, StoreError> {
        let object = self
            .api(&key.namespace)
            .get_opt(&key.name)
            .await
            .map_err(|e| database("reading", key, e))?;
        let Some(object) = object else {
            return Err(StoreError::Database(format!(
                "rollout {key} is not in the cluster: on Kubernetes a rollout is an object, \
                 create it with `kubectl apply -f FILE`"
            )));
        };
        match Entry::from_object(&object) {
            Some(entry) => entry,
            None => Ok(Entry {
                stored: StoredRollout {
                    key: key.clone(),
                    rollout: read_rollout(&object).map_err(|detail| StoreError::Corrupt {
                        key: key.clone(),
                        detail,
                    })?,
                    status: RolloutStatus::default(),
                    version: 0,
                    generation: 0,
                    pending_effects: Vec::new(),
                    last_event_seq: 0,
                    created_at: Timestamp::now(),
                    updated_at: Timestamp::now(),
                },
                history: VecDeque::new(),
                resource_version: object.metadata.resource_version.unwrap_or_default(),
                persisted: 0,
            }),
        }
    }
}

fn check_version(key: &RolloutKey, expected: Option<u64>, actual: u64) -> Result<(), StoreError> {
    match expected {
        Some(expected) if expected != actual => Err(StoreError::Conflict {
            key: key.clone(),
            expected,
            actual,
        }),
        _ => Ok(()),
    }
}

impl Store for KubeStore {
    async fn apply(
        &self,
        rollout: &Rollout,
        expected_version: Option<u64>,
        now: Timestamp,
    ) -> Result<(StoredRollout, ApplyOutcome), StoreError> {
        let key = RolloutKey::of(rollout);
        let mut document = rollout.clone();
        document.status = None;
        let mut entry = match self.entry(&key) {
            Some(entry) => entry,
            None => self.adopt(&key).await?,
        };
        if entry.persisted == 0 {
            if let Some(expected) = expected_version
                && expected != 0
            {
                return Err(StoreError::NotFound(key));
            }
        } else {
            if expected_version == Some(0) {
                return Err(StoreError::AlreadyExists(key));
            }
            check_version(&key, expected_version, entry.stored.version)?;
            if entry.stored.rollout == document {
                self.entries().insert(key, entry.clone());
                return Ok((entry.stored, ApplyOutcome::Unchanged));
            }
        }
        let created = entry.persisted == 0;
        let stored = &mut entry.stored;
        if created {
            stored.created_at = now;
            stored.generation = 1;
        } else if stored.rollout.spec != document.spec {
            stored.generation += 1;
        }
        stored.rollout = document;
        stored.version += 1;
        stored.updated_at = now;
        let entry = self.write(entry).await?;
        self.entries().insert(key, entry.clone());
        let outcome = if created {
            ApplyOutcome::Created
        } else {
            ApplyOutcome::Updated
        };
        Ok((entry.stored, outcome))
    }

    async fn get(&self, key: &RolloutKey) -> Result<Option<StoredRollout>, StoreError> {
        Ok(self.entry(key).map(|entry| entry.stored))
    }

    async fn list(&self, query: &ListQuery) -> Result<Page<StoredRollout>, StoreError> {
        let after = match query.cursor.as_deref() {
            Some(cursor) => Some(
                cursor
                    .split_once('/')
                    .map(|(namespace, name)| RolloutKey::new(namespace, name))
                    .ok_or_else(|| StoreError::InvalidCursor(cursor.to_string()))?,
            ),
            None => None,
        };
        let limit = match query.limit {
            0 => DEFAULT_PAGE,
            limit => limit.min(MAX_PAGE),
        };
        let entries = self.entries();
        let mut matching = entries
            .values()
            .map(|entry| &entry.stored)
            .filter(|stored| after.as_ref().is_none_or(|after| &stored.key > after))
            .filter(|stored| {
                query
                    .namespace
                    .as_ref()
                    .is_none_or(|namespace| &stored.key.namespace == namespace)
            })
            .filter(|stored| query.phase.is_none_or(|phase| stored.status.phase == phase));
        let items: Vec<StoredRollout> = matching.by_ref().take(limit).cloned().collect();
        let next_cursor = match items.last() {
            Some(last) if matching.next().is_some() => {
                Some(format!("{}/{}", last.key.namespace, last.key.name))
            }
            _ => None,
        };
        Ok(Page { items, next_cursor })
    }

    async fn load_all(&self) -> Result<Vec<StoredRollout>, StoreError> {
        let mut objects = Vec::new();
        for api in apis(
            &self.inner.client,
            &self.inner.namespaces,
            &rollouts_resource(),
        ) {
            let listed = api
                .list(&kube::api::ListParams::default())
                .await
                .map_err(|error| StoreError::Database(format!("listing rollouts: {error}")))?;
            objects.extend(listed.items);
        }
        let mut loaded = Vec::new();
        let mut entries = self.entries();
        for object in &objects {
            match Entry::from_object(object) {
                Some(Ok(entry)) => {
                    loaded.push(entry.stored.clone());
                    entries.insert(entry.stored.key.clone(), entry);
                }
                // Never written by weir: the watch applies it as a new rollout.
                None => {}
                Some(Err(error)) => {
                    tracing::warn!(%error, "a rollout's stored state cannot be read; it starts afresh");
                }
            }
        }
        Ok(loaded)
    }

    async fn commit(
        &self,
        key: &RolloutKey,
        expected_version: u64,
        status: &RolloutStatus,
        events: &[weir_core::model::Event],
        pending: &[Effect],
        now: Timestamp,
    ) -> Result<StoredRollout, StoreError> {
        let mut entry = self
            .entry(key)
            .ok_or_else(|| StoreError::NotFound(key.clone()))?;
        check_version(key, Some(expected_version), entry.stored.version)?;
        let stored = &mut entry.stored;
        stored.status = status.clone();
        stored.pending_effects.extend(pending.iter().cloned());
        for event in events {
            stored.last_event_seq += 1;
            entry.history.push_back(StoredEvent {
                seq: stored.last_event_seq,
                event: event.clone(),
            });
        }
        while entry.history.len() > HISTORY_KEPT {
            entry.history.pop_front();
        }
        stored.version += 1;
        stored.updated_at = now;
        let entry = self.write(entry).await?;
        self.entries().insert(key.clone(), entry.clone());
        Ok(entry.stored)
    }

    /// Clears the delivered effects in this process's copy only: the rollout's next commit
    /// writes the shorter list. Until then a restarted operator delivers them again, which the
    /// store's contract allows (at least once, each with its delivery id) and which saves a
    /// status write per notification (docs/BENCHMARKS.md, operator scale).
    /// The items are steps of different rollouts, so their status writes go out together: one
    /// after the other, a thousand rollouts would wait for a thousand round trips.
    async fn commit_batch(&self, items: Vec<CommitItem>) -> Vec<Result<StoredRollout, StoreError>> {
        futures_util::future::join_all(items.iter().map(|item| {
            self.commit(
                &item.key,
                item.expected_version,
                &item.status,
                &item.events,
                &item.pending,
                item.now,
            )
        }))
        .await
    }

    async fn clear_pending(
        &self,
        key: &RolloutKey,
        delivery_ids: &[String],
    ) -> Result<(), StoreError> {
        if let Some(entry) = self.entries().get_mut(key) {
            entry.stored.pending_effects.retain(|effect| {
                effect
                    .delivery_id()
                    .is_none_or(|id| !delivery_ids.iter().any(|delivered| delivered == id))
            });
        }
        Ok(())
    }

    async fn delete(
        &self,
        key: &RolloutKey,
        expected_version: Option<u64>,
    ) -> Result<(), StoreError> {
        let Some(entry) = self.entry(key) else {
            return Err(StoreError::NotFound(key.clone()));
        };
        check_version(key, expected_version, entry.stored.version)?;
        self.check_fence(key)?;
        match self
            .api(&key.namespace)
            .delete(&key.name, &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(error) if api_code(&error) == Some(404) => {}
            Err(error) => return Err(database("deleting", key, error)),
        }
        self.entries().remove(key);
        Ok(())
    }

    async fn events(
        &self,
        key: &RolloutKey,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let limit = match limit {
            0 => DEFAULT_PAGE,
            limit => limit.min(MAX_PAGE),
        };
        let entry = self
            .entry(key)
            .ok_or_else(|| StoreError::NotFound(key.clone()))?;
        Ok(entry
            .history
            .iter()
            .filter(|event| event.seq > after_seq)
            .take(limit)
            .cloned()
            .collect())
    }
}
