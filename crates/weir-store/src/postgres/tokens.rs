//! API tokens in PostgreSQL: table `tokens`, one row per token, its secret only as a SHA-256
//! hash; and `server_keys`, the keys a server creates on its first start (the session cookie's
//! signing key), shared by every instance on the database. The same semantics as on SQLite.

use jiff::Timestamp;
use sqlx::Row;
use sqlx::postgres::PgRow;

use super::PostgresStore;
use crate::{NewToken, StoredToken, TokenScope, TokenStore, TokenStoreError};

const COLUMNS: &str =
    "id, name, scope, namespaces, created_at, expires_at, revoked_at, last_used_at";

fn database(what: &'static str) -> impl FnOnce(sqlx::Error) -> TokenStoreError {
    move |error| TokenStoreError::Database(format!("{what}: {error}"))
}

fn decode(row: &PgRow) -> Result<StoredToken, TokenStoreError> {
    let corrupt = |column: &str, detail: String| {
        TokenStoreError::Database(format!("stored token is corrupt ({column}): {detail}"))
    };
    let text = |column: &str| -> Result<Option<String>, TokenStoreError> {
        row.try_get::<Option<String>, _>(column)
            .map_err(|error| corrupt(column, error.to_string()))
    };
    let required = |column: &str| -> Result<String, TokenStoreError> {
        text(column)?.ok_or_else(|| corrupt(column, "is NULL".into()))
    };
    let timestamp = |column: &str| -> Result<Option<Timestamp>, TokenStoreError> {
        text(column)?
            .map(|text| {
                text.parse()
                    .map_err(|error: jiff::Error| corrupt(column, error.to_string()))
            })
            .transpose()
    };
    let scope = required("scope")?;
    let namespaces = text("namespaces")?
        .map(|json| {
            serde_json::from_str::<Vec<String>>(&json)
                .map_err(|error| corrupt("namespaces", error.to_string()))
        })
        .transpose()?;
    Ok(StoredToken {
        id: row
            .try_get::<i64, _>("id")
            .map_err(|error| corrupt("id", error.to_string()))?,
        name: required("name")?,
        scope: TokenScope::parse(&scope)
            .ok_or_else(|| corrupt("scope", format!("{scope:?} is not a scope")))?,
        namespaces,
        created_at: timestamp("created_at")?
            .ok_or_else(|| corrupt("created_at", "is NULL".into()))?,
        expires_at: timestamp("expires_at")?,
        revoked_at: timestamp("revoked_at")?,
        last_used_at: timestamp("last_used_at")?,
    })
}

impl TokenStore for PostgresStore {
    async fn create_token(
        &self,
        token: &NewToken,
        now: Timestamp,
    ) -> Result<StoredToken, TokenStoreError> {
        let namespaces = token
            .namespaces
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|error| TokenStoreError::Database(format!("encoding namespaces: {error}")))?;
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(database("creating a token"))?;
        let taken = sqlx::query("SELECT 1 FROM tokens WHERE name = $1")
            .bind(&token.name)
            .fetch_optional(&mut *tx)
            .await
            .map_err(database("creating a token"))?;
        if taken.is_some() {
            return Err(TokenStoreError::AlreadyExists(token.name.clone()));
        }
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO tokens (name, scope, namespaces, secret_hash, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (name) DO NOTHING RETURNING {COLUMNS}"
        )))
        .bind(&token.name)
        .bind(token.scope.as_str())
        .bind(namespaces)
        .bind(&token.secret_hash)
        .bind(now.to_string())
        .bind(token.expires_at.map(|at| at.to_string()))
        .fetch_optional(&mut *tx)
        .await
        .map_err(database("creating a token"))?;
        // Created concurrently since the check above.
        let Some(row) = row else {
            return Err(TokenStoreError::AlreadyExists(token.name.clone()));
        };
        let stored = decode(&row)?;
        tx.commit().await.map_err(database("creating a token"))?;
        Ok(stored)
    }

    async fn list_tokens(&self) -> Result<Vec<StoredToken>, TokenStoreError> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM tokens ORDER BY name"
        )))
        .fetch_all(&self.pool)
        .await
        .map_err(database("listing tokens"))?
        .iter()
        .map(decode)
        .collect()
    }

    async fn token_by_hash(
        &self,
        secret_hash: &str,
    ) -> Result<Option<StoredToken>, TokenStoreError> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM tokens WHERE secret_hash = $1"
        )))
        .bind(secret_hash)
        .fetch_optional(&self.pool)
        .await
        .map_err(database("reading a token"))?
        .as_ref()
        .map(decode)
        .transpose()
    }

    async fn token_by_id(&self, id: i64) -> Result<Option<StoredToken>, TokenStoreError> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM tokens WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(database("reading a token"))?
        .as_ref()
        .map(decode)
        .transpose()
    }

    async fn revoke_token(
        &self,
        name: &str,
        now: Timestamp,
    ) -> Result<StoredToken, TokenStoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE tokens SET revoked_at = COALESCE(revoked_at, $1) WHERE name = $2 \
             RETURNING {COLUMNS}"
        )))
        .bind(now.to_string())
        .bind(name)
        .fetch_optional(&self.pool)
        .await
        .map_err(database("revoking a token"))?;
        match row {
            Some(row) => decode(&row),
            None => Err(TokenStoreError::NotFound(name.to_string())),
        }
    }

    async fn touch_token(&self, id: i64, now: Timestamp) -> Result<(), TokenStoreError> {
        sqlx::query("UPDATE tokens SET last_used_at = $1 WHERE id = $2")
            .bind(now.to_string())
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(database("recording a token's use"))?;
        Ok(())
    }

    async fn has_tokens(&self) -> Result<bool, TokenStoreError> {
        let row = sqlx::query("SELECT EXISTS (SELECT 1 FROM tokens) AS found")
            .fetch_one(&self.pool)
            .await
            .map_err(database("counting tokens"))?;
        row.try_get::<bool, _>("found")
            .map_err(database("counting tokens"))
    }

    async fn server_key(&self, name: &str, candidate: &[u8]) -> Result<Vec<u8>, TokenStoreError> {
        // Insert unless present, then read back: whoever inserted first wins, and every
        // instance sharing the database signs with that key.
        sqlx::query(
            "INSERT INTO server_keys (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(candidate)
        .execute(&self.pool)
        .await
        .map_err(database("storing the server's key"))?;
        let row = sqlx::query("SELECT value FROM server_keys WHERE name = $1")
            .bind(name)
            .fetch_one(&self.pool)
            .await
            .map_err(database("reading the server's key"))?;
        row.try_get::<Vec<u8>, _>("value")
            .map_err(database("reading the server's key"))
    }
}
