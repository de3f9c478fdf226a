//! Guarded flag rollouts from the target's side, over a real SQLite store: what the judges get
//! from reported outcomes (`judge_window`) and the builtin checks of a flag rollout. The whole
//! loop on a running server - a failing verdict rolling the flag back - is in
//! `crates/weir/tests/flag_rollout.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use weir_analysis::{VersionCounts, Window};
use weir_core::document::{Document, load};
use weir_core::model::{CheckOutcome, Phase, Rollout, RolloutStatus};
use weir_engine::{MetricSource, TargetProvider};
use weir_flags::{FlagTargets, Flags, Outcome, Report};
use weir_store::{FlagKey, RolloutKey, SqliteStore};

const CHECKOUT: &str = "apiVersion: weir.dev/v1alpha1
kind: Flag
metadata: {name: checkout, namespace: shop}
spec:
  variations: [{name: \"off\", value: false}, {name: \"on\", value: true}]
  defaultStrategy: {variation: \"off\"}
";

const GUARDED: &str = "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {name: checkout-on, namespace: shop}
spec:
  target: {kind: flag, flag: checkout, control: \"off\", variation: \"on\"}
  plan:
    schedule:
      manual: [{at: \"2030-01-01T00:00:00Z\", weight: 20}]
  analysis:
    interval: 1m
    judges: [sequential]
    metrics:
      - {name: request-success-rate, thresholdRange: {min: 90}}
      - {name: request-duration, thresholdRange: {max: 300}}
";

fn document(yaml: &str) -> Document {
    match load(yaml.as_bytes()).into_iter().next() {
        Some(Ok(loaded)) => loaded.document,
        other => panic!("{other:?}"),
    }
}

struct Guarded {
    flags: Flags<SqliteStore>,
    targets: FlagTargets<SqliteStore>,
    rollout: Rollout,
    key: RolloutKey,
}

async fn guarded() -> Guarded {
    let flags = Flags::open(SqliteStore::open_in_memory().await.unwrap())
        .await
        .unwrap();
    let Document::Flag(flag) = document(CHECKOUT) else {
        panic!("not a flag");
    };
    flags
        .apply(*flag, None, jiff::Timestamp::now())
        .await
        .unwrap();
    let Document::Rollout(rollout) = document(GUARDED) else {
        panic!("not a rollout");
    };
    Guarded {
        targets: FlagTargets::new(flags.clone()),
        flags,
        rollout: *rollout,
        key: RolloutKey::new("shop", "checkout-on"),
    }
}

/// A run in progress; `promoted` once both roles are the target variation.
fn run(run: u64, promoted: bool) -> RolloutStatus {
    RolloutStatus {
        phase: Phase::Progressing,
        run,
        canary_revision: Some("on".into()),
        primary_revision: Some(if promoted { "on" } else { "off" }.into()),
        ..RolloutStatus::default()
    }
}

fn outcome(requests: u64, errors: u64) -> Outcome {
    Outcome {
        requests,
        errors,
        ..Outcome::default()
    }
}

impl Guarded {
    fn report(&self, entries: &[(&str, Outcome)]) {
        let report: Report = entries
            .iter()
            .map(|(name, outcome)| (name.to_string(), outcome.clone()))
            .collect();
        self.flags
            .report(&FlagKey::new("shop", "checkout"), &report)
            .unwrap();
    }

    /// A tick: the target observes the run (and closes the builtin checks' window).
    async fn tick(&self, status: &RolloutStatus) {
        self.targets
            .observe(&self.key, &self.rollout, status)
            .await
            .unwrap();
    }

    async fn window(&self, slow_above_ms: Option<f64>) -> Option<Window> {
        TargetProvider::judge_window(&self.targets, &self.key, &self.rollout, slow_above_ms).await
    }

    async fn check(&self, index: usize) -> weir_core::model::CheckResult {
        let metric = &self.rollout.spec.analysis.metrics[index];
        assert!(self.targets.handles(&self.rollout, metric));
        self.targets.check(&self.key, &self.rollout, metric).await
    }
}

fn counts(requests: u64, errors: u64, slow: u64) -> VersionCounts {
    VersionCounts {
        requests,
        errors,
        slow,
    }
}

#[tokio::test]
async fn judges_get_what_each_variation_served_since_their_previous_look() {
    let guarded = guarded().await;
    // Nothing is judged before the target has seen the run.
    assert_eq!(guarded.window(None).await, None);
    guarded.tick(&run(1, false)).await;
    // Reports before the judges' first look are not theirs: the first look starts counting.
    guarded.report(&[("on", outcome(50, 50))]);
    assert_eq!(guarded.window(None).await, None);

    guarded.report(&[("on", outcome(100, 20)), ("off", outcome(300, 3))]);
    let window = guarded.window(None).await.unwrap();
    assert_eq!(window.canary, counts(100, 20, 0));
    assert_eq!(window.primary, counts(300, 3, 0));
    // The share of the requests the target variation served, not the schedule's weight.
    assert_eq!(window.canary_weight, 0.25);

    // Nothing reported since: an empty window.
    let window = guarded.window(None).await.unwrap();
    assert_eq!(
        (window.canary, window.primary),
        (counts(0, 0, 0), counts(0, 0, 0))
    );

    // Shares are rounded up to 0.01% (conservative for the test).
    guarded.report(&[("on", outcome(1, 0)), ("off", outcome(2, 0))]);
    assert_eq!(guarded.window(None).await.unwrap().canary_weight, 0.3334);

    // Slow requests: reported ones, and latencies above the rollout's bound.
    guarded.report(&[
        (
            "on",
            Outcome {
                requests: 3,
                latencies_ms: vec![12.0, 450.0, 2000.0],
                ..Outcome::default()
            },
        ),
        (
            "off",
            Outcome {
                requests: 4,
                slow: 1,
                ..Outcome::default()
            },
        ),
    ]);
    let window = guarded.window(Some(300.0)).await.unwrap();
    assert_eq!(window.canary, counts(3, 0, 2));
    assert_eq!(window.primary, counts(4, 0, 1));

    // A new run starts counting afresh.
    guarded.tick(&run(2, false)).await;
    guarded.report(&[("on", outcome(10, 10))]);
    assert_eq!(guarded.window(None).await, None);
    guarded.report(&[("on", outcome(10, 1))]);
    assert_eq!(guarded.window(None).await.unwrap().canary, counts(10, 1, 0));

    // Promoted: both roles are one variation, nothing to compare.
    guarded.tick(&run(2, true)).await;
    assert_eq!(guarded.window(None).await, None);
    assert_eq!(guarded.window(None).await, None);

    // Gone: nothing more.
    guarded.tick(&run(3, false)).await;
    guarded.targets.remove(&guarded.key).await;
    assert_eq!(guarded.window(None).await, None);
    assert_eq!(guarded.window(None).await, None);
}

#[tokio::test]
async fn builtin_checks_judge_the_target_variation_per_tick() {
    let guarded = guarded().await;
    let status = run(1, false);
    guarded.tick(&status).await;
    // The first tick has no window yet.
    assert_eq!(guarded.check(0).await.outcome, CheckOutcome::NoData);

    guarded.report(&[("on", outcome(100, 20)), ("off", outcome(100, 0))]);
    guarded.tick(&status).await;
    let success = guarded.check(0).await;
    assert_eq!(success.outcome, CheckOutcome::Fail, "{success:?}");
    assert_eq!(success.value, Some(80.0));
    assert!(
        success.message.contains("100 requests, 20 errors"),
        "{success:?}"
    );
    // No latencies reported: request-duration has no data.
    assert_eq!(guarded.check(1).await.outcome, CheckOutcome::NoData);

    let latencies: Vec<f64> = (1..=100).map(f64::from).collect();
    guarded.report(&[(
        "on",
        Outcome {
            requests: 100,
            errors: 1,
            latencies_ms: latencies,
            ..Outcome::default()
        },
    )]);
    guarded.tick(&status).await;
    let success = guarded.check(0).await;
    assert_eq!(
        (success.outcome, success.value),
        (CheckOutcome::Pass, Some(99.0))
    );
    let duration = guarded.check(1).await;
    assert_eq!(duration.outcome, CheckOutcome::Pass, "{duration:?}");
    let p99 = duration.value.unwrap();
    assert!((99.0..=108.0).contains(&p99), "{duration:?}");

    // A tick without reports: no data, not a pass.
    guarded.tick(&status).await;
    assert_eq!(guarded.check(0).await.outcome, CheckOutcome::NoData);
}
