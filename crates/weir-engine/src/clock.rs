//! Where the engine and the adapters take time from: the system clock in production, a
//! [`ManualClock`] that tests move forward, so schedules, intervals and pauses can be tested
//! without sleeping.

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use tokio::sync::watch;

use crate::providers::BoxFuture;

/// A source of the current time that can also wait for a later one.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;

    /// Resolves once [`Clock::now`] has reached `at` (at once if it already has).
    fn sleep_until(&self, at: Timestamp) -> BoxFuture<'static, ()>;
}

/// The clock everything shares: cheap to clone.
pub type SharedClock = Arc<dyn Clock>;

/// The wall clock, with tokio's timer for waiting.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl SystemClock {
    /// The system clock as a [`SharedClock`].
    pub fn shared() -> SharedClock {
        Arc::new(SystemClock)
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        // The one place weir's shell reads the wall clock.
        Timestamp::now()
    }

    fn sleep_until(&self, at: Timestamp) -> BoxFuture<'static, ()> {
        let wait = self.now().duration_until(at);
        Box::pin(async move {
            if wait > SignedDuration::ZERO {
                tokio::time::sleep(Duration::try_from(wait).unwrap_or(Duration::MAX)).await;
            }
        })
    }
}

/// A clock that stands still until told to move: [`ManualClock::advance`] wakes every sleeper
/// whose time has come.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: watch::Sender<Timestamp>,
}

impl ManualClock {
    /// A clock showing `start`.
    pub fn new(start: Timestamp) -> ManualClock {
        ManualClock {
            now: watch::Sender::new(start),
        }
    }

    /// This clock as a [`SharedClock`] (the same clock: advancing either moves both).
    pub fn shared(&self) -> SharedClock {
        Arc::new(self.clone())
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = SignedDuration::try_from(by).unwrap_or(SignedDuration::MAX);
        self.now.send_modify(|now| {
            *now = now.checked_add(by).unwrap_or(Timestamp::MAX);
        });
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.borrow()
    }

    fn sleep_until(&self, at: Timestamp) -> BoxFuture<'static, ()> {
        let mut now = self.now.subscribe();
        Box::pin(async move {
            // The sender lives as long as any clone of the clock; if all are gone, time has
            // stopped for good and the sleeper never wakes, as with a timer that never fires.
            if now.wait_for(|now| *now >= at).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_manual_sleeper_wakes_when_the_clock_reaches_its_time_and_not_before() {
        let clock = ManualClock::new(Timestamp::UNIX_EPOCH);
        let at = Timestamp::UNIX_EPOCH + SignedDuration::from_secs(60);
        let mut sleeper = tokio::spawn(clock.sleep_until(at));
        clock.advance(Duration::from_secs(59));
        tokio::task::yield_now().await;
        assert!(
            tokio::time::timeout(Duration::from_millis(50), &mut sleeper)
                .await
                .is_err(),
            "woke a second early"
        );
        clock.advance(Duration::from_secs(1));
        sleeper.await.unwrap();
        assert_eq!(clock.now(), at);
    }

    #[tokio::test]
    async fn a_time_already_past_resolves_at_once() {
        let clock = ManualClock::new(Timestamp::UNIX_EPOCH + SignedDuration::from_secs(10));
        clock.sleep_until(Timestamp::UNIX_EPOCH).await;
        SystemClock.sleep_until(Timestamp::UNIX_EPOCH).await;
    }
}
