//! [`Cluster`] on PostgreSQL: leases with fencing epochs, forwarded requests, and notifications
//! over LISTEN/NOTIFY.
//!
//! # Leases
//!
//! Every rollout has one row in `leases` (created and deleted with the rollout by the write paths
//! in `postgres.rs`). Every lease time is computed by the database (`clock_timestamp()`, read once
//! per statement), so instances whose clocks disagree still agree on who holds what. The epoch is
//! bumped by every claim and never by anything else; the write paths compare it, in their own
//! transaction, with the epoch this instance holds (`Node::held`), so a write after a takeover is
//! refused ([`StoreError::Fenced`]).
//!
//! `Node::held` is the only truth this process writes by: a key leaves it *before* the database
//! gives the lease up (release, leave), and a key the database no longer grants is taken out of it
//! by [`Cluster::renew`] before renew returns. A lease this instance still owns at its epoch is
//! renewed even when it has expired: nobody took it over, so nothing was written by anyone else.
//!
//! # Notifications
//!
//! Channel `weir`, JSON payloads (see [`Payload`]); the write paths send `rollout`, `flag`,
//! `tokens` and `freed`, this module sends `request`, `answer` and `freed`. `NOTIFY` is transactional, so a
//! notification is delivered only when (and once) its transaction commits.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{MutexGuard, PoisonError};
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use sqlx::postgres::{PgListener, PgPool, PgPoolOptions, PgRow};
use sqlx::{PgConnection, Row};
use tokio::sync::mpsc;

use super::{CHANNEL, Node, PostgresStore};
use crate::{Cluster, Lease, LeaseSummary, Notice, PendingRequest, RolloutKey, StoreError};

/// How many notices a receiver may fall behind before notices are dropped (and
/// [`Notice::Reconnected`] tells it to re-read).
const NOTICE_CAPACITY: usize = 4096;

/// The first wait before re-opening a lost listening connection; doubled per failed attempt.
const RECONNECT_FIRST: Duration = Duration::from_millis(100);

/// The longest wait between two attempts to re-open the listening connection.
const RECONNECT_MAX: Duration = Duration::from_secs(5);

/// How long opening the listening connection may take before the attempt counts as failed.
const LISTEN_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The columns [`decode_lease`] reads, of `leases` as `l`. Timestamps are read as microseconds
/// since the Unix epoch (exact: PostgreSQL stores microseconds), so no date-time feature of sqlx
/// is needed.
macro_rules! lease_columns {
    () => {
        "l.namespace, l.name, l.owner, l.epoch, l.host, \
         (extract(epoch FROM l.acquired_at) * 1000000)::bigint AS acquired_us, \
         (extract(epoch FROM l.renewed_at) * 1000000)::bigint AS renewed_us, \
         (extract(epoch FROM l.expires_at) * 1000000)::bigint AS expires_us"
    };
}

/// A notification's payload on channel `weir`, as every instance writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "lowercase")]
pub(crate) enum Payload {
    /// A rollout was written (`version` 0: deleted).
    Rollout {
        /// Namespace.
        ns: String,
        /// Name.
        name: String,
        /// Version after the write.
        version: u64,
        /// Last event's sequence number after the write.
        seq: u64,
        /// Writing instance.
        by: String,
    },
    /// A flag was written (`version` 0: deleted).
    Flag {
        /// Namespace.
        ns: String,
        /// The flag's key.
        key: String,
        /// Version after the write.
        version: u64,
        /// Writing instance.
        by: String,
    },
    /// A request was submitted.
    Request {
        /// Its id.
        id: i64,
        /// The rollout's namespace.
        ns: String,
        /// The rollout's name.
        name: String,
    },
    /// A request was answered.
    Answer {
        /// Its id.
        id: i64,
    },
    /// Leases were released or a rollout was created.
    Freed,
    /// A token was created or revoked.
    Tokens {
        /// Writing instance (or `weir token`'s own store).
        by: String,
    },
}

impl Payload {
    /// The notice a payload announces.
    fn into_notice(self) -> Notice {
        match self {
            Payload::Rollout {
                ns,
                name,
                version,
                seq,
                by,
            } => Notice::RolloutChanged {
                key: RolloutKey::new(ns, name),
                version,
                last_event_seq: seq,
                by,
            },
            Payload::Flag {
                ns,
                key,
                version,
                by,
            } => Notice::FlagChanged {
                namespace: ns,
                key,
                version,
                by,
            },
            Payload::Request { id, ns, name } => Notice::RequestSubmitted {
                id,
                key: RolloutKey::new(ns, name),
            },
            Payload::Answer { id } => Notice::RequestAnswered { id },
            Payload::Freed => Notice::LeasesFreed,
            Payload::Tokens { by } => Notice::TokensChanged { by },
        }
    }

    /// The JSON text sent with `pg_notify`.
    fn text(&self) -> String {
        // Serializing this enum of strings and integers cannot fail; an empty payload would be
        // ignored by every parser, which is the harmless outcome were it ever to.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Parses a payload on channel `weir`; `None` for anything else (e.g. a payload of a newer
/// version of weir, which this one cannot act on).
pub(crate) fn parse_notice(payload: &str) -> Option<Notice> {
    serde_json::from_str::<Payload>(payload)
        .ok()
        .map(Payload::into_notice)
}

/// Sends `payload` on channel `weir` within the transaction of `conn` (delivered on commit).
async fn notify(conn: &mut PgConnection, payload: &Payload) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(CHANNEL)
        .bind(payload.text())
        .execute(conn)
        .await
        .map(|_| ())
}

/// Maps a database error to [`StoreError::Database`] saying what was being done.
fn database<'a>(
    node: &'a Node,
    what: impl std::fmt::Display + 'a,
) -> impl FnOnce(sqlx::Error) -> StoreError + 'a {
    move |error| node.store_error(what, error)
}

/// Maps an error reading a row already fetched to [`StoreError::Database`].
fn unreadable(what: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |error| StoreError::Database(format!("{what}: {error}"))
}

/// The leases this instance holds. A poisoned lock is used as it is: every critical section is
/// one insert, remove or copy, so the map is never left half-changed by a panic.
fn held(node: &Node) -> MutexGuard<'_, HashMap<RolloutKey, u64>> {
    node.held.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The held leases as three parallel arrays (namespaces, names, epochs) for `UNNEST`.
fn held_arrays(held: &HashMap<RolloutKey, u64>) -> (Vec<String>, Vec<String>, Vec<i64>) {
    let mut namespaces = Vec::with_capacity(held.len());
    let mut names = Vec::with_capacity(held.len());
    let mut epochs = Vec::with_capacity(held.len());
    for (key, epoch) in held {
        namespaces.push(key.namespace.clone());
        names.push(key.name.clone());
        // Epochs come from BIGINT columns, so they fit; a saturated one simply matches no row.
        epochs.push(i64::try_from(*epoch).unwrap_or(i64::MAX));
    }
    (namespaces, names, epochs)
}

/// A duration as whole milliseconds for binding (`$n * interval '1 millisecond'`). Durations
/// beyond i64 milliseconds saturate; PostgreSQL then refuses the interval as out of range.
fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Microseconds since the Unix epoch (a `lease_columns!` timestamp) as a timestamp.
fn timestamp(row: &PgRow, column: &str, key: &RolloutKey) -> Result<Option<Timestamp>, StoreError> {
    let micros: Option<i64> = row.try_get(column).map_err(corrupt(key))?;
    micros
        .map(|micros| {
            Timestamp::from_microsecond(micros).map_err(|error| StoreError::Corrupt {
                key: key.clone(),
                detail: format!("lease {column}: {error}"),
            })
        })
        .transpose()
}

/// Maps a column that cannot be read to [`StoreError::Corrupt`].
fn corrupt(key: &RolloutKey) -> impl FnOnce(sqlx::Error) -> StoreError + '_ {
    move |error| StoreError::Corrupt {
        key: key.clone(),
        detail: format!("lease row: {error}"),
    }
}

/// Reads a row selected with `lease_columns!` (plus `previous_owner` when `with_previous`).
fn decode_lease(row: &PgRow, with_previous: bool) -> Result<Lease, StoreError> {
    let namespace: String = row
        .try_get("namespace")
        .map_err(unreadable("reading a lease"))?;
    let name: String = row.try_get("name").map_err(unreadable("reading a lease"))?;
    let key = RolloutKey::new(namespace, name);
    let epoch: i64 = row.try_get("epoch").map_err(corrupt(&key))?;
    let epoch = u64::try_from(epoch).map_err(|_| StoreError::Corrupt {
        key: key.clone(),
        detail: format!("lease epoch {epoch} is negative"),
    })?;
    let previous_owner = if with_previous {
        row.try_get("previous_owner").map_err(corrupt(&key))?
    } else {
        None
    };
    Ok(Lease {
        owner: row.try_get("owner").map_err(corrupt(&key))?,
        epoch,
        host: row.try_get("host").map_err(corrupt(&key))?,
        acquired_at: timestamp(row, "acquired_us", &key)?,
        renewed_at: timestamp(row, "renewed_us", &key)?,
        expires_at: timestamp(row, "expires_us", &key)?,
        previous_owner,
        key,
    })
}

/// A count column as u64 (counts are never negative).
fn count(row: &PgRow, column: &str) -> Result<u64, StoreError> {
    let n: i64 = row
        .try_get(column)
        .map_err(unreadable("reading the lease summary"))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Unowns the leases `owner` holds among `keys` (all of them when `keys` is `None`), keeping
/// their epochs, and says how many it unowned. Runs in the caller's transaction.
///
/// Like renew, it locks its rows in key order first (`mine`), so that this instance's renew,
/// release and leave running at once wait for each other instead of deadlocking.
async fn unown(
    conn: &mut PgConnection,
    owner: &str,
    keys: Option<(Vec<String>, Vec<String>)>,
) -> Result<u64, sqlx::Error> {
    let result = match keys {
        Some((namespaces, names)) => {
            sqlx::query(
                "WITH mine AS (SELECT l.namespace, l.name FROM leases l \
                   JOIN UNNEST($2::text[], $3::text[]) AS k(namespace, name) \
                     ON l.namespace = k.namespace AND l.name = k.name \
                   WHERE l.owner = $1 ORDER BY l.namespace, l.name FOR UPDATE OF l) \
                 UPDATE leases l \
                 SET owner = NULL, acquired_at = NULL, renewed_at = NULL, expires_at = NULL \
                 FROM mine WHERE l.namespace = mine.namespace AND l.name = mine.name",
            )
            .bind(owner)
            .bind(namespaces)
            .bind(names)
            .execute(conn)
            .await?
        }
        None => {
            sqlx::query(
                "WITH mine AS (SELECT namespace, name FROM leases WHERE owner = $1 \
                   ORDER BY namespace, name FOR UPDATE) \
                 UPDATE leases l \
                 SET owner = NULL, acquired_at = NULL, renewed_at = NULL, expires_at = NULL \
                 FROM mine WHERE l.namespace = mine.namespace AND l.name = mine.name",
            )
            .bind(owner)
            .execute(conn)
            .await?
        }
    };
    Ok(result.rows_affected())
}

impl Cluster for PostgresStore {
    fn instance_id(&self) -> &str {
        &self.node.id
    }

    fn held_leases(&self) -> Vec<(RolloutKey, u64)> {
        held(&self.node)
            .iter()
            .map(|(key, epoch)| (key.clone(), *epoch))
            .collect()
    }

    fn host_label(&self) -> &str {
        &self.node.host_label
    }

    async fn heartbeat(&self, api: Option<&str>, lease_time: Duration) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO instances (id, host, api, started_at, seen_at) \
             VALUES ($1, $2, $3, clock_timestamp(), clock_timestamp()) \
             ON CONFLICT (id) DO UPDATE \
             SET host = EXCLUDED.host, api = EXCLUDED.api, seen_at = EXCLUDED.seen_at",
        )
        .bind(&self.node.id)
        .bind(&self.node.host_label)
        .bind(api)
        .execute(&self.pool)
        .await
        .map_err(database(&self.node, "recording this instance's heartbeat"))?;
        // The lease time first: a rollout created once `joined` is seen is leased for it.
        let ms = u64::try_from(millis(lease_time)).unwrap_or(0);
        self.node.lease_time_ms.store(ms, Ordering::SeqCst);
        self.node.joined.store(true, Ordering::SeqCst);
        Ok(())
    }

    async fn claim(&self, max: usize, lease_time: Duration) -> Result<Vec<Lease>, StoreError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        // `c` picks and locks the rows, remembering who held them, and skips rows another
        // session holds locked (a concurrent claim or renew, or a write of the current owner
        // checking its lease: that one is settled before its lease can change hands); the
        // UPDATE takes them over at epoch + 1.
        let rows = sqlx::query(concat!(
            "WITH t AS (SELECT clock_timestamp() AS now), \
             c AS (SELECT namespace, name, owner FROM leases \
                   WHERE (owner IS NULL OR expires_at IS NULL \
                          OR expires_at < (SELECT now FROM t)) \
                     AND (host IS NULL OR host = $2) \
                   ORDER BY namespace, name LIMIT $3 \
                   FOR UPDATE SKIP LOCKED) \
             UPDATE leases l \
             SET owner = $1, epoch = l.epoch + 1, acquired_at = t.now, renewed_at = t.now, \
                 expires_at = t.now + $4 * interval '1 millisecond' \
             FROM c, t \
             WHERE l.namespace = c.namespace AND l.name = c.name \
             RETURNING ",
            lease_columns!(),
            ", c.owner AS previous_owner"
        ))
        .bind(&self.node.id)
        .bind(&self.node.host_label)
        .bind(i64::try_from(max).unwrap_or(i64::MAX))
        .bind(millis(lease_time))
        .fetch_all(&self.pool)
        .await
        .map_err(database(&self.node, "claiming leases"))?;
        let mut leases = rows
            .iter()
            .map(|row| decode_lease(row, true))
            .collect::<Result<Vec<_>, _>>()?;
        leases.sort_by(|a, b| a.key.cmp(&b.key));
        let mut held = held(&self.node);
        for lease in &leases {
            held.insert(lease.key.clone(), lease.epoch);
        }
        Ok(leases)
    }

    async fn renew(&self, lease_time: Duration) -> Result<Vec<RolloutKey>, StoreError> {
        let snapshot = held(&self.node).clone();
        if snapshot.is_empty() {
            return Ok(Vec::new());
        }
        let (namespaces, names, epochs) = held_arrays(&snapshot);
        // `mine` locks the rows still held at their epochs in key order (waiting for writes of
        // this instance that hold one `FOR SHARE`), so a release or leave running at the same
        // time waits instead of deadlocking with it.
        let rows = sqlx::query(
            "WITH t AS (SELECT clock_timestamp() AS now), \
             mine AS (SELECT l.namespace, l.name FROM leases l \
               JOIN UNNEST($2::text[], $3::text[], $4::bigint[]) AS h(namespace, name, epoch) \
                 ON l.namespace = h.namespace AND l.name = h.name AND l.epoch = h.epoch \
               WHERE l.owner = $1 ORDER BY l.namespace, l.name FOR UPDATE OF l) \
             UPDATE leases l \
             SET renewed_at = t.now, expires_at = t.now + $5 * interval '1 millisecond' \
             FROM t, mine \
             WHERE l.namespace = mine.namespace AND l.name = mine.name \
             RETURNING l.namespace, l.name",
        )
        .bind(&self.node.id)
        .bind(namespaces)
        .bind(names)
        .bind(epochs)
        .bind(millis(lease_time))
        .fetch_all(&self.pool)
        .await
        .map_err(database(&self.node, "renewing leases"))?;
        let mut renewed = std::collections::HashSet::with_capacity(rows.len());
        for row in &rows {
            let namespace: String = row
                .try_get("namespace")
                .map_err(database(&self.node, "renewing leases"))?;
            let name: String = row
                .try_get("name")
                .map_err(database(&self.node, "renewing leases"))?;
            renewed.insert(RolloutKey::new(namespace, name));
        }
        // Lost: held at the snapshot's epoch and not renewed. A key released meanwhile, or
        // claimed again at a newer epoch by a concurrent claim, was not lost by this renew.
        let mut lost = Vec::new();
        let mut held = held(&self.node);
        for (key, epoch) in snapshot {
            if !renewed.contains(&key) && held.get(&key) == Some(&epoch) {
                held.remove(&key);
                lost.push(key);
            }
        }
        drop(held);
        lost.sort();
        Ok(lost)
    }

    async fn release(&self, keys: &[RolloutKey]) -> Result<(), StoreError> {
        if keys.is_empty() {
            return Ok(());
        }
        // Out of `held` first: from here on every write of these rollouts is fenced, so nothing
        // is written by this instance once another may own them.
        {
            let mut held = held(&self.node);
            for key in keys {
                held.remove(key);
            }
        }
        let namespaces = keys.iter().map(|key| key.namespace.clone()).collect();
        let names = keys.iter().map(|key| key.name.clone()).collect();
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(database(&self.node, "releasing leases"))?;
        let released = unown(&mut tx, &self.node.id, Some((namespaces, names)))
            .await
            .map_err(database(&self.node, "releasing leases"))?;
        if released > 0 {
            notify(&mut tx, &Payload::Freed)
                .await
                .map_err(database(&self.node, "releasing leases"))?;
        }
        tx.commit()
            .await
            .map_err(database(&self.node, "releasing leases"))
    }

    async fn leave(&self) -> Result<(), StoreError> {
        // `joined` stays set: with `held` empty every later write to an existing rollout is
        // fenced, which is what a leaving instance wants.
        held(&self.node).clear();
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(database(&self.node, "leaving"))?;
        let released = unown(&mut tx, &self.node.id, None)
            .await
            .map_err(database(&self.node, "leaving"))?;
        sqlx::query("DELETE FROM instances WHERE id = $1")
            .bind(&self.node.id)
            .execute(&mut *tx)
            .await
            .map_err(database(&self.node, "leaving"))?;
        if released > 0 {
            notify(&mut tx, &Payload::Freed)
                .await
                .map_err(database(&self.node, "leaving"))?;
        }
        tx.commit().await.map_err(database(&self.node, "leaving"))
    }

    async fn lease(&self, key: &RolloutKey) -> Result<Option<Lease>, StoreError> {
        let row = sqlx::query(concat!(
            "SELECT ",
            lease_columns!(),
            " FROM leases l WHERE l.namespace = $1 AND l.name = $2"
        ))
        .bind(&key.namespace)
        .bind(&key.name)
        .fetch_optional(&self.pool)
        .await
        .map_err(database(
            &self.node,
            format_args!("reading the lease of {key}"),
        ))?;
        row.map(|row| decode_lease(&row, false)).transpose()
    }

    async fn lease_summary(&self, lease_time: Duration) -> Result<LeaseSummary, StoreError> {
        // One statement, so one snapshot and one clock reading for every figure.
        let row = sqlx::query(
            "WITH t AS (SELECT clock_timestamp() AS now), \
             o AS (SELECT owner, count(*) AS n FROM leases, t \
                   WHERE owner IS NOT NULL AND expires_at >= t.now GROUP BY owner) \
             SELECT \
               (SELECT count(*) FROM leases WHERE host IS NULL OR host = $1) AS claimable, \
               (SELECT count(*) FROM leases, t WHERE (host IS NULL OR host = $1) \
                  AND (owner IS NULL OR expires_at IS NULL OR expires_at < t.now)) AS free, \
               (SELECT coalesce(array_agg(owner ORDER BY owner), '{}'::text[]) FROM o) \
                  AS owners, \
               (SELECT coalesce(array_agg(n ORDER BY owner), '{}'::bigint[]) FROM o) AS counts, \
               (SELECT coalesce(array_agg(id ORDER BY id), '{}'::text[]) FROM instances, t \
                  WHERE seen_at > t.now - $2 * interval '1 millisecond') AS live",
        )
        .bind(&self.node.host_label)
        .bind(millis(lease_time))
        .fetch_one(&self.pool)
        .await
        .map_err(database(&self.node, "reading the lease summary"))?;
        let owners: Vec<String> = row
            .try_get("owners")
            .map_err(database(&self.node, "reading the lease summary"))?;
        let counts: Vec<i64> = row
            .try_get("counts")
            .map_err(database(&self.node, "reading the lease summary"))?;
        Ok(LeaseSummary {
            claimable_total: count(&row, "claimable")?,
            free: count(&row, "free")?,
            by_owner: owners
                .into_iter()
                .zip(counts)
                .map(|(owner, n)| (owner, u64::try_from(n).unwrap_or(0)))
                .collect(),
            live_instances: row
                .try_get("live")
                .map_err(database(&self.node, "reading the lease summary"))?,
        })
    }

    async fn submit_request(
        &self,
        key: &RolloutKey,
        body: &serde_json::Value,
    ) -> Result<i64, StoreError> {
        let what = format_args!("submitting a request for {key}").to_string();
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(database(&self.node, &what))?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO requests (namespace, name, body, submitted_by, submitted_at) \
             VALUES ($1, $2, $3, $4, clock_timestamp()) RETURNING id",
        )
        .bind(&key.namespace)
        .bind(&key.name)
        .bind(body.to_string())
        .bind(&self.node.id)
        .fetch_one(&mut *tx)
        .await
        .map_err(database(&self.node, &what))?;
        let payload = Payload::Request {
            id,
            ns: key.namespace.clone(),
            name: key.name.clone(),
        };
        notify(&mut tx, &payload)
            .await
            .map_err(database(&self.node, &what))?;
        tx.commit().await.map_err(database(&self.node, &what))?;
        Ok(id)
    }

    async fn pending_requests(&self) -> Result<Vec<PendingRequest>, StoreError> {
        let snapshot = held(&self.node).clone();
        if snapshot.is_empty() {
            return Ok(Vec::new());
        }
        let (namespaces, names, epochs) = held_arrays(&snapshot);
        let rows = sqlx::query(
            "SELECT r.id, r.namespace, r.name, r.body, r.executed_at IS NOT NULL AS executed \
             FROM requests r \
             JOIN leases l ON l.namespace = r.namespace AND l.name = r.name \
             JOIN UNNEST($2::text[], $3::text[], $4::bigint[]) AS h(namespace, name, epoch) \
               ON h.namespace = l.namespace AND h.name = l.name AND h.epoch = l.epoch \
             WHERE r.answer IS NULL AND l.owner = $1 \
             ORDER BY r.id",
        )
        .bind(&self.node.id)
        .bind(namespaces)
        .bind(names)
        .bind(epochs)
        .fetch_all(&self.pool)
        .await
        .map_err(database(&self.node, "reading pending requests"))?;
        rows.iter()
            .map(|row| {
                let namespace: String = row
                    .try_get("namespace")
                    .map_err(database(&self.node, "reading pending requests"))?;
                let name: String = row
                    .try_get("name")
                    .map_err(database(&self.node, "reading pending requests"))?;
                let key = RolloutKey::new(namespace, name);
                let id: i64 = row.try_get("id").map_err(corrupt(&key))?;
                let body: String = row.try_get("body").map_err(corrupt(&key))?;
                let body = serde_json::from_str(&body).map_err(|error| StoreError::Corrupt {
                    key: key.clone(),
                    detail: format!("request {id}: body is not JSON: {error}"),
                })?;
                Ok(PendingRequest {
                    id,
                    body,
                    executed: row.try_get("executed").map_err(corrupt(&key))?,
                    key,
                })
            })
            .collect()
    }

    async fn answer_request(&self, id: i64, answer: &serde_json::Value) -> Result<(), StoreError> {
        let what = format!("answering request {id}");
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(database(&self.node, &what))?;
        let answered = sqlx::query(
            "UPDATE requests \
             SET answer = $2, answered_at = clock_timestamp(), \
                 executed_at = coalesce(executed_at, clock_timestamp()) \
             WHERE id = $1 AND answer IS NULL",
        )
        .bind(id)
        .bind(answer.to_string())
        .execute(&mut *tx)
        .await
        .map_err(database(&self.node, &what))?
        .rows_affected();
        if answered > 0 {
            notify(&mut tx, &Payload::Answer { id })
                .await
                .map_err(database(&self.node, &what))?;
        }
        // Answered requests are kept an hour (a submitter polling request_answer after a lost
        // notification still finds its answer), then deleted by a later answer, at most 1000 at a
        // time. Rows another answer is deleting are skipped: answers never wait for each other.
        sqlx::query(
            "DELETE FROM requests WHERE id IN (SELECT id FROM requests \
               WHERE answered_at < clock_timestamp() - interval '1 hour' \
               LIMIT 1000 FOR UPDATE SKIP LOCKED)",
        )
        .execute(&mut *tx)
        .await
        .map_err(database(&self.node, &what))?;
        tx.commit().await.map_err(database(&self.node, &what))
    }

    async fn request_answer(&self, id: i64) -> Result<Option<serde_json::Value>, StoreError> {
        let what = format!("reading the answer to request {id}");
        let answer: Option<Option<String>> =
            sqlx::query_scalar("SELECT answer FROM requests WHERE id = $1")
                .bind(id)
                .fetch_optional(&self.pool)
                .await
                .map_err(database(&self.node, &what))?;
        answer
            .flatten()
            .map(|text| {
                serde_json::from_str(&text).map_err(|error| {
                    StoreError::Database(format!("{what}: the answer is not JSON: {error}"))
                })
            })
            .transpose()
    }

    async fn notices(&self) -> Result<mpsc::Receiver<Notice>, StoreError> {
        // A pool of its own (one connection) built from the store's options: the listening
        // connection is held for as long as the receiver lives, and must neither take a
        // connection from the store's pool nor be cut off when that pool is closed.
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .acquire_timeout(LISTEN_CONNECT_TIMEOUT)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_lazy_with((*self.pool.connect_options()).clone());
        let listener = listen(&pool)
            .await
            .map_err(database(&self.node, "listening for notifications"))?;
        let (sender, receiver) = mpsc::channel(NOTICE_CAPACITY);
        tokio::spawn(forward_notices(pool, listener, sender));
        Ok(receiver)
    }
}

/// A listener on channel `weir`, on a connection of `pool`.
async fn listen(pool: &PgPool) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(CHANNEL).await?;
    Ok(listener)
}

/// Forwards notifications to `sender` until its receiver is dropped, then closes the listening
/// connection (the pool would otherwise keep it open, idle).
async fn forward_notices(pool: PgPool, listener: PgListener, sender: mpsc::Sender<Notice>) {
    forward(&pool, listener, &sender).await;
    pool.close().await;
}

/// The loop of [`forward_notices`]. A lost connection is opened again (waiting
/// [`RECONNECT_FIRST`], doubling up to [`RECONNECT_MAX`] between failed attempts) and
/// [`Notice::Reconnected`] sent once it listens again; a notice that finds the channel full is
/// dropped, and [`Notice::Reconnected`] sent as soon as there is room.
async fn forward(pool: &PgPool, mut listener: PgListener, sender: &mpsc::Sender<Notice>) {
    // Something was missed (dropped on a full channel, or while reconnecting) and the receiver
    // has not been told yet.
    let mut missed = false;
    loop {
        let received = {
            let recv = listener.try_recv();
            tokio::pin!(recv);
            loop {
                tokio::select! {
                    received = &mut recv => break received,
                    permit = sender.reserve(), if missed => match permit {
                        Ok(permit) => {
                            permit.send(Notice::Reconnected);
                            missed = false;
                        }
                        Err(_) => return,
                    },
                    () = sender.closed(), if !missed => return,
                }
            }
        };
        match received {
            Ok(Some(notification)) => {
                let Some(notice) = parse_notice(notification.payload()) else {
                    continue;
                };
                if missed {
                    // Reconnected first; without room for it this notice is dropped too (the
                    // receiver re-reads everything once told).
                    match sender.try_send(Notice::Reconnected) {
                        Ok(()) => missed = false,
                        Err(mpsc::error::TrySendError::Full(_)) => continue,
                        Err(mpsc::error::TrySendError::Closed(_)) => return,
                    }
                }
                match sender.try_send(notice) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(_)) => missed = true,
                    Err(mpsc::error::TrySendError::Closed(_)) => return,
                }
            }
            // `Ok(None)`: the connection was lost (sqlx may have opened another already);
            // `Err`: it failed otherwise. Either way notifications may have been missed: start
            // over on a fresh connection.
            Ok(None) | Err(_) => {
                drop(listener);
                missed = true;
                let Some(again) = relisten(pool, sender).await else {
                    return;
                };
                listener = again;
            }
        }
    }
}

/// Opens the listening connection again, with growing waits between failed attempts; `None` once
/// the receiver is dropped.
async fn relisten(pool: &PgPool, sender: &mpsc::Sender<Notice>) -> Option<PgListener> {
    let mut wait = RECONNECT_FIRST;
    loop {
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = sender.closed() => return None,
        }
        tokio::select! {
            listener = listen(pool) => {
                if let Ok(listener) = listener {
                    return Some(listener);
                }
            }
            () = sender.closed() => return None,
        }
        wait = (wait * 2).min(RECONNECT_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_parse_into_notices() {
        let cases = [
            (
                r#"{"t":"rollout","ns":"shop","name":"checkout","version":3,"seq":7,"by":"a-1-0f"}"#,
                Notice::RolloutChanged {
                    key: RolloutKey::new("shop", "checkout"),
                    version: 3,
                    last_event_seq: 7,
                    by: "a-1-0f".into(),
                },
            ),
            (
                r#"{"t":"flag","ns":"shop","key":"new-cart","version":0,"by":"b"}"#,
                Notice::FlagChanged {
                    namespace: "shop".into(),
                    key: "new-cart".into(),
                    version: 0,
                    by: "b".into(),
                },
            ),
            (
                r#"{"t":"request","id":12,"ns":"shop","name":"checkout"}"#,
                Notice::RequestSubmitted {
                    id: 12,
                    key: RolloutKey::new("shop", "checkout"),
                },
            ),
            (
                r#"{"t":"answer","id":12}"#,
                Notice::RequestAnswered { id: 12 },
            ),
            (r#"{"t":"freed"}"#, Notice::LeasesFreed),
            (
                r#"{"t":"tokens","by":"a-1-0f"}"#,
                Notice::TokensChanged {
                    by: "a-1-0f".into(),
                },
            ),
        ];
        for (payload, notice) in cases {
            assert_eq!(parse_notice(payload), Some(notice), "{payload}");
        }
    }

    #[test]
    fn payloads_this_module_sends_read_back() {
        for payload in [
            Payload::Request {
                id: 1,
                ns: "a\"b".into(),
                name: "c".into(),
            },
            Payload::Answer { id: 2 },
            Payload::Freed,
        ] {
            let text = payload.text();
            assert_eq!(
                serde_json::from_str::<Payload>(&text).ok(),
                Some(payload),
                "{text}"
            );
        }
        assert_eq!(Payload::Freed.text(), r#"{"t":"freed"}"#);
        assert_eq!(Payload::Answer { id: 5 }.text(), r#"{"t":"answer","id":5}"#);
    }

    #[test]
    fn unknown_payloads_are_ignored() {
        for payload in [
            "",
            "not json",
            r#"{"t":"something-new","x":1}"#,
            r#"{"t":"answer"}"#,
            r#"{"t":"rollout","ns":"a"}"#,
        ] {
            assert_eq!(parse_notice(payload), None, "{payload}");
        }
    }
}
