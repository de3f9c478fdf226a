//! Evaluation counts over time: per flag, variation and minute, kept in the store for a day
//! ([`EVALUATIONS_KEPT_MINUTES`]) so they survive a restart.
//!
//! An evaluation costs nothing more than the exposure count it already made (one relaxed atomic
//! add, `outcomes.rs`): [`Flags::flush_evaluations`], called every few seconds and at shutdown,
//! reads every counter, writes what each grew since the previous flush to the current minute in
//! one transaction, and prunes minutes older than a day. A minute's count is thus exact to
//! within one flush interval at its edges.

use std::collections::{BTreeMap, HashMap};

use jiff::Timestamp;
use weir_store::{EvaluationCount, FlagKey, FlagStore};

use crate::{FlagError, Flags};

/// How many minutes of counts the store keeps: a day, and a little more.
pub const EVALUATIONS_KEPT_MINUTES: i64 = 24 * 60 + 5;

/// What the previous flush read: per flag and variation, the counter's identity and value.
#[derive(Debug, Default)]
pub(crate) struct Flushed {
    read: HashMap<(FlagKey, String), (usize, u64)>,
    pruned: Option<i64>,
}

/// One flag's counts over time: per minute (Unix seconds / 60), per variation.
pub type MinuteCounts = BTreeMap<i64, BTreeMap<String, u64>>;

/// The minute `at` falls in.
pub fn minute_of(at: Timestamp) -> i64 {
    at.as_second().div_euclid(60)
}

impl<S: FlagStore> Flags<S> {
    /// Writes what every flag's variations served since the previous flush to `now`'s minute,
    /// and prunes counts older than a day. What fails to be written is tried again next time.
    pub async fn flush_evaluations(&self, now: Timestamp) -> Result<(), FlagError> {
        let mut flushed = self.flushed.lock().await;
        let minute = minute_of(now);
        let snapshot = self.snapshot();
        let mut read = HashMap::new();
        let mut counts = Vec::new();
        for entry in snapshot.all() {
            for (variation, identity, value) in entry.counters.exposures() {
                let id = (entry.stored.key.clone(), variation.clone());
                let before = match flushed.read.get(&id) {
                    Some((known, before)) if *known == identity && *before <= value => *before,
                    _ => 0,
                };
                if value > before {
                    counts.push(EvaluationCount {
                        key: entry.stored.key.clone(),
                        variation: variation.clone(),
                        minute,
                        count: value - before,
                    });
                }
                read.insert(id, (identity, value));
            }
        }
        self.store.add_evaluation_counts(&counts).await?;
        flushed.read = read;
        let horizon = minute - EVALUATIONS_KEPT_MINUTES;
        if flushed.pruned != Some(minute) {
            self.store.prune_evaluation_counts(horizon).await?;
            flushed.pruned = Some(minute);
        }
        Ok(())
    }

    /// Flag `key`'s evaluations from minute `since` on (the stored ones; what was served since
    /// the last flush is not in them yet).
    pub async fn evaluations(&self, key: &FlagKey, since: i64) -> Result<MinuteCounts, FlagError> {
        let mut minutes = MinuteCounts::new();
        for count in self.store.evaluation_counts(key, since).await? {
            *minutes
                .entry(count.minute)
                .or_default()
                .entry(count.variation)
                .or_default() += count.count;
        }
        Ok(minutes)
    }
}
