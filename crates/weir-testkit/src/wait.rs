//! Waiting on a condition, never on the clock: a loaded machine makes a test slower, not red.
//!
//! These are the only places where a test sleeps between two looks at what it waits for.

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
/// A check that itself never finishes is cut off at the deadline too.
pub async fn wait_for<T, F>(what: &str, mut check: impl FnMut() -> F) -> T
where
    F: Future<Output = Option<T>>,
{
    wait_for_ok_within(DEADLINE, what, || {
        let next = check();
        async move { next.await.ok_or_else(String::new) }
    })
    .await
}

/// [`wait_for`] with another deadline.
pub async fn wait_for_within<T, F>(
    deadline: Duration,
    what: &str,
    mut check: impl FnMut() -> F,
) -> T
where
    F: Future<Output = Option<T>>,
{
    wait_for_ok_within(deadline, what, || {
        let next = check();
        async move { next.await.ok_or_else(String::new) }
    })
    .await
}

/// [`wait_for`] for checks that say what they saw when it was not yet what they wait for
/// (`Err(description)`): the panic at the deadline shows the last description, which is
/// usually what explains the hang.
pub async fn wait_for_ok<T, F>(what: &str, check: impl FnMut() -> F) -> T
where
    F: Future<Output = Result<T, String>>,
{
    wait_for_ok_within(DEADLINE, what, check).await
}

/// [`wait_for_ok`] with another deadline.
pub async fn wait_for_ok_within<T, F>(
    deadline: Duration,
    what: &str,
    mut check: impl FnMut() -> F,
) -> T
where
    F: Future<Output = Result<T, String>>,
{
    let until = tokio::time::Instant::now() + deadline;
    let mut last = String::new();
    loop {
        match tokio::time::timeout_at(until, check()).await {
            Ok(Ok(value)) => return value,
            Ok(Err(seen)) => last = seen,
            Err(_) => last = format!("{last} (the last check did not finish)"),
        }
        let last = if last.is_empty() {
            String::new()
        } else {
            format!("; last: {last}")
        };
        assert!(
            tokio::time::Instant::now() < until,
            "gave up after {deadline:?} waiting for {what}{last}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Runs `test` to its end, or fails it after [`DEADLINE`] instead of letting it hang forever if
/// something deadlocks. Not a timing assertion: the bound is far above any plausible run time.
pub async fn no_hang<F: Future>(test: F) -> F::Output {
    no_hang_within(DEADLINE, test).await
}

/// [`no_hang`] with another bound, for tests that do a lot of work on purpose.
pub async fn no_hang_within<F: Future>(limit: Duration, test: F) -> F::Output {
    match tokio::time::timeout(limit, test).await {
        Ok(output) => output,
        Err(_) => panic!("the test hung: not done after {limit:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_until_returns_the_first_value_found() {
        let mut calls = 0;
        let found = wait_until("the third call", || {
            calls += 1;
            (calls == 3).then_some(calls)
        });
        assert_eq!(found, 3);
    }

    #[test]
    #[should_panic(expected = "waiting for nothing at all")]
    fn wait_until_names_what_it_waited_for() {
        wait_until_within(Duration::from_millis(50), "nothing at all", || None::<()>);
    }

    #[tokio::test]
    #[should_panic(expected = "waiting for a phase; last: Progressing")]
    async fn wait_for_ok_shows_the_last_state_seen() {
        wait_for_ok_within(Duration::from_millis(50), "a phase", || async {
            Err::<(), _>("Progressing".to_string())
        })
        .await;
    }

    #[tokio::test]
    #[should_panic(expected = "the last check did not finish")]
    async fn a_check_that_never_ends_is_cut_off() {
        wait_for_within(Duration::from_millis(50), "a hanging check", || {
            std::future::pending::<Option<()>>()
        })
        .await;
    }

    #[tokio::test]
    #[should_panic(expected = "the test hung")]
    async fn no_hang_fails_a_hanging_test() {
        no_hang_within(Duration::from_millis(20), std::future::pending::<()>()).await;
    }
}
