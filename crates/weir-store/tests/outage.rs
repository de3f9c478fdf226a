//! `PostgresStore` while its database cannot be reached (weir-testkit's throwaway cluster,
//! frozen or stopped): every operation fails within about the acquire timeout with
//! `Unavailable` (rollouts, flags and tokens alike), naming the database and never the URL's
//! user or password; and works again once the database is back. Bounds are generous: only a
//! hang (sqlx's default 30 s) fails them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use weir_store::{
    FlagKey, FlagStore, FlagStoreError, PostgresOptions, PostgresStore, RolloutKey, Store,
    StoreError, TokenStore, TokenStoreError,
};
use weir_testkit::postgres::PgCluster;
use weir_testkit::wait::wait_for;

/// An operation must fail within this while the database is out (the acquire timeout is 1 s).
const BOUND: Duration = Duration::from_secs(15);

fn assert_names_the_database(message: &str) {
    assert!(
        message.starts_with("PostgreSQL database \"weir\" at /tmp/")
            && message.contains("cannot be reached ("),
        "{message}"
    );
    assert!(!message.contains("postgres@"), "{message}");
}

/// Every kind of operation, while the database is out: `Unavailable`, in time.
async fn every_operation_is_unavailable(store: &PostgresStore, how: &str) {
    let key = RolloutKey::new("shop", "web");
    let started = Instant::now();
    match store.get(&key).await {
        Err(StoreError::Unavailable(message)) => assert_names_the_database(&message),
        other => panic!("{how}: get: {other:?}"),
    }
    match store.list_flags().await {
        Err(FlagStoreError::Unavailable(message)) => assert_names_the_database(&message),
        other => panic!("{how}: list_flags: {other:?}"),
    }
    match store.get_flag(&FlagKey::new("shop", "banner")).await {
        Err(FlagStoreError::Unavailable(message)) => assert_names_the_database(&message),
        other => panic!("{how}: get_flag: {other:?}"),
    }
    match store.tokens_with_hashes().await {
        Err(TokenStoreError::Unavailable(message)) => assert_names_the_database(&message),
        other => panic!("{how}: tokens_with_hashes: {other:?}"),
    }
    match store.ping().await {
        Err(StoreError::Unavailable(message)) => assert_names_the_database(&message),
        other => panic!("{how}: ping: {other:?}"),
    }
    let took = started.elapsed();
    assert!(took < BOUND, "{how}: five operations took {took:?}");
    eprintln!(
        "{how}: five operations failed as unavailable in {:.2} s",
        took.as_secs_f64()
    );
}

async fn back(store: &PostgresStore, how: &str) {
    wait_for(how, || async { store.ping().await.ok() }).await;
    assert_eq!(
        store.get(&RolloutKey::new("shop", "web")).await.unwrap(),
        None
    );
    assert!(store.list_flags().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_is_unavailable_within_the_acquire_timeout() {
    let cluster = PgCluster::start();
    let url = cluster.database("weir");
    let settings = PostgresOptions {
        acquire_timeout: Duration::from_secs(1),
    };
    let store = PostgresStore::open_with(&url, "host-a", &settings)
        .await
        .unwrap();
    assert_eq!(
        store.database(),
        format!(
            "PostgreSQL database \"weir\" at {}/sock",
            cluster.dir().display()
        )
    );
    store.ping().await.unwrap();

    cluster.freeze();
    every_operation_is_unavailable(&store, "frozen").await;
    cluster.thaw();
    back(&store, "the database to answer after the freeze").await;

    cluster.stop_immediately();
    every_operation_is_unavailable(&store, "stopped").await;
    cluster.restart();
    back(&store, "the database to answer after the restart").await;

    let zero = PostgresOptions {
        acquire_timeout: Duration::ZERO,
    };
    let refused = PostgresStore::open_with(&url, "host-a", &zero).await;
    assert!(
        matches!(&refused, Err(StoreError::Database(message)) if message.contains("acquire timeout")),
        "{refused:?}"
    );
}
