// The rollouts list and a rollout's page.
import { allows, command, enc, get, listAll, watch } from "/ui/api.js";
import { age, confirmAction, errorBox, fill, h, pct, phase, progress, time, toast } from "/ui/ui.js";
import { gateTypes, planSteps, stepsDone } from "/ui/plan.js";

const PHASES = ["Initializing", "Initialized", "Waiting", "Progressing", "WaitingPromotion", "Promoting", "Finalising", "Succeeded", "Failed", "Held", "Stopped", "Terminated"];
const ACTIVE = ["Waiting", "Progressing", "WaitingPromotion", "Held"];

const keyOf = (ns, name) => `${ns}/${name}`;
const kindOf = (rollout) => (rollout.spec && rollout.spec.target && rollout.spec.target.kind) || "?";
/** A rollout's namespace: the API names it always; `default` is the rule when it does not. */
const nsOf = (rollout) => (rollout.metadata && rollout.metadata.namespace) || "default";
const nameOf = (rollout) => (rollout.metadata && rollout.metadata.name) || "";
/** The address of a rollout's page, or null when a part is missing: no link is built from one. */
export function rolloutHref(ns, name) {
  return ns && name ? `/rollouts/${enc(ns)}/${enc(name)}` : null;
}
/** A succeeded run has taken its whole plan: the new version serves everyone. */
const complete = (rollout) => (rollout.status || {}).phase === "Succeeded";

/** The bar of a rollout: its plan's ticks, its weight now (a succeeded run: the whole plan). */
function bar(rollout) {
  const plan = planSteps(rollout);
  const status = rollout.status || {};
  const done = complete(rollout) ? plan.steps.length : stepsDone(rollout, plan);
  const marks = plan.steps.map((step, index) => ({ ...step, kind: index < done ? `${step.kind} tick-done` : step.kind }));
  const label = `${nsOf(rollout)}/${nameOf(rollout)} weight`;
  return complete(rollout) ? progress(marks, 100, `${label}: promoted`, { complete: true }) : progress(marks, status.canaryWeight, label);
}

function stepText(rollout) {
  const plan = planSteps(rollout);
  const status = rollout.status || {};
  const done = complete(rollout);
  if (plan.kind === "iterations") {
    return done ? `${plan.name}: ${plan.iterations} of ${plan.iterations} iterations, promoted` : `${plan.name}: iteration ${status.iterations || 0} of ${plan.iterations}`;
  }
  const total = plan.steps.filter((s) => !s.promotion).length;
  const unit = plan.kind === "schedule" ? "entry" : "step";
  return done ? `${unit} ${total} of ${total}, promoted` : `${unit} ${stepsDone(rollout, plan)} of ${total}`;
}

// === the list ===

export async function rolloutsPage(main) {
  document.title = "Rollouts · weir";
  const params = new URLSearchParams(location.search);
  const filters = { name: params.get("name") || "", namespace: params.get("namespace") || "", phase: params.get("phase") || "", kind: params.get("kind") || "" };
  const rows = new Map();
  const tbody = h("tbody", {});
  const empty = h("p", { class: "muted", hidden: true }, "No rollouts match.");
  const nsSelect = h("select", { id: "filter-namespace", "data-filter": "namespace" }, h("option", { value: "" }, "all"));
  const phaseSelect = h("select", { id: "filter-phase", "data-filter": "phase" }, h("option", { value: "" }, "all"), PHASES.map((p) => h("option", { value: p }, p)));
  const kindSelect = h("select", { id: "filter-kind", "data-filter": "kind" }, h("option", { value: "" }, "all"), ["local", "kubernetes", "flag", "flagger"].map((k) => h("option", { value: k }, k)));
  phaseSelect.value = filters.phase;
  kindSelect.value = filters.kind;
  // Search by name: the rows shown are filtered in the page; the address keeps the text.
  const nameInput = h("input", { type: "search", id: "filter-name", "data-filter": "name", autocomplete: "off", spellcheck: "false", placeholder: "part of a name" });
  nameInput.value = filters.name;
  const keepInAddress = () => {
    const query = new URLSearchParams(Object.entries(filters).filter(([, v]) => v));
    history.replaceState(null, "", `/rollouts${query.toString() ? `?${query}` : ""}`);
  };
  for (const select of [nsSelect, phaseSelect, kindSelect]) {
    select.addEventListener("change", () => {
      filters[select.dataset.filter] = select.value;
      keepInAddress();
      applyFilters();
    });
  }
  nameInput.addEventListener("input", () => {
    filters.name = nameInput.value.trim();
    keepInAddress();
    applyFilters();
  });
  const shownCount = h("p", { class: "sr", id: "rollouts-count", role: "status" });
  fill(main,
    h("div", { class: "page-head" }, h("h1", {}, "Rollouts")),
    h("form", { class: "filters", role: "search", "aria-label": "Filter rollouts", onsubmit: (e) => e.preventDefault() },
      h("label", { for: "filter-name" }, "Name"), nameInput,
      h("label", { for: "filter-namespace" }, "Namespace"), nsSelect,
      h("label", { for: "filter-phase" }, "Phase"), phaseSelect,
      h("label", { for: "filter-kind" }, "Kind"), kindSelect),
    h("div", { class: "table-wrap" },
      h("table", { class: "rollouts", id: "rollouts" },
        h("thead", {}, h("tr", {}, ["Name", "Kind", "Phase", "Progress", "Run", "Age", "Last message"].map((c) => h("th", { scope: "col", class: `col-${c.toLowerCase().replace(" ", "-")}` }, c)))),
        tbody)),
    empty, shownCount);

  function render(rollout) {
    const namespace = nsOf(rollout);
    const name = nameOf(rollout);
    const status = rollout.status || {};
    const href = rolloutHref(namespace, name);
    const title = [h("span", { class: "ns" }, `${namespace}/`), name || "(no name)"];
    const tr = h("tr", { "data-rollout": keyOf(namespace, name), "data-phase": status.phase || "", "data-kind": kindOf(rollout), "data-namespace": namespace },
      h("th", { scope: "row", class: "col-name" }, href ? h("a", { href }, title) : title),
      h("td", { class: "col-kind", "data-label": "Kind" }, kindOf(rollout)),
      h("td", { class: "col-phase", "data-label": "Phase" }, phase(status.phase), status.paused ? h("span", { class: "tag" }, "paused") : null,
        status.scheduleState ? h("span", { class: "tag tag-schedule", title: "the schedule's state (seed 004's words)" }, status.scheduleState) : null),
      h("td", { class: "col-progress", "data-label": "Progress" }, bar(rollout), h("small", { class: "muted step-text" }, stepText(rollout))),
      h("td", { class: "col-run", "data-label": "Run" }, String(status.run || 0)),
      h("td", { class: "col-age", "data-label": "Age" }, age(rollout.createdAt)),
      h("td", { class: "col-last-message", title: status.message || "" }, status.message || ""));
    const old = rows.get(keyOf(namespace, name));
    rows.set(keyOf(namespace, name), { rollout, tr });
    if (old) {
      // A live update must not take the keyboard focus away from the row's link.
      const hadFocus = old.tr.contains(document.activeElement);
      old.tr.replaceWith(tr);
      const link = tr.querySelector("a");
      if (hadFocus && link) link.focus();
    }
    return tr;
  }

  function applyFilters() {
    let shown = 0;
    const wanted = filters.name.toLowerCase();
    for (const { rollout, tr } of rows.values()) {
      const status = rollout.status || {};
      const visible = (!wanted || nameOf(rollout).toLowerCase().includes(wanted))
        && (!filters.namespace || nsOf(rollout) === filters.namespace)
        && (!filters.phase || status.phase === filters.phase)
        && (!filters.kind || kindOf(rollout) === filters.kind);
      tr.hidden = !visible;
      if (visible) shown += 1;
    }
    empty.hidden = shown > 0;
    shownCount.textContent = `${shown} of ${rows.size} rollouts shown`;
  }

  async function reload() {
    try {
      const items = await listAll("/api/v1/rollouts");
      rows.clear();
      tbody.replaceChildren(...items.map(render));
      const namespaces = [...new Set(items.map(nsOf))].sort();
      fill(nsSelect, h("option", { value: "" }, "all"), namespaces.map((ns) => h("option", { value: ns }, ns)));
      nsSelect.value = filters.namespace;
      applyFilters();
    } catch (error) {
      main.append(errorBox(error));
    }
  }

  await reload();
  let reloading = null;
  const close = watch("/api/v1/watch", {
    status: (change) => {
      const key = keyOf(change.namespace, change.name);
      const known = rows.get(key);
      if (!change.status) {
        // Deleted: keep the row (no layout jump) but show it as gone.
        if (known) {
          known.rollout.status = { ...(known.rollout.status || {}), phase: "Terminated" };
          render(known.rollout);
          applyFilters();
        }
        return;
      }
      if (!known) {
        clearTimeout(reloading);
        reloading = setTimeout(reload, 200);
        return;
      }
      known.rollout.status = change.status;
      render(known.rollout);
      applyFilters();
    },
  }, reload);
  return close;
}

// === one rollout ===

/** Whether `cmd` is possible in the rollout's state (mirrors weir-core's commands.rs). */
function possible(cmd, rollout) {
  const status = rollout.status || {};
  const p = status.phase;
  switch (cmd) {
    case "promote": case "abort": return ACTIVE.includes(p);
    case "promote-step": return ["Progressing", "WaitingPromotion"].includes(p) && ["canary", "schedule"].includes(planSteps(rollout).kind);
    case "pause": return ["Waiting", "Progressing", "WaitingPromotion"].includes(p) && !status.paused;
    case "resume": return p === "Held" || p === "Waiting" || (["Progressing", "WaitingPromotion"].includes(p) && (status.paused || status.waitingForResume));
    case "retry": return p === "Failed" && Boolean(status.canaryRevision);
    case "open-gate": case "close-gate": return ACTIVE.includes(p);
    case "stop": return kindOf(rollout) === "flag" && ACTIVE.includes(p);
    default: return false;
  }
}

const EXPLAIN = {
  promote: "Promote to the end: the new version gets all traffic now, skipping the remaining steps.",
  "promote-step": "Promote one step: the plan's next step now (its own pause still applies); the rest of the plan goes on as before.",
  abort: "Abort: everyone goes back to the primary and the run fails.",
  pause: "Pause: the weight holds where it is until resumed.",
  resume: "Resume the run.",
  retry: "Retry: start a new run of the failed revision.",
  stop: "Stop: the run ends where it stands and the flag keeps its split.",
};

export async function rolloutPage(main, ns, name) {
  document.title = `${ns}/${name} · weir`;
  const path = `/api/v1/rollouts/${enc(ns)}/${enc(name)}`;
  let rollout;
  try {
    rollout = await get(path);
  } catch (error) {
    fill(main, h("h1", {}, `${ns}/${name}`), errorBox(error), h("p", {}, h("a", { href: "/rollouts" }, "Back to the rollouts")));
    return null;
  }
  let events = [];
  const loadEvents = async () => {
    const all = [];
    let after = 0;
    for (;;) {
      const page = await get(`${path}/events?after=${after}&limit=500`);
      all.push(...page.items);
      if (page.nextAfter === null || page.nextAfter === undefined || page.items.length === 0) break;
      after = page.nextAfter;
    }
    events = all;
  };
  await loadEvents().catch(() => {});

  const head = h("section", { class: "summary", "aria-label": "Summary" });
  const actions = h("section", { class: "actions", "aria-labelledby": "actions-title" });
  const timeline = h("section", { "aria-labelledby": "timeline-title" });
  const chart = h("section", { "aria-labelledby": "chart-title" });
  const checks = h("section", { "aria-labelledby": "checks-title" });
  const judge = h("section", { id: "judge", "aria-labelledby": "judge-title" });
  const historySection = h("section", { "aria-labelledby": "history-title" });
  fill(main,
    h("p", { class: "crumbs" }, h("a", { href: "/rollouts" }, "Rollouts"), " / ", `${ns}/`),
    h("h1", { id: "rollout-title" }, name),
    head, actions, timeline, chart, checks, judge, historySection);

  function renderAll() {
    // Live updates re-render the page; the focused control (by id) keeps the focus.
    const focused = document.activeElement && document.activeElement.id;
    renderHead();
    renderActions();
    renderTimeline();
    renderChart();
    renderChecks();
    renderJudge();
    renderHistory();
    const again = focused && document.getElementById(focused);
    if (again && again !== document.activeElement && !document.getElementById("confirm").open) again.focus();
  }

  function renderHead() {
    const status = rollout.status || {};
    const target = rollout.spec.target || {};
    fill(head,
      h("dl", { class: "facts" },
        h("dt", {}, "Phase"), h("dd", { id: "rollout-phase" }, phase(status.phase), status.paused ? h("span", { class: "tag" }, "paused") : null),
        h("dt", {}, "Weight"), h("dd", {}, bar(rollout), h("small", { class: "muted" }, stepText(rollout))),
        h("dt", {}, "Target"), h("dd", {}, target.kind === "flag" ? [`flag `, target.flag ? h("a", { href: `/flags/${enc(ns)}/${enc(target.flag)}` }, target.flag) : "–", ` (${target.control} → ${target.variation})`] : target.kind || "–"),
        h("dt", {}, "Run"), h("dd", {}, String(status.run || 0), " started ", time(status.runStartedAt)),
        // A flag rollout's revisions are hashes of the flag's settings: nothing a reader uses.
        target.kind === "flag" ? null : [h("dt", {}, "Revisions"), h("dd", { class: "revisions" },
          h("span", {}, "primary ", h("code", {}, status.primaryRevision || "–")), " ",
          h("span", {}, "canary ", h("code", {}, status.canaryRevision || "–")))],
        status.scheduleState ? [h("dt", {}, "Schedule"), h("dd", {}, status.scheduleState)] : null,
        h("dt", {}, "Message"), h("dd", { class: "message" }, status.message || "–"),
        h("dt", {}, "Updated"), h("dd", {}, time(rollout.updatedAt))));
  }

  function button(cmd, label, payload, text) {
    const allowedScope = allows("operate");
    const allowedState = possible(cmd, rollout);
    const reason = !allowedScope ? "Your token's scope does not allow commands (operate needed)." : !allowedState ? `Not possible in phase ${(rollout.status || {}).phase}.` : "";
    const id = `cmd-${label.toLowerCase().replace(/[^a-z0-9]+/g, "-")}`;
    return h("button", {
      type: "button", id, class: cmd === "abort" || cmd === "stop" ? "danger" : "", disabled: !(allowedScope && allowedState),
      title: reason || text, "data-command": cmd,
      onclick: async (event) => {
        // Taken before the first await: currentTarget is only set while the event is dispatched.
        const target = event.currentTarget;
        if (!(await confirmAction(`${text} (${ns}/${name})`, label))) return;
        target.disabled = true;
        try {
          // One step is the API's promote with `"step": true`.
          await command(ns, name, cmd === "promote-step" ? { command: "promote", step: true, ...payload } : { command: cmd, ...payload });
          toast(`${label}: done`);
          rollout = await get(path);
          renderAll();
        } catch (error) {
          toast(`${label} refused: ${error.message}`, "error");
          target.disabled = false;
        }
      },
    }, label);
  }

  function renderActions() {
    const gates = gateTypes(rollout);
    fill(actions,
      h("h2", { id: "actions-title" }, "Commands"),
      h("div", { class: "buttons" },
        button("promote", "Promote", {}, EXPLAIN.promote),
        button("promote-step", "Promote one step", {}, EXPLAIN["promote-step"]),
        button("pause", "Pause", {}, EXPLAIN.pause),
        button("resume", "Resume", {}, EXPLAIN.resume),
        button("retry", "Retry", {}, EXPLAIN.retry),
        gates.map((type) => [
          button("open-gate", `Open ${type}`, { gate: { type } }, `Open the ${type} gate for this run.`),
          button("close-gate", `Close ${type}`, { gate: { type } }, `Close the ${type} gate for this run.`),
        ]),
        kindOf(rollout) === "flag" ? [
          button("stop", "Stop", {}, EXPLAIN.stop),
          button("stop", "Stop and roll back", { rollback: true }, "Stop and return everyone to the control variation."),
        ] : null,
        button("abort", "Abort", {}, EXPLAIN.abort)),
      allows("operate") ? null : h("p", { class: "muted" }, "Commands need a token with the operate scope."));
  }

  function renderTimeline() {
    const plan = planSteps(rollout);
    const done = complete(rollout) ? plan.steps.length : stepsDone(rollout, plan);
    const status = rollout.status || {};
    fill(timeline, h("h2", { id: "timeline-title" }, "Plan"),
      plan.kind === "iterations"
        ? h("p", {}, `${plan.name}: ${status.iterations || 0} of ${plan.iterations} iterations`)
        : h("ol", { class: "timeline" }, plan.steps.map((step, index) => {
          const state = step.promotion ? (status.phase === "WaitingPromotion" ? "current" : complete(rollout) ? "done" : "") : index < done ? "done" : index === done && ACTIVE.includes(status.phase) ? "current" : "";
          return h("li", { class: `tl-${step.kind} ${state ? `tl-${state}` : ""}`, "aria-current": state === "current" ? "step" : null },
            h("span", { class: "tl-weight" }, pct(step.weight)),
            step.at ? [" ", time(step.at)] : null,
            h("span", { class: "tl-label" }, step.kind === "pause" ? " pause" : step.kind === "gate" ? ` ${step.label.replace(/^step \d+: [\d.]+%, /, "")}` : ""),
            state === "done" ? h("span", { class: "sr" }, " (done)") : state === "current" ? h("span", { class: "sr" }, " (current)") : null);
        })));
  }

  function renderChart() {
    const points = events.map((e) => ({ t: new Date(e.at).getTime(), w: Number(e.canaryWeight || 0) }));
    fill(chart, h("h2", { id: "chart-title" }, "Weight over time"),
      points.length ? lineChart(points, { id: "weight-chart", label: "canary weight (%) over time", max: 100, step: true }) : h("p", { class: "muted" }, "No history yet."));
  }

  function renderChecks() {
    const metrics = (rollout.spec.analysis && rollout.spec.analysis.metrics) || [];
    const ranges = new Map(metrics.map((m) => [m.name, m.thresholdRange]));
    const rowsOf = events.filter((e) => e.evidence && Array.isArray(e.evidence.checks) && e.evidence.checks.length).slice(-50).reverse();
    const range = (r) => (r ? `${r.min ?? "−∞"} … ${r.max ?? "∞"}` : "–");
    fill(checks, h("h2", { id: "checks-title" }, "Checks"),
      rowsOf.length ? h("div", { class: "table-wrap" }, h("table", {},
        h("thead", {}, h("tr", {}, ["Time", "Check", "Outcome", "Value", "Range", "Details"].map((c) => h("th", { scope: "col" }, c)))),
        h("tbody", {}, rowsOf.flatMap((e) => e.evidence.checks.map((c) => h("tr", {},
          h("td", {}, time(e.at)), h("td", {}, c.name), h("td", {}, h("span", { class: `outcome outcome-${c.outcome}` }, c.outcome)),
          h("td", { class: "num" }, c.value === undefined ? "–" : String(Number(c.value.toPrecision(6)))), h("td", {}, range(ranges.get(c.name))), h("td", {}, c.message || "")))))))
        : h("p", { class: "muted" }, metrics.length ? "No checks yet." : "This rollout has no metric checks."));
  }

  function renderJudge() {
    const runs = judgeRuns(events);
    if (!runs.length) {
      fill(judge, h("h2", { id: "judge-title" }, "Judge"),
        h("p", { class: "muted", id: "judge-none" }, "No judge's evidence in the history: no judge watched these runs (a judge watches local rollouts unless spec.analysis.judges says otherwise), or the runs promoted without the evidence rule (promoteOn: noHarm)."));
      return;
    }
    fill(judge, h("h2", { id: "judge-title" }, "Judge: what decided each run"),
      runs.slice(0, 5).map((r) => judgeRun(r)));
  }

  /** One run's evidence: e-values against the rollback threshold, the health bound against its margin, counts, and the verdict in words. */
  function judgeRun(r) {
    const outcome = runOutcome(r.run);
    const log = (x) => Math.log10(Math.max(1e-6, x));
    const parts = [h("h3", {}, `Run ${r.run}`, outcome ? [" ", phase(outcome)] : null)];
    if (r.eValues.length) {
      const threshold = Number(r.threshold) || 20;
      const top = Math.max(log(threshold) * 1.2, ...r.eValues.map((p) => log(p.w)));
      const bottom = Math.min(0, ...r.eValues.map((p) => log(p.w)));
      const last = r.eValues.at(-1);
      parts.push(lineChart(r.eValues.map((p) => ({ t: p.t, w: log(p.w) })), {
        id: `judge-evalue-${r.run}`,
        label: `Run ${r.run}: the judge's e-value over time (log scale), ${r.eValues.length} point${r.eValues.length === 1 ? "" : "s"}; rolls back at ${threshold}; latest ${last.w.toPrecision(3)}`,
        min: bottom, max: top, threshold: log(threshold), thresholdLabel: `rolls back at ${threshold}`,
        format: (y) => Number((10 ** y).toPrecision(2)).toString(), markers: true, tEnd: r.end,
      }));
    }
    if (r.health.length) {
      const margin = r.health.map((p) => p.margin).filter((m) => typeof m === "number").at(-1);
      const bounds = r.health.map((p) => p.bound);
      const top = Math.max(margin !== undefined ? margin * 1.5 : 1, ...bounds);
      const bottom = Math.min(0, ...bounds);
      parts.push(lineChart(r.health.map((p) => ({ t: p.t, w: p.bound })), {
        id: `judge-health-${r.run}`,
        label: `Run ${r.run}: upper bound of the canary's excess error rate over the primary's (percentage points) against the margin${margin !== undefined ? ` of ${margin}` : ""}, ${r.health.length} point${r.health.length === 1 ? "" : "s"}`,
        min: bottom, max: top, threshold: margin, thresholdLabel: margin !== undefined ? `margin ${margin}%` : undefined,
        format: (y) => `${Number(y.toPrecision(2))}%`, markers: true, tEnd: r.end,
      }));
    }
    const facts = [];
    if (r.counts) {
      const c = r.counts;
      facts.push(h("dt", {}, "Counts"), h("dd", { "data-role": "counts" }, `canary ${c.canaryErrors} errors in ${c.canaryRequests} requests; primary ${c.primaryErrors} in ${c.primaryRequests}`));
    }
    if (r.eValues.length) {
      facts.push(h("dt", {}, "E-value"), h("dd", {}, `${r.eValues.at(-1).w.toPrecision(3)} (rolls back at ${Number(r.threshold) || 20})`));
    }
    const health = r.health.at(-1);
    if (health) {
      facts.push(h("dt", {}, "Health"), h("dd", { "data-role": "health" }, health.summary || `excess at most ${health.bound}%${health.margin !== undefined ? ` (margin ${health.margin}%)` : ""}`));
    }
    const verdict = r.last;
    parts.push(h("p", { class: "judge-verdict", "data-role": "verdict" }, verdictText(verdict, outcome)));
    if (facts.length) parts.push(h("dl", { class: "facts judge-facts" }, facts));
    return h("section", { class: "judge-run", "data-run": String(r.run), "aria-label": `Judge, run ${r.run}` }, parts);
  }

  /** How run `run` ended, from the history (null while it goes on). */
  function runOutcome(run) {
    const ended = events.filter((e) => e.run === run && ["Succeeded", "Failed", "Stopped"].includes(e.phase));
    return ended.length ? ended.at(-1).phase : null;
  }

  function verdictText({ v, ev }, outcome) {
    if (v.judge === "evidence-rule") {
      const said = ev.summary || "";
      return v.outcome === "pass"
        ? `Evidence of health that let the run ${outcome === "Succeeded" ? "promote" : "go on"}: ${said}`
        : `Waiting for evidence of health: ${said}`;
    }
    if (v.outcome === "fail") return `Judge ${v.judge} found the canary worse than the primary${typeof ev.eValue === "number" ? `: e-value ${ev.eValue.toPrecision(3)} reached ${ev.threshold}` : ""}. ${ev.summary || ""}`;
    if (v.outcome === "pass") return `Judge ${v.judge} passed the canary. ${ev.summary || ""}`;
    return `Judge ${v.judge}: ${v.outcome}. ${ev.summary || ""}`;
  }

  function renderHistory() {
    fill(historySection, h("h2", { id: "history-title" }, "History (newest first)"),
      h("ol", { class: "history", reversed: true }, events.slice().reverse().slice(0, 500).map((e) => h("li", {},
        h("div", { class: "history-head" }, time(e.at), " ", h("strong", {}, e.reason), " ", phase(e.phase), " ", pct(e.canaryWeight), h("span", { class: "muted" }, ` run ${e.run}`)),
        h("p", {}, e.message),
        e.evidence && Object.keys(e.evidence).length ? h("details", {}, h("summary", {}, "Evidence"), h("pre", {}, JSON.stringify(e.evidence, null, 2))) : null))));
  }

  renderAll();
  return watch(`/api/v1/watch?namespace=${enc(ns)}&name=${enc(name)}`, {
    status: (change) => {
      if (!change.status) {
        rollout.status = { ...(rollout.status || {}), phase: "Terminated" };
      } else {
        rollout.status = change.status;
      }
      const seen = new Set(events.map((e) => e.seq));
      for (const e of change.events || []) if (!seen.has(e.seq)) events.push(e);
      renderAll();
    },
  }, async () => {
    rollout = await get(path).catch(() => rollout);
    await loadEvents().catch(() => {});
    renderAll();
  });
}

/**
 * The judge's evidence in the history, by run, newest first: e-values (`{t, w}`), health
 * bounds (`{t, bound, margin, summary}` in percentage points), the last counts and verdict.
 * The judge's own verdicts carry numbers (`eValue`, `health`); the evidence rule's
 * (`evidence-rule`, on the events it decided) carry its summary, read for its numbers.
 */
export function judgeRuns(events) {
  const runs = new Map();
  for (const e of events) {
    const v = e.evidence && e.evidence.verdict;
    if (!v) continue;
    const ev = v.evidence && typeof v.evidence === "object" ? v.evidence : {};
    const run = Number(e.run || 0);
    if (!runs.has(run)) runs.set(run, { run, eValues: [], health: [], threshold: null, counts: null, last: null, end: null });
    const r = runs.get(run);
    const t = new Date(e.at).getTime();
    if (typeof ev.eValue === "number") {
      r.eValues.push({ t, w: ev.eValue });
      if (ev.threshold !== undefined) r.threshold = ev.threshold;
    }
    const health = healthOf(ev);
    if (health) r.health.push({ t, ...health });
    if (typeof ev.canaryRequests === "number" && typeof ev.primaryRequests === "number") {
      r.counts = { canaryRequests: ev.canaryRequests, canaryErrors: ev.canaryErrors ?? 0, primaryRequests: ev.primaryRequests, primaryErrors: ev.primaryErrors ?? 0 };
    }
    r.last = { e, v, ev };
  }
  // A run's charts end where the run did (its last event), not now.
  for (const r of runs.values()) {
    const last = events.filter((e) => Number(e.run || 0) === r.run).at(-1);
    r.end = last ? new Date(last.at).getTime() : null;
  }
  return [...runs.values()].sort((a, b) => b.run - a.run);
}

/** A health bound from a verdict's evidence: the judge's `health`, or the evidence rule's summary. */
function healthOf(ev) {
  if (ev.health && typeof ev.health.excessUpper === "number") {
    return {
      bound: Number((ev.health.excessUpper * 100).toPrecision(4)),
      margin: typeof ev.health.margin === "number" ? Number((ev.health.margin * 100).toPrecision(4)) : undefined,
      requests: ev.health.canaryRequests,
      summary: ev.health.summary,
    };
  }
  if (typeof ev.summary !== "string") return null;
  // "evidence of health after 412 canary requests: excess over the primary errors <= 0.4% (margin 5%)"
  // "waiting for evidence: 86 of ~400 canary requests ...; excess over the primary errors <= 3% so far (allowed: the primary's + 5%)"
  const bound = ev.summary.match(/<= (-?[\d.]+)%/);
  if (!bound) return null;
  const margin = ev.summary.match(/\(margin (-?[\d.]+)%\)/) || ev.summary.match(/the primary's \+ (-?[\d.]+)%/);
  const requests = ev.summary.match(/(\d+) (?:of ~\d+ )?canary requests/);
  return {
    bound: Number(bound[1]),
    margin: margin ? Number(margin[1]) : undefined,
    requests: requests ? Number(requests[1]) : undefined,
    summary: ev.summary,
  };
}

/**
 * A line chart: `points` `[{t, w}]`, y from `min` to `max`, each point marked (a run of one
 * point is a dot). The SVG stretches to its box, so it holds lines and dots only (strokes and
 * dots keep their size: `vector-effect`); every text is HTML beside it, readable at any width.
 */
function lineChart(points, { id, label, min = 0, max = 100, step = false, threshold, thresholdLabel, format = (y) => `${Math.round(y)}%`, markers = false, tEnd }) {
  const width = 720, height = 180, padX = 6, padY = 8;
  const t0 = points[0].t;
  const t1 = Math.max(points.at(-1).t, tEnd ?? Date.now());
  const span = t1 - t0;
  const x = (t) => (span > 0 ? padX + ((t - t0) / span) * (width - 2 * padX) : width / 2);
  const y = (v) => padY + (1 - (v - min) / Math.max(1e-9, max - min)) * (height - 2 * padY);
  const top = (v) => `${(y(v) / height) * 100}%`;
  const coords = [];
  points.forEach((p, i) => {
    if (step && i > 0) coords.push(`${x(p.t)},${y(points[i - 1].w)}`);
    coords.push(`${x(p.t)},${y(p.w)}`);
  });
  if (step) coords.push(`${x(t1)},${y(points.at(-1).w)}`);
  const ticks = [min, (min + max) / 2, max];
  const clock = (t) => new Date(t).toLocaleTimeString();
  const stamp = (t) => `${new Date(t).toISOString().replace(/\.\d+Z$/, "Z")} (UTC)`;
  const yLabels = ticks.map((v) => {
    const node = h("span", { class: "y-label", "aria-hidden": "true" }, format(v));
    node.style.top = top(v);
    return node;
  });
  let limit = null;
  if (threshold !== undefined && thresholdLabel) {
    limit = h("span", { class: "limit-label", "aria-hidden": "true" }, thresholdLabel);
    limit.style.top = top(threshold);
  }
  return h("figure", { class: "chart", id },
    h("div", { class: "plot" },
      h("div", { class: "y-axis" }, yLabels),
      h("div", { class: "plot-area" },
        h("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": label, preserveAspectRatio: "none" },
          ticks.map((v) => h("line", { x1: 0, x2: width, y1: y(v), y2: y(v), class: "grid" })),
          threshold !== undefined ? h("line", { x1: 0, x2: width, y1: y(threshold), y2: y(threshold), class: "threshold" }) : null,
          coords.length > 1 ? h("polyline", { points: coords.join(" "), class: "series" }) : null,
          // Dots: zero-length round-capped lines, round at any aspect ratio.
          markers ? points.map((p) => h("line", { x1: x(p.t), x2: x(p.t), y1: y(p.w), y2: y(p.w), class: "point", "data-role": "point" })) : null),
        limit)),
    h("div", { class: "x-axis", "aria-hidden": "true" },
      h("time", { datetime: new Date(t0).toISOString(), title: stamp(t0) }, clock(t0)),
      h("time", { datetime: new Date(t1).toISOString(), title: stamp(t1) }, clock(t1))),
    h("figcaption", { class: "sr" }, label));
}
