//! API tokens as the store keeps them: who they are, what they may do, and only a hash of their
//! secret. Checking a request against them is weir-api's (`auth.rs`); this is what it reads.

use std::fmt;
use std::future::Future;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// What a token may do. `read` < `operate` < `admin`; `evaluate` is OFREP only (and every
/// other scope may evaluate too). The rules per route are weir-api's `auth::ROUTES`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenScope {
    /// Every GET under /api/v1 (and `/metrics` when the server asks for a token there).
    Read,
    /// `read`, and commands to rollouts and outcome reports of flags.
    Operate,
    /// `operate`, and applying and deleting rollouts and flags, and managing tokens.
    Admin,
    /// OFREP evaluations only.
    Evaluate,
}

impl TokenScope {
    /// Every scope, weakest first (`evaluate` last: it is not above the others).
    pub const ALL: [TokenScope; 4] = [
        TokenScope::Read,
        TokenScope::Operate,
        TokenScope::Admin,
        TokenScope::Evaluate,
    ];

    /// The scope's name (`read`, `operate`, `admin`, `evaluate`).
    pub fn as_str(self) -> &'static str {
        match self {
            TokenScope::Read => "read",
            TokenScope::Operate => "operate",
            TokenScope::Admin => "admin",
            TokenScope::Evaluate => "evaluate",
        }
    }

    /// The scope named `name`, if it is one.
    pub fn parse(name: &str) -> Option<TokenScope> {
        TokenScope::ALL
            .into_iter()
            .find(|scope| scope.as_str() == name)
    }

    /// The names of every scope, for messages: `read, operate, admin, evaluate`.
    pub fn names() -> String {
        TokenScope::ALL.map(TokenScope::as_str).join(", ")
    }

    /// Whether a token of this scope may do what needs `needed`.
    pub fn allows(self, needed: TokenScope) -> bool {
        match needed {
            TokenScope::Evaluate => true,
            TokenScope::Read => self != TokenScope::Evaluate,
            TokenScope::Operate => matches!(self, TokenScope::Operate | TokenScope::Admin),
            TokenScope::Admin => self == TokenScope::Admin,
        }
    }
}

impl fmt::Display for TokenScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A token as stored (never its secret, nor the secret's hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredToken {
    /// The store's id (what a session cookie names).
    pub id: i64,
    /// Unique; the actor the history records for changes made with it.
    pub name: String,
    /// What it may do.
    pub scope: TokenScope,
    /// The namespaces it is limited to; `None`: every namespace.
    pub namespaces: Option<Vec<String>>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it stops working, if ever.
    pub expires_at: Option<Timestamp>,
    /// When it was revoked, if it was.
    pub revoked_at: Option<Timestamp>,
    /// When it was last used (recorded at most about once a minute).
    pub last_used_at: Option<Timestamp>,
}

impl StoredToken {
    /// Whether it works at `now`: `Err` says why not (revoked, expired).
    pub fn usable(&self, now: Timestamp) -> Result<(), String> {
        if let Some(revoked) = self.revoked_at {
            return Err(format!("token {:?} was revoked at {revoked}", self.name));
        }
        if let Some(expires) = self.expires_at
            && expires <= now
        {
            return Err(format!("token {:?} expired at {expires}", self.name));
        }
        Ok(())
    }

    /// Whether it may see and touch objects of `namespace`.
    pub fn admits_namespace(&self, namespace: &str) -> bool {
        self.namespaces
            .as_ref()
            .is_none_or(|namespaces| namespaces.iter().any(|allowed| allowed == namespace))
    }
}

/// A token with the hash of its secret: what a server keeps in memory to check credentials
/// without reading the database per request ([`TokenStore::tokens_with_hashes`]). Never shown
/// to anyone.
#[derive(Clone, PartialEq, Eq)]
pub struct HashedToken {
    /// The token.
    pub token: StoredToken,
    /// SHA-256 of its secret, lower-case hex.
    pub secret_hash: String,
}

impl fmt::Debug for HashedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The hash stays out of logs and panics.
        f.debug_struct("HashedToken")
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

/// What changes whenever a token is created or revoked ([`TokenStore::token_stamp`]): tokens
/// are never deleted and a revocation is never undone, so the two counts only grow, and one of
/// them grows with every such change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TokenStamp {
    /// Tokens ever created.
    pub created: u64,
    /// Of those, tokens revoked.
    pub revoked: u64,
}

/// A token to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewToken {
    /// Its name (validated by the caller).
    pub name: String,
    /// Its scope.
    pub scope: TokenScope,
    /// The namespaces it is limited to; `None`: every namespace.
    pub namespaces: Option<Vec<String>>,
    /// When it stops working, if ever.
    pub expires_at: Option<Timestamp>,
    /// SHA-256 of its secret, lower-case hex.
    pub secret_hash: String,
}

/// Why a token operation failed. A failed operation changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenStoreError {
    /// A token with this name exists (revoked ones too: names are never reused).
    #[error("a token named {0:?} exists already (names of revoked tokens are not reused)")]
    AlreadyExists(String),
    /// No token with this name.
    #[error("no token named {0:?}")]
    NotFound(String),
    /// The database failed (or holds what cannot be read back).
    #[error("database error: {0}")]
    Database(String),
    /// The database cannot be reached now (see [`crate::StoreError::Unavailable`]).
    #[error("{0}")]
    Unavailable(String),
}

/// Where tokens live. Implemented by [`crate::SqliteStore`] (table `tokens`, migration 3) and
/// [`crate::PostgresStore`].
pub trait TokenStore: Clone + Send + Sync + 'static {
    /// Stores a new token.
    fn create_token(
        &self,
        token: &NewToken,
        now: Timestamp,
    ) -> impl Future<Output = Result<StoredToken, TokenStoreError>> + Send;

    /// Every token, revoked and expired ones included, by name.
    fn list_tokens(&self)
    -> impl Future<Output = Result<Vec<StoredToken>, TokenStoreError>> + Send;

    /// The token whose secret hashes to `secret_hash` (lower-case hex SHA-256).
    fn token_by_hash(
        &self,
        secret_hash: &str,
    ) -> impl Future<Output = Result<Option<StoredToken>, TokenStoreError>> + Send;

    /// The token with this id.
    fn token_by_id(
        &self,
        id: i64,
    ) -> impl Future<Output = Result<Option<StoredToken>, TokenStoreError>> + Send;

    /// Revokes a token (a token revoked already keeps its first revocation time).
    fn revoke_token(
        &self,
        name: &str,
        now: Timestamp,
    ) -> impl Future<Output = Result<StoredToken, TokenStoreError>> + Send;

    /// Records that a token was used at `now`.
    fn touch_token(
        &self,
        id: i64,
        now: Timestamp,
    ) -> impl Future<Output = Result<(), TokenStoreError>> + Send;

    /// Whether any token was ever created (revoked and expired ones count: revoking the last
    /// token must not open the server to everyone).
    fn has_tokens(&self) -> impl Future<Output = Result<bool, TokenStoreError>> + Send;

    /// Every token with the hash of its secret, revoked and expired ones included, by name.
    fn tokens_with_hashes(
        &self,
    ) -> impl Future<Output = Result<Vec<HashedToken>, TokenStoreError>> + Send;

    /// The [`TokenStamp`] now: it differs from an earlier one once a token was created or
    /// revoked since, by this process or another on the same database.
    fn token_stamp(&self) -> impl Future<Output = Result<TokenStamp, TokenStoreError>> + Send;

    /// The server key named `name`: the one stored, or else `candidate`, stored now (so two
    /// servers starting on one file at once agree on one key).
    fn server_key(
        &self,
        name: &str,
        candidate: &[u8],
    ) -> impl Future<Output = Result<Vec<u8>, TokenStoreError>> + Send;
}
