//! The tokens a server keeps in memory, so that checking a request's credentials reads no
//! database (docs/SECURITY.md, "Tokens and scopes"; docs/SCALE-OUT.md).
//!
//! The set of every token (revoked and expired ones included, with the hashes of their secrets)
//! is read as a whole and replaced as a whole when it may have changed. How the cache learns of
//! a change is the [`TokenChanges`] the server chose:
//!
//! - [`TokenChanges::Announced`]: the server calls [`TokenCache::changed`] for every change
//!   notice (PostgreSQL's `NOTIFY` on every token write, and a re-established listening
//!   connection, after which notices may have been missed). A request reads nothing.
//! - [`TokenChanges::Polled`]: every request that needs a token reads the store's
//!   [`TokenStamp`] (two counts; SQLite, where `weir token create|revoke` may write the file
//!   from another process and nothing announces it) and the set again when it differs.
//!
//! Either way a change made through this server's own API ([`TokenCache::changed`]) is seen by
//! its next request, and a set known to be stale is never used: when it cannot be read again,
//! the request fails (503 while the database cannot be reached), it is not answered from the
//! stale set. The version a set carries is read *before* the set, so a change racing the read
//! makes the next request read again rather than be missed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use jiff::{SignedDuration, Timestamp};
use weir_store::{HashedToken, StoredToken, TokenStamp, TokenStore, TokenStoreError};

/// How a server's token cache learns that tokens changed (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TokenChanges {
    /// Read the store's stamp on every request that needs a token; safe with any store.
    #[default]
    Polled,
    /// The server calls [`crate::Auth::tokens_changed`] on every change notice; no read per
    /// request.
    Announced,
}

/// What a set was read at: the in-process generation, and the store's stamp when polled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Version {
    generation: u64,
    stamp: Option<TokenStamp>,
}

/// Every token, by the hash of its secret and by id.
#[derive(Debug, Default)]
pub(super) struct TokenSet {
    by_hash: HashMap<String, StoredToken>,
    by_id: HashMap<i64, StoredToken>,
}

impl TokenSet {
    fn new(tokens: Vec<HashedToken>) -> TokenSet {
        let mut set = TokenSet::default();
        for HashedToken { token, secret_hash } in tokens {
            set.by_id.insert(token.id, token.clone());
            set.by_hash.insert(secret_hash, token);
        }
        set
    }

    /// The token whose secret hashes to `secret_hash`.
    pub(super) fn by_hash(&self, secret_hash: &str) -> Option<&StoredToken> {
        self.by_hash.get(secret_hash)
    }

    /// The token with this id.
    pub(super) fn by_id(&self, id: i64) -> Option<&StoredToken> {
        self.by_id.get(&id)
    }

    /// Whether any token was ever created (tokens are revoked, never deleted).
    pub(super) fn any(&self) -> bool {
        !self.by_id.is_empty()
    }
}

struct Loaded {
    version: Version,
    set: Arc<TokenSet>,
}

/// See the module documentation.
pub(super) struct TokenCache<T> {
    store: T,
    changes: TokenChanges,
    /// Bumped by [`TokenCache::changed`].
    generation: AtomicU64,
    current: RwLock<Option<Loaded>>,
    /// One reader of the store at a time; the others wait for its set.
    reading: tokio::sync::Mutex<()>,
    /// When each token's use was last recorded by this server (`last_used_at` is written at
    /// most once a [`TokenCache::TOUCH_EVERY`], in the background).
    touched: Mutex<HashMap<i64, Timestamp>>,
}

impl<T: TokenStore> TokenCache<T> {
    /// A token's last use is written at most this often (not on every request).
    const TOUCH_EVERY: SignedDuration = SignedDuration::from_secs(60);

    pub(super) fn new(store: T, changes: TokenChanges) -> TokenCache<T> {
        TokenCache {
            store,
            changes,
            generation: AtomicU64::new(0),
            current: RwLock::new(None),
            reading: tokio::sync::Mutex::new(()),
            touched: Mutex::new(HashMap::new()),
        }
    }

    /// Tokens may have changed: the next request reads them again.
    pub(super) fn changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The version a set read now would carry (the stamp read from the store when polled).
    async fn version_now(&self) -> Result<Version, TokenStoreError> {
        let generation = self.generation.load(Ordering::Acquire);
        let stamp = match self.changes {
            TokenChanges::Polled => Some(self.store.token_stamp().await?),
            TokenChanges::Announced => None,
        };
        Ok(Version { generation, stamp })
    }

    fn loaded_at(&self, version: Version) -> Option<Arc<TokenSet>> {
        let current = self.current.read().unwrap_or_else(PoisonError::into_inner);
        current
            .as_ref()
            .filter(|loaded| loaded.version == version)
            .map(|loaded| Arc::clone(&loaded.set))
    }

    /// The current set of tokens, read again first when it may have changed.
    pub(super) async fn tokens(&self) -> Result<Arc<TokenSet>, TokenStoreError> {
        let version = self.version_now().await?;
        if let Some(set) = self.loaded_at(version) {
            return Ok(set);
        }
        let _reading = self.reading.lock().await;
        // Read by another request while this one waited, or changed again meanwhile.
        let version = self.version_now().await?;
        if let Some(set) = self.loaded_at(version) {
            return Ok(set);
        }
        let set = Arc::new(TokenSet::new(self.store.tokens_with_hashes().await?));
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Some(Loaded {
            version,
            set: Arc::clone(&set),
        });
        Ok(set)
    }

    /// Records `token`'s use at `now`, in the background and at most once a
    /// [`TokenCache::TOUCH_EVERY`] per token, so that a request never waits for the write.
    pub(super) fn touch(&self, token: &StoredToken, now: Timestamp) {
        {
            let mut touched = self.touched.lock().unwrap_or_else(PoisonError::into_inner);
            let last = touched.get(&token.id).copied().or(token.last_used_at);
            if last.is_some_and(|last| now.duration_since(last) < Self::TOUCH_EVERY) {
                return;
            }
            touched.insert(token.id, now);
        }
        let (store, id, name) = (self.store.clone(), token.id, token.name.clone());
        tokio::spawn(async move {
            if let Err(error) = store.touch_token(id, now).await {
                tracing::warn!("cannot record the use of token {name:?}: {error}");
            }
        });
    }
}

#[cfg(test)]
mod tests;
