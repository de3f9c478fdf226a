//! `Flags` over a real SQLite store: writes reach the snapshot evaluations read, and survive a
//! reopen.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use weir_core::document::{Document, load};
use weir_core::flag::{EvaluationContext, Reason};
use weir_core::model::Flag;
use weir_flags::{FlagError, Flags};
use weir_store::{ApplyOutcome, FlagKey, FlagStoreError, SqliteStore};

fn flag(yaml: &str) -> Flag {
    match load(yaml.as_bytes()).into_iter().next() {
        Some(Ok(loaded)) => match loaded.document {
            Document::Flag(flag) => *flag,
            other => panic!("not a flag: {other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

const BANNER: &str = "apiVersion: weir.dev/v1alpha1
kind: Flag
metadata: {name: banner, namespace: shop}
spec:
  variations: [{name: control, value: blue}, {name: target, value: green}]
  defaultStrategy: {variation: control}
";

#[tokio::test]
async fn a_write_reaches_the_snapshot_and_a_reopened_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weir.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let flags = Flags::open(store.clone()).await.unwrap();
    let mut changes = flags.subscribe();
    let before = flags.snapshot();
    assert!(before.get("shop", "banner").is_none());

    let (stored, outcome) = flags
        .apply(flag(BANNER), None, jiff::Timestamp::now())
        .await
        .unwrap();
    assert_eq!(outcome, ApplyOutcome::Created);
    assert_eq!(stored.version, 1);
    let change = changes.recv().await.unwrap();
    assert_eq!(change.key, FlagKey::new("shop", "banner"));
    assert_eq!(change.version, Some(1));
    // An evaluation started before the write keeps the snapshot it had.
    assert!(before.get("shop", "banner").is_none());
    let now = flags.snapshot();
    let entry = now.get("shop", "banner").unwrap();
    let evaluation = entry
        .compiled
        .evaluate(&EvaluationContext::default())
        .unwrap();
    assert_eq!(evaluation.variant, "control");
    assert_eq!(evaluation.reason, Reason::Static);
    assert_ne!(now.etag("shop"), before.etag("shop"));

    // The same document again writes nothing; a stale version is a conflict.
    let (_, again) = flags
        .apply(flag(BANNER), None, jiff::Timestamp::now())
        .await
        .unwrap();
    assert_eq!(again, ApplyOutcome::Unchanged);
    let changed = BANNER.replace("{variation: control}", "{variation: target}");
    let stale = flags
        .apply(flag(&changed), Some(7), jiff::Timestamp::now())
        .await;
    assert!(
        matches!(
            stale,
            Err(FlagError::Store(FlagStoreError::Conflict {
                expected: 7,
                actual: 1,
                ..
            }))
        ),
        "{stale:?}"
    );
    flags
        .apply(flag(&changed), Some(1), jiff::Timestamp::now())
        .await
        .unwrap();

    // A new process reads what was committed.
    store.close().await;
    let reopened = Flags::open(SqliteStore::open(&path).await.unwrap())
        .await
        .unwrap();
    let snapshot = reopened.snapshot();
    let entry = snapshot.get("shop", "banner").unwrap();
    assert_eq!(entry.stored.version, 2);
    assert_eq!(
        entry
            .compiled
            .evaluate(&EvaluationContext::default())
            .unwrap()
            .variant,
        "target"
    );
    reopened
        .delete(&FlagKey::new("shop", "banner"), Some(2))
        .await
        .unwrap();
    assert!(reopened.snapshot().get("shop", "banner").is_none());
    let missing = reopened.delete(&FlagKey::new("shop", "banner"), None).await;
    assert!(matches!(
        missing,
        Err(FlagError::Store(FlagStoreError::NotFound(_)))
    ));
}

#[tokio::test]
async fn an_invalid_flag_is_refused_with_its_paths_and_changes_nothing() {
    let flags = Flags::open(SqliteStore::open_in_memory().await.unwrap())
        .await
        .unwrap();
    let mut invalid = flag(BANNER);
    invalid.spec.off_variation = Some("purple".into());
    let refused = flags.apply(invalid, None, jiff::Timestamp::now()).await;
    let Err(FlagError::Invalid(errors)) = refused else {
        panic!("{refused:?}");
    };
    assert!(
        errors.iter().any(|error| error.path == "spec.offVariation"),
        "{errors:?}"
    );
    assert!(flags.snapshot().get("shop", "banner").is_none());
}
