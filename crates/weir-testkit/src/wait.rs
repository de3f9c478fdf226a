//! Waiting on a condition, never on the clock: a loaded machine makes a test slower, not red.

use std::time::{Duration, Instant};

/// How long anything a test waits for may take before the test calls it a hang. Generous on
/// purpose: CI machines are shared and two cores build while tests run.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// How often a condition is asked again.
const POLL: Duration = Duration::from_millis(25);

/// Polls `check` until it returns `Some`, and returns that; panics naming `what` after
/// [`DEADLINE`].
pub fn wait_until<T>(what: &str, check: impl FnMut() -> Option<T>) -> T {
    wait_until_within(DEADLINE, what, check)
}

/// [`wait_until`] with another deadline.
pub fn wait_until_within<T>(
    deadline: Duration,
    what: &str,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let until = Instant::now() + deadline;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < until,
            "gave up after {deadline:?} waiting for {what}"
        );
        std::thread::sleep(POLL);
    }
}

/// The async twin of [`wait_until`]: polls `check` (a future per call) until it yields `Some`.
pub async fn wait_for<T, F>(what: &str, mut check: impl FnMut() -> F) -> T
where
    F: Future<Output = Option<T>>,
{
    let until = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "gave up after {DEADLINE:?} waiting for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}
