//! Tokens in a real SQLite file: created, found by hash and id, revoked, names unique, the
//! server key kept across opens.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use jiff::Timestamp;
use weir_store::{NewToken, SqliteStore, TokenScope, TokenStore, TokenStoreError};

fn new_token(name: &str, hash: &str) -> NewToken {
    NewToken {
        name: name.into(),
        scope: TokenScope::Operate,
        namespaces: Some(vec!["team-a".into()]),
        expires_at: None,
        secret_hash: hash.into(),
    }
}

#[tokio::test]
async fn tokens_round_trip_and_names_are_unique() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weir.db");
    let store = SqliteStore::open(&path).await.unwrap();
    assert!(!store.has_tokens().await.unwrap());
    let now = Timestamp::from_second(1_800_000_000).unwrap();
    let created = store
        .create_token(&new_token("ci", "aa11"), now)
        .await
        .unwrap();
    assert_eq!(created.name, "ci");
    assert_eq!(created.scope, TokenScope::Operate);
    assert_eq!(created.namespaces, Some(vec!["team-a".to_string()]));
    assert_eq!(created.created_at, now);
    assert!(store.has_tokens().await.unwrap());
    assert_eq!(
        store.create_token(&new_token("ci", "bb22"), now).await,
        Err(TokenStoreError::AlreadyExists("ci".into()))
    );
    assert_eq!(
        store.token_by_hash("aa11").await.unwrap(),
        Some(created.clone())
    );
    assert_eq!(store.token_by_hash("bb22").await.unwrap(), None);
    assert_eq!(
        store.token_by_id(created.id).await.unwrap(),
        Some(created.clone())
    );

    let later = Timestamp::from_second(1_800_000_100).unwrap();
    store.touch_token(created.id, later).await.unwrap();
    let revoked = store.revoke_token("ci", later).await.unwrap();
    assert_eq!(revoked.revoked_at, Some(later));
    assert_eq!(revoked.last_used_at, Some(later));
    assert!(revoked.usable(later).is_err());
    let again = store
        .revoke_token("ci", Timestamp::from_second(1_800_000_200).unwrap())
        .await
        .unwrap();
    assert_eq!(
        again.revoked_at,
        Some(later),
        "the first revocation time is kept"
    );
    assert_eq!(
        store.revoke_token("nobody", later).await,
        Err(TokenStoreError::NotFound("nobody".into()))
    );
    // Revoked tokens still count: revoking the last one does not open the server.
    assert!(store.has_tokens().await.unwrap());

    let key = store.server_key("session", &[1; 32]).await.unwrap();
    assert_eq!(key, vec![1; 32]);
    store.close().await;
    let reopened = SqliteStore::open(&path).await.unwrap();
    assert_eq!(
        reopened.server_key("session", &[2; 32]).await.unwrap(),
        vec![1; 32]
    );
    assert_eq!(reopened.list_tokens().await.unwrap(), vec![again]);
}
