//! Flags' history, evaluation counts and the refusals while a rollout moves a flag.

use jiff::Timestamp;
use weir_core::document::{Document, load};
use weir_core::model::{Flag, Strategy};
use weir_store::{FlagKey, RolloutKey, SqliteStore};

use crate::{FlagError, Flags};

fn flag(default: &str) -> Flag {
    let yaml = format!(
        "apiVersion: weir.dev/v1alpha1\nkind: Flag\nmetadata: {{name: banner, namespace: shop}}\n\
         spec:\n  variations: [{{name: a, value: a}}, {{name: b, value: b}}]\n  \
         defaultStrategy: {{variation: {default}}}\n"
    );
    match load(yaml.as_bytes())
        .remove(0)
        .map(|loaded| loaded.document)
    {
        Ok(Document::Flag(flag)) => *flag,
        other => panic!("not a flag: {other:?}"),
    }
}

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + second).unwrap()
}

async fn flags() -> Flags<SqliteStore> {
    Flags::open(SqliteStore::open_in_memory().await.unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn every_change_is_in_the_history_newest_first_with_its_actor() {
    let flags = flags().await;
    let key = FlagKey::new("shop", "banner");
    flags.apply_as(flag("a"), None, at(0), "ci").await.unwrap();
    flags
        .apply_as(flag("b"), None, at(1), "alice")
        .await
        .unwrap();
    // Unchanged: nothing recorded.
    flags
        .apply_as(flag("b"), None, at(2), "alice")
        .await
        .unwrap();
    flags
        .set_enabled(
            &key,
            false,
            at(3),
            "trigger t1",
            "triggered",
            Some("192.0.2.1".into()),
        )
        .await
        .unwrap();
    flags.delete_as(&key, None, "bob").await.unwrap();
    let history = flags.history(&key, 10, None).await.unwrap();
    let seen: Vec<(&str, &str)> = history
        .iter()
        .map(|change| (change.change.actor.as_str(), change.change.action.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("bob", "deleted"),
            ("trigger t1", "triggered"),
            ("alice", "updated"),
            ("ci", "created")
        ]
    );
    let text: Vec<String> = history[2]
        .change
        .changes
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(text, ["spec.defaultStrategy.variation: \"a\" -> \"b\""]);
    assert_eq!(history[1].change.address.as_deref(), Some("192.0.2.1"));
    assert_eq!(
        history[1].change.changes[0].to_string(),
        "spec.enabled: true -> false"
    );
    let older = flags.history(&key, 2, Some(history[1].id)).await.unwrap();
    assert_eq!(older.len(), 2);
    assert_eq!(older[0].change.action, "updated");
}

#[tokio::test]
async fn evaluations_are_flushed_per_minute_as_what_grew_since_the_last_flush() {
    let flags = flags().await;
    let key = FlagKey::new("shop", "banner");
    flags.apply(flag("a"), None, at(0)).await.unwrap();
    let serve = |variant: &str, times: usize| {
        let snapshot = flags.snapshot();
        let entry = snapshot.get("shop", "banner").unwrap();
        for _ in 0..times {
            entry.count_exposure(variant);
        }
    };
    serve("a", 3);
    serve("b", 1);
    flags.flush_evaluations(at(0)).await.unwrap();
    serve("a", 2);
    flags.flush_evaluations(at(10)).await.unwrap();
    // Nothing new: nothing written.
    flags.flush_evaluations(at(20)).await.unwrap();
    serve("b", 4);
    flags.flush_evaluations(at(61)).await.unwrap();
    let minute = crate::minute_of(at(0));
    let counts = flags.evaluations(&key, 0).await.unwrap();
    let expected: crate::MinuteCounts = [
        (minute, [("a".to_string(), 5), ("b".to_string(), 1)].into()),
        (minute + 1, [("b".to_string(), 4)].into()),
    ]
    .into();
    assert_eq!(counts, expected);
    assert_eq!(flags.evaluations(&key, minute + 1).await.unwrap().len(), 1);
    // A day later the old minutes are pruned.
    flags.flush_evaluations(at(61 + 25 * 3600)).await.unwrap();
    assert!(flags.evaluations(&key, 0).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_flag_under_a_rollout_keeps_its_variations_and_default_strategy() {
    let flags = flags().await;
    let key = FlagKey::new("shop", "banner");
    flags.apply(flag("a"), None, at(0)).await.unwrap();
    let rollout = RolloutKey::new("shop", "banner-b");
    flags.mark_rolled_out(key.clone(), &rollout, true);
    let refused = flags.apply(flag("b"), None, at(1)).await.unwrap_err();
    let FlagError::RolledOut(message) = refused else {
        panic!("{refused:?}")
    };
    assert!(message.contains("shop/banner-b"), "{message}");
    assert!(message.contains("default strategy"), "{message}");
    // The strategy the rollout has in force, as a GET shows it, is no change.
    let split = Strategy {
        variation: Some("b".into()),
        weights: None,
    };
    assert!(flags.set_rollout_strategy(&key, split).await);
    let mut shown = flag("b");
    shown.spec.enabled = false;
    let (stored, _) = flags.apply(shown, None, at(2)).await.unwrap();
    assert!(!stored.flag.spec.enabled);
    assert_eq!(
        stored.flag.spec.default_strategy.variation.as_deref(),
        Some("a")
    );
}
