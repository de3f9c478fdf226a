//! Timeouts of HTTP/1.1 client connections with one timer per connection instead of several per
//! request.
//!
//! An HTTP/1.1 connection is always in one of three phases: waiting for a request head (idle),
//! waiting for the upstream's response head, or streaming a response body. The first two have
//! deadlines - the header-read timeout and the response timeout. Rather than arming a timer for
//! each request (hyper's header-read timer and a `tokio::time::timeout` around the upstream
//! exchange: allocations and timer-wheel inserts and removals per request), each request only
//! stores its phase and when it began in a [`ConnClock`] (a few relaxed atomic stores). One
//! [`Watchdog`] per connection, polled in the connection's own task, owns a single sleep; when it
//! fires it compares the clock with the deadline of the current phase and either closes the
//! idle connection, marks the waiting request as timed out, or re-arms itself for the phase's
//! real deadline. Pushing a sleep later is a compare-and-swap in tokio, so with the defaults
//! (response timeout longer than the header-read timeout) the timer wheel is touched about once
//! per timeout period per connection, not per request.
//!
//! A timed-out request learns about it without a waker of its own: hyper polls the request's
//! future in the connection's task, the same task the watchdog's sleep wakes, and the watchdog
//! is polled first.
//!
//! HTTP/2 connections multiplex requests in tasks of their own and keep per-request timers.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::time::Sleep;

const IDLE: u8 = 0;
const WAITING: u8 = 1;
const STREAMING: u8 = 2;

/// The phase of one HTTP/1.1 connection and when it began, shared by its requests and its
/// watchdog (all in the same task; atomics only because futures must be `Send`).
#[derive(Debug)]
pub(crate) struct ConnClock {
    base: Instant,
    phase: AtomicU8,
    /// Milliseconds after `base` at which the current phase began.
    since: AtomicU64,
    /// The waiting request's response timeout has passed.
    expired: AtomicBool,
}

impl ConnClock {
    pub(crate) fn new() -> Self {
        Self {
            base: Instant::now(),
            phase: AtomicU8::new(IDLE),
            since: AtomicU64::new(0),
            expired: AtomicBool::new(false),
        }
    }

    fn millis(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_millis()).unwrap_or(u64::MAX)
    }

    fn instant(&self, millis: u64) -> Instant {
        self.base + Duration::from_millis(millis)
    }

    /// A request head arrived at `at`; its response is now awaited.
    pub(crate) fn waiting(&self, at: Instant) {
        self.expired.store(false, Ordering::Relaxed);
        self.since.store(self.millis(at), Ordering::Relaxed);
        self.phase.store(WAITING, Ordering::Relaxed);
    }

    /// The response head is ready; its body streams without a deadline.
    pub(crate) fn streaming(&self) {
        self.phase.store(STREAMING, Ordering::Relaxed);
    }

    /// The response is finished; the next request head is awaited from now.
    pub(crate) fn idle(&self) {
        self.since
            .store(self.millis(Instant::now()), Ordering::Relaxed);
        self.phase.store(IDLE, Ordering::Relaxed);
    }

    /// Whether the waiting request's response timeout has passed.
    pub(crate) fn expired(&self) -> bool {
        self.expired.load(Ordering::Relaxed)
    }

    /// The deadline of the current phase, if it has one still to enforce.
    fn deadline(&self, header_read: Duration, response: Duration) -> Option<(u8, Instant)> {
        let since = self.instant(self.since.load(Ordering::Relaxed));
        match self.phase.load(Ordering::Relaxed) {
            IDLE => Some((IDLE, since + header_read)),
            WAITING if !self.expired() => Some((WAITING, since + response)),
            _ => None,
        }
    }
}

/// Enforces a connection's deadlines with one sleep (see the module documentation). Completes
/// when the connection has been idle for longer than the header-read timeout and must be closed.
pub(crate) struct Watchdog<'a> {
    clock: &'a ConnClock,
    header_read: Duration,
    response: Duration,
    sleep: Pin<Box<Sleep>>,
    /// When `sleep` is set to fire.
    armed: Instant,
    /// `sleep` was armed since it was last polled, so it must be polled to register a wake-up.
    fresh: bool,
}

impl<'a> Watchdog<'a> {
    pub(crate) fn new(clock: &'a ConnClock, header_read: Duration, response: Duration) -> Self {
        let armed = clock.base + header_read;
        Self {
            clock,
            header_read,
            response,
            sleep: Box::pin(tokio::time::sleep_until(armed.into())),
            armed,
            fresh: true,
        }
    }

    fn arm(&mut self, at: Instant) {
        self.sleep.as_mut().reset(at.into());
        self.armed = at;
        self.fresh = true;
    }

    /// Polls the watchdog; `Ready` means: close the connection.
    pub(crate) fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            let due = self.clock.deadline(self.header_read, self.response);
            // Only a deadline earlier than the armed one needs the timer moved now (e.g. a
            // response timeout shorter than the header-read timeout); later ones are picked up
            // when the sleep fires.
            if let Some((_, at)) = due
                && at < self.armed
            {
                self.arm(at);
            }
            // Once polled, the sleep wakes this task when it fires (the task, and so its waker,
            // never changes); until then a flag check is enough, and cheaper than a poll.
            if self.fresh {
                self.fresh = false;
                if self.sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
            } else if !self.sleep.is_elapsed() {
                return Poll::Pending;
            }
            let now = Instant::now();
            let next = match due {
                Some((IDLE, at)) if at <= now => return Poll::Ready(()),
                Some((_, at)) if at <= now => {
                    // Waiting past the response timeout: the request's future (polled next, in
                    // this same task) sees the flag and answers 504.
                    self.clock.expired.store(true, Ordering::Relaxed);
                    now + self.header_read
                }
                Some((_, at)) => at,
                // Streaming, or already expired: look again later.
                None => now + self.header_read,
            };
            self.arm(next);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn phases_have_the_right_deadlines() {
        let clock = ConnClock::new();
        let (read, response) = (Duration::from_secs(10), Duration::from_secs(30));
        let (phase, at) = clock.deadline(read, response).unwrap();
        assert_eq!((phase, at), (IDLE, clock.base + read));
        let head = clock.base + Duration::from_secs(5);
        clock.waiting(head);
        let (phase, at) = clock.deadline(read, response).unwrap();
        assert_eq!((phase, at), (WAITING, head + response));
        clock.expired.store(true, Ordering::Relaxed);
        assert!(clock.deadline(read, response).is_none());
        clock.waiting(head);
        assert!(!clock.expired());
        clock.streaming();
        assert!(clock.deadline(read, response).is_none());
        clock.idle();
        assert_eq!(clock.deadline(read, response).unwrap().0, IDLE);
    }
}
