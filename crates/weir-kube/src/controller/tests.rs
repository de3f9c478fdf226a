#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicU32, Ordering};

use super::*;

fn revert_failed() -> Error {
    Error::Revert {
        key: RolloutKey::new("shop", "web"),
        source: ProviderError::transient("the primary has 0 of 2 pods ready"),
    }
}

fn forget_failed() -> Error {
    Error::Forget {
        key: RolloutKey::new("shop", "web"),
        source: EngineError::NotFound(RolloutKey::new("shop", "web")),
    }
}

#[test]
fn a_revert_is_tried_again_after_a_doubling_wait_of_at_most_ten_seconds() {
    let waits: Vec<Requeue> = (1..=8)
        .map(|failures| error_policy(&revert_failed(), failures))
        .collect();
    let millis = [200, 400, 800, 1600, 3200, 6400, 10_000, 10_000];
    let expected: Vec<Requeue> = millis
        .iter()
        .map(|&ms| Requeue::After(Duration::from_millis(ms)))
        .collect();
    assert_eq!(waits, expected);
    assert_eq!(
        error_policy(&revert_failed(), u32::MAX),
        Requeue::After(BACKOFF_MAX)
    );
}

#[test]
fn every_other_failure_waits_for_the_objects_next_change() {
    let event = Error::Event {
        key: RolloutKey::new("shop", "web"),
        source: serde_json::from_str::<u8>("x").unwrap_err(),
    };
    for error in [forget_failed(), event] {
        assert_eq!(error_policy(&error, 1), Requeue::OnChange, "{error}");
    }
}

#[test]
fn errors_say_what_was_being_done_and_for_which_rollout() {
    assert_eq!(
        revert_failed().to_string(),
        "reverting shop/web before its deletion: the primary has 0 of 2 pods ready (transient, will retry)"
    );
    assert!(
        forget_failed()
            .to_string()
            .starts_with("deleting shop/web: "),
        "{}",
        forget_failed()
    );
}

#[tokio::test]
async fn retrying_stops_at_the_first_success_or_at_a_failure_that_waits_for_a_change() {
    let attempts = AtomicU32::new(0);
    let reverted = retrying(|| async {
        match attempts.fetch_add(1, Ordering::SeqCst) {
            0 => Err(revert_failed()),
            _ => Ok(()),
        }
    })
    .await;
    assert!(reverted);
    assert_eq!(attempts.load(Ordering::SeqCst), 2);

    let attempts = AtomicU32::new(0);
    let done = retrying(|| async {
        attempts.fetch_add(1, Ordering::SeqCst);
        Err(forget_failed())
    })
    .await;
    assert!(!done);
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
}
