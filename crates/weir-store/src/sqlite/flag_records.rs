//! What is kept about flags beside them in the SQLite file (migration 4): `flag_history`,
//! `flag_evaluations` and `flag_triggers` (see `flag_records.rs` at the crate's root). Writes use
//! the single writer connection, as every write does.

use jiff::Timestamp;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use super::{SqliteStore, to_sql};
use crate::{
    EvaluationCount, FieldChange, FlagKey, FlagStoreError, NewFlagChange, NewFlagTrigger,
    StoredFlagChange, StoredFlagTrigger,
};

pub(crate) const HISTORY_COLUMNS: &str =
    "id, namespace, key, at, actor, action, version, address, changes";
pub(crate) const TRIGGER_COLUMNS: &str = "id, namespace, key, action, description, secret_hash, \
     created_by, created_at, last_used_at, uses";

fn failed(what: &'static str) -> impl FnOnce(sqlx::Error) -> FlagStoreError {
    move |error| FlagStoreError::Database(format!("{what}: {error}"))
}

/// Reads what both backends store alike (text, integers) from a row.
pub(crate) trait Columns {
    fn text(&self, column: &str) -> Result<String, FlagStoreError>;
    fn optional_text(&self, column: &str) -> Result<Option<String>, FlagStoreError>;
    fn integer(&self, column: &str) -> Result<Option<i64>, FlagStoreError>;
}

impl Columns for SqliteRow {
    fn text(&self, column: &str) -> Result<String, FlagStoreError> {
        self.try_get::<String, _>(column)
            .map_err(|error| FlagStoreError::Database(format!("reading column {column}: {error}")))
    }
    fn optional_text(&self, column: &str) -> Result<Option<String>, FlagStoreError> {
        self.try_get::<Option<String>, _>(column)
            .map_err(|error| FlagStoreError::Database(format!("reading column {column}: {error}")))
    }
    fn integer(&self, column: &str) -> Result<Option<i64>, FlagStoreError> {
        self.try_get::<Option<i64>, _>(column)
            .map_err(|error| FlagStoreError::Database(format!("reading column {column}: {error}")))
    }
}

fn corrupt(what: &str, detail: impl std::fmt::Display) -> FlagStoreError {
    FlagStoreError::Database(format!("stored {what} is corrupt: {detail}"))
}

fn timestamp(text: &str) -> Result<Timestamp, FlagStoreError> {
    text.parse()
        .map_err(|error: jiff::Error| corrupt("time", error))
}

fn unsigned(value: Option<i64>) -> Option<u64> {
    value.and_then(|value| u64::try_from(value).ok())
}

pub(crate) fn decode_change(row: &impl Columns) -> Result<StoredFlagChange, FlagStoreError> {
    let changes: Vec<FieldChange> = serde_json::from_str(&row.text("changes")?)
        .map_err(|error| corrupt("flag history", error))?;
    Ok(StoredFlagChange {
        id: unsigned(row.integer("id")?).ok_or_else(|| corrupt("flag history", "id"))?,
        change: NewFlagChange {
            key: FlagKey::new(row.text("namespace")?, row.text("key")?),
            at: timestamp(&row.text("at")?)?,
            actor: row.text("actor")?,
            action: row.text("action")?,
            version: unsigned(row.integer("version")?),
            address: row.optional_text("address")?,
            changes,
        },
    })
}

pub(crate) fn decode_trigger(row: &impl Columns) -> Result<StoredFlagTrigger, FlagStoreError> {
    Ok(StoredFlagTrigger {
        trigger: NewFlagTrigger {
            id: row.text("id")?,
            key: FlagKey::new(row.text("namespace")?, row.text("key")?),
            action: row.text("action")?,
            description: row.text("description")?,
            secret_hash: row.text("secret_hash")?,
            created_by: row.text("created_by")?,
            created_at: timestamp(&row.text("created_at")?)?,
        },
        last_used_at: row
            .optional_text("last_used_at")?
            .map(|text| timestamp(&text))
            .transpose()?,
        uses: unsigned(row.integer("uses")?).unwrap_or(0),
    })
}

pub(crate) fn decode_count(row: &impl Columns) -> Result<EvaluationCount, FlagStoreError> {
    Ok(EvaluationCount {
        key: FlagKey::new(row.text("namespace")?, row.text("key")?),
        variation: row.text("variation")?,
        minute: row.integer("minute")?.unwrap_or(0),
        count: unsigned(row.integer("count")?).unwrap_or(0),
    })
}

pub(crate) fn encode_changes(changes: &[FieldChange]) -> Result<String, FlagStoreError> {
    serde_json::to_string(changes)
        .map_err(|error| FlagStoreError::Database(format!("encoding a flag's changes: {error}")))
}

/// A `LIMIT` for SQL.
pub(crate) fn limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

impl SqliteStore {
    pub(crate) async fn record_flag_change_impl(
        &self,
        change: &NewFlagChange,
    ) -> Result<u64, FlagStoreError> {
        let row = sqlx::query(
            "INSERT INTO flag_history (namespace, key, at, actor, action, version, address, changes) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        )
        .bind(&change.key.namespace)
        .bind(&change.key.key)
        .bind(change.at.to_string())
        .bind(&change.actor)
        .bind(&change.action)
        .bind(change.version.map(to_sql))
        .bind(&change.address)
        .bind(encode_changes(&change.changes)?)
        .fetch_one(&self.writer)
        .await
        .map_err(failed("recording a flag's change"))?;
        unsigned(row.integer("id")?).ok_or_else(|| corrupt("flag history", "id"))
    }

    pub(crate) async fn flag_history_impl(
        &self,
        key: &FlagKey,
        max: usize,
        before: Option<u64>,
    ) -> Result<Vec<StoredFlagChange>, FlagStoreError> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {HISTORY_COLUMNS} FROM flag_history WHERE namespace = ? AND key = ? AND id < ? \
             ORDER BY id DESC LIMIT ?"
        )))
        .bind(&key.namespace)
        .bind(&key.key)
        .bind(before.map_or(i64::MAX, to_sql))
        .bind(limit(max))
        .fetch_all(&self.reader)
        .await
        .map_err(failed("reading a flag's history"))?
        .iter()
        .map(decode_change)
        .collect()
    }

    pub(crate) async fn add_evaluation_counts_impl(
        &self,
        counts: &[EvaluationCount],
    ) -> Result<(), FlagStoreError> {
        if counts.is_empty() {
            return Ok(());
        }
        let mut tx = self
            .writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(failed("adding evaluation counts"))?;
        for count in counts {
            sqlx::query(
                "INSERT INTO flag_evaluations (namespace, key, variation, minute, count) \
                 VALUES (?, ?, ?, ?, ?) ON CONFLICT (namespace, key, minute, variation) \
                 DO UPDATE SET count = flag_evaluations.count + excluded.count",
            )
            .bind(&count.key.namespace)
            .bind(&count.key.key)
            .bind(&count.variation)
            .bind(count.minute)
            .bind(to_sql(count.count))
            .execute(&mut *tx)
            .await
            .map_err(failed("adding evaluation counts"))?;
        }
        tx.commit()
            .await
            .map_err(failed("committing evaluation counts"))
    }

    pub(crate) async fn prune_evaluation_counts_impl(
        &self,
        minute: i64,
    ) -> Result<(), FlagStoreError> {
        sqlx::query("DELETE FROM flag_evaluations WHERE minute < ?")
            .bind(minute)
            .execute(&self.writer)
            .await
            .map_err(failed("pruning evaluation counts"))?;
        Ok(())
    }

    pub(crate) async fn evaluation_counts_impl(
        &self,
        key: &FlagKey,
        since: i64,
    ) -> Result<Vec<EvaluationCount>, FlagStoreError> {
        sqlx::query(
            "SELECT namespace, key, variation, minute, count FROM flag_evaluations \
             WHERE namespace = ? AND key = ? AND minute >= ? ORDER BY minute, variation",
        )
        .bind(&key.namespace)
        .bind(&key.key)
        .bind(since)
        .fetch_all(&self.reader)
        .await
        .map_err(failed("reading evaluation counts"))?
        .iter()
        .map(decode_count)
        .collect()
    }

    pub(crate) async fn create_trigger_impl(
        &self,
        trigger: &NewFlagTrigger,
    ) -> Result<(), FlagStoreError> {
        sqlx::query(
            "INSERT INTO flag_triggers (id, namespace, key, action, description, secret_hash, \
             created_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&trigger.id)
        .bind(&trigger.key.namespace)
        .bind(&trigger.key.key)
        .bind(&trigger.action)
        .bind(&trigger.description)
        .bind(&trigger.secret_hash)
        .bind(&trigger.created_by)
        .bind(trigger.created_at.to_string())
        .execute(&self.writer)
        .await
        .map_err(failed("creating a trigger"))?;
        Ok(())
    }

    pub(crate) async fn list_triggers_impl(
        &self,
        key: &FlagKey,
    ) -> Result<Vec<StoredFlagTrigger>, FlagStoreError> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {TRIGGER_COLUMNS} FROM flag_triggers WHERE namespace = ? AND key = ? \
             ORDER BY created_at, id"
        )))
        .bind(&key.namespace)
        .bind(&key.key)
        .fetch_all(&self.reader)
        .await
        .map_err(failed("listing triggers"))?
        .iter()
        .map(decode_trigger)
        .collect()
    }

    pub(crate) async fn get_trigger_impl(
        &self,
        id: &str,
    ) -> Result<Option<StoredFlagTrigger>, FlagStoreError> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {TRIGGER_COLUMNS} FROM flag_triggers WHERE id = ?"
        )))
        .bind(id)
        .fetch_optional(&self.reader)
        .await
        .map_err(failed("reading a trigger"))?
        .map(|row| decode_trigger(&row))
        .transpose()
    }

    pub(crate) async fn delete_trigger_impl(
        &self,
        key: &FlagKey,
        id: &str,
    ) -> Result<bool, FlagStoreError> {
        let deleted =
            sqlx::query("DELETE FROM flag_triggers WHERE namespace = ? AND key = ? AND id = ?")
                .bind(&key.namespace)
                .bind(&key.key)
                .bind(id)
                .execute(&self.writer)
                .await
                .map_err(failed("revoking a trigger"))?
                .rows_affected();
        Ok(deleted > 0)
    }

    pub(crate) async fn trigger_used_impl(
        &self,
        id: &str,
        at: Timestamp,
    ) -> Result<(), FlagStoreError> {
        sqlx::query("UPDATE flag_triggers SET uses = uses + 1, last_used_at = ? WHERE id = ?")
            .bind(at.to_string())
            .bind(id)
            .execute(&self.writer)
            .await
            .map_err(failed("counting a trigger's use"))?;
        Ok(())
    }
}
