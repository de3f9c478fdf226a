//! The PostgreSQL store: see [`PostgresStore`] for the schema, the write path, fencing and the
//! notifications it sends.

use std::borrow::Cow;
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use jiff::Timestamp;
use serde::de::DeserializeOwned;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions, PgRow};
use sqlx::{AssertSqlSafe, Row, SqlSafeStr};
use weir_core::machine::Effect;
use weir_core::model::{Event, Rollout, RolloutStatus, Target};

use crate::sqlite::{
    check_version, decode_cursor, encode, encode_cursor, enum_name, page_limit, to_sql,
};
use crate::{
    ApplyOutcome, CommitItem, ListQuery, Page, RolloutKey, Store, StoreError, StoredEvent,
    StoredRollout,
};

mod cluster;
mod flag_records;
mod flags;
mod tokens;

/// The schema (one migration holds every table; see the file for the reasoning).
const MIGRATION_0001: &str = include_str!("../migrations/postgres/0001_schema.sql");
/// Migration 2: flags' history, evaluation counts and triggers.
const MIGRATION_0002: &str = include_str!("../migrations/postgres/0002_flag_records.sql");

/// The columns `decode_rollout` reads, in any `SELECT` of a whole rollout.
const ROLLOUT_COLUMNS: &str = "namespace, name, document, status, version, generation, \
     pending_effects, last_event_seq, created_at, updated_at";

/// Connections per store: the engine's writer, API readers and the cluster loop share them.
const MAX_CONNECTIONS: u32 = 16;

/// The channel every notification goes to (docs/SCALE-OUT.md; parsed by `cluster.rs`).
pub(crate) const CHANNEL: &str = "weir";

/// The label of a local rollout that binds it to one host (its lease's `host`).
const HOST_LABEL: &str = "weir.dev/host";

/// How often an apply retries when a concurrent apply created the same rollout between its read
/// and its insert (the second attempt finds the row; more are for pathological churn).
const CREATE_ATTEMPTS: usize = 3;

/// Migrations embedded in the binary, built without sqlx's proc macros (as `sqlite.rs` does).
fn migrator() -> Migrator {
    Migrator::with_migrations(vec![
        Migration::new(
            1,
            Cow::Borrowed("schema"),
            MigrationType::Simple,
            MIGRATION_0001.into_sql_str(),
            false,
        ),
        Migration::new(
            2,
            Cow::Borrowed("flag records"),
            MigrationType::Simple,
            MIGRATION_0002.into_sql_str(),
            false,
        ),
    ])
}

// === impl PostgresStore ===

/// The store several weir instances share: one PostgreSQL database, schema migrations embedded in
/// the binary, and the [`crate::Cluster`] side (leases, fencing, forwarded requests,
/// notifications) for scale-out (docs/SCALE-OUT.md).
///
/// Cloning is cheap (the clones share the pool and the instance's identity).
///
/// # Schema
///
/// `migrations/postgres/0001_schema.sql`, applied by [`PostgresStore::open`] and recorded in
/// sqlx's `_sqlx_migrations` table (sqlx takes an advisory lock, so instances starting at once
/// migrate once). `rollouts`, `events`, `flags`, `tokens` and `server_keys` have the shapes of
/// SQLite's tables (see [`crate::SqliteStore`]): timestamps of weir's data are RFC 3339 text, so
/// they read back equal; JSON is text; integers are BIGINT. Keys collate `"C"`, so listings and
/// cursors order keys bytewise whatever the database's default collation. `leases` (one row per
/// rollout, created and deleted with it), `instances` and `requests` serve the cluster.
///
/// # Writes
///
/// Every write is one transaction (READ COMMITTED). A write to an existing rollout first locks
/// its row (`SELECT ... FOR UPDATE`), so the version check and the write see the same state and
/// event numbers taken from `last_event_seq` under that lock are gap-free. Two applies creating
/// the same rollout at once meet in the primary key: the loser starts over and finds the row.
/// `commit_batch` is one transaction with a `SAVEPOINT` per item (a failing item is rolled back
/// alone) and one `COMMIT`, so a batch costs one WAL flush.
///
/// The semantics are [`crate::SqliteStore`]'s (NotFound, Conflict, Unchanged applies that write
/// nothing, only effects with a delivery id are stored as pending, Corrupt rows that can still
/// be deleted, limits and cursors), plus:
///
/// - **Leases.** Creating a rollout inserts its lease row: bound to a host (the `weir.dev/host`
///   label, else this store's host label) when the target is `local`. Unowned (epoch 0) unless
///   this store has joined a cluster ([`crate::Cluster::heartbeat`]); then it is leased to this
///   instance at once (epoch 1, for the lease time of the last heartbeat).
/// - **Fencing.** Once joined, every write to an existing rollout (an apply that changes it,
///   commit, each batch item, clear_pending, delete) reads the lease row `FOR SHARE` in its
///   transaction and fails with [`StoreError::Fenced`], changing nothing, unless this instance
///   owns it at the epoch it claimed. Not joined: no check (a single instance).
/// - **Requests.** A commit item with `request: Some(id)` marks request `id` executed in the same
///   transaction, and fails with [`StoreError::AlreadyExecuted`] (changing nothing) when it was
///   executed before.
/// - **Notifications.** Every transaction that writes sends, on COMMIT, a `NOTIFY weir` with a
///   JSON payload: `{"t":"rollout","ns","name","version","seq","by"}` when a rollout was written
///   (version 0: deleted), also `{"t":"freed"}` when one was created (claimable work),
///   `{"t":"flag","ns","key","version","by"}` when a flag was written (version 0: deleted), and
///   `{"t":"tokens","by"}` when a token was created or revoked. `by` is this instance's id.
///
/// # Durability
///
/// An acknowledged write was committed by PostgreSQL: with the server's default `fsync = on`
/// and `synchronous_commit = on`, it is in the flushed WAL and survives a crash of the server.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pub(crate) pool: sqlx::PgPool,
    pub(crate) node: std::sync::Arc<Node>,
}

/// This instance, as the cluster knows it.
#[derive(Debug)]
pub(crate) struct Node {
    /// Unique per process start: "{host_label}-{pid}-{8 hex chars random}".
    pub(crate) id: String,
    /// The database in messages, without credentials: `PostgreSQL database "weir" at
    /// HOST:PORT` ([`database_label`]).
    pub(crate) database: String,
    pub(crate) host_label: String,
    /// Set by Cluster::heartbeat (B); from then on writes to existing rollouts are fenced (A).
    pub(crate) joined: std::sync::atomic::AtomicBool,
    /// The lease time given to the last heartbeat, in milliseconds (for leases of rollouts this
    /// instance creates).
    pub(crate) lease_time_ms: std::sync::atomic::AtomicU64,
    /// Leases this instance holds: key -> epoch. Filled by claim/renew (B) and by apply when it
    /// creates a rollout while joined (A); read by the fencing check (A).
    pub(crate) held: std::sync::Mutex<std::collections::HashMap<crate::RolloutKey, u64>>,
}

impl Node {
    fn new(host_label: &str, database: String) -> Result<Node, StoreError> {
        let mut random = [0u8; 4];
        getrandom::fill(&mut random).map_err(|error| {
            StoreError::Database(format!("drawing a random instance id: {error}"))
        })?;
        let random: String = random.iter().map(|byte| format!("{byte:02x}")).collect();
        Ok(Node {
            id: format!("{host_label}-{}-{random}", std::process::id()),
            database,
            host_label: host_label.to_string(),
            joined: AtomicBool::new(false),
            lease_time_ms: AtomicU64::new(0),
            held: Mutex::new(HashMap::new()),
        })
    }

    /// `error`, met while doing `what`, as a [`StoreError`]: [`StoreError::Unavailable`]
    /// naming the database when it cannot be reached ([`unreachable`]), else
    /// [`StoreError::Database`].
    pub(crate) fn store_error(
        &self,
        what: impl std::fmt::Display,
        error: sqlx::Error,
    ) -> StoreError {
        if unreachable(&error) {
            StoreError::Unavailable(self.unreachable_message(what, &error))
        } else {
            StoreError::Database(format!("{what}: {error}"))
        }
    }

    /// What a caller is told when the database cannot be reached.
    pub(crate) fn unreachable_message(
        &self,
        what: impl std::fmt::Display,
        error: &sqlx::Error,
    ) -> String {
        format!("{} cannot be reached ({what}: {error})", self.database)
    }

    /// The epoch this instance holds `key`'s lease at, if it does.
    pub(crate) fn held_epoch(&self, key: &RolloutKey) -> Option<u64> {
        // A panic while holding the lock cannot leave the map half-written (every use is one
        // insert, remove or read), so a poisoned lock's data is still right.
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .copied()
    }
}

/// Settings of a [`PostgresStore`].
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// How long an operation waits for a connection (an idle one, or a new one while the
    /// database does not answer) before it fails with [`StoreError::Unavailable`]. Short, so
    /// that a database outage is answered in seconds rather than hanging every request
    /// (`weir serve --db-timeout`).
    pub acquire_timeout: Duration,
}

/// [`PostgresOptions::acquire_timeout`] by default.
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            acquire_timeout: DEFAULT_ACQUIRE_TIMEOUT,
        }
    }
}

/// The database of `options` in words, without credentials: `PostgreSQL database "weir" at
/// 10.0.0.5:5432` (or `at /run/postgresql`, a socket directory).
fn database_label(options: &PgConnectOptions) -> String {
    let database = options.get_database().map_or_else(
        || "(the user's default)".to_string(),
        |name| format!("{name:?}"),
    );
    if let Some(socket) = options.get_socket() {
        return format!("PostgreSQL database {database} at {}", socket.display());
    }
    let host = options.get_host();
    if host.starts_with('/') {
        format!("PostgreSQL database {database} at {host}")
    } else {
        format!(
            "PostgreSQL database {database} at {host}:{}",
            options.get_port()
        )
    }
}

impl PostgresStore {
    /// `url`: postgres://... (sqlx's syntax, incl. `?host=/path/to/socket`). `host_label`:
    /// this machine's label (weir serve passes --host-label, default the hostname).
    ///
    /// Connects and brings the schema up to date. [`PostgresOptions::default`]'s settings.
    pub async fn open(url: &str, host_label: &str) -> Result<PostgresStore, StoreError> {
        PostgresStore::open_with(url, host_label, &PostgresOptions::default()).await
    }

    /// [`PostgresStore::open`] with `settings`.
    pub async fn open_with(
        url: &str,
        host_label: &str,
        settings: &PostgresOptions,
    ) -> Result<PostgresStore, StoreError> {
        if settings.acquire_timeout.is_zero() {
            return Err(StoreError::Database(
                "the acquire timeout must be above zero".into(),
            ));
        }
        // The URL may carry a password: errors name the database, never the URL.
        let options = PgConnectOptions::from_str(url)
            .map_err(|error| StoreError::Database(format!("invalid PostgreSQL URL: {error}")))?;
        let label = database_label(&options);
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(settings.acquire_timeout)
            .connect_with(options)
            .await
            .map_err(|error| StoreError::Database(format!("connecting to {label}: {error}")))?;
        migrator().run(&pool).await.map_err(|error| {
            StoreError::Database(format!("migrating the schema of {label}: {error}"))
        })?;
        Ok(PostgresStore {
            pool,
            node: Arc::new(Node::new(host_label, label)?),
        })
    }

    /// The database in words, without credentials (`PostgreSQL database "weir" at
    /// 10.0.0.5:5432`).
    pub fn database(&self) -> &str {
        &self.node.database
    }

    /// Whether the database answers now: `SELECT 1` on a connection of the pool (within the
    /// acquire timeout). `Err` is [`StoreError::Unavailable`] when it cannot be reached.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(|error| self.node.store_error("checking the connection", error))
    }

    /// Closes every connection, waiting for operations in flight. Later operations fail with
    /// [`StoreError::Database`]. Not needed for durability: every acknowledged write is committed.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    async fn begin(
        &self,
        what: &str,
        key: &RolloutKey,
    ) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, StoreError> {
        self.pool
            .begin()
            .await
            .map_err(database(&self.node, what, key))
    }

    /// The fencing check (see the type's documentation), inside the write's transaction.
    async fn fence(&self, tx: &mut PgConnection, key: &RolloutKey) -> Result<(), StoreError> {
        if !self.node.joined.load(Ordering::SeqCst) {
            return Ok(());
        }
        let held = self.node.held_epoch(key);
        let row = sqlx::query(
            "SELECT owner, epoch FROM leases WHERE namespace = $1 AND name = $2 FOR SHARE",
        )
        .bind(&key.namespace)
        .bind(&key.name)
        .fetch_optional(&mut *tx)
        .await
        .map_err(database(&self.node, "checking the lease of", key))?;
        let current = match &row {
            Some(row) => {
                let owner: Option<String> = row.try_get("owner").map_err(database(
                    &self.node,
                    "checking the lease of",
                    key,
                ))?;
                let epoch: i64 = row.try_get("epoch").map_err(database(
                    &self.node,
                    "checking the lease of",
                    key,
                ))?;
                Some((owner, epoch))
            }
            None => None,
        };
        match (held, current) {
            (Some(held), Some((Some(owner), epoch)))
                if owner == self.node.id && u64::try_from(epoch).ok() == Some(held) =>
            {
                Ok(())
            }
            _ => Err(StoreError::Fenced {
                key: key.clone(),
                epoch: held.unwrap_or(0),
            }),
        }
    }

    /// Queues a rollout notification in the transaction (sent on COMMIT).
    async fn notify_rollout(
        &self,
        tx: &mut PgConnection,
        key: &RolloutKey,
        version: u64,
        seq: u64,
    ) -> Result<(), StoreError> {
        let payload = serde_json::json!({
            "t": "rollout",
            "ns": key.namespace,
            "name": key.name,
            "version": version,
            "seq": seq,
            "by": self.node.id,
        });
        notify(tx, &payload)
            .await
            .map_err(database(&self.node, "notifying about", key))
    }

    /// Creates a rollout and its lease row; `None` when a concurrent apply created it first.
    async fn create(
        &self,
        tx: &mut PgConnection,
        key: &RolloutKey,
        document: &Rollout,
        document_json: &str,
        now: Timestamp,
    ) -> Result<Option<StoredRollout>, StoreError> {
        let stored = StoredRollout {
            key: key.clone(),
            rollout: document.clone(),
            status: RolloutStatus::default(),
            version: 1,
            generation: 1,
            pending_effects: Vec::new(),
            last_event_seq: 0,
            created_at: now,
            updated_at: now,
        };
        let inserted = sqlx::query(
            "INSERT INTO rollouts (namespace, name, document, status, phase, canary_revision, \
             version, generation, pending_effects, last_event_seq, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, 1, 1, '[]', 0, $7, $8) \
             ON CONFLICT (namespace, name) DO NOTHING",
        )
        .bind(&key.namespace)
        .bind(&key.name)
        .bind(document_json)
        .bind(encode(&stored.status, "status", key)?)
        .bind(stored.status.phase.as_str())
        .bind(stored.status.canary_revision.as_deref())
        .bind(now.to_string())
        .bind(now.to_string())
        .execute(&mut *tx)
        .await
        .map_err(database(&self.node, "creating", key))?
        .rows_affected();
        if inserted == 0 {
            return Ok(None);
        }
        let host = match &document.spec.target {
            Target::Local(_) => Some(
                document
                    .metadata
                    .labels
                    .get(HOST_LABEL)
                    .cloned()
                    .unwrap_or_else(|| self.node.host_label.clone()),
            ),
            _ => None,
        };
        if self.node.joined.load(Ordering::SeqCst) {
            let lease_ms = self.node.lease_time_ms.load(Ordering::SeqCst);
            sqlx::query(
                "INSERT INTO leases (namespace, name, owner, epoch, host, acquired_at, \
                 renewed_at, expires_at) \
                 SELECT $1, $2, $3, 1, $4, now.t, now.t, \
                 now.t + make_interval(secs => $5::double precision / 1000.0) \
                 FROM (SELECT clock_timestamp() AS t) AS now",
            )
            .bind(&key.namespace)
            .bind(&key.name)
            .bind(&self.node.id)
            .bind(host)
            .bind(to_sql(lease_ms))
            .execute(&mut *tx)
            .await
            .map_err(database(&self.node, "leasing", key))?;
        } else {
            sqlx::query(
                "INSERT INTO leases (namespace, name, owner, epoch, host) \
                 VALUES ($1, $2, NULL, 0, $3)",
            )
            .bind(&key.namespace)
            .bind(&key.name)
            .bind(host)
            .execute(&mut *tx)
            .await
            .map_err(database(&self.node, "leasing", key))?;
        }
        self.notify_rollout(tx, key, 1, 0).await?;
        notify(tx, &serde_json::json!({"t": "freed"}))
            .await
            .map_err(database(&self.node, "notifying about", key))?;
        Ok(Some(stored))
    }

    /// One attempt at an apply inside its transaction; `None` when a concurrent apply created
    /// the rollout between the read and the insert.
    async fn apply_in(
        &self,
        tx: &mut PgConnection,
        key: &RolloutKey,
        document: &Rollout,
        document_json: &str,
        expected_version: Option<u64>,
        now: Timestamp,
    ) -> Result<Option<(StoredRollout, ApplyOutcome)>, StoreError> {
        let Some(current) = fetch_rollout(&self.node, &mut *tx, key, true).await? else {
            if let Some(expected) = expected_version
                && expected != 0
            {
                return Err(StoreError::NotFound(key.clone()));
            }
            let created = self.create(tx, key, document, document_json, now).await?;
            return Ok(created.map(|stored| (stored, ApplyOutcome::Created)));
        };
        if expected_version == Some(0) {
            return Err(StoreError::AlreadyExists(key.clone()));
        }
        check_version(key, expected_version, current.version)?;
        if current.rollout == *document {
            // Nothing to write (and so nothing to fence).
            return Ok(Some((current, ApplyOutcome::Unchanged)));
        }
        self.fence(&mut *tx, key).await?;
        let generation = if current.rollout.spec == document.spec {
            current.generation
        } else {
            current.generation + 1
        };
        let version = current.version + 1;
        sqlx::query(
            "UPDATE rollouts SET document = $1, version = $2, generation = $3, \
             updated_at = $4 WHERE namespace = $5 AND name = $6",
        )
        .bind(document_json)
        .bind(to_sql(version))
        .bind(to_sql(generation))
        .bind(now.to_string())
        .bind(&key.namespace)
        .bind(&key.name)
        .execute(&mut *tx)
        .await
        .map_err(database(&self.node, "updating", key))?;
        self.notify_rollout(tx, key, version, current.last_event_seq)
            .await?;
        let stored = StoredRollout {
            rollout: document.clone(),
            version,
            generation,
            updated_at: now,
            ..current
        };
        Ok(Some((stored, ApplyOutcome::Updated)))
    }

    /// clear_pending inside its transaction; whether it wrote anything.
    async fn clear_pending_in(
        &self,
        tx: &mut PgConnection,
        key: &RolloutKey,
        delivery_ids: &[String],
    ) -> Result<bool, StoreError> {
        let row = sqlx::query(
            "SELECT pending_effects, version, last_event_seq FROM rollouts \
             WHERE namespace = $1 AND name = $2 FOR UPDATE",
        )
        .bind(&key.namespace)
        .bind(&key.name)
        .fetch_optional(&mut *tx)
        .await
        .map_err(database(&self.node, "reading pending effects of", key))?
        .ok_or_else(|| StoreError::NotFound(key.clone()))?;
        let mut pending: Vec<Effect> = decode_column(&row, "pending_effects", key)?;
        let before = pending.len();
        pending.retain(|effect| {
            effect
                .delivery_id()
                .is_none_or(|id| !delivery_ids.iter().any(|delivered| delivered == id))
        });
        if pending.len() == before {
            return Ok(false);
        }
        self.fence(&mut *tx, key).await?;
        sqlx::query("UPDATE rollouts SET pending_effects = $1 WHERE namespace = $2 AND name = $3")
            .bind(encode(&pending, "pending effects", key)?)
            .bind(&key.namespace)
            .bind(&key.name)
            .execute(&mut *tx)
            .await
            .map_err(database(&self.node, "clearing pending effects of", key))?;
        let version = decode_u64(&row, "version", key)?;
        let seq = decode_u64(&row, "last_event_seq", key)?;
        self.notify_rollout(tx, key, version, seq).await?;
        Ok(true)
    }

    /// delete inside its transaction.
    async fn delete_in(
        &self,
        tx: &mut PgConnection,
        key: &RolloutKey,
        expected_version: Option<u64>,
    ) -> Result<(), StoreError> {
        let row = sqlx::query(
            "SELECT version FROM rollouts WHERE namespace = $1 AND name = $2 FOR UPDATE",
        )
        .bind(&key.namespace)
        .bind(&key.name)
        .fetch_optional(&mut *tx)
        .await
        .map_err(database(&self.node, "deleting", key))?
        .ok_or_else(|| StoreError::NotFound(key.clone()))?;
        let version = decode_u64(&row, "version", key)?;
        self.fence(&mut *tx, key).await?;
        check_version(key, expected_version, version)?;
        // The events and the lease go with the row (ON DELETE CASCADE).
        sqlx::query("DELETE FROM rollouts WHERE namespace = $1 AND name = $2")
            .bind(&key.namespace)
            .bind(&key.name)
            .execute(&mut *tx)
            .await
            .map_err(database(&self.node, "deleting", key))?;
        self.notify_rollout(tx, key, 0, 0).await
    }

    /// One step's writes inside an open transaction: lock the row, check the lease, the version
    /// and the request, append the events, update the status and the pending effects. The
    /// caller queues the notification.
    async fn commit_in(
        &self,
        tx: &mut PgConnection,
        item: &CommitItem,
    ) -> Result<StoredRollout, StoreError> {
        let key = &item.key;
        let status_json = encode(&item.status, "status", key)?;
        let current = fetch_rollout(&self.node, &mut *tx, key, true)
            .await?
            .ok_or_else(|| StoreError::NotFound(key.clone()))?;
        self.fence(&mut *tx, key).await?;
        check_version(key, Some(item.expected_version), current.version)?;
        if let Some(id) = item.request {
            let marked = sqlx::query(
                "UPDATE requests SET executed_at = clock_timestamp() \
                 WHERE id = $1 AND executed_at IS NULL",
            )
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(database(
                &self.node,
                "marking the request executed for",
                key,
            ))?
            .rows_affected();
            if marked == 0 {
                return Err(StoreError::AlreadyExecuted(id));
            }
        }

        let mut pending_effects = current.pending_effects;
        pending_effects.extend(
            item.pending
                .iter()
                .filter(|effect| effect.delivery_id().is_some())
                .cloned(),
        );
        let mut seq = current.last_event_seq;
        if !item.events.is_empty() {
            // One statement for all events (a step may carry hundreds): parallel arrays, UNNESTed.
            let mut seqs = Vec::with_capacity(item.events.len());
            let mut ats = Vec::with_capacity(item.events.len());
            let mut runs = Vec::with_capacity(item.events.len());
            let mut reasons = Vec::with_capacity(item.events.len());
            let mut bodies = Vec::with_capacity(item.events.len());
            for event in &item.events {
                seq += 1;
                seqs.push(to_sql(seq));
                ats.push(event.at.to_string());
                runs.push(to_sql(event.run));
                reasons.push(enum_name(&event.reason));
                bodies.push(encode(event, "event", key)?);
            }
            sqlx::query(
                "INSERT INTO events (namespace, name, seq, at, run, reason, event) \
                 SELECT $1, $2, * FROM UNNEST($3::bigint[], $4::text[], $5::bigint[], \
                 $6::text[], $7::text[])",
            )
            .bind(&key.namespace)
            .bind(&key.name)
            .bind(seqs)
            .bind(ats)
            .bind(runs)
            .bind(reasons)
            .bind(bodies)
            .execute(&mut *tx)
            .await
            .map_err(database(&self.node, "committing events of", key))?;
        }
        let version = current.version + 1;
        sqlx::query(
            "UPDATE rollouts SET status = $1, phase = $2, canary_revision = $3, version = $4, \
             pending_effects = $5, last_event_seq = $6, updated_at = $7 \
             WHERE namespace = $8 AND name = $9",
        )
        .bind(status_json)
        .bind(item.status.phase.as_str())
        .bind(item.status.canary_revision.as_deref())
        .bind(to_sql(version))
        .bind(encode(&pending_effects, "pending effects", key)?)
        .bind(to_sql(seq))
        .bind(item.now.to_string())
        .bind(&key.namespace)
        .bind(&key.name)
        .execute(&mut *tx)
        .await
        .map_err(database(&self.node, "committing status of", key))?;
        Ok(StoredRollout {
            status: item.status.clone(),
            version,
            pending_effects,
            last_event_seq: seq,
            updated_at: item.now,
            ..current
        })
    }
}

/// Queues `payload` on the notification channel in the current transaction.
pub(crate) async fn notify(
    connection: &mut PgConnection,
    payload: &serde_json::Value,
) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(CHANNEL)
        .bind(payload.to_string())
        .execute(&mut *connection)
        .await
        .map(|_| ())
}

/// Maps a database error to [`StoreError::Unavailable`] when the database cannot be reached
/// ([`unreachable`]), else to [`StoreError::Database`], with what was being done to which
/// rollout.
pub(crate) fn database<'a>(
    node: &'a Node,
    what: &'a str,
    key: &'a RolloutKey,
) -> impl FnOnce(sqlx::Error) -> StoreError + 'a {
    move |error| node.store_error(format_args!("{what} {key}"), error)
}

/// Whether `error` means that the database cannot be reached now (not that it refused or failed
/// a statement): no connection within the acquire timeout, a connection that failed or was
/// cut, or a server shutting down, starting up or out of connections. A request meeting one
/// may succeed once the database is back.
pub(crate) fn unreachable(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::Tls(_) => true,
        sqlx::Error::Database(error) => error.code().is_some_and(|code| {
            // Class 08: connection exception; 57P01-57P03: admin shutdown, crash shutdown,
            // cannot connect now (starting up, recovering); 53300: too many connections.
            code.starts_with("08") || matches!(&*code, "57P01" | "57P02" | "57P03" | "53300")
        }),
        _ => false,
    }
}

/// Ends a write's transaction: commits when `result` says something was written
/// (`Ok((_, true))`), rolls back otherwise. Rolled back explicitly, not on drop: a dropped
/// transaction's ROLLBACK waits for the connection's next use, and until then its row locks
/// would stall every other writer of the rollout.
async fn finish<T>(
    node: &Node,
    tx: sqlx::Transaction<'static, sqlx::Postgres>,
    result: Result<(T, bool), StoreError>,
    what: &str,
    key: &RolloutKey,
) -> Result<T, StoreError> {
    match result {
        Ok((value, true)) => {
            tx.commit().await.map_err(database(node, what, key))?;
            Ok(value)
        }
        Ok((value, false)) => {
            tx.rollback().await.map_err(database(node, what, key))?;
            Ok(value)
        }
        Err(error) => {
            // The error says what went wrong; a failed rollback only closes the connection.
            let _ = tx.rollback().await;
            Err(error)
        }
    }
}

impl Store for PostgresStore {
    async fn apply(
        &self,
        rollout: &Rollout,
        expected_version: Option<u64>,
        now: Timestamp,
    ) -> Result<(StoredRollout, ApplyOutcome), StoreError> {
        let key = RolloutKey::of(rollout);
        let mut document = rollout.clone();
        document.status = None;
        let document_json = encode(&document, "document", &key)?;

        for _ in 0..CREATE_ATTEMPTS {
            let mut tx = self.begin("applying", &key).await?;
            let result = self
                .apply_in(
                    &mut tx,
                    &key,
                    &document,
                    &document_json,
                    expected_version,
                    now,
                )
                .await;
            let written = matches!(
                result,
                Ok(Some((_, ApplyOutcome::Created | ApplyOutcome::Updated)))
            );
            let Some((stored, outcome)) = finish(
                &self.node,
                tx,
                result.map(|outcome| (outcome, written)),
                "applying",
                &key,
            )
            .await?
            else {
                // Created concurrently since the read: start over, and find it.
                continue;
            };
            if outcome == ApplyOutcome::Created && self.node.joined.load(Ordering::SeqCst) {
                self.node
                    .held
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(key.clone(), 1);
            }
            return Ok((stored, outcome));
        }
        Err(StoreError::Database(format!(
            "applying {key}: it was created and deleted concurrently {CREATE_ATTEMPTS} times"
        )))
    }

    async fn get(&self, key: &RolloutKey) -> Result<Option<StoredRollout>, StoreError> {
        let mut connection = self
            .pool
            .acquire()
            .await
            .map_err(database(&self.node, "reading", key))?;
        fetch_rollout(&self.node, &mut connection, key, false).await
    }

    async fn list(&self, query: &ListQuery) -> Result<Page<StoredRollout>, StoreError> {
        let limit = page_limit(query.limit);
        let after = query.cursor.as_deref().map(decode_cursor).transpose()?;
        let mut sql = format!("SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE TRUE");
        let mut parameter = 0;
        let mut next = || {
            parameter += 1;
            format!("${parameter}")
        };
        if query.namespace.is_some() {
            sql.push_str(&format!(" AND namespace = {}", next()));
        }
        if query.phase.is_some() {
            sql.push_str(&format!(" AND phase = {}", next()));
        }
        if after.is_some() {
            sql.push_str(&format!(
                " AND (namespace, name) > ({}, {})",
                next(),
                next()
            ));
        }
        sql.push_str(&format!(" ORDER BY namespace, name LIMIT {}", next()));
        // The statement is built from the constants above only; every value is bound.
        let mut statement = sqlx::query(AssertSqlSafe(sql));
        if let Some(namespace) = &query.namespace {
            statement = statement.bind(namespace.clone());
        }
        if let Some(phase) = query.phase {
            statement = statement.bind(phase.as_str());
        }
        if let Some(after) = &after {
            statement = statement
                .bind(after.namespace.clone())
                .bind(after.name.clone());
        }
        // One more than asked for tells whether there is a next page.
        statement = statement.bind(to_sql(limit as u64 + 1));
        let rows = statement
            .fetch_all(&self.pool)
            .await
            .map_err(|error| self.node.store_error("listing rollouts", error))?;
        let more = rows.len() > limit;
        let items = rows
            .iter()
            .take(limit)
            .map(decode_rollout)
            .collect::<Result<Vec<_>, _>>()?;
        let next_cursor = match items.last() {
            Some(last) if more => Some(encode_cursor(&last.key)),
            _ => None,
        };
        Ok(Page { items, next_cursor })
    }

    async fn load_all(&self) -> Result<Vec<StoredRollout>, StoreError> {
        let sql = AssertSqlSafe(format!(
            "SELECT {ROLLOUT_COLUMNS} FROM rollouts ORDER BY namespace, name"
        ));
        let rows = sqlx::query(sql)
            .fetch_all(&self.pool)
            .await
            .map_err(|error| self.node.store_error("loading rollouts", error))?;
        rows.iter().map(decode_rollout).collect()
    }

    async fn commit(
        &self,
        key: &RolloutKey,
        expected_version: u64,
        status: &RolloutStatus,
        events: &[Event],
        pending: &[Effect],
        now: Timestamp,
    ) -> Result<StoredRollout, StoreError> {
        let item = CommitItem {
            key: key.clone(),
            expected_version,
            status: status.clone(),
            events: events.to_vec(),
            pending: pending.to_vec(),
            now,
            request: None,
        };
        let mut results = self.commit_batch(vec![item]).await;
        results
            .pop()
            .unwrap_or_else(|| Err(StoreError::Database(format!("committing {key}: no result"))))
    }

    async fn commit_batch(&self, items: Vec<CommitItem>) -> Vec<Result<StoredRollout, StoreError>> {
        let Some(first) = items.first() else {
            return Vec::new();
        };
        let batch_key = first.key.clone();
        // Every item fails as the batch did: unavailable (the database cannot be reached) or
        // failed.
        let all_fail = |error: StoreError| {
            items
                .iter()
                .map(|_| {
                    Err(match &error {
                        StoreError::Unavailable(message) => {
                            StoreError::Unavailable(message.clone())
                        }
                        other => StoreError::Database(other.to_string()),
                    })
                })
                .collect::<Vec<_>>()
        };
        let mut tx = match self.begin("committing a batch with", &batch_key).await {
            Ok(tx) => tx,
            Err(error) => return all_fail(error),
        };
        if let [item] = items.as_slice() {
            // One item: the transaction itself is its unit (no savepoint round trips).
            let result = match self.commit_in(&mut tx, item).await {
                Ok(stored) => self
                    .notify_rollout(&mut tx, &item.key, stored.version, stored.last_event_seq)
                    .await
                    .map(|()| (stored, true)),
                Err(error) => Err(error),
            };
            return vec![finish(&self.node, tx, result, "committing", &item.key).await];
        }
        // Items run in key order (stable: two items of one rollout keep theirs), so the lease
        // rows' FOR SHARE locks of the fencing check are taken in the order `renew` takes its
        // FOR UPDATE locks. In arrival order the two deadlocked under load (the scale_pg
        // benchmark: PostgreSQL aborted a renewal, the instance lost every lease it held).
        let mut order: Vec<usize> = (0..items.len()).collect();
        order.sort_by(|a, b| items[*a].key.cmp(&items[*b].key));
        let mut results: Vec<Option<Result<StoredRollout, StoreError>>> =
            (0..items.len()).map(|_| None).collect();
        for index in order {
            let item = &items[index];
            // A savepoint per item: a conflicting or failing item is undone alone.
            let outcome = match sqlx::Connection::begin(&mut *tx).await {
                Ok(mut savepoint) => match self.commit_in(&mut savepoint, item).await {
                    Ok(stored) => savepoint.commit().await.map(|()| stored).map_err(database(
                        &self.node,
                        "committing",
                        &item.key,
                    )),
                    Err(error) => {
                        // Should this fail, the batch's COMMIT fails too and says so.
                        let _ = savepoint.rollback().await;
                        Err(error)
                    }
                },
                Err(error) => Err(database(&self.node, "committing", &item.key)(error)),
            };
            // Queued outside the item's savepoint, so only committed items announce themselves.
            let outcome = match outcome {
                Ok(stored) => self
                    .notify_rollout(&mut tx, &item.key, stored.version, stored.last_event_seq)
                    .await
                    .map(|()| stored),
                Err(error) => Err(error),
            };
            results[index] = Some(outcome);
        }
        if let Err(error) = tx.commit().await {
            return all_fail(
                self.node
                    .store_error(format_args!("committing a batch with {batch_key}"), error),
            );
        }
        results
            .into_iter()
            .map(|outcome| {
                // Every index was visited once above.
                outcome.unwrap_or_else(|| {
                    Err(StoreError::Database(
                        "a batch item was not committed".to_owned(),
                    ))
                })
            })
            .collect()
    }

    async fn clear_pending(
        &self,
        key: &RolloutKey,
        delivery_ids: &[String],
    ) -> Result<(), StoreError> {
        let mut tx = self.begin("clearing pending effects of", key).await?;
        let result = self.clear_pending_in(&mut tx, key, delivery_ids).await;
        finish(
            &self.node,
            tx,
            result.map(|written| ((), written)),
            "clearing pending effects of",
            key,
        )
        .await
    }

    async fn delete(
        &self,
        key: &RolloutKey,
        expected_version: Option<u64>,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin("deleting", key).await?;
        let result = self.delete_in(&mut tx, key, expected_version).await;
        finish(&self.node, tx, result.map(|()| ((), true)), "deleting", key).await?;
        self.node
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
        Ok(())
    }

    async fn events(
        &self,
        key: &RolloutKey,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let limit = page_limit(limit);
        // Sequence numbers are stored as i64; nothing can come after i64::MAX.
        let after = i64::try_from(after_seq).unwrap_or(i64::MAX);
        let rows = sqlx::query(
            "SELECT seq, event FROM events WHERE namespace = $1 AND name = $2 AND seq > $3 \
             ORDER BY seq LIMIT $4",
        )
        .bind(&key.namespace)
        .bind(&key.name)
        .bind(after)
        .bind(to_sql(limit as u64))
        .fetch_all(&self.pool)
        .await
        .map_err(database(&self.node, "reading events of", key))?;
        if rows.is_empty() {
            let exists = sqlx::query("SELECT 1 FROM rollouts WHERE namespace = $1 AND name = $2")
                .bind(&key.namespace)
                .bind(&key.name)
                .fetch_optional(&self.pool)
                .await
                .map_err(database(&self.node, "reading", key))?;
            if exists.is_none() {
                return Err(StoreError::NotFound(key.clone()));
            }
        }
        rows.iter()
            .map(|row| {
                let seq = decode_u64(row, "seq", key)?;
                let event = decode_column(row, "event", key).map_err(|error| match error {
                    StoreError::Corrupt { key, detail } => StoreError::Corrupt {
                        key,
                        detail: format!("event {seq}: {detail}"),
                    },
                    other => other,
                })?;
                Ok(StoredEvent { seq, event })
            })
            .collect()
    }

    async fn owner_of(&self, key: &RolloutKey) -> Result<Option<crate::Lease>, StoreError> {
        crate::Cluster::lease(self, key).await
    }
}

// === rows ===

/// One rollout; `lock`: `FOR UPDATE`, inside a write's transaction.
async fn fetch_rollout(
    node: &Node,
    connection: &mut PgConnection,
    key: &RolloutKey,
    lock: bool,
) -> Result<Option<StoredRollout>, StoreError> {
    let sql = AssertSqlSafe(format!(
        "SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE namespace = $1 AND name = $2{}",
        if lock { " FOR UPDATE" } else { "" }
    ));
    let row = sqlx::query(sql)
        .bind(&key.namespace)
        .bind(&key.name)
        .fetch_optional(&mut *connection)
        .await
        .map_err(database(node, "reading", key))?;
    row.as_ref().map(decode_rollout).transpose()
}

fn decode_rollout(row: &PgRow) -> Result<StoredRollout, StoreError> {
    let key_part = |column: &str| {
        row.try_get::<String, _>(column).map_err(|error| {
            StoreError::Database(format!(
                "reading the key of a rollout row ({column}): {error}"
            ))
        })
    };
    let key = RolloutKey::new(key_part("namespace")?, key_part("name")?);
    let mut rollout: Rollout = decode_column(row, "document", &key)?;
    if RolloutKey::of(&rollout) != key {
        return Err(StoreError::Corrupt {
            detail: format!("document: it names rollout {}", RolloutKey::of(&rollout)),
            key,
        });
    }
    // Stored documents never carry a status; one written by hand would only confuse readers.
    rollout.status = None;
    Ok(StoredRollout {
        status: decode_column(row, "status", &key)?,
        version: decode_u64(row, "version", &key)?,
        generation: decode_u64(row, "generation", &key)?,
        pending_effects: decode_column(row, "pending_effects", &key)?,
        last_event_seq: decode_u64(row, "last_event_seq", &key)?,
        created_at: decode_timestamp(row, "created_at", &key)?,
        updated_at: decode_timestamp(row, "updated_at", &key)?,
        rollout,
        key,
    })
}

fn corrupt(key: &RolloutKey, column: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        key: key.clone(),
        detail: format!("{column}: {detail}"),
    }
}

fn decode_text(row: &PgRow, column: &str, key: &RolloutKey) -> Result<String, StoreError> {
    row.try_get::<String, _>(column)
        .map_err(|error| corrupt(key, column, error))
}

fn decode_column<T: DeserializeOwned>(
    row: &PgRow,
    column: &str,
    key: &RolloutKey,
) -> Result<T, StoreError> {
    let text = decode_text(row, column, key)?;
    serde_json::from_str(&text).map_err(|error| corrupt(key, column, error))
}

fn decode_u64(row: &PgRow, column: &str, key: &RolloutKey) -> Result<u64, StoreError> {
    let value = row
        .try_get::<i64, _>(column)
        .map_err(|error| corrupt(key, column, error))?;
    u64::try_from(value).map_err(|_| corrupt(key, column, format!("negative value {value}")))
}

fn decode_timestamp(row: &PgRow, column: &str, key: &RolloutKey) -> Result<Timestamp, StoreError> {
    let text = decode_text(row, column, key)?;
    Timestamp::from_str(&text).map_err(|error| corrupt(key, column, error))
}

#[cfg(test)]
mod tests;
