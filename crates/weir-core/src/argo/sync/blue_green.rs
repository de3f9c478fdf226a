//! The blue-green strategy: preview and active Services, analyses around the switch, delays.

use super::*;

pub(super) fn blue_green_pass(pass: &mut Pass<'_>, blue_green: &BlueGreenStrategy) {
    let replicas = pass.replicas;
    let now = pass.observed.now;
    let Some(new_rs) = pass.rs(&pass.hash).cloned() else {
        return;
    };
    let active_service = blue_green.active_service.clone().unwrap_or_default();
    let preview_service = blue_green.preview_service.clone();
    let stable_hash = pass.status.stable_rs.clone();
    let stable_rs = pass
        .rs(&stable_hash)
        .filter(|rs| rs.hash != new_rs.hash)
        .cloned();
    let first_deploy = stable_hash.is_empty() || (stable_rs.is_none() && stable_hash != pass.hash);
    let user_paused = pass.paused_by_user();

    // The preview always selects the newest ReplicaSet.
    if let Some(preview) = &preview_service
        && !pass.status.abort
    {
        pass.actions.push(Action::PointService {
            service: preview.clone(),
            hash: pass.hash.clone(),
        });
        pass.status.blue_green.preview_selector = pass.hash.clone();
    }
    if first_deploy {
        if !user_paused {
            pass.scale(&new_rs, replicas);
        }
        pass.actions.push(Action::PointService {
            service: active_service.clone(),
            hash: pass.hash.clone(),
        });
        pass.status.blue_green.active_selector = pass.hash.clone();
        if pass.status.blue_green.preview_selector.is_empty() {
            pass.status.blue_green.preview_selector = pass.hash.clone();
        }
        if new_rs.saturated(replicas) {
            pass.promote("Initial deploy", 0);
        } else {
            pass.requeue(POLL);
        }
        return;
    }
    let Some(stable) = stable_rs else {
        // The template is the stable one: nothing to switch; old ReplicaSets go after their delay.
        pass.actions.push(Action::PointService {
            service: active_service,
            hash: pass.hash.clone(),
        });
        pass.status.blue_green.active_selector = pass.hash.clone();
        if !user_paused {
            if new_rs.replicas != replicas {
                pass.scale(&new_rs, replicas);
            }
            scale_down_old(pass, &new_rs.hash, "", blue_green, now);
        }
        return;
    };
    let mut wanted_runs = Vec::new();
    let revision = pass.revision();
    if pass.status.abort {
        // Back to the stable ReplicaSet; the preview goes after its delay.
        pass.actions.push(Action::PointService {
            service: active_service,
            hash: stable.hash.clone(),
        });
        pass.status.blue_green.active_selector = stable.hash.clone();
        if stable.replicas != replicas && !user_paused {
            pass.scale(&stable, replicas);
        }
        let delay = blue_green
            .abort_scale_down_delay_seconds
            .unwrap_or(DEFAULT_SCALE_DOWN_DELAY_SECONDS);
        if delay > 0 && new_rs.replicas > 0 && !user_paused {
            delayed_scale_down(pass, &new_rs, delay, now);
        }
        for run in pass.observed.runs {
            if !run.terminating && !run_completed(run) {
                pass.actions.push(Action::TerminateRun {
                    name: run.name.clone(),
                });
            }
        }
        pass.settle_abort(0);
        return;
    }
    let active_is_new = pass.status.blue_green.active_selector == pass.hash;
    let preview_count =
        if pass.status.promote_full || pass.status.blue_green.scale_up_preview_check_point {
            replicas
        } else {
            blue_green
                .preview_replica_count
                .unwrap_or(replicas)
                .min(replicas)
        };
    if !user_paused && !active_is_new && new_rs.replicas != preview_count {
        pass.scale(&new_rs, preview_count);
    }
    let saturated = new_rs.saturated(preview_count);
    if !active_is_new {
        if !saturated || user_paused {
            pass.requeue(POLL);
            terminate_unwanted(pass, &wanted_runs);
            return;
        }
        // Pre-promotion analysis.
        if let Some(analysis) = &blue_green.pre_promotion_analysis
            && !pass.status.promote_full
        {
            let prefix = format!("{}-{}-{revision}-pre", pass.name, pass.hash);
            let current = pass
                .status
                .blue_green
                .pre_promotion_analysis_run_status
                .clone();
            let (run, phase, message) =
                pass.ensure_run(current.as_ref(), &prefix, RunKind::PrePromotion, analysis);
            wanted_runs.push(run.clone());
            pass.status.blue_green.pre_promotion_analysis_run_status = Some(RunStatus {
                name: run,
                status: phase.map_or("Pending", Phase::as_str).into(),
                message: message.clone(),
            });
            match phase {
                Some(Phase::Successful) => {}
                Some(Phase::Failed | Phase::Error) => {
                    let what = phase.map_or("", |phase| phase.as_str()).to_lowercase();
                    pass.abort(format!("PrePromotion analysis phase {what}: {message}"));
                    pass.settle_abort(0);
                    terminate_unwanted(pass, &wanted_runs);
                    return;
                }
                Some(Phase::Inconclusive) => {
                    pass.status.add_pause("InconclusiveAnalysisRun", now);
                    terminate_unwanted(pass, &wanted_runs);
                    return;
                }
                _ => {
                    pass.requeue(POLL);
                    terminate_unwanted(pass, &wanted_runs);
                    return;
                }
            }
        }
        // The pause before the switch.
        let auto = blue_green.auto_promotion_enabled != Some(false);
        let seconds = blue_green.auto_promotion_seconds.unwrap_or(0);
        if !pass.status.promote_full && (!auto || seconds > 0) {
            match pass.status.paused_for("BlueGreenPause").cloned() {
                None if pass.status.controller_pause => {} // promoted by a user
                None => {
                    pass.status.add_pause("BlueGreenPause", now);
                    if auto {
                        pass.requeue(SignedDuration::from_secs(seconds));
                    }
                    terminate_unwanted(pass, &wanted_runs);
                    return;
                }
                Some(condition) => {
                    let started = condition.start_time.parse::<Timestamp>().unwrap_or(now);
                    let ends = started
                        .checked_add(SignedDuration::from_secs(seconds))
                        .unwrap_or(started);
                    if !auto || now < ends {
                        if auto {
                            pass.requeue(ends.duration_since(now));
                        }
                        terminate_unwanted(pass, &wanted_runs);
                        return;
                    }
                }
            }
        }
        pass.status.clear_pauses();
        if preview_count < replicas {
            pass.status.blue_green.scale_up_preview_check_point = true;
            pass.scale(&new_rs, replicas);
            pass.requeue(POLL);
            terminate_unwanted(pass, &wanted_runs);
            return;
        }
        if pass.lacks_evidence() {
            terminate_unwanted(pass, &wanted_runs);
            return;
        }
        // The switch.
        let from = pass.status.blue_green.active_selector.clone();
        pass.event(
            false,
            "SwitchService",
            format!(
                "Switched selector for service '{active_service}' from '{from}' to '{}'",
                pass.hash
            ),
        );
        pass.status.blue_green.active_selector = pass.hash.clone();
        pass.status.promote_full = false;
    }
    pass.actions.push(Action::PointService {
        service: active_service,
        hash: pass.status.blue_green.active_selector.clone(),
    });
    // Post-promotion analysis, then the new ReplicaSet is stable.
    if let Some(analysis) = &blue_green.post_promotion_analysis {
        let prefix = format!("{}-{}-{revision}-post", pass.name, pass.hash);
        let current = pass
            .status
            .blue_green
            .post_promotion_analysis_run_status
            .clone();
        let (run, phase, message) =
            pass.ensure_run(current.as_ref(), &prefix, RunKind::PostPromotion, analysis);
        wanted_runs.push(run.clone());
        pass.status.blue_green.post_promotion_analysis_run_status = Some(RunStatus {
            name: run,
            status: phase.map_or("Pending", Phase::as_str).into(),
            message: message.clone(),
        });
        match phase {
            Some(Phase::Successful) => {}
            Some(Phase::Failed | Phase::Error) => {
                let what = phase.map_or("", |phase| phase.as_str()).to_lowercase();
                pass.abort(format!("PostPromotion analysis phase {what}: {message}"));
                pass.actions.push(Action::PointService {
                    service: blue_green.active_service.clone().unwrap_or_default(),
                    hash: stable.hash.clone(),
                });
                pass.status.blue_green.active_selector = stable.hash.clone();
                pass.settle_abort(0);
                terminate_unwanted(pass, &wanted_runs);
                return;
            }
            _ => {
                pass.requeue(POLL);
                terminate_unwanted(pass, &wanted_runs);
                return;
            }
        }
    }
    terminate_unwanted(pass, &wanted_runs);
    pass.promote("Completed blue-green update", 0);
    if !user_paused {
        scale_down_old(pass, &new_rs.hash.clone(), &stable.hash, blue_green, now);
    }
}

fn terminate_unwanted(pass: &mut Pass<'_>, wanted: &[String]) {
    for run in pass.observed.runs {
        if !wanted.contains(&run.name) && !run.terminating && !run_completed(run) {
            pass.actions.push(Action::TerminateRun {
                name: run.name.clone(),
            });
        }
    }
}

/// Old ReplicaSets of a blue-green Rollout: the one just replaced waits `scaleDownDelaySeconds`
/// (its deadline annotated), the rest go at once.
fn scale_down_old(
    pass: &mut Pass<'_>,
    new_hash: &str,
    replaced_hash: &str,
    blue_green: &BlueGreenStrategy,
    now: Timestamp,
) {
    let delay = blue_green
        .scale_down_delay_seconds
        .unwrap_or(DEFAULT_SCALE_DOWN_DELAY_SECONDS);
    let old: Vec<ReplicaSetView> = pass
        .observed
        .replica_sets
        .iter()
        .filter(|rs| rs.hash != new_hash && rs.replicas > 0)
        .cloned()
        .collect();
    for rs in old {
        // The one just replaced waits for its delay, and so does any whose deadline is set.
        if (rs.hash == replaced_hash && delay > 0) || rs.scale_down_deadline.is_some() {
            delayed_scale_down(pass, &rs, delay, now);
        } else {
            pass.scale(&rs, 0);
        }
    }
}
