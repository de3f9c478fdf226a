//! What is kept about flags beside them in PostgreSQL (migration 2): `flag_history`,
//! `flag_evaluations` and `flag_triggers`, as on SQLite (`sqlite/flag_records.rs`, whose decoding
//! this shares). Neither needs a notification: every instance reads them from the database.

use jiff::Timestamp;
use sqlx::Row;
use sqlx::postgres::PgRow;

use super::PostgresStore;
use crate::sqlite::flag_records::{
    Columns, HISTORY_COLUMNS, TRIGGER_COLUMNS, decode_change, decode_count, decode_trigger,
    encode_changes, limit,
};
use crate::sqlite::to_sql;
use crate::{
    EvaluationCount, FlagKey, FlagStoreError, NewFlagChange, NewFlagTrigger, StoredFlagChange,
    StoredFlagTrigger,
};

impl Columns for PgRow {
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

fn unsigned(value: Option<i64>) -> Option<u64> {
    value.and_then(|value| u64::try_from(value).ok())
}

impl PostgresStore {
    fn failed(&self, what: &'static str) -> impl FnOnce(sqlx::Error) -> FlagStoreError + '_ {
        move |error| {
            if super::unreachable(&error) {
                FlagStoreError::Unavailable(self.node.unreachable_message(what, &error))
            } else {
                FlagStoreError::Database(format!("{what}: {error}"))
            }
        }
    }

    pub(crate) async fn record_flag_change_impl(
        &self,
        change: &NewFlagChange,
    ) -> Result<u64, FlagStoreError> {
        let row = sqlx::query(
            "INSERT INTO flag_history (namespace, key, at, actor, action, version, address, changes) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
        )
        .bind(&change.key.namespace)
        .bind(&change.key.key)
        .bind(change.at.to_string())
        .bind(&change.actor)
        .bind(&change.action)
        .bind(change.version.map(to_sql))
        .bind(&change.address)
        .bind(encode_changes(&change.changes)?)
        .fetch_one(&self.pool)
        .await
        .map_err(self.failed("recording a flag's change"))?;
        unsigned(row.integer("id")?)
            .ok_or_else(|| FlagStoreError::Database("stored flag history is corrupt: id".into()))
    }

    pub(crate) async fn flag_history_impl(
        &self,
        key: &FlagKey,
        max: usize,
        before: Option<u64>,
    ) -> Result<Vec<StoredFlagChange>, FlagStoreError> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {HISTORY_COLUMNS} FROM flag_history WHERE namespace = $1 AND key = $2 AND id < $3 \
             ORDER BY id DESC LIMIT $4"
        )))
        .bind(&key.namespace)
        .bind(&key.key)
        .bind(before.map_or(i64::MAX, to_sql))
        .bind(limit(max))
        .fetch_all(&self.pool)
        .await
        .map_err(self.failed("reading a flag's history"))?
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
            .pool
            .begin()
            .await
            .map_err(self.failed("adding evaluation counts"))?;
        for count in counts {
            sqlx::query(
                "INSERT INTO flag_evaluations (namespace, key, variation, minute, count) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (namespace, key, minute, variation) \
                 DO UPDATE SET count = flag_evaluations.count + excluded.count",
            )
            .bind(&count.key.namespace)
            .bind(&count.key.key)
            .bind(&count.variation)
            .bind(count.minute)
            .bind(to_sql(count.count))
            .execute(&mut *tx)
            .await
            .map_err(self.failed("adding evaluation counts"))?;
        }
        tx.commit()
            .await
            .map_err(self.failed("committing evaluation counts"))
    }

    pub(crate) async fn prune_evaluation_counts_impl(
        &self,
        minute: i64,
    ) -> Result<(), FlagStoreError> {
        sqlx::query("DELETE FROM flag_evaluations WHERE minute < $1")
            .bind(minute)
            .execute(&self.pool)
            .await
            .map_err(self.failed("pruning evaluation counts"))?;
        Ok(())
    }

    pub(crate) async fn evaluation_counts_impl(
        &self,
        key: &FlagKey,
        since: i64,
    ) -> Result<Vec<EvaluationCount>, FlagStoreError> {
        sqlx::query(
            "SELECT namespace, key, variation, minute, count FROM flag_evaluations \
             WHERE namespace = $1 AND key = $2 AND minute >= $3 ORDER BY minute, variation",
        )
        .bind(&key.namespace)
        .bind(&key.key)
        .bind(since)
        .fetch_all(&self.pool)
        .await
        .map_err(self.failed("reading evaluation counts"))?
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
             created_by, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(&trigger.id)
        .bind(&trigger.key.namespace)
        .bind(&trigger.key.key)
        .bind(&trigger.action)
        .bind(&trigger.description)
        .bind(&trigger.secret_hash)
        .bind(&trigger.created_by)
        .bind(trigger.created_at.to_string())
        .execute(&self.pool)
        .await
        .map_err(self.failed("creating a trigger"))?;
        Ok(())
    }

    pub(crate) async fn list_triggers_impl(
        &self,
        key: &FlagKey,
    ) -> Result<Vec<StoredFlagTrigger>, FlagStoreError> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {TRIGGER_COLUMNS} FROM flag_triggers WHERE namespace = $1 AND key = $2 \
             ORDER BY created_at, id"
        )))
        .bind(&key.namespace)
        .bind(&key.key)
        .fetch_all(&self.pool)
        .await
        .map_err(self.failed("listing triggers"))?
        .iter()
        .map(decode_trigger)
        .collect()
    }

    pub(crate) async fn get_trigger_impl(
        &self,
        id: &str,
    ) -> Result<Option<StoredFlagTrigger>, FlagStoreError> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {TRIGGER_COLUMNS} FROM flag_triggers WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(self.failed("reading a trigger"))?
        .map(|row| decode_trigger(&row))
        .transpose()
    }

    pub(crate) async fn delete_trigger_impl(
        &self,
        key: &FlagKey,
        id: &str,
    ) -> Result<bool, FlagStoreError> {
        let deleted =
            sqlx::query("DELETE FROM flag_triggers WHERE namespace = $1 AND key = $2 AND id = $3")
                .bind(&key.namespace)
                .bind(&key.key)
                .bind(id)
                .execute(&self.pool)
                .await
                .map_err(self.failed("revoking a trigger"))?
                .rows_affected();
        Ok(deleted > 0)
    }

    pub(crate) async fn trigger_used_impl(
        &self,
        id: &str,
        at: Timestamp,
    ) -> Result<(), FlagStoreError> {
        sqlx::query("UPDATE flag_triggers SET uses = uses + 1, last_used_at = $1 WHERE id = $2")
            .bind(at.to_string())
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(self.failed("counting a trigger's use"))?;
        Ok(())
    }
}
