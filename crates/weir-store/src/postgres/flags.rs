//! Feature flags in PostgreSQL: table `flags`, one row per flag, primary key `(namespace, key)`,
//! the document as JSON text and a version for optimistic concurrency, as on SQLite. A write
//! locks the row it checks (`FOR UPDATE`) and notifies the other instances on COMMIT.

use jiff::Timestamp;
use sqlx::Row;
use sqlx::postgres::{PgConnection, PgRow};
use weir_core::model::Flag;

use super::{CREATE_ATTEMPTS, Node, PostgresStore, notify};
use crate::sqlite::to_sql;
use crate::{ApplyOutcome, FlagKey, FlagStore, FlagStoreError, StoredFlag};

const COLUMNS: &str = "namespace, key, document, version, created_at, updated_at";

fn database<'a>(
    node: &'a Node,
    what: &'a str,
    key: &'a FlagKey,
) -> impl FnOnce(sqlx::Error) -> FlagStoreError + 'a {
    move |error| {
        if super::unreachable(&error) {
            FlagStoreError::Unavailable(
                node.unreachable_message(format_args!("{what} flag {key}"), &error),
            )
        } else {
            FlagStoreError::Database(format!("{what} flag {key}: {error}"))
        }
    }
}

/// Ends a flag write's transaction: commits when `result` says something was written, rolls back
/// otherwise (explicitly: see `finish` in postgres.rs).
async fn finish<T>(
    node: &Node,
    tx: sqlx::Transaction<'static, sqlx::Postgres>,
    result: Result<(T, bool), FlagStoreError>,
    key: &FlagKey,
) -> Result<T, FlagStoreError> {
    match result {
        Ok((value, true)) => {
            tx.commit()
                .await
                .map_err(database(node, "committing", key))?;
            Ok(value)
        }
        Ok((value, false)) => {
            tx.rollback()
                .await
                .map_err(database(node, "writing", key))?;
            Ok(value)
        }
        Err(error) => {
            // The error says what went wrong; a failed rollback only closes the connection.
            let _ = tx.rollback().await;
            Err(error)
        }
    }
}

fn decode(row: &PgRow) -> Result<StoredFlag, FlagStoreError> {
    let text = |column: &str| -> Result<String, FlagStoreError> {
        row.try_get::<String, _>(column)
            .map_err(|error| FlagStoreError::Database(format!("reading column {column}: {error}")))
    };
    let key = FlagKey::new(text("namespace")?, text("key")?);
    let corrupt = |column: &str, detail: String| {
        FlagStoreError::Database(format!("stored flag {key} is corrupt ({column}): {detail}"))
    };
    let flag: Flag = serde_json::from_str(&text("document")?)
        .map_err(|error| corrupt("document", error.to_string()))?;
    let version = row
        .try_get::<i64, _>("version")
        .ok()
        .and_then(|version| u64::try_from(version).ok())
        .ok_or_else(|| corrupt("version", "not a positive integer".into()))?;
    let timestamp = |column: &str| -> Result<Timestamp, FlagStoreError> {
        text(column)?
            .parse()
            .map_err(|error: jiff::Error| corrupt(column, error.to_string()))
    };
    Ok(StoredFlag {
        created_at: timestamp("created_at")?,
        updated_at: timestamp("updated_at")?,
        key,
        flag,
        version,
    })
}

impl PostgresStore {
    /// One attempt at put_flag inside its transaction: the outcome and whether it wrote
    /// anything; `None` when a concurrent write created the flag between the read and the insert.
    async fn put_flag_in(
        &self,
        tx: &mut PgConnection,
        flag: &Flag,
        key: &FlagKey,
        document: &str,
        expected_version: Option<u64>,
        now: Timestamp,
    ) -> Result<Option<((StoredFlag, ApplyOutcome), bool)>, FlagStoreError> {
        let current = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM flags WHERE namespace = $1 AND key = $2 FOR UPDATE"
        )))
        .bind(&key.namespace)
        .bind(&key.key)
        .fetch_optional(&mut *tx)
        .await
        .map_err(database(&self.node, "reading", key))?
        .map(|row| decode(&row))
        .transpose()?;
        let stored = match current {
            None => {
                if let Some(expected) = expected_version
                    && expected != 0
                {
                    return Err(FlagStoreError::NotFound(key.clone()));
                }
                let inserted = sqlx::query(
                    "INSERT INTO flags (namespace, key, document, version, created_at, updated_at) \
                     VALUES ($1, $2, $3, 1, $4, $5) ON CONFLICT (namespace, key) DO NOTHING",
                )
                .bind(&key.namespace)
                .bind(&key.key)
                .bind(document)
                .bind(now.to_string())
                .bind(now.to_string())
                .execute(&mut *tx)
                .await
                .map_err(database(&self.node, "creating", key))?
                .rows_affected();
                if inserted == 0 {
                    // Created concurrently since the read.
                    return Ok(None);
                }
                (
                    StoredFlag {
                        key: key.clone(),
                        flag: flag.clone(),
                        version: 1,
                        created_at: now,
                        updated_at: now,
                    },
                    ApplyOutcome::Created,
                )
            }
            Some(current) => {
                if expected_version == Some(0) {
                    return Err(FlagStoreError::AlreadyExists(key.clone()));
                }
                if let Some(expected) = expected_version
                    && expected != current.version
                {
                    return Err(FlagStoreError::Conflict {
                        key: key.clone(),
                        expected,
                        actual: current.version,
                    });
                }
                if current.flag == *flag {
                    return Ok(Some(((current, ApplyOutcome::Unchanged), false)));
                }
                let version = current.version + 1;
                sqlx::query(
                    "UPDATE flags SET document = $1, version = $2, updated_at = $3 \
                     WHERE namespace = $4 AND key = $5",
                )
                .bind(document)
                .bind(to_sql(version))
                .bind(now.to_string())
                .bind(&key.namespace)
                .bind(&key.key)
                .execute(&mut *tx)
                .await
                .map_err(database(&self.node, "updating", key))?;
                (
                    StoredFlag {
                        key: key.clone(),
                        flag: flag.clone(),
                        version,
                        created_at: current.created_at,
                        updated_at: now,
                    },
                    ApplyOutcome::Updated,
                )
            }
        };
        self.notify_flag(tx, &stored.0.key, stored.0.version)
            .await?;
        Ok(Some((stored, true)))
    }

    /// Queues a flag notification in the transaction (sent on COMMIT); version 0: deleted.
    async fn notify_flag(
        &self,
        tx: &mut PgConnection,
        key: &FlagKey,
        version: u64,
    ) -> Result<(), FlagStoreError> {
        let payload = serde_json::json!({
            "t": "flag",
            "ns": key.namespace,
            "key": key.key,
            "version": version,
            "by": self.node.id,
        });
        notify(tx, &payload)
            .await
            .map_err(database(&self.node, "notifying about", key))
    }
}

impl FlagStore for PostgresStore {
    async fn put_flag(
        &self,
        flag: &Flag,
        expected_version: Option<u64>,
        now: Timestamp,
    ) -> Result<(StoredFlag, ApplyOutcome), FlagStoreError> {
        let key = FlagKey::of(flag);
        let document = serde_json::to_string(flag)
            .map_err(|error| FlagStoreError::Database(format!("encoding flag {key}: {error}")))?;
        for _ in 0..CREATE_ATTEMPTS {
            let mut tx = self
                .pool
                .begin()
                .await
                .map_err(database(&self.node, "writing", &key))?;
            let result = self
                .put_flag_in(&mut tx, flag, &key, &document, expected_version, now)
                .await;
            let outcome = match result {
                Ok(Some((stored, written))) => Ok((Some(stored), written)),
                Ok(None) => Ok((None, false)),
                Err(error) => Err(error),
            };
            if let Some(stored) = finish(&self.node, tx, outcome, &key).await? {
                return Ok(stored);
            }
        }
        Err(FlagStoreError::Database(format!(
            "writing flag {key}: it was created and deleted concurrently {CREATE_ATTEMPTS} times"
        )))
    }

    async fn get_flag(&self, key: &FlagKey) -> Result<Option<StoredFlag>, FlagStoreError> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM flags WHERE namespace = $1 AND key = $2"
        )))
        .bind(&key.namespace)
        .bind(&key.key)
        .fetch_optional(&self.pool)
        .await
        .map_err(database(&self.node, "reading", key))?
        .map(|row| decode(&row))
        .transpose()
    }

    async fn list_flags(&self) -> Result<Vec<StoredFlag>, FlagStoreError> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM flags ORDER BY namespace, key"
        )))
        .fetch_all(&self.pool)
        .await
        .map_err(|error| {
            if super::unreachable(&error) {
                FlagStoreError::Unavailable(self.node.unreachable_message("listing flags", &error))
            } else {
                FlagStoreError::Database(format!("listing flags: {error}"))
            }
        })?
        .iter()
        .map(decode)
        .collect()
    }

    async fn delete_flag(
        &self,
        key: &FlagKey,
        expected_version: Option<u64>,
    ) -> Result<(), FlagStoreError> {
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(database(&self.node, "deleting", key))?;
        let result = async {
            let version: Option<i64> = sqlx::query(
                "SELECT version FROM flags WHERE namespace = $1 AND key = $2 FOR UPDATE",
            )
            .bind(&key.namespace)
            .bind(&key.key)
            .fetch_optional(&mut *tx)
            .await
            .map_err(database(&self.node, "reading", key))?
            .and_then(|row| row.try_get("version").ok());
            let Some(version) = version.and_then(|version| u64::try_from(version).ok()) else {
                return Err(FlagStoreError::NotFound(key.clone()));
            };
            if let Some(expected) = expected_version
                && expected != version
            {
                return Err(FlagStoreError::Conflict {
                    key: key.clone(),
                    expected,
                    actual: version,
                });
            }
            sqlx::query("DELETE FROM flags WHERE namespace = $1 AND key = $2")
                .bind(&key.namespace)
                .bind(&key.key)
                .execute(&mut *tx)
                .await
                .map_err(database(&self.node, "deleting", key))?;
            self.notify_flag(&mut tx, key, 0).await?;
            Ok(((), true))
        }
        .await;
        finish(&self.node, tx, result, key).await
    }

    async fn record_flag_change(
        &self,
        change: &crate::NewFlagChange,
    ) -> Result<u64, FlagStoreError> {
        self.record_flag_change_impl(change).await
    }

    async fn flag_history(
        &self,
        key: &FlagKey,
        limit: usize,
        before: Option<u64>,
    ) -> Result<Vec<crate::StoredFlagChange>, FlagStoreError> {
        self.flag_history_impl(key, limit, before).await
    }

    async fn add_evaluation_counts(
        &self,
        counts: &[crate::EvaluationCount],
    ) -> Result<(), FlagStoreError> {
        self.add_evaluation_counts_impl(counts).await
    }

    async fn prune_evaluation_counts(&self, minute: i64) -> Result<(), FlagStoreError> {
        self.prune_evaluation_counts_impl(minute).await
    }

    async fn evaluation_counts(
        &self,
        key: &FlagKey,
        since: i64,
    ) -> Result<Vec<crate::EvaluationCount>, FlagStoreError> {
        self.evaluation_counts_impl(key, since).await
    }

    async fn create_trigger(&self, trigger: &crate::NewFlagTrigger) -> Result<(), FlagStoreError> {
        self.create_trigger_impl(trigger).await
    }

    async fn list_triggers(
        &self,
        key: &FlagKey,
    ) -> Result<Vec<crate::StoredFlagTrigger>, FlagStoreError> {
        self.list_triggers_impl(key).await
    }

    async fn get_trigger(
        &self,
        id: &str,
    ) -> Result<Option<crate::StoredFlagTrigger>, FlagStoreError> {
        self.get_trigger_impl(id).await
    }

    async fn delete_trigger(&self, key: &FlagKey, id: &str) -> Result<bool, FlagStoreError> {
        self.delete_trigger_impl(key, id).await
    }

    async fn trigger_used(&self, id: &str, at: Timestamp) -> Result<(), FlagStoreError> {
        self.trigger_used_impl(id, at).await
    }
}
