//! The SQLite store: see [`SqliteStore`] for the schema, the write path and durability.

use std::borrow::Cow;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use jiff::Timestamp;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, Row, SqlSafeStr, SqliteConnection};
use weir_core::machine::Effect;
use weir_core::model::{Event, Rollout, RolloutStatus};

use crate::{
    ApplyOutcome, CommitItem, DEFAULT_PAGE, ListQuery, MAX_PAGE, Page, RolloutKey, Store,
    StoreError, StoredEvent, StoredRollout,
};

/// How long a write waits for another process holding the write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections for reads (the writer has its own).
const READ_CONNECTIONS: u32 = 4;

/// The schema, version 1. The description matches what sqlx-cli derives from the file name, and
/// the checksum is computed from the same text, so the file's migration table agrees with
/// `sqlx migrate info`.
const MIGRATION_0001: &str = include_str!("../migrations/sqlite/0001_rollouts_and_events.sql");
/// Version 2: feature flags.
const MIGRATION_0002: &str = include_str!("../migrations/sqlite/0002_flags.sql");
/// Version 3: API tokens and the server's keys.
const MIGRATION_0003: &str = include_str!("../migrations/sqlite/0003_tokens.sql");
/// Version 4: flags' history, evaluation counts and triggers.
const MIGRATION_0004: &str = include_str!("../migrations/sqlite/0004_flag_records.sql");

/// The columns `decode_rollout` reads, in any `SELECT` of a whole rollout.
const ROLLOUT_COLUMNS: &str = "namespace, name, document, status, version, generation, \
     pending_effects, last_event_seq, created_at, updated_at";

/// Migrations embedded in the binary, built without sqlx's proc macros (`migrate!` would pull
/// sqlx-macros and its dependencies into every build for one `include_str!`).
fn migrator() -> Migrator {
    Migrator::with_migrations(vec![
        Migration::new(
            1,
            Cow::Borrowed("rollouts and events"),
            MigrationType::Simple,
            MIGRATION_0001.into_sql_str(),
            false,
        ),
        Migration::new(
            2,
            Cow::Borrowed("flags"),
            MigrationType::Simple,
            MIGRATION_0002.into_sql_str(),
            false,
        ),
        Migration::new(
            3,
            Cow::Borrowed("tokens"),
            MigrationType::Simple,
            MIGRATION_0003.into_sql_str(),
            false,
        ),
        Migration::new(
            4,
            Cow::Borrowed("flag records"),
            MigrationType::Simple,
            MIGRATION_0004.into_sql_str(),
            false,
        ),
    ])
}

// === impl SqliteStore ===

/// The default [`Store`]: one SQLite file in WAL mode, schema migrations embedded in the binary.
///
/// Cloning is cheap (the clones share the connections).
///
/// # Schema
///
/// `migrations/sqlite/` holds the schema (applied by [`SqliteStore::open`], recorded in sqlx's
/// `_sqlx_migrations` table, so `sqlx migrate info` understands the file):
///
/// - `rollouts`, primary key `(namespace, name)`: `document` (the Rollout as applied, JSON, without
///   its status), `status` (the `RolloutStatus`, JSON; authoritative), `phase` and
///   `canary_revision` (copies of two status fields, for filtering and for people inspecting the
///   file; index `rollouts_by_phase`), `version` (the optimistic-concurrency token), `generation`,
///   `pending_effects` (a JSON array of one-shot effects not yet delivered), `last_event_seq`,
///   `created_at`, `updated_at`.
/// - `events`, primary key `(namespace, name, seq)`, `WITHOUT ROWID` so one rollout's history is
///   stored contiguously: `at`, `run` and `reason` as columns for inspection, `event` the whole
///   `Event` as JSON. A foreign key to `rollouts` with `ON DELETE CASCADE` (delete also removes
///   the events explicitly, so a connection without `foreign_keys` cannot leave orphans).
/// - `flags` (migration 2, `sqlite/flags.rs`); `tokens` and `server_keys` (migration 3,
///   `sqlite/tokens.rs`): API tokens, of which only the SHA-256 of the secret is stored, and the
///   keys a server creates on its first start (the session cookie's signing key).
///
/// Timestamps are RFC 3339 text in UTC as jiff prints them, with full precision, so a timestamp
/// reads back equal to the one written. JSON is serde_json text of weir-core's types.
///
/// # Writes
///
/// Every write is one transaction started with `BEGIN IMMEDIATE` on the single writer connection:
/// it reads the row, checks `expected_version`, and writes. In-process writers queue on that
/// connection (fair and async, instead of sleeping in SQLite's busy handler); another process
/// writing the same file waits up to the busy timeout. Event numbers come from
/// `rollouts.last_event_seq` inside the same transaction, so they are gap-free and a commit either
/// writes status, events, pending effects and the new version together or writes nothing.
///
/// Reads use a small pool of other connections; in WAL mode they see the last committed state and
/// never block the writer.
///
/// Semantics beyond the trait's documentation:
/// - A write with `expected_version: Some(v)` (v > 0), and every `commit`, `clear_pending` and
///   `delete`, to a rollout that does not exist fails with [`StoreError::NotFound`].
///   `delete` with `Some(0)` fails with [`StoreError::Conflict`] (`expected: 0`).
/// - `apply` reports `Updated` when metadata, `apiVersion`/`kind` or spec changed, and bumps
///   `generation` only when the spec changed (as Kubernetes does); an identical document is
///   `Unchanged` and nothing is written.
/// - `commit` stores only the effects that have a delivery id (hook calls, notifications); desired
///   state (routes, scale, promote, finalize) is derived from the status again after a restart, so
///   storing it would only create effects nobody clears.
/// - `events` fails with [`StoreError::NotFound`] when the rollout does not exist.
/// - A limit of 0 (list and events) means [`DEFAULT_PAGE`]; larger limits are capped at
///   [`MAX_PAGE`].
/// - A row that cannot be decoded fails the read with [`StoreError::Corrupt`] naming the rollout;
///   `delete` still works on it, so an operator can remove it.
///
/// # Durability
///
/// A write that returned `Ok` survives a process kill and a power loss:
/// - `journal_mode = WAL`, `synchronous = FULL`: every commit appends to the WAL and fsyncs it
///   before `COMMIT` returns. With `NORMAL`, WAL commits are not synced; they survive a process
///   kill (the data is in the OS page cache) but the last ones can vanish on power loss or a
///   kernel crash, and an engine that already applied a step's effects would then re-run it from
///   an older status. FULL costs one fsync per commit; no benchmark has shown that to matter yet.
///   If it does (thousands of rollouts stepping at once), commit several rollouts' steps in one
///   transaction rather than weakening the sync.
/// - Checkpoints are SQLite's automatic ones: the committing connection copies the WAL back into
///   the database file once the WAL exceeds 1000 pages (about 4 MiB), and the last connection to
///   close checkpoints and removes the WAL. After a crash the WAL is replayed on the next open,
///   so committed transactions in it are not lost; a torn last frame (a transaction that never
///   committed) is discarded. A long-lived reader holding a snapshot can make the WAL grow until
///   it finishes; reads here are short.
/// - `foreign_keys = ON`, and a busy timeout of 5 s for other processes sharing the file.
///
/// # List cursors
///
/// A cursor is the last key of the previous page, `hex(namespace) "." hex(name)`: opaque, and
/// robust to any character in names. Anything else is [`StoreError::InvalidCursor`].
#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// One connection: every write goes through it, one transaction at a time.
    writer: SqlitePool,
    /// Connections for reads (the writer pool itself for an in-memory store).
    reader: SqlitePool,
}

impl SqliteStore {
    /// Opens the database file at `path`, creating the file when it is missing, and brings its
    /// schema up to date. Its directory must exist: a database never creates directories, so a
    /// mistyped path fails, naming the directory, instead of making a new empty database
    /// somewhere unexpected.
    pub async fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with(path, true).await
    }

    /// Opens the existing database file at `path` and brings its schema up to date; a missing
    /// file is an error naming it, and nothing is created.
    pub async fn open_existing(path: &Path) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with(path, false).await
    }

    async fn open_with(path: &Path, create: bool) -> Result<SqliteStore, StoreError> {
        let directory = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        if !directory.is_dir() {
            return Err(StoreError::Database(format!(
                "cannot open {}: the directory {} does not exist (weir creates no directories \
                 for a database; create it first, or correct the path)",
                path.display(),
                directory.display()
            )));
        }
        if !create && !path.exists() {
            return Err(StoreError::Database(format!(
                "cannot open {}: no such database file (nothing was created)",
                path.display()
            )));
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(create)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT);
        let context = |what: &str, error: sqlx::Error| {
            StoreError::Database(format!("{what} {}: {error}", path.display()))
        };
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options.clone())
            .await
            .map_err(|error| context("opening", error))?;
        migrate(&writer, path).await?;
        let reader = SqlitePoolOptions::new()
            .max_connections(READ_CONNECTIONS)
            .connect_with(options)
            .await
            .map_err(|error| context("opening (reader)", error))?;
        Ok(SqliteStore { writer, reader })
    }

    /// A private in-memory database on one connection, for tests of code that needs a store.
    /// Nothing is durable; it lives until the last clone is dropped or [closed](Self::close).
    pub async fn open_in_memory() -> Result<SqliteStore, StoreError> {
        let options = SqliteConnectOptions::new()
            .in_memory(true)
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            // An in-memory database lives as long as its connection: keep exactly one, forever.
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options)
            .await
            .map_err(|error| {
                StoreError::Database(format!("opening in-memory database: {error}"))
            })?;
        migrate(&pool, Path::new(":memory:")).await?;
        Ok(SqliteStore {
            writer: pool.clone(),
            reader: pool,
        })
    }

    /// Closes every connection, waiting for operations in flight; the last close checkpoints the
    /// WAL into the database file. Later operations fail with [`StoreError::Database`]. Not
    /// needed for durability: every acknowledged write is already on disk.
    pub async fn close(&self) {
        self.reader.close().await;
        self.writer.close().await;
    }

    async fn begin_write(
        &self,
        what: &str,
        key: &RolloutKey,
    ) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, StoreError> {
        // IMMEDIATE takes the write lock at once, so the read that checks the version and the
        // write that follows see the same state (a deferred transaction could fail to upgrade).
        self.writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(database(what, key))
    }
}

pub(crate) mod flag_records;
mod flags;
mod tokens;

async fn migrate(pool: &SqlitePool, path: &Path) -> Result<(), StoreError> {
    migrator().run(pool).await.map_err(|error| {
        StoreError::Database(format!("migrating schema of {}: {error}", path.display()))
    })
}

/// Maps a database error to [`StoreError::Database`] with what was being done to which rollout.
fn database(what: &str, key: &RolloutKey) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |error| StoreError::Database(format!("{what} {key}: {error}"))
}

impl Store for SqliteStore {
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

        let mut tx = self.begin_write("applying", &key).await?;
        let current = fetch_rollout(&mut tx, &key).await?;
        let Some(current) = current else {
            if let Some(expected) = expected_version
                && expected != 0
            {
                return Err(StoreError::NotFound(key));
            }
            let stored = StoredRollout {
                key: key.clone(),
                rollout: document,
                status: RolloutStatus::default(),
                version: 1,
                generation: 1,
                pending_effects: Vec::new(),
                last_event_seq: 0,
                created_at: now,
                updated_at: now,
            };
            sqlx::query(
                "INSERT INTO rollouts (namespace, name, document, status, phase, canary_revision, \
                 version, generation, pending_effects, last_event_seq, created_at, updated_at) \
                 VALUES (?, ?, ?, ?, ?, ?, 1, 1, '[]', 0, ?, ?)",
            )
            .bind(&key.namespace)
            .bind(&key.name)
            .bind(document_json)
            .bind(encode(&stored.status, "status", &key)?)
            .bind(stored.status.phase.as_str())
            .bind(stored.status.canary_revision.as_deref())
            .bind(now.to_string())
            .bind(now.to_string())
            .execute(&mut *tx)
            .await
            .map_err(database("creating", &key))?;
            tx.commit().await.map_err(database("creating", &key))?;
            return Ok((stored, ApplyOutcome::Created));
        };

        if expected_version == Some(0) {
            return Err(StoreError::AlreadyExists(key));
        }
        check_version(&key, expected_version, current.version)?;
        if current.rollout == document {
            // Dropping the transaction rolls it back; it wrote nothing.
            return Ok((current, ApplyOutcome::Unchanged));
        }
        let generation = if current.rollout.spec == document.spec {
            current.generation
        } else {
            current.generation + 1
        };
        let version = current.version + 1;
        sqlx::query(
            "UPDATE rollouts SET document = ?, version = ?, generation = ?, updated_at = ? \
             WHERE namespace = ? AND name = ?",
        )
        .bind(document_json)
        .bind(to_sql(version))
        .bind(to_sql(generation))
        .bind(now.to_string())
        .bind(&key.namespace)
        .bind(&key.name)
        .execute(&mut *tx)
        .await
        .map_err(database("updating", &key))?;
        tx.commit().await.map_err(database("updating", &key))?;
        let stored = StoredRollout {
            rollout: document,
            version,
            generation,
            updated_at: now,
            ..current
        };
        Ok((stored, ApplyOutcome::Updated))
    }

    async fn get(&self, key: &RolloutKey) -> Result<Option<StoredRollout>, StoreError> {
        let mut connection = self
            .reader
            .acquire()
            .await
            .map_err(database("reading", key))?;
        fetch_rollout(&mut connection, key).await
    }

    async fn list(&self, query: &ListQuery) -> Result<Page<StoredRollout>, StoreError> {
        let limit = page_limit(query.limit);
        let after = query.cursor.as_deref().map(decode_cursor).transpose()?;
        let mut sql = format!("SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE 1 = 1");
        if query.namespace.is_some() {
            sql.push_str(" AND namespace = ?");
        }
        if query.phase.is_some() {
            sql.push_str(" AND phase = ?");
        }
        if after.is_some() {
            sql.push_str(" AND (namespace, name) > (?, ?)");
        }
        sql.push_str(" ORDER BY namespace, name LIMIT ?");
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
            .fetch_all(&self.reader)
            .await
            .map_err(|error| StoreError::Database(format!("listing rollouts: {error}")))?;
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
            .fetch_all(&self.reader)
            .await
            .map_err(|error| StoreError::Database(format!("loading rollouts: {error}")))?;
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
        let mut tx = self.begin_write("committing", key).await?;
        let stored =
            commit_in(&mut tx, key, expected_version, status, events, pending, now).await?;
        tx.commit().await.map_err(database("committing", key))?;
        Ok(stored)
    }

    async fn commit_batch(&self, items: Vec<CommitItem>) -> Vec<Result<StoredRollout, StoreError>> {
        let Some(first) = items.first() else {
            return Vec::new();
        };
        let batch_key = first.key.clone();
        let mut tx = match self
            .begin_write("committing a batch with", &batch_key)
            .await
        {
            Ok(tx) => tx,
            Err(error) => {
                let message = error.to_string();
                return items
                    .iter()
                    .map(|_| Err(StoreError::Database(message.clone())))
                    .collect();
            }
        };
        let mut results = Vec::with_capacity(items.len());
        for item in &items {
            // A savepoint per item: a conflicting or failing item is undone alone.
            let outcome = match sqlx::Connection::begin(&mut *tx).await {
                Ok(mut savepoint) => {
                    let result = commit_in(
                        &mut savepoint,
                        &item.key,
                        item.expected_version,
                        &item.status,
                        &item.events,
                        &item.pending,
                        item.now,
                    )
                    .await;
                    match result {
                        Ok(stored) => match savepoint.commit().await {
                            Ok(()) => Ok(stored),
                            Err(error) => Err(database("committing", &item.key)(error)),
                        },
                        // Dropping the savepoint rolls it back.
                        Err(error) => Err(error),
                    }
                }
                Err(error) => Err(database("committing", &item.key)(error)),
            };
            results.push(outcome);
        }
        if let Err(error) = tx.commit().await {
            let message = format!("committing a batch with {batch_key}: {error}");
            return items
                .iter()
                .map(|_| Err(StoreError::Database(message.clone())))
                .collect();
        }
        results
    }

    async fn clear_pending(
        &self,
        key: &RolloutKey,
        delivery_ids: &[String],
    ) -> Result<(), StoreError> {
        let mut tx = self.begin_write("clearing pending effects of", key).await?;
        let row =
            sqlx::query("SELECT pending_effects FROM rollouts WHERE namespace = ? AND name = ?")
                .bind(&key.namespace)
                .bind(&key.name)
                .fetch_optional(&mut *tx)
                .await
                .map_err(database("reading pending effects of", key))?
                .ok_or_else(|| StoreError::NotFound(key.clone()))?;
        let mut pending: Vec<Effect> = decode_column(&row, "pending_effects", key)?;
        let before = pending.len();
        pending.retain(|effect| {
            effect
                .delivery_id()
                .is_none_or(|id| !delivery_ids.iter().any(|delivered| delivered == id))
        });
        if pending.len() == before {
            return Ok(());
        }
        sqlx::query("UPDATE rollouts SET pending_effects = ? WHERE namespace = ? AND name = ?")
            .bind(encode(&pending, "pending effects", key)?)
            .bind(&key.namespace)
            .bind(&key.name)
            .execute(&mut *tx)
            .await
            .map_err(database("clearing pending effects of", key))?;
        tx.commit()
            .await
            .map_err(database("clearing pending effects of", key))
    }

    async fn delete(
        &self,
        key: &RolloutKey,
        expected_version: Option<u64>,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin_write("deleting", key).await?;
        let row = sqlx::query("SELECT version FROM rollouts WHERE namespace = ? AND name = ?")
            .bind(&key.namespace)
            .bind(&key.name)
            .fetch_optional(&mut *tx)
            .await
            .map_err(database("deleting", key))?
            .ok_or_else(|| StoreError::NotFound(key.clone()))?;
        let version = decode_u64(&row, "version", key)?;
        check_version(key, expected_version, version)?;
        for sql in [
            "DELETE FROM events WHERE namespace = ? AND name = ?",
            "DELETE FROM rollouts WHERE namespace = ? AND name = ?",
        ] {
            sqlx::query(sql)
                .bind(&key.namespace)
                .bind(&key.name)
                .execute(&mut *tx)
                .await
                .map_err(database("deleting", key))?;
        }
        tx.commit().await.map_err(database("deleting", key))
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
            "SELECT seq, event FROM events WHERE namespace = ? AND name = ? AND seq > ? \
             ORDER BY seq LIMIT ?",
        )
        .bind(&key.namespace)
        .bind(&key.name)
        .bind(after)
        .bind(to_sql(limit as u64))
        .fetch_all(&self.reader)
        .await
        .map_err(database("reading events of", key))?;
        if rows.is_empty() {
            let exists = sqlx::query("SELECT 1 FROM rollouts WHERE namespace = ? AND name = ?")
                .bind(&key.namespace)
                .bind(&key.name)
                .fetch_optional(&self.reader)
                .await
                .map_err(database("reading", key))?;
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
}

// === rows ===

/// One step's writes inside an open transaction: check the version, append the events, update the
/// status and the pending effects.
async fn commit_in(
    tx: &mut SqliteConnection,
    key: &RolloutKey,
    expected_version: u64,
    status: &RolloutStatus,
    events: &[Event],
    pending: &[Effect],
    now: Timestamp,
) -> Result<StoredRollout, StoreError> {
    let status_json = encode(status, "status", key)?;
    let current = fetch_rollout(&mut *tx, key)
        .await?
        .ok_or_else(|| StoreError::NotFound(key.clone()))?;
    check_version(key, Some(expected_version), current.version)?;

    let mut pending_effects = current.pending_effects;
    pending_effects.extend(
        pending
            .iter()
            .filter(|effect| effect.delivery_id().is_some())
            .cloned(),
    );
    let mut seq = current.last_event_seq;
    for event in events {
        seq += 1;
        sqlx::query(
            "INSERT INTO events (namespace, name, seq, at, run, reason, event) \
             VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&key.namespace)
        .bind(&key.name)
        .bind(to_sql(seq))
        .bind(event.at.to_string())
        .bind(to_sql(event.run))
        .bind(enum_name(&event.reason))
        .bind(encode(event, "event", key)?)
        .execute(&mut *tx)
        .await
        .map_err(database("committing events of", key))?;
    }
    let version = current.version + 1;
    sqlx::query(
        "UPDATE rollouts SET status = ?, phase = ?, canary_revision = ?, version = ?, \
         pending_effects = ?, last_event_seq = ?, updated_at = ? \
         WHERE namespace = ? AND name = ?",
    )
    .bind(status_json)
    .bind(status.phase.as_str())
    .bind(status.canary_revision.as_deref())
    .bind(to_sql(version))
    .bind(encode(&pending_effects, "pending effects", key)?)
    .bind(to_sql(seq))
    .bind(now.to_string())
    .bind(&key.namespace)
    .bind(&key.name)
    .execute(&mut *tx)
    .await
    .map_err(database("committing status of", key))?;
    Ok(StoredRollout {
        status: status.clone(),
        version,
        pending_effects,
        last_event_seq: seq,
        updated_at: now,
        ..current
    })
}

async fn fetch_rollout(
    connection: &mut SqliteConnection,
    key: &RolloutKey,
) -> Result<Option<StoredRollout>, StoreError> {
    let sql = AssertSqlSafe(format!(
        "SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE namespace = ? AND name = ?"
    ));
    let row = sqlx::query(sql)
        .bind(&key.namespace)
        .bind(&key.name)
        .fetch_optional(&mut *connection)
        .await
        .map_err(database("reading", key))?;
    row.as_ref().map(decode_rollout).transpose()
}

fn decode_rollout(row: &SqliteRow) -> Result<StoredRollout, StoreError> {
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

fn decode_text(row: &SqliteRow, column: &str, key: &RolloutKey) -> Result<String, StoreError> {
    row.try_get::<String, _>(column)
        .map_err(|error| corrupt(key, column, error))
}

fn decode_column<T: DeserializeOwned>(
    row: &SqliteRow,
    column: &str,
    key: &RolloutKey,
) -> Result<T, StoreError> {
    let text = decode_text(row, column, key)?;
    serde_json::from_str(&text).map_err(|error| corrupt(key, column, error))
}

fn decode_u64(row: &SqliteRow, column: &str, key: &RolloutKey) -> Result<u64, StoreError> {
    let value = row
        .try_get::<i64, _>(column)
        .map_err(|error| corrupt(key, column, error))?;
    u64::try_from(value).map_err(|_| corrupt(key, column, format!("negative value {value}")))
}

fn decode_timestamp(
    row: &SqliteRow,
    column: &str,
    key: &RolloutKey,
) -> Result<Timestamp, StoreError> {
    let text = decode_text(row, column, key)?;
    Timestamp::from_str(&text).map_err(|error| corrupt(key, column, error))
}

pub(crate) fn encode<T: Serialize>(
    value: &T,
    what: &str,
    key: &RolloutKey,
) -> Result<String, StoreError> {
    serde_json::to_string(value)
        .map_err(|error| StoreError::Database(format!("encoding the {what} of {key}: {error}")))
}

/// The name serde gives a unit enum variant (`EventReason::RunStarted` -> `RunStarted`).
pub(crate) fn enum_name<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        Ok(other) => other.to_string(),
        Err(error) => format!("<{error}>"),
    }
}

/// Versions, generations and sequence numbers are u64 in the API and INTEGER (i64) in SQLite.
/// They count writes and events from 1, so they stay far below i64::MAX; saturating keeps the
/// conversion total without a panic path.
pub(crate) fn to_sql(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

pub(crate) fn check_version(
    key: &RolloutKey,
    expected: Option<u64>,
    actual: u64,
) -> Result<(), StoreError> {
    match expected {
        None => Ok(()),
        Some(expected) if expected == actual => Ok(()),
        Some(expected) => Err(StoreError::Conflict {
            key: key.clone(),
            expected,
            actual,
        }),
    }
}

pub(crate) fn page_limit(limit: usize) -> usize {
    match limit {
        0 => DEFAULT_PAGE,
        limit => limit.min(MAX_PAGE),
    }
}

// === cursors ===

pub(crate) fn encode_cursor(key: &RolloutKey) -> String {
    format!("{}.{}", hex(&key.namespace), hex(&key.name))
}

pub(crate) fn decode_cursor(cursor: &str) -> Result<RolloutKey, StoreError> {
    let invalid = || StoreError::InvalidCursor(cursor.to_string());
    let (namespace, name) = cursor.split_once('.').ok_or_else(invalid)?;
    Ok(RolloutKey::new(
        unhex(namespace).ok_or_else(invalid)?,
        unhex(name).ok_or_else(invalid)?,
    ))
}

fn hex(text: &str) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(text.len() * 2);
    for byte in text.bytes() {
        // Writing to a String cannot fail.
        let _ = write!(out, "{byte:02x}");
    }
    out
}

fn unhex(text: &str) -> Option<String> {
    // Strict, so that every key has exactly one cursor (`from_str_radix` alone would take "+f").
    // Lowercase only, as `hex` writes it: "4A" and "4a" would be two cursors for one key.
    let lower_hex = |byte: u8| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte);
    if !text.len().is_multiple_of(2) || !text.bytes().all(lower_hex) {
        return None;
    }
    let bytes = text
        .as_bytes()
        .chunks(2)
        .map(|pair| {
            let digits = std::str::from_utf8(pair).ok()?;
            u8::from_str_radix(digits, 16).ok()
        })
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests;
