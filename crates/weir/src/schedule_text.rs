//! How a schedule reads in a terminal: progress bars and waits a person takes in at a glance.
//! Shared by `weir status` (a rollout's schedule table) and `weir flag rollouts` (one row per
//! flag rollout), so the two print the same things the same way.

use jiff::{SignedDuration, Timestamp};

/// `[####------]`: `part` of `whole` as a bar of `width` cells. Rounded up, so any progress at
/// all shows as at least one cell; empty when `whole` is 0.
pub(crate) fn bar(part: u64, whole: u64, width: usize) -> String {
    let width_cells = width as u64;
    let filled = if whole == 0 {
        0
    } else {
        (part.min(whole) * width_cells).div_ceil(whole)
    };
    // `filled` is at most `width`, so it fits in a usize.
    let filled = usize::try_from(filled).unwrap_or(width).min(width);
    format!("[{}{}]", "#".repeat(filled), "-".repeat(width - filled))
}

/// A wait in whole units a person reads at a glance: `4m 58s`, `2d 3h`.
pub(crate) fn rounded(wait: SignedDuration) -> String {
    let seconds = wait.as_secs().max(0);
    let (days, hours, minutes, secs) = (
        seconds / 86_400,
        seconds / 3_600 % 24,
        seconds / 60 % 60,
        seconds % 60,
    );
    match (days, hours, minutes) {
        (0, 0, 0) => format!("{secs}s"),
        (0, 0, _) => format!("{minutes}m {secs}s"),
        (0, _, _) => format!("{hours}h {minutes}m"),
        _ => format!("{days}d {hours}h"),
    }
}

/// When `at` is, seen from `now`: `in 4m 57s`, or `due now` once it has come.
pub(crate) fn due(at: Timestamp, now: Timestamp) -> String {
    let wait = now.duration_until(at);
    if wait.is_positive() {
        format!("in {}", rounded(wait))
    } else {
        "due now".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_round_up_and_stay_within_their_width() {
        assert_eq!(bar(0, 5, 10), "[----------]");
        assert_eq!(bar(2, 5, 10), "[####------]");
        assert_eq!(bar(1, 3, 10), "[####------]");
        assert_eq!(bar(5, 5, 10), "[##########]");
        assert_eq!(bar(7, 5, 10), "[##########]");
        assert_eq!(bar(0, 0, 10), "[----------]");
        // A weight in basis points: 30% of 20 cells.
        assert_eq!(bar(3_000, 10_000, 20), "[######--------------]");
    }

    #[test]
    fn waits_read_in_whole_units() {
        let now = Timestamp::from_second(1_800_000_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let later = |seconds| now + SignedDuration::from_secs(seconds);
        assert_eq!(due(later(297), now), "in 4m 57s");
        assert_eq!(due(later(2 * 86_400 + 3 * 3_600 + 60), now), "in 2d 3h");
        assert_eq!(due(later(3_600 + 120), now), "in 1h 2m");
        assert_eq!(due(later(9), now), "in 9s");
        assert_eq!(due(now, now), "due now");
        assert_eq!(due(later(-60), now), "due now");
    }
}
