//! Feature flags in the SQLite file: table `flags` (migration 2), one row per flag, primary key
//! `(namespace, key)`, the document as JSON and a version for optimistic concurrency. Writes use
//! the same single writer connection and `BEGIN IMMEDIATE` transactions as rollouts.

use jiff::Timestamp;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;
use weir_core::model::Flag;

use super::{SqliteStore, to_sql};
use crate::{ApplyOutcome, FlagKey, FlagStore, FlagStoreError, StoredFlag};

const COLUMNS: &str = "namespace, key, document, version, created_at, updated_at";

fn database(what: &str, key: &FlagKey) -> impl FnOnce(sqlx::Error) -> FlagStoreError {
    move |error| FlagStoreError::Database(format!("{what} flag {key}: {error}"))
}

fn decode(row: &SqliteRow) -> Result<StoredFlag, FlagStoreError> {
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

impl FlagStore for SqliteStore {
    async fn put_flag(
        &self,
        flag: &Flag,
        expected_version: Option<u64>,
        now: Timestamp,
    ) -> Result<(StoredFlag, ApplyOutcome), FlagStoreError> {
        let key = FlagKey::of(flag);
        let document = serde_json::to_string(flag)
            .map_err(|error| FlagStoreError::Database(format!("encoding flag {key}: {error}")))?;
        let mut tx = self
            .writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(database("writing", &key))?;
        let current = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM flags WHERE namespace = ? AND key = ?"
        )))
        .bind(&key.namespace)
        .bind(&key.key)
        .fetch_optional(&mut *tx)
        .await
        .map_err(database("reading", &key))?
        .map(|row| decode(&row))
        .transpose()?;
        let stored = match current {
            None => {
                if let Some(expected) = expected_version
                    && expected != 0
                {
                    return Err(FlagStoreError::NotFound(key));
                }
                sqlx::query(
                    "INSERT INTO flags (namespace, key, document, version, created_at, updated_at) \
                     VALUES (?, ?, ?, 1, ?, ?)",
                )
                .bind(&key.namespace)
                .bind(&key.key)
                .bind(&document)
                .bind(now.to_string())
                .bind(now.to_string())
                .execute(&mut *tx)
                .await
                .map_err(database("creating", &key))?;
                (
                    StoredFlag {
                        key,
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
                    return Err(FlagStoreError::AlreadyExists(key));
                }
                if let Some(expected) = expected_version
                    && expected != current.version
                {
                    return Err(FlagStoreError::Conflict {
                        key,
                        expected,
                        actual: current.version,
                    });
                }
                if current.flag == *flag {
                    return Ok((current, ApplyOutcome::Unchanged));
                }
                let version = current.version + 1;
                sqlx::query(
                    "UPDATE flags SET document = ?, version = ?, updated_at = ? \
                     WHERE namespace = ? AND key = ?",
                )
                .bind(&document)
                .bind(to_sql(version))
                .bind(now.to_string())
                .bind(&key.namespace)
                .bind(&key.key)
                .execute(&mut *tx)
                .await
                .map_err(database("updating", &key))?;
                (
                    StoredFlag {
                        key,
                        flag: flag.clone(),
                        version,
                        created_at: current.created_at,
                        updated_at: now,
                    },
                    ApplyOutcome::Updated,
                )
            }
        };
        tx.commit()
            .await
            .map_err(database("committing", &stored.0.key))?;
        Ok(stored)
    }

    async fn get_flag(&self, key: &FlagKey) -> Result<Option<StoredFlag>, FlagStoreError> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM flags WHERE namespace = ? AND key = ?"
        )))
        .bind(&key.namespace)
        .bind(&key.key)
        .fetch_optional(&self.reader)
        .await
        .map_err(database("reading", key))?
        .map(|row| decode(&row))
        .transpose()
    }

    async fn list_flags(&self) -> Result<Vec<StoredFlag>, FlagStoreError> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM flags ORDER BY namespace, key"
        )))
        .fetch_all(&self.reader)
        .await
        .map_err(|error| FlagStoreError::Database(format!("listing flags: {error}")))?
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
            .writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(database("deleting", key))?;
        let version: Option<i64> =
            sqlx::query("SELECT version FROM flags WHERE namespace = ? AND key = ?")
                .bind(&key.namespace)
                .bind(&key.key)
                .fetch_optional(&mut *tx)
                .await
                .map_err(database("reading", key))?
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
        sqlx::query("DELETE FROM flags WHERE namespace = ? AND key = ?")
            .bind(&key.namespace)
            .bind(&key.key)
            .execute(&mut *tx)
            .await
            .map_err(database("deleting", key))?;
        tx.commit().await.map_err(database("deleting", key))
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
