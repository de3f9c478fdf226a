#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use jiff::Timestamp;
use weir_store::{
    HashedToken, NewToken, SqliteStore, StoredToken, TokenScope, TokenStamp, TokenStore,
    TokenStoreError,
};

use super::{TokenCache, TokenChanges};

/// A real store that counts the reads the cache makes, and can be made unreachable.
#[derive(Clone)]
struct Watched {
    inner: SqliteStore,
    reads: Arc<AtomicUsize>,
    down: Arc<AtomicBool>,
}

impl Watched {
    async fn new() -> Watched {
        Watched {
            inner: SqliteStore::open_in_memory().await.unwrap(),
            reads: Arc::default(),
            down: Arc::default(),
        }
    }

    fn reachable(&self) -> Result<(), TokenStoreError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(TokenStoreError::Unavailable(
                "the test's database cannot be reached".into(),
            ));
        }
        self.reads.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    async fn create(&self, name: &str, hash: &str) -> StoredToken {
        let token = NewToken {
            name: name.into(),
            scope: TokenScope::Read,
            namespaces: None,
            expires_at: None,
            secret_hash: hash.into(),
        };
        self.inner
            .create_token(&token, Timestamp::now())
            .await
            .unwrap()
    }
}

impl TokenStore for Watched {
    async fn create_token(
        &self,
        token: &NewToken,
        now: Timestamp,
    ) -> Result<StoredToken, TokenStoreError> {
        self.inner.create_token(token, now).await
    }
    async fn list_tokens(&self) -> Result<Vec<StoredToken>, TokenStoreError> {
        self.inner.list_tokens().await
    }
    async fn token_by_hash(&self, hash: &str) -> Result<Option<StoredToken>, TokenStoreError> {
        self.inner.token_by_hash(hash).await
    }
    async fn token_by_id(&self, id: i64) -> Result<Option<StoredToken>, TokenStoreError> {
        self.inner.token_by_id(id).await
    }
    async fn revoke_token(
        &self,
        name: &str,
        now: Timestamp,
    ) -> Result<StoredToken, TokenStoreError> {
        self.inner.revoke_token(name, now).await
    }
    async fn touch_token(&self, id: i64, now: Timestamp) -> Result<(), TokenStoreError> {
        self.inner.touch_token(id, now).await
    }
    async fn has_tokens(&self) -> Result<bool, TokenStoreError> {
        self.inner.has_tokens().await
    }
    async fn tokens_with_hashes(&self) -> Result<Vec<HashedToken>, TokenStoreError> {
        self.reachable()?;
        self.inner.tokens_with_hashes().await
    }
    async fn token_stamp(&self) -> Result<TokenStamp, TokenStoreError> {
        self.reachable()?;
        self.inner.token_stamp().await
    }
    async fn server_key(&self, name: &str, candidate: &[u8]) -> Result<Vec<u8>, TokenStoreError> {
        self.inner.server_key(name, candidate).await
    }
}

#[tokio::test]
async fn announced_changes_need_no_read_per_request_and_a_stale_set_is_never_used() {
    let store = Watched::new().await;
    let cache = TokenCache::new(store.clone(), TokenChanges::Announced);
    assert!(!cache.tokens().await.unwrap().any());
    let alice = store.create("alice", "hash-a").await;
    // Not told yet: still the set read first (the server hears of it by a notice).
    assert!(cache.tokens().await.unwrap().by_hash("hash-a").is_none());
    cache.changed();
    let set = cache.tokens().await.unwrap();
    assert_eq!(set.by_hash("hash-a").map(|token| token.id), Some(alice.id));
    assert_eq!(
        set.by_id(alice.id).map(|token| token.name.as_str()),
        Some("alice")
    );
    let reads = store.reads.load(Ordering::SeqCst);
    for _ in 0..1000 {
        assert!(cache.tokens().await.unwrap().by_hash("hash-a").is_some());
    }
    assert_eq!(
        store.reads.load(Ordering::SeqCst),
        reads,
        "1000 checks read the database"
    );
    // While the database is down, the set in memory still answers...
    store.down.store(true, Ordering::SeqCst);
    assert!(cache.tokens().await.unwrap().by_hash("hash-a").is_some());
    // ...until it is known to be stale: then the request fails rather than use it.
    store
        .inner
        .revoke_token("alice", Timestamp::now())
        .await
        .unwrap();
    cache.changed();
    let error = cache.tokens().await.err().unwrap();
    assert!(matches!(error, TokenStoreError::Unavailable(_)), "{error}");
    store.down.store(false, Ordering::SeqCst);
    let set = cache.tokens().await.unwrap();
    assert!(set.by_hash("hash-a").unwrap().revoked_at.is_some());
}

#[tokio::test]
async fn polled_changes_are_seen_at_the_next_request_whoever_made_them() {
    let store = Watched::new().await;
    let cache = TokenCache::new(store.clone(), TokenChanges::Polled);
    assert!(!cache.tokens().await.unwrap().any());
    // Written behind the cache's back (another process on the same file): seen at once.
    store.create("bob", "hash-b").await;
    assert!(cache.tokens().await.unwrap().by_hash("hash-b").is_some());
    store
        .inner
        .revoke_token("bob", Timestamp::now())
        .await
        .unwrap();
    assert!(
        cache
            .tokens()
            .await
            .unwrap()
            .by_hash("hash-b")
            .unwrap()
            .revoked_at
            .is_some()
    );
    // Unchanged: one stamp read per request, the set is not read again.
    let reads = store.reads.load(Ordering::SeqCst);
    for _ in 0..10 {
        cache.tokens().await.unwrap();
    }
    assert_eq!(store.reads.load(Ordering::SeqCst), reads + 10);
}
