//! The canary strategy: steps, ReplicaSets by weight or with a router, analyses, experiments.

use super::*;

pub(super) fn canary_pass(pass: &mut Pass<'_>, canary: &CanaryStrategy, step_count: usize) {
    let replicas = pass.replicas;
    let steps = canary.steps.clone().unwrap_or_default();
    let Some(new_rs) = pass.rs(&pass.hash).cloned() else {
        return;
    };
    let stable_hash = pass.status.stable_rs.clone();
    let stable_rs = pass
        .rs(&stable_hash)
        .filter(|rs| rs.hash != new_rs.hash)
        .cloned();
    // The first deploy, or a stable ReplicaSet that is gone: the template is the stable one.
    if stable_hash.is_empty() || (stable_rs.is_none() && stable_hash != pass.hash) {
        if new_rs.replicas != replicas && !pass.paused_by_user() {
            pass.scale(&new_rs, replicas);
        }
        if new_rs.saturated(replicas) {
            pass.promote("Initial deploy", step_count);
        } else {
            pass.requeue(POLL);
        }
        point_services(pass, canary, &pass.hash.clone(), &pass.hash.clone());
        if canary.traffic_routing.is_some() {
            let hash = pass.hash.clone();
            route(pass, canary, 0, replicas::max_weight(canary), hash);
        }
        return;
    }
    let stable_hash_now = stable_rs
        .as_ref()
        .map_or(pass.hash.clone(), |rs| rs.hash.clone());
    point_services(pass, canary, &stable_hash_now, &pass.hash.clone());

    let at_stable = pass.hash == pass.status.stable_rs;
    let analyses_allowed = !at_stable && !pass.status.abort && !pass.status.promote_full;
    // Background analysis, from `startingStep`.
    let mut wanted_runs: Vec<String> = Vec::new();
    if let Some(background) = &canary.analysis
        && analyses_allowed
        && pass.status.current_step_index.unwrap_or(0) >= background.starting_step.unwrap_or(0)
    {
        let prefix = format!("{}-{}-{}", pass.name, pass.hash, pass.revision());
        let current = pass
            .status
            .canary
            .current_background_analysis_run_status
            .clone();
        let (run, phase, message) =
            pass.ensure_run(current.as_ref(), &prefix, RunKind::Background, background);
        wanted_runs.push(run.clone());
        pass.status.canary.current_background_analysis_run_status = Some(RunStatus {
            name: run.clone(),
            status: phase.map_or("Pending", Phase::as_str).into(),
            message: message.clone(),
        });
        match phase {
            Some(Phase::Failed | Phase::Error) => {
                let what = phase.map_or("", |phase| phase.as_str()).to_lowercase();
                pass.abort(format!("Background analysis phase {what}: {message}"));
            }
            Some(Phase::Inconclusive) => pass
                .status
                .add_pause("InconclusiveAnalysisRun", pass.observed.now),
            _ => {}
        }
    }
    // The current step's analysis.
    let index = pass.status.current_step_index.unwrap_or(0);
    let step = usize::try_from(index)
        .ok()
        .and_then(|index| steps.get(index));
    let mut step_done = false;
    let mut wanted_experiment = None;
    if let Some(step) = step
        && !pass.paused_by_user()
    {
        if let Some(analysis) = &step.analysis {
            if analyses_allowed {
                let prefix = format!("{}-{}-{}-{index}", pass.name, pass.hash, pass.revision());
                let current = pass.status.canary.current_step_analysis_run_status.clone();
                let step_index = usize::try_from(index).unwrap_or(0);
                let (run, phase, message) = pass.ensure_run(
                    current.as_ref(),
                    &prefix,
                    RunKind::Step(step_index),
                    analysis,
                );
                wanted_runs.push(run.clone());
                pass.status.canary.current_step_analysis_run_status = Some(RunStatus {
                    name: run,
                    status: phase.map_or("Pending", Phase::as_str).into(),
                    message: message.clone(),
                });
                match phase {
                    Some(Phase::Successful) => step_done = true,
                    Some(Phase::Failed | Phase::Error) => {
                        let what = phase.map_or("", |phase| phase.as_str()).to_lowercase();
                        pass.abort(format!("Step-based analysis phase {what}: {message}"));
                    }
                    Some(Phase::Inconclusive) => {
                        pass.status
                            .add_pause("InconclusiveAnalysisRun", pass.observed.now);
                    }
                    _ => pass.requeue(POLL),
                }
            }
        } else if step.experiment.is_some() {
            if analyses_allowed {
                let step_index = usize::try_from(index).unwrap_or(0);
                let (name, phase, message) = experiment_step(pass, index, step_index);
                wanted_experiment = Some(name);
                match phase {
                    Some(Phase::Successful) => step_done = true,
                    Some(Phase::Failed | Phase::Error) => {
                        let what = phase.map_or("", |phase| phase.as_str()).to_lowercase();
                        pass.abort(format!("Experiment analysis phase is {what}: {message}"));
                    }
                    Some(Phase::Inconclusive) => {
                        pass.status
                            .add_pause("InconclusiveExperiment", pass.observed.now);
                    }
                    _ => pass.requeue(POLL),
                }
            }
        } else if let Some(route) = &step.set_header_route {
            if analyses_allowed {
                pass.actions.push(Action::SetHeaderRoute(route.clone()));
                step_done = true;
            }
        } else if let Some(route) = &step.set_mirror_route {
            if analyses_allowed {
                pass.actions.push(Action::SetMirrorRoute(route.clone()));
                step_done = true;
            }
        } else if let Some(pause) = &step.pause
            && !pass.status.abort
            && !pass.status.promote_full
        {
            step_done = pause_step(pass, pause.duration.as_ref());
        }
    } else if pass.paused_by_user() {
        wanted_experiment = pass.status.canary.current_experiment.clone();
        // A user's pause holds everything, analysis included.
        if let Some(run) = &pass.status.canary.current_step_analysis_run_status {
            wanted_runs.push(run.name.clone());
        }
    }
    // Experiments no longer needed (another step, an abort, a full promotion) are terminated.
    for experiment in pass.observed.experiments {
        if wanted_experiment.as_ref() != Some(&experiment.name)
            && !experiment.terminating
            && !run_completed(experiment)
        {
            pass.actions.push(Action::TerminateExperiment {
                name: experiment.name.clone(),
            });
        }
    }
    if wanted_experiment.is_none() {
        pass.status.canary.current_experiment = None;
    }
    // Runs no longer needed are terminated.
    for run in pass.observed.runs {
        if !wanted_runs.contains(&run.name) && !run.terminating && !run_completed(run) {
            pass.actions.push(Action::TerminateRun {
                name: run.name.clone(),
            });
        }
    }
    pass.settle_abort(step_count);

    // Full promotion.
    let steps_over = pass.status.current_step_index.unwrap_or(0) >= step_count as i64;
    let promote_why = if pass.status.abort || at_stable {
        None
    } else if pass.status.promote_full {
        Some("Full promotion requested")
    } else if steps_over {
        Some("Completed all canary steps")
    } else {
        None
    };
    // The ReplicaSets, sized for the weight wanted now.
    let (stable_now, hash_now) = (pass.status.stable_rs.clone(), pass.hash.clone());
    let position = CanaryPosition {
        current_step_index: pass.status.current_step_index,
        stable_rs: &stable_now,
        current_pod_hash: &hash_now,
        promote_full: pass.status.promote_full,
        abort: pass.status.abort,
    };
    let max = replicas::max_weight(canary);
    let desired = replicas::desired(
        canary,
        replicas,
        &position,
        Some(new_rs.counts()),
        stable_rs.as_ref().map(ReplicaSetView::counts),
    );
    let weight = if promote_why.is_some() {
        max
    } else {
        desired.weight
    };
    let routed = canary.traffic_routing.is_some();
    let fenceposts = Fenceposts::of(canary, replicas);
    let older: Vec<ReplicaSetView> = pass
        .observed
        .replica_sets
        .iter()
        .filter(|rs| {
            rs.hash != new_rs.hash && Some(&rs.hash) != stable_rs.as_ref().map(|rs| &rs.hash)
        })
        .cloned()
        .collect();
    let older_counts: Vec<ReplicaSetCounts> = older.iter().map(ReplicaSetView::counts).collect();
    let stable_view = match &stable_rs {
        Some(rs) => StableReplicaSet::Distinct(rs.counts()),
        None => StableReplicaSet::SameAsCanary,
    };
    let written = pass
        .status
        .canary
        .weights
        .as_ref()
        .map(|weights| (weights.canary.weight, weights.stable.weight));
    let targets = if routed {
        replicas::traffic_routed_canary(&TrafficRoutedCanary {
            replicas,
            desired: Desired {
                canary_replicas: if promote_why.is_some() {
                    None
                } else {
                    desired.canary_replicas
                },
                weight,
            },
            max_weight: max,
            min_pods_per_replica_set: canary.min_pods_per_replica_set,
            dynamic_stable_scale: canary.dynamic_stable_scale == Some(true),
            abort: pass.status.abort,
            current_weights: written,
        })
    } else {
        replicas::basic_canary(&BasicCanary {
            replicas,
            weight,
            max_weight: max,
            fenceposts,
            canary: Some(new_rs.counts()),
            stable: stable_view,
            older: &older_counts,
        })
    };
    let mut scaled = false;
    if !pass.paused_by_user() {
        if let Some(stable) = &stable_rs
            && stable.replicas != targets.stable
        {
            scaled = pass.scale(stable, targets.stable);
        }
        if !scaled && new_rs.replicas != targets.canary {
            if routed && pass.status.abort && targets.canary < new_rs.replicas {
                // After an abort a routed canary keeps its pods for abortScaleDownDelaySeconds
                // (0: for good), so it can be looked at.
                let delay = canary
                    .abort_scale_down_delay_seconds
                    .unwrap_or(DEFAULT_SCALE_DOWN_DELAY_SECONDS);
                if delay > 0 {
                    delayed_scale_down(pass, &new_rs, delay, pass.observed.now);
                }
            } else {
                scaled = pass.scale(&new_rs, targets.canary);
            }
        }
        if !scaled && routed {
            // An old stable waits for its scale-down delay; any other old set goes at once.
            for rs in &older {
                if rs.replicas > 0 {
                    if rs.scale_down_deadline.is_some() {
                        delayed_scale_down(pass, rs, 0, pass.observed.now);
                    } else {
                        scaled |= pass.scale(rs, 0);
                    }
                }
            }
        } else if !scaled {
            // Older ReplicaSets drain to 0, no faster than availability allows.
            let available: i64 = pass
                .observed
                .replica_sets
                .iter()
                .map(|rs| rs.available)
                .sum();
            let mut room = (available - (replicas - fenceposts.max_unavailable)).max(0);
            for rs in &older {
                if rs.replicas > 0 && room > 0 {
                    let down = rs.replicas.min(room);
                    room -= down;
                    scaled |= pass.scale(rs, rs.replicas - down);
                }
            }
        }
    }
    let canary_ready = new_rs.replicas == targets.canary && new_rs.available >= targets.canary;
    let settled = !scaled
        && canary_ready
        && stable_rs.as_ref().is_none_or(|rs| {
            rs.replicas == targets.stable && rs.available >= targets.stable.min(rs.replicas)
        })
        && (routed || older.iter().all(|rs| rs.available == 0 && rs.replicas == 0));
    if !settled {
        pass.requeue(POLL);
    }
    // The router's weight: the one wanted once the canary's pods are there to take it, the
    // last one written until then, none to a canary without pods or after an abort.
    let mut weight_in_force = weight;
    if routed {
        // Promoted: both Services select the same pods, and the canary's share goes back to 0.
        let wanted = if at_stable { 0 } else { weight };
        let routed_weight = if pass.status.abort || new_rs.available == 0 {
            0
        } else if canary_ready {
            wanted
        } else {
            written.map_or(0, |(canary, _)| canary)
        };
        weight_in_force = routed_weight + weight - wanted;
        let managed = canary
            .traffic_routing
            .as_ref()
            .and_then(|routing| routing.managed_routes.as_ref())
            .is_some_and(|routes| !routes.is_empty());
        if managed
            && (at_stable || pass.status.abort || pass.status.promote_full || new_rs.available == 0)
        {
            pass.actions.push(Action::RemoveManagedRoutes);
        }
        route(
            pass,
            canary,
            routed_weight,
            max,
            stable_rs
                .as_ref()
                .map_or(&new_rs.hash, |rs| &rs.hash)
                .clone(),
        );
    }
    let settled = settled && weight_in_force == weight;
    if let Some(why) = promote_why {
        if settled && new_rs.available >= replicas && !pass.lacks_evidence() {
            let why = if why == "Completed all canary steps" {
                format!("Completed all {step_count} canary steps")
            } else {
                why.to_string()
            };
            pass.promote(&why, step_count);
            if routed && let Some(old) = &stable_rs {
                // The old stable keeps its pods for scaleDownDelaySeconds after traffic left.
                let delay = canary
                    .scale_down_delay_seconds
                    .unwrap_or(DEFAULT_SCALE_DOWN_DELAY_SECONDS);
                delayed_scale_down(pass, old, delay, pass.observed.now);
            }
        }
        return;
    }
    // One step per reconcile, once the ReplicaSets are where the step wants them.
    if pass.status.abort || pass.paused_by_user() {
        return;
    }
    let Some(step) = step else {
        return;
    };
    if step.set_weight.is_some() || step.set_canary_scale.is_some() {
        step_done = settled;
    }
    if step_done {
        let next = index + 1;
        pass.status.current_step_index = Some(next);
        pass.status.canary.current_step_analysis_run_status = None;
        pass.status
            .pause_conditions
            .retain(|c| c.reason != "CanaryPauseStep");
        if pass.status.pause_conditions.is_empty() {
            pass.status.controller_pause = false;
        }
        pass.event(
            false,
            "RolloutStepCompleted",
            format!(
                "Rollout step {next}/{step_count} completed ({})",
                step_text(step)
            ),
        );
        pass.requeue(SignedDuration::from_millis(100));
    }
}

/// An `experiment` step: its Experiment (created when missing), with its phase and message.
fn experiment_step(
    pass: &mut Pass<'_>,
    index: i64,
    step_index: usize,
) -> (String, Option<Phase>, String) {
    let name = format!("{}-{}-{}-{index}", pass.name, pass.hash, pass.revision());
    pass.status.canary.current_experiment = Some(name.clone());
    match pass
        .observed
        .experiments
        .iter()
        .find(|experiment| experiment.name == name)
    {
        Some(experiment) => (name, experiment.phase, experiment.message.clone()),
        None => {
            pass.event(
                false,
                "ExperimentCreated",
                format!("Created Experiment '{name}'"),
            );
            pass.actions.push(Action::CreateExperiment {
                name: name.clone(),
                step_index,
            });
            (name, None, String::new())
        }
    }
}

/// A `pause` step: true once it is over (its duration passed, or a user promoted).
fn pause_step(pass: &mut Pass<'_>, duration: Option<&IntOrString>) -> bool {
    let now = pass.observed.now;
    match pass.status.paused_for("CanaryPauseStep").cloned() {
        None if pass.status.controller_pause => true, // a user removed the condition: promote
        None => {
            pass.status.add_pause("CanaryPauseStep", now);
            if let Some(duration) = duration.and_then(duration_of) {
                pass.requeue(duration);
            }
            false
        }
        Some(condition) => {
            let Some(duration) = duration.and_then(duration_of) else {
                return false;
            };
            let started = condition.start_time.parse::<Timestamp>().unwrap_or(now);
            let ends = started.checked_add(duration).unwrap_or(started);
            if now >= ends {
                true
            } else {
                pass.requeue(ends.duration_since(now));
                false
            }
        }
    }
}

fn duration_of(value: &IntOrString) -> Option<SignedDuration> {
    match value {
        IntOrString::Int(seconds) => Some(SignedDuration::from_secs(*seconds)),
        IntOrString::String(text) => {
            let text = if text.chars().all(|c| c.is_ascii_digit()) {
                format!("{text}s")
            } else {
                text.clone()
            };
            GoDuration::parse(&text)
                .ok()
                .and_then(|duration| SignedDuration::try_from(duration.get()).ok())
        }
    }
}

fn step_text(step: &crate::argo::types::CanaryStep) -> String {
    if let Some(weight) = step.set_weight {
        format!("setWeight: {weight}")
    } else if let Some(pause) = &step.pause {
        match &pause.duration {
            Some(IntOrString::Int(seconds)) => format!("pause: {seconds}s"),
            Some(IntOrString::String(text)) => format!("pause: {text}"),
            None => "pause".into(),
        }
    } else if step.analysis.is_some() {
        "analysis".into()
    } else if step.experiment.is_some() {
        "experiment".into()
    } else if let Some(route) = &step.set_header_route {
        format!("setHeaderRoute: {}", route.name.as_deref().unwrap_or(""))
    } else if let Some(route) = &step.set_mirror_route {
        format!("setMirrorRoute: {}", route.name)
    } else {
        "step".into()
    }
}

/// Tells the routers `weight` to the canary (the rest to the stable) and records it.
fn route(pass: &mut Pass<'_>, canary: &CanaryStrategy, weight: i64, max: i64, stable_hash: String) {
    let weight = weight.clamp(0, max);
    pass.actions.push(Action::RouteTraffic {
        canary: weight,
        stable: max - weight,
    });
    let canary_hash = if pass.status.abort || weight == 0 {
        stable_hash.clone()
    } else {
        pass.hash.clone()
    };
    pass.status.canary.weights = Some(TrafficWeights {
        canary: WeightDestination {
            weight,
            service_name: canary.canary_service.clone().unwrap_or_default(),
            pod_template_hash: canary_hash,
        },
        stable: WeightDestination {
            weight: max - weight,
            service_name: canary.stable_service.clone().unwrap_or_default(),
            pod_template_hash: stable_hash,
        },
    });
}

fn point_services(pass: &mut Pass<'_>, canary: &CanaryStrategy, stable: &str, new: &str) {
    if let Some(service) = &canary.stable_service {
        pass.actions.push(Action::PointService {
            service: service.clone(),
            hash: stable.to_string(),
        });
    }
    let canary_hash = if pass.status.abort { stable } else { new };
    if let Some(service) = &canary.canary_service {
        pass.actions.push(Action::PointService {
            service: service.clone(),
            hash: canary_hash.to_string(),
        });
    }
}
