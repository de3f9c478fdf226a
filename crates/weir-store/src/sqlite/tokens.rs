//! API tokens in the SQLite file: table `tokens` (migration 3), one row per token, its secret
//! only as a SHA-256 hash; and `server_keys`, the keys a server creates on its first start (the
//! session cookie's signing key). Writes use the single writer connection.

use jiff::Timestamp;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use super::SqliteStore;
use crate::{
    HashedToken, NewToken, StoredToken, TokenScope, TokenStamp, TokenStore, TokenStoreError,
};

const COLUMNS: &str =
    "id, name, scope, namespaces, created_at, expires_at, revoked_at, last_used_at";

fn database(what: &'static str) -> impl FnOnce(sqlx::Error) -> TokenStoreError {
    move |error| TokenStoreError::Database(format!("{what}: {error}"))
}

fn decode(row: &SqliteRow) -> Result<StoredToken, TokenStoreError> {
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

impl TokenStore for SqliteStore {
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
            .writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(database("creating a token"))?;
        let taken = sqlx::query("SELECT 1 FROM tokens WHERE name = ?")
            .bind(&token.name)
            .fetch_optional(&mut *tx)
            .await
            .map_err(database("creating a token"))?;
        if taken.is_some() {
            return Err(TokenStoreError::AlreadyExists(token.name.clone()));
        }
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO tokens (name, scope, namespaces, secret_hash, created_at, expires_at) \
             VALUES (?, ?, ?, ?, ?, ?) RETURNING {COLUMNS}"
        )))
        .bind(&token.name)
        .bind(token.scope.as_str())
        .bind(namespaces)
        .bind(&token.secret_hash)
        .bind(now.to_string())
        .bind(token.expires_at.map(|at| at.to_string()))
        .fetch_one(&mut *tx)
        .await
        .map_err(database("creating a token"))?;
        let stored = decode(&row)?;
        tx.commit().await.map_err(database("creating a token"))?;
        Ok(stored)
    }

    async fn list_tokens(&self) -> Result<Vec<StoredToken>, TokenStoreError> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM tokens ORDER BY name"
        )))
        .fetch_all(&self.reader)
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
            "SELECT {COLUMNS} FROM tokens WHERE secret_hash = ?"
        )))
        .bind(secret_hash)
        .fetch_optional(&self.reader)
        .await
        .map_err(database("reading a token"))?
        .as_ref()
        .map(decode)
        .transpose()
    }

    async fn token_by_id(&self, id: i64) -> Result<Option<StoredToken>, TokenStoreError> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM tokens WHERE id = ?"
        )))
        .bind(id)
        .fetch_optional(&self.reader)
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
            "UPDATE tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE name = ? \
             RETURNING {COLUMNS}"
        )))
        .bind(now.to_string())
        .bind(name)
        .fetch_optional(&self.writer)
        .await
        .map_err(database("revoking a token"))?;
        match row {
            Some(row) => decode(&row),
            None => Err(TokenStoreError::NotFound(name.to_string())),
        }
    }

    async fn touch_token(&self, id: i64, now: Timestamp) -> Result<(), TokenStoreError> {
        sqlx::query("UPDATE tokens SET last_used_at = ? WHERE id = ?")
            .bind(now.to_string())
            .bind(id)
            .execute(&self.writer)
            .await
            .map_err(database("recording a token's use"))?;
        Ok(())
    }

    async fn has_tokens(&self) -> Result<bool, TokenStoreError> {
        let row = sqlx::query("SELECT EXISTS (SELECT 1 FROM tokens) AS found")
            .fetch_one(&self.reader)
            .await
            .map_err(database("counting tokens"))?;
        row.try_get::<bool, _>("found")
            .map_err(database("counting tokens"))
    }

    async fn tokens_with_hashes(&self) -> Result<Vec<HashedToken>, TokenStoreError> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS}, secret_hash FROM tokens ORDER BY name"
        )))
        .fetch_all(&self.reader)
        .await
        .map_err(database("reading the tokens"))?
        .iter()
        .map(|row| {
            Ok(HashedToken {
                token: decode(row)?,
                secret_hash: row.try_get::<String, _>("secret_hash").map_err(|error| {
                    TokenStoreError::Database(format!(
                        "stored token is corrupt (secret_hash): {error}"
                    ))
                })?,
            })
        })
        .collect()
    }

    async fn token_stamp(&self) -> Result<TokenStamp, TokenStoreError> {
        let row =
            sqlx::query("SELECT COUNT(*) AS created, COUNT(revoked_at) AS revoked FROM tokens")
                .fetch_one(&self.reader)
                .await
                .map_err(database("reading the tokens' stamp"))?;
        let count = |column: &str| -> Result<u64, TokenStoreError> {
            let count: i64 = row
                .try_get(column)
                .map_err(|error| TokenStoreError::Database(format!("counting tokens: {error}")))?;
            Ok(u64::try_from(count).unwrap_or(0))
        };
        Ok(TokenStamp {
            created: count("created")?,
            revoked: count("revoked")?,
        })
    }

    async fn server_key(&self, name: &str, candidate: &[u8]) -> Result<Vec<u8>, TokenStoreError> {
        // INSERT OR IGNORE then read back on the writer: whoever inserted first wins, and every
        // server sharing the file signs with that key.
        sqlx::query("INSERT OR IGNORE INTO server_keys (name, value) VALUES (?, ?)")
            .bind(name)
            .bind(candidate)
            .execute(&self.writer)
            .await
            .map_err(database("storing the server's key"))?;
        let row = sqlx::query("SELECT value FROM server_keys WHERE name = ?")
            .bind(name)
            .fetch_one(&self.writer)
            .await
            .map_err(database("reading the server's key"))?;
        row.try_get::<Vec<u8>, _>("value")
            .map_err(database("reading the server's key"))
    }
}
