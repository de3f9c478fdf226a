//! Opening a SQLite database creates no directory, and `open_existing` creates nothing at all
//! (issue 32: a mistyped `--db` made a new, empty database, so an open server).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use weir_store::{SqliteStore, TokenStore};

#[tokio::test]
async fn a_missing_directory_is_an_error_naming_it_and_is_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no/such/dir");
    let path = missing.join("weir.db");
    let error = SqliteStore::open(&path).await.unwrap_err().to_string();
    assert!(error.contains(&path.display().to_string()), "{error}");
    assert!(error.contains(&missing.display().to_string()), "{error}");
    assert!(error.contains("does not exist"), "{error}");
    assert!(!dir.path().join("no").exists(), "a directory was created");
}

#[tokio::test]
async fn open_creates_a_missing_file_and_open_existing_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    let error = SqliteStore::open_existing(&path)
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains(&path.display().to_string()), "{error}");
    assert!(error.contains("no such database file"), "{error}");
    assert!(!path.exists(), "open_existing created the file");
    let created = SqliteStore::open(&path).await.unwrap();
    assert!(!created.has_tokens().await.unwrap());
    created.close().await;
    assert!(path.exists());
    let again = SqliteStore::open_existing(&path).await.unwrap();
    assert!(!again.has_tokens().await.unwrap());
    again.close().await;
}

/// A path without a directory part is in the working directory, which exists.
#[tokio::test]
async fn a_bare_file_name_is_opened_in_the_working_directory() {
    let error = SqliteStore::open_existing(std::path::Path::new("weir-surely-missing-7f3a.db"))
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("no such database file"), "{error}");
}
