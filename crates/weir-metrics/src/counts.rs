//! Counts for the continuous judges from a metric provider (`spec.analysis.judgeCounts`).
//!
//! Four queries - requests and errors of the canary and of the primary - each answer how many
//! happened in the last `{{ interval }}`. weir renders `{{ interval }}` as the whole seconds since
//! the time its previous read covered up to, and moves that time on by exactly as much, so
//! successive reads cover the run without gaps or overlaps (the fraction of a second left over
//! is counted by the next read). The first call of a run only marks where its first window
//! starts (the baseline: traffic before the run is not evidence). Between reads, and when a read
//! fails or one of its four answers holds no number, the judges get an empty window: counts from
//! this backend are never mixed with another source's.
//!
//! The arithmetic here is pure ([`next_step`], [`window`]); [`crate::MetricsSource`] does the IO.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use weir_analysis::{VersionCounts, Window};

/// Where a rollout's reads stand: the run, and the end of the time its reads have covered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// The run the reads belong to.
    pub run: u64,
    /// The end of the time covered so far.
    pub until: Timestamp,
}

/// What to do at a judge's call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The first call of a run: mark its start, query nothing, give an empty window.
    Baseline,
    /// Less than the least time between reads has passed: give an empty window.
    Wait,
    /// Query the counts of the last `seconds` (rendered as `{{ interval }}`).
    Read {
        /// Whole seconds since the previous read's end, at least 1.
        seconds: u64,
    },
}

/// The step at `now` for run `run`, reading at most once per `every` (at least 1s), and the
/// cursor to keep.
pub fn next_step(
    previous: Option<Cursor>,
    run: u64,
    now: Timestamp,
    every: Duration,
) -> (Step, Cursor) {
    let fresh = Cursor { run, until: now };
    let Some(previous) = previous.filter(|previous| previous.run == run) else {
        return (Step::Baseline, fresh);
    };
    let elapsed = now.duration_since(previous.until);
    let every = every.max(Duration::from_secs(1));
    let seconds = u64::try_from(elapsed.as_secs()).unwrap_or(0);
    if elapsed < every_signed(every) {
        // The clock went back, or it is not yet time: nothing is read, nothing is lost.
        return (Step::Wait, previous);
    }
    let until = previous
        .until
        .checked_add(SignedDuration::from_secs(
            i64::try_from(seconds).unwrap_or(i64::MAX),
        ))
        .unwrap_or(now);
    (Step::Read { seconds }, Cursor { run, until })
}

fn every_signed(every: Duration) -> SignedDuration {
    SignedDuration::try_from(every).unwrap_or(SignedDuration::MAX)
}

/// One answer's count: a finite, non-negative number rounded to a whole one; anything else
/// (no data, a negative number, NaN) is `None`.
pub fn count(value: Option<f64>) -> Option<u64> {
    let value = value?;
    if !value.is_finite() || value < 0.0 {
        return None;
    }
    // Counts beyond u64 do not occur; `as` saturates.
    Some(value.round() as u64)
}

/// The judges' window from the four answers (canary requests, canary errors, primary requests,
/// primary errors): empty unless all four hold a count. Errors are at most the requests (the
/// two queries may see slightly different moments); the canary's weight is its share of the
/// requests.
pub fn window(values: [Option<f64>; 4]) -> Window {
    let [
        Some(canary_requests),
        Some(canary_errors),
        Some(primary_requests),
        Some(primary_errors),
    ] = values.map(count)
    else {
        return Window::default();
    };
    let canary = VersionCounts {
        requests: canary_requests,
        errors: canary_errors.min(canary_requests),
        slow: 0,
    };
    let primary = VersionCounts {
        requests: primary_requests,
        errors: primary_errors.min(primary_requests),
        slow: 0,
    };
    let total = canary.requests.saturating_add(primary.requests);
    let canary_weight = if total > 0 {
        canary.requests as f64 / total as f64
    } else {
        0.0
    };
    Window {
        canary_weight,
        canary,
        primary,
        ..Window::default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn at(seconds: f64) -> Timestamp {
        let base: Timestamp = "2026-11-28T12:00:00Z".parse().unwrap();
        base.checked_add(SignedDuration::from_secs_f64(seconds))
            .unwrap()
    }

    #[test]
    fn the_first_call_of_a_run_is_a_baseline_and_reads_cover_the_time_since_without_gaps() {
        let every = Duration::from_secs(1);
        let (step, cursor) = next_step(None, 1, at(0.0), every);
        assert_eq!(step, Step::Baseline);
        assert_eq!(cursor.until, at(0.0));
        // Not yet a second: nothing is read.
        let (step, cursor) = next_step(Some(cursor), 1, at(0.6), every);
        assert_eq!(step, Step::Wait);
        assert_eq!(cursor.until, at(0.0));
        // 2.7 s later: two whole seconds are read, the 0.7 s left over go to the next read.
        let (step, cursor) = next_step(Some(cursor), 1, at(2.7), every);
        assert_eq!(step, Step::Read { seconds: 2 });
        assert_eq!(cursor.until, at(2.0));
        let (step, cursor) = next_step(Some(cursor), 1, at(3.4), every);
        assert_eq!(step, Step::Read { seconds: 1 });
        assert_eq!(cursor.until, at(3.0));
        // A new run starts over with a baseline.
        let (step, cursor) = next_step(Some(cursor), 2, at(10.0), every);
        assert_eq!(step, Step::Baseline);
        assert_eq!(
            cursor,
            Cursor {
                run: 2,
                until: at(10.0)
            }
        );
        // A clock that went back reads nothing.
        let (step, _) = next_step(Some(cursor), 2, at(5.0), every);
        assert_eq!(step, Step::Wait);
    }

    #[test]
    fn reads_are_at_least_the_interval_apart() {
        let every = Duration::from_secs(30);
        let (_, cursor) = next_step(None, 7, at(0.0), every);
        let (step, cursor) = next_step(Some(cursor), 7, at(29.9), every);
        assert_eq!(step, Step::Wait);
        let (step, cursor) = next_step(Some(cursor), 7, at(31.2), every);
        assert_eq!(step, Step::Read { seconds: 31 });
        assert_eq!(cursor.until, at(31.0));
        // A fractional least time: 1.5 s.
        let every = Duration::from_millis(1500);
        let (_, cursor) = next_step(None, 1, at(0.0), every);
        assert_eq!(next_step(Some(cursor), 1, at(1.2), every).0, Step::Wait);
        assert_eq!(
            next_step(Some(cursor), 1, at(1.6), every).0,
            Step::Read { seconds: 1 }
        );
    }

    #[test]
    fn four_counts_make_a_window_and_anything_less_an_empty_one() {
        let full = window([Some(300.4), Some(30.0), Some(699.6), Some(1.0)]);
        assert_eq!(
            (full.canary.requests, full.canary.errors),
            (300, 30),
            "{full:?}"
        );
        assert_eq!((full.primary.requests, full.primary.errors), (700, 1));
        assert!((full.canary_weight - 0.3).abs() < 1e-12, "{full:?}");
        // No data in any of the four: empty, never half a window.
        for missing in 0..4 {
            let mut values = [Some(10.0), Some(1.0), Some(10.0), Some(0.0)];
            values[missing] = None;
            assert_eq!(window(values), Window::default(), "{missing}");
        }
        // Negative and NaN are no data.
        assert_eq!(
            window([Some(-1.0), Some(0.0), Some(5.0), Some(0.0)]),
            Window::default()
        );
        assert_eq!(
            window([Some(5.0), Some(f64::NAN), Some(5.0), Some(0.0)]),
            Window::default()
        );
        assert_eq!(
            window([Some(5.0), Some(0.0), Some(f64::INFINITY), Some(0.0)]),
            Window::default()
        );
        // No traffic: zero counts, weight 0.
        let idle = window([Some(0.0), Some(0.0), Some(0.0), Some(0.0)]);
        assert_eq!(idle, Window::default());
        // Errors beyond the requests are capped at them.
        let capped = window([Some(4.0), Some(6.0), Some(0.0), Some(0.0)]);
        assert_eq!((capped.canary.requests, capped.canary.errors), (4, 4));
        assert_eq!(capped.canary_weight, 1.0);
    }
}
