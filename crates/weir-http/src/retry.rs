//! The one retry policy of weir's outbound requests.
//!
//! An answer is worth another attempt when the receiver may answer differently a moment later:
//! `408 Request Timeout`, `429 Too Many Requests`, and any `5xx` but `501 Not Implemented`
//! (which never changes). A connection error or a timeout is always worth another attempt; the
//! caller decides how many it makes. Between attempts the wait doubles from `first` up to `max`,
//! without jitter: weir's deliveries are few and spread out already, and fixed waits keep a
//! rollout's timing predictable.

use std::time::Duration;

use http::StatusCode;

/// Whether an answer with `status` is worth another attempt.
pub fn worth_retrying(status: StatusCode) -> bool {
    status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || (status.is_server_error() && status != StatusCode::NOT_IMPLEMENTED)
}

/// The waits between attempts: `first`, then doubling, never more than `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The wait before the first retry.
    pub first: Duration,
    /// The longest wait.
    pub max: Duration,
}

impl Default for Backoff {
    /// 0.5s doubling, at most 5s.
    fn default() -> Self {
        Backoff {
            first: Duration::from_millis(500),
            max: Duration::from_secs(5),
        }
    }
}

impl Backoff {
    /// The wait before retry number `retry` (0 for the first).
    pub fn delay(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry).unwrap_or(u32::MAX);
        self.first.saturating_mul(factor).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_half_a_second_up_to_five() {
        let backoff = Backoff::default();
        let delays: Vec<u128> = (0..6).map(|n| backoff.delay(n).as_millis()).collect();
        assert_eq!(delays, [500, 1000, 2000, 4000, 5000, 5000]);
        assert_eq!(backoff.delay(u32::MAX), Duration::from_secs(5));
    }

    #[test]
    fn only_transient_answers_are_retried() {
        assert!(worth_retrying(StatusCode::BAD_GATEWAY));
        assert!(worth_retrying(StatusCode::SERVICE_UNAVAILABLE));
        assert!(worth_retrying(StatusCode::TOO_MANY_REQUESTS));
        assert!(worth_retrying(StatusCode::REQUEST_TIMEOUT));
        assert!(!worth_retrying(StatusCode::NOT_IMPLEMENTED));
        assert!(!worth_retrying(StatusCode::BAD_REQUEST));
        assert!(!worth_retrying(StatusCode::FORBIDDEN));
        assert!(!worth_retrying(StatusCode::NOT_FOUND));
    }
}
