//! Pre-generated request streams and their per-second tallies.
//!
//! A stream is a pure function of (seed, rate): second `s` holds the requests of a Poisson
//! process over [s, s + 1), each with three uniform draws fixed in advance: a routing draw (the
//! request goes to the canary when it is below the canary weight in force), an outcome draw (it
//! fails when it is below its version's error probability) and a latency draw (its latency is
//! its version's latency quantile at that draw, so it is slow when the draw is above the
//! distribution function at the threshold). Every controller reads the same draws; only the
//! weight it sets decides which version serves a request.

use weir_analysis::VersionCounts;

use crate::rng::Rng;
use crate::scenario::Conditions;

/// One request of a stream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Request {
    /// Arrival time within its second, in [0, 1).
    pub offset: f64,
    /// The routing draw in [0, 1): the canary serves the request when `route < weight`.
    pub route: f64,
    /// The outcome draw in [0, 1): the request fails when `outcome < error probability`.
    pub outcome: f64,
    /// The latency draw in [0, 1): the quantile of the serving version's latency distribution.
    pub latency: f64,
}

/// A seeded stream of requests at a rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestStream {
    seed: u64,
    rate: f64,
}

impl RequestStream {
    /// The stream of `seed` at `rate` requests per second.
    pub fn new(seed: u64, rate: f64) -> RequestStream {
        RequestStream { seed, rate }
    }

    /// The requests arriving during second `second`, sorted by routing draw, into `out`
    /// (cleared first). Each second has its own generator, so any second can be produced on
    /// its own and every caller gets the same requests.
    pub fn second(&self, second: u32, out: &mut Vec<Request>) {
        out.clear();
        if self.rate.is_nan() || self.rate <= 0.0 {
            return;
        }
        let mut rng = Rng::new(self.seed, u64::from(second));
        // A Poisson process restricted to one second: exponential gaps from its start until
        // one second has passed (memorylessness makes the seconds independent).
        let mut at = rng.exponential(self.rate);
        while at < 1.0 {
            out.push(Request {
                offset: at,
                route: rng.uniform(),
                outcome: rng.uniform(),
                latency: rng.uniform(),
            });
            at += rng.exponential(self.rate);
        }
        out.sort_by(|a, b| a.route.total_cmp(&b.route));
    }
}

/// One second's requests counted for every possible split: prefix sums over the requests sorted
/// by routing draw, so the counts for any canary weight cost one binary search.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    routes: Vec<f64>,
    canary_errors: Vec<u32>,
    primary_errors: Vec<u32>,
    canary_slow: Vec<u32>,
    primary_slow: Vec<u32>,
}

impl Tally {
    /// Counts `requests` (sorted by routing draw) under `conditions`.
    pub fn fill(&mut self, requests: &[Request], conditions: &Conditions) {
        self.routes.clear();
        for prefix in [
            &mut self.canary_errors,
            &mut self.primary_errors,
            &mut self.canary_slow,
            &mut self.primary_slow,
        ] {
            prefix.clear();
            prefix.push(0);
        }
        let canary_fast = 1.0 - conditions.canary_slow;
        let primary_fast = 1.0 - conditions.primary_slow;
        let (mut ce, mut pe, mut cs, mut ps) = (0u32, 0u32, 0u32, 0u32);
        for request in requests {
            self.routes.push(request.route);
            ce += u32::from(request.outcome < conditions.canary_error);
            pe += u32::from(request.outcome < conditions.primary_error);
            cs += u32::from(request.latency > canary_fast);
            ps += u32::from(request.latency > primary_fast);
            self.canary_errors.push(ce);
            self.primary_errors.push(pe);
            self.canary_slow.push(cs);
            self.primary_slow.push(ps);
        }
    }

    /// How many of the requests go to the canary at this weight (0.0..=1.0).
    pub fn canary_share(&self, weight: f64) -> usize {
        self.routes.partition_point(|route| *route < weight)
    }

    /// The canary's and the primary's counts when the canary weight is `weight`.
    pub fn split(&self, weight: f64) -> (VersionCounts, VersionCounts) {
        let k = self.canary_share(weight);
        let n = self.routes.len();
        let canary = VersionCounts {
            requests: k as u64,
            errors: u64::from(self.canary_errors[k]),
            slow: u64::from(self.canary_slow[k]),
        };
        let primary = VersionCounts {
            requests: (n - k) as u64,
            errors: u64::from(self.primary_errors[n] - self.primary_errors[k]),
            slow: u64::from(self.primary_slow[n] - self.primary_slow[k]),
        };
        (canary, primary)
    }
}

#[cfg(test)]
mod tests;
