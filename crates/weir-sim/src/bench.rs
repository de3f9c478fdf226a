//! The blast-radius benchmark: every scenario, both controllers, many seeds, and the
//! per-scenario metrics; plus the sweep of each controller's knobs behind the Pareto chart.

use std::ops::Range;

use serde::Serialize;
use weir_analysis::{SequentialConfig, clopper_pearson, wald_expected_samples};
use weir_core::model::EvidenceRule;

use crate::scenario::{Fault, Harm, Scenario};
use crate::sim::{ControllerSpec, RunEnd, RunResult, SimConfig, simulate};

/// alpha and beta of the Wald bound the ratio is taken to (the reference's 4.50 nats).
pub const WALD_ALPHA: f64 = 0.01;
/// See [`WALD_ALPHA`].
pub const WALD_BETA: f64 = 0.01;

/// weir's default false-rollback bound in the benchmark.
pub const DEFAULT_ALPHA: f64 = 0.01;

/// The sequential judge's settings for a scenario: `alpha`, the scenario's r0 (1 unless it says
/// otherwise), the default grid of design ratios, and the latency test on the scenario's fixed
/// threshold (the primary's p99).
pub fn weir_judge(scenario: &Scenario, alpha: f64) -> SequentialConfig {
    SequentialConfig {
        alpha,
        tolerated_increase: scenario.tolerated_increase.unwrap_or(1.0),
        latency_threshold_ms: Some(scenario.latency_threshold_ms),
        ..SequentialConfig::default()
    }
}

/// The two controllers compared on a scenario: weir (sequential judge at `alpha`, weir's
/// default evidence rule) and the Flagger-style reference (threshold 5, success rate >= 99%,
/// Flagger's promotion semantics), on the same plan and interval.
pub fn controllers(scenario: &Scenario, alpha: f64) -> Vec<ControllerSpec> {
    controllers_with(scenario, alpha, EvidenceRule::default())
}

/// [`controllers`] with weir under another evidence rule (a deadline policy, a margin).
pub fn controllers_with(
    scenario: &Scenario,
    alpha: f64,
    evidence: EvidenceRule,
) -> Vec<ControllerSpec> {
    vec![
        ControllerSpec {
            evidence,
            ..ControllerSpec::weir(scenario.interval_s, weir_judge(scenario, alpha))
        },
        ControllerSpec::flagger_style(scenario.interval_s, 5, 99.0),
    ]
}

/// Runs `controllers` on `scenario` for every seed in `seeds`, spread over `threads` threads
/// (results do not depend on the number of threads). Returns, per controller, one result per
/// seed in seed order.
pub fn run_seeds(
    scenario: &Scenario,
    controllers: &[ControllerSpec],
    seeds: Range<u64>,
    config: &SimConfig,
    threads: usize,
) -> Vec<Vec<RunResult>> {
    let count = usize::try_from(seeds.end.saturating_sub(seeds.start)).unwrap_or(usize::MAX);
    let threads = threads.clamp(1, count.max(1));
    let chunk = count.div_ceil(threads).max(1) as u64;
    let chunks: Vec<Range<u64>> = (0..threads as u64)
        .map(|i| {
            let start = seeds.start + i * chunk;
            start.min(seeds.end)..(start + chunk).min(seeds.end)
        })
        .collect();
    let run_chunk = |range: Range<u64>| -> Vec<Vec<RunResult>> {
        range
            .map(|seed| simulate(scenario, controllers, seed, config))
            .collect()
    };
    let per_seed: Vec<Vec<RunResult>> = if threads == 1 {
        run_chunk(seeds)
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = chunks
                .into_iter()
                .map(|range| scope.spawn(move || run_chunk(range)))
                .collect();
            handles
                .into_iter()
                // A panicking worker is a bug in the simulator; re-raise it here.
                .flat_map(|handle| {
                    handle
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        })
    };
    (0..controllers.len())
        .map(|index| per_seed.iter().map(|results| results[index]).collect())
        .collect()
}

/// One line of the report: a controller's behaviour on a scenario over all seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The scenario's name.
    pub scenario: String,
    /// The controller's name.
    pub controller: String,
    /// The scenario in words.
    pub summary: String,
    /// Runs (seeds).
    pub seeds: u64,
    /// Whether the canary is faulty in this scenario.
    pub faulty: bool,
    /// What counts as a failed request: `errors` or `latency` (slow requests).
    pub harm: Harm,
    /// Canary requests served from the fault's onset (from the first request in healthy
    /// scenarios) until the run ended (rollback, promotion or the limit), mean.
    pub canary_requests_mean: f64,
    /// The same, 95th percentile.
    pub canary_requests_p95: f64,
    /// Failed canary requests (errors, or slow requests in latency scenarios) from the fault's
    /// onset until the run ended, mean over all runs.
    pub failed_requests_mean: f64,
    /// The same, 95th percentile.
    pub failed_requests_p95: f64,
    /// Share of runs rolled back.
    pub rollback_rate: f64,
    /// Seconds from the fault's onset to the rollback, mean over runs rolled back after the
    /// onset (`null` when none was).
    pub rollback_time_mean_s: Option<f64>,
    /// The same, 95th percentile.
    pub rollback_time_p95_s: Option<f64>,
    /// Faulty scenarios: share of runs in which the faulty canary was not rolled back: promoted
    /// ([`Row::promotion_rate`]) or still held at the limit ([`Row::held_rate`]). `null` for
    /// healthy scenarios.
    pub missed_detection_rate: Option<f64>,
    /// Faulty scenarios: share of runs rolled back before the fault's onset (false alarms).
    pub early_rollback_rate: Option<f64>,
    /// Healthy scenarios: share of runs rolled back. `null` for faulty scenarios.
    pub false_rollback_rate: Option<f64>,
    /// 95% Clopper-Pearson interval of `false_rollback_rate`, lower end.
    pub false_rollback_ci_low: Option<f64>,
    /// The interval's upper end.
    pub false_rollback_ci_high: Option<f64>,
    /// Share of runs promoted.
    pub promotion_rate: f64,
    /// Seconds from the canary's first traffic to promotion, median over promoted runs.
    pub promotion_time_median_s: Option<f64>,
    /// The same, 95th percentile.
    pub promotion_time_p95_s: Option<f64>,
    /// Share of runs that neither promoted nor rolled back within the simulation's limit: held
    /// (for evidence of health, with weir's evidence rule). promoted + rolled back + held = 1.
    pub held_rate: f64,
    /// Wald's bound on the failed canary requests before a rollback (see
    /// [`wald_failed_bound`]); `null` where the fault is not a constant regression.
    pub wald_bound_failed: Option<f64>,
    /// `failed_requests_mean / wald_bound_failed`, reported when the controller missed at most
    /// 1% of the faulty canaries (the bound assumes beta = 1%); `null` otherwise.
    pub wald_ratio: Option<f64>,
}

/// Wald & Wolfowitz's lower bound on the expected failed canary requests before any test
/// with false-rollback probability [`WALD_ALPHA`] and missed-detection probability
/// [`WALD_BETA`] rolls back a canary with the scenario's constant fault, conditioning on error
/// (or slow) events with r0 = 1, at the canary weight the plan has reached at the onset:
/// `p_canary * wald_expected_samples(0.01, 0.01, p_canary, p_primary, w_onset, 1)`.
/// `None` for healthy scenarios and intermittent faults.
pub fn wald_failed_bound(scenario: &Scenario, controller: &ControllerSpec) -> Option<f64> {
    let Fault::From { onset_s } = scenario.fault else {
        return None;
    };
    let (p_canary, p_primary) = scenario.harm_probabilities();
    let weight = controller.planned_weight(onset_s);
    let canary_requests =
        wald_expected_samples(WALD_ALPHA, WALD_BETA, p_canary, p_primary, weight, 1.0);
    let bound = p_canary * canary_requests;
    (bound.is_finite() && bound > 0.0).then_some(bound)
}

fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// The q-quantile by nearest rank (q in (0, 1]).
fn quantile(values: &[f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

fn share(count: usize, total: usize) -> f64 {
    if total == 0 {
        0.0
    } else {
        count as f64 / total as f64
    }
}

/// Summarises one controller's runs on a scenario.
pub fn summarize(scenario: &Scenario, controller: &ControllerSpec, runs: &[RunResult]) -> Row {
    let n = runs.len();
    let failed = |run: &RunResult| match scenario.harm {
        Harm::Errors => run.canary_errors,
        Harm::Latency => run.canary_slow,
    } as f64;
    let canary: Vec<f64> = runs.iter().map(|run| run.canary_requests as f64).collect();
    let failures: Vec<f64> = runs.iter().map(failed).collect();
    let rolled_back = runs
        .iter()
        .filter(|run| run.end == RunEnd::RolledBack)
        .count();
    let promoted: Vec<f64> = runs
        .iter()
        .filter(|run| run.end == RunEnd::Promoted)
        .map(|run| f64::from(run.end_s))
        .collect();
    let held = runs.iter().filter(|run| run.end == RunEnd::Held).count();
    let onset = scenario.onset_s();
    let detections: Vec<f64> = match onset {
        Some(onset) => runs
            .iter()
            .filter(|run| run.end == RunEnd::RolledBack && run.end_s >= onset)
            .map(|run| f64::from(run.end_s - onset))
            .collect(),
        None => Vec::new(),
    };
    let faulty = scenario.is_faulty();
    let (false_rate, ci) = if faulty {
        (None, None)
    } else {
        let (low, high) = clopper_pearson(rolled_back as u64, n as u64, 0.05);
        (Some(share(rolled_back, n)), Some((low, high)))
    };
    let missed = faulty.then(|| share(n - rolled_back, n));
    let early = faulty.then(|| share(rolled_back - detections.len(), n));
    let failed_mean = mean(&failures).unwrap_or(0.0);
    let bound = wald_failed_bound(scenario, controller);
    let wald_ratio = match (bound, missed) {
        (Some(bound), Some(missed)) if missed <= WALD_BETA => Some(failed_mean / bound),
        _ => None,
    };
    Row {
        scenario: scenario.name.clone(),
        controller: controller.name.clone(),
        summary: scenario.summary.clone(),
        seeds: n as u64,
        faulty,
        harm: scenario.harm,
        canary_requests_mean: mean(&canary).unwrap_or(0.0),
        canary_requests_p95: quantile(&canary, 0.95).unwrap_or(0.0),
        failed_requests_mean: failed_mean,
        failed_requests_p95: quantile(&failures, 0.95).unwrap_or(0.0),
        rollback_rate: share(rolled_back, n),
        rollback_time_mean_s: mean(&detections),
        rollback_time_p95_s: quantile(&detections, 0.95),
        missed_detection_rate: missed,
        early_rollback_rate: early,
        false_rollback_rate: false_rate,
        false_rollback_ci_low: ci.map(|(low, _)| low),
        false_rollback_ci_high: ci.map(|(_, high)| high),
        promotion_rate: share(promoted.len(), n),
        promotion_time_median_s: quantile(&promoted, 0.5),
        promotion_time_p95_s: quantile(&promoted, 0.95),
        held_rate: share(held, n),
        wald_bound_failed: bound,
        wald_ratio,
    }
}

/// Runs the benchmark on `scenarios` with weir at `alpha` under the evidence rule `evidence`:
/// one row per scenario and controller, in order.
pub fn run_benchmark(
    scenarios: &[Scenario],
    alpha: f64,
    evidence: EvidenceRule,
    seeds: Range<u64>,
    config: &SimConfig,
    threads: usize,
) -> Vec<Row> {
    let mut rows = Vec::new();
    for scenario in scenarios {
        let controllers = controllers_with(scenario, alpha, evidence);
        let results = run_seeds(scenario, &controllers, seeds.clone(), config, threads);
        for (controller, runs) in controllers.iter().zip(&results) {
            rows.push(summarize(scenario, controller, runs));
        }
    }
    rows
}

/// One controller's behaviour over every scenario of a report: the trade-off between missed
/// detections and promotions at a glance.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ControllerSummary {
    /// The controller's name.
    pub controller: String,
    /// Runs on faulty scenarios (every seed of every faulty scenario).
    pub faulty_runs: u64,
    /// Of those, the share not rolled back (promoted or held).
    pub missed_detection_rate: f64,
    /// Of those, the share promoted: a bad canary shipped.
    pub faulty_promotion_rate: f64,
    /// Of those, the share held at the limit.
    pub faulty_held_rate: f64,
    /// Runs on healthy scenarios.
    pub healthy_runs: u64,
    /// Of those, the share promoted.
    pub promotion_rate: f64,
    /// Of those, the share held at the limit.
    pub healthy_held_rate: f64,
    /// Of those, the share rolled back.
    pub false_rollback_rate: f64,
}

/// Pools the rows of each controller (in the order they first appear) over the faulty and the
/// healthy scenarios, weighting every run alike.
pub fn summarize_controllers(rows: &[Row]) -> Vec<ControllerSummary> {
    let mut names: Vec<&str> = Vec::new();
    for row in rows {
        if !names.contains(&row.controller.as_str()) {
            names.push(&row.controller);
        }
    }
    names
        .into_iter()
        .map(|name| {
            let mine = rows.iter().filter(|row| row.controller == name);
            // Runs of each kind and the runs of each outcome among them (rates times seeds).
            let (mut faulty, mut missed, mut bad_promoted, mut bad_held) = (0u64, 0.0, 0.0, 0.0);
            let (mut healthy, mut promoted, mut held, mut false_rollbacks) = (0u64, 0.0, 0.0, 0.0);
            for row in mine {
                let runs = row.seeds as f64;
                if row.faulty {
                    faulty += row.seeds;
                    missed += row.missed_detection_rate.unwrap_or(0.0) * runs;
                    bad_promoted += row.promotion_rate * runs;
                    bad_held += row.held_rate * runs;
                } else {
                    healthy += row.seeds;
                    promoted += row.promotion_rate * runs;
                    held += row.held_rate * runs;
                    false_rollbacks += row.rollback_rate * runs;
                }
            }
            let of = |count: f64, total: u64| {
                if total == 0 {
                    0.0
                } else {
                    count / total as f64
                }
            };
            ControllerSummary {
                controller: name.to_string(),
                faulty_runs: faulty,
                missed_detection_rate: of(missed, faulty),
                faulty_promotion_rate: of(bad_promoted, faulty),
                faulty_held_rate: of(bad_held, faulty),
                healthy_runs: healthy,
                promotion_rate: of(promoted, healthy),
                healthy_held_rate: of(held, healthy),
                false_rollback_rate: of(false_rollbacks, healthy),
            }
        })
        .collect()
}

/// One setting of a controller's knobs in the sweep, with its two outcomes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepPoint {
    /// `weir` or `flagger-style`.
    pub controller: String,
    /// The knobs (`alpha=0.01`, `threshold=5 min=99%`).
    pub knob: String,
    /// Whether this is the setting of the main table.
    pub headline: bool,
    /// False-rollback rate on S0.
    pub false_rollback_rate: f64,
    /// Its 95% Clopper-Pearson interval, lower end.
    pub false_rollback_ci_low: f64,
    /// Upper end.
    pub false_rollback_ci_high: f64,
    /// Mean failed canary requests on S1.
    pub failed_requests_mean: f64,
    /// Missed detections on S1.
    pub missed_detection_rate: f64,
}

/// weir's alphas in the sweep.
pub const SWEEP_ALPHAS: [f64; 7] = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1];
/// Flagger-style thresholds in the sweep.
pub const SWEEP_THRESHOLDS: [u32; 10] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
/// Flagger-style minimum success rates (percent) in the sweep.
pub const SWEEP_MIN_SUCCESS: [f64; 6] = [95.0, 97.0, 98.0, 99.0, 99.5, 99.9];

fn sweep_controllers(scenario: &Scenario) -> Vec<(String, bool, ControllerSpec)> {
    let mut list = Vec::new();
    for alpha in SWEEP_ALPHAS {
        list.push((
            format!("alpha={alpha}"),
            alpha == DEFAULT_ALPHA,
            ControllerSpec::weir(scenario.interval_s, weir_judge(scenario, alpha)),
        ));
    }
    for threshold in SWEEP_THRESHOLDS {
        for min in SWEEP_MIN_SUCCESS {
            list.push((
                format!("threshold={threshold} min={min}%"),
                threshold == 5 && min == 99.0,
                ControllerSpec::flagger_style(scenario.interval_s, threshold, min),
            ));
        }
    }
    list
}

/// The knob sweep: every setting on S0 (false rollbacks) and S1 (failed requests).
pub fn run_sweep(seeds: Range<u64>, config: &SimConfig, threads: usize) -> Vec<SweepPoint> {
    let pick = |name: &str| Scenario::select(name).into_iter().next();
    let (Some(healthy), Some(faulty)) = (pick("S0"), pick("S1")) else {
        return Vec::new();
    };
    let settings = sweep_controllers(&healthy);
    let specs: Vec<ControllerSpec> = settings.iter().map(|(_, _, spec)| spec.clone()).collect();
    let on_healthy = run_seeds(&healthy, &specs, seeds.clone(), config, threads);
    let on_faulty = run_seeds(&faulty, &specs, seeds, config, threads);
    settings
        .iter()
        .zip(on_healthy.iter().zip(&on_faulty))
        .map(|((knob, headline, spec), (healthy_runs, faulty_runs))| {
            let s0 = summarize(&healthy, spec, healthy_runs);
            let s1 = summarize(&faulty, spec, faulty_runs);
            SweepPoint {
                controller: spec.name.clone(),
                knob: knob.clone(),
                headline: *headline,
                false_rollback_rate: s0.false_rollback_rate.unwrap_or(0.0),
                false_rollback_ci_low: s0.false_rollback_ci_low.unwrap_or(0.0),
                false_rollback_ci_high: s0.false_rollback_ci_high.unwrap_or(1.0),
                failed_requests_mean: s1.failed_requests_mean,
                missed_detection_rate: s1.missed_detection_rate.unwrap_or(0.0),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
