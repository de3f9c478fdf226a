// The plan as marks on a progress bar and as a timeline: canary steps (weir-core's
// `canary_steps`), schedule entries (`schedule_entries`), pauses and gates.
import { expandManual, expandTemplate } from "/ui/schedule.js";

const GATES = ["confirm-rollout", "confirm-traffic-increase", "confirm-promotion"];

/** The gate types the rollout's webhooks declare. */
export function gateTypes(rollout) {
  const hooks = (rollout.spec && rollout.spec.analysis && rollout.spec.analysis.webhooks) || [];
  return GATES.filter((type) => hooks.some((hook) => hook.type === type));
}

function canarySteps(canary) {
  const max = canary.maxWeight !== undefined ? Math.min(Number(canary.maxWeight), 100)
    : Array.isArray(canary.stepWeights) && canary.stepWeights.length ? Math.min(Number(canary.stepWeights.at(-1)), 100) : 100;
  const steps = [];
  const push = (weight, pause) => {
    const capped = Math.min(Number(weight), max);
    steps.push({ weight: capped, pause });
    return capped < max && steps.length < 10000;
  };
  if (Number(canary.stepWeight) > 0) {
    // In basis points, as weir-core adds weights.
    const step = Math.round(Number(canary.stepWeight) * 100);
    const top = Math.round(max * 100);
    let weight = step;
    while (push(weight / 100, undefined)) weight = Math.min(weight + step, top);
  } else if (Array.isArray(canary.stepWeights)) {
    for (const weight of canary.stepWeights) if (!push(weight, undefined)) break;
  } else if (Array.isArray(canary.steps)) {
    for (const step of canary.steps.slice(0, 10000)) {
      steps.push({ weight: Math.min(Number(step.weight), max), pause: step.pause ? (step.pause.duration || "until resumed") : undefined });
    }
  }
  return steps;
}

/**
 * The plan's steps: `[{weight, label, kind, at?}]` with kind `step`, `pause`, `gate` or
 * `entry`; `kind` of the plan (`canary`, `schedule`, `iterations`) and its total.
 */
export function planSteps(rollout) {
  const plan = (rollout.spec && rollout.spec.plan) || {};
  const gates = gateTypes(rollout);
  if (plan.canary) {
    const steps = canarySteps(plan.canary).map((step, index) => ({
      weight: step.weight,
      kind: step.pause ? "pause" : gates.includes("confirm-traffic-increase") ? "gate" : "step",
      label: `step ${index + 1}: ${step.weight}%${step.pause ? `, pause ${step.pause}` : ""}${gates.includes("confirm-traffic-increase") ? ", confirm-traffic-increase gate" : ""}`,
    }));
    if (gates.includes("confirm-promotion")) {
      steps.push({ weight: steps.length ? steps.at(-1).weight : 100, kind: "gate", label: "confirm-promotion gate before promotion", promotion: true });
    }
    return { kind: "canary", steps };
  }
  if (plan.schedule) {
    const entries = plan.schedule.manual ? expandManual(plan.schedule.manual) : plan.schedule.template ? expandTemplate(plan.schedule.template) : [];
    return {
      kind: "schedule",
      steps: entries.map((entry, index) => ({ weight: entry.weight, at: entry.at, kind: "entry", label: `entry ${index + 1}: ${entry.weight}% at ${entry.at.toISOString()}` })),
    };
  }
  const name = Object.keys(plan)[0] || "plan";
  const iterations = (plan[name] && plan[name].iterations) || 0;
  return { kind: "iterations", name, iterations, steps: [] };
}

/** How many of `steps` are behind the rollout (canary: stepsTaken; schedule: triggered in this run). */
export function stepsDone(rollout, plan) {
  const status = rollout.status || {};
  if (plan.kind === "schedule") return Math.min(plan.steps.length, Number(status.stepsTaken || 0));
  return Math.min(plan.steps.filter((s) => !s.promotion).length, Number(status.stepsTaken || 0));
}
