// The rollouts list and a rollout's page.
import { allows, command, enc, get, listAll, watch } from "/ui/api.js";
import { age, confirmAction, errorBox, fill, h, pct, phase, progress, time, toast } from "/ui/ui.js";
import { gateTypes, planSteps, stepsDone } from "/ui/plan.js";

const PHASES = ["Initializing", "Initialized", "Waiting", "Progressing", "WaitingPromotion", "Promoting", "Finalising", "Succeeded", "Failed", "Held", "Stopped", "Terminated"];
const ACTIVE = ["Waiting", "Progressing", "WaitingPromotion", "Held"];

const keyOf = (ns, name) => `${ns}/${name}`;
const kindOf = (rollout) => (rollout.spec && rollout.spec.target && rollout.spec.target.kind) || "?";

/** The bar of a rollout: its plan's ticks, its weight now. */
function bar(rollout) {
  const plan = planSteps(rollout);
  const status = rollout.status || {};
  const done = stepsDone(rollout, plan);
  const marks = plan.steps.map((step, index) => ({ ...step, kind: index < done ? `${step.kind} tick-done` : step.kind }));
  return progress(marks, status.canaryWeight, `${rollout.metadata.namespace}/${rollout.metadata.name} weight`);
}

function stepText(rollout) {
  const plan = planSteps(rollout);
  const status = rollout.status || {};
  if (plan.kind === "iterations") return `${plan.name}: iteration ${status.iterations || 0} of ${plan.iterations}`;
  const total = plan.steps.filter((s) => !s.promotion).length;
  return `${plan.kind === "schedule" ? "entry" : "step"} ${stepsDone(rollout, plan)} of ${total}`;
}

// === the list ===

export async function rolloutsPage(main) {
  document.title = "Rollouts · weir";
  const params = new URLSearchParams(location.search);
  const filters = { namespace: params.get("namespace") || "", phase: params.get("phase") || "", kind: params.get("kind") || "" };
  const rows = new Map();
  const tbody = h("tbody", {});
  const empty = h("p", { class: "muted", hidden: true }, "No rollouts match.");
  const nsSelect = h("select", { id: "filter-namespace", "data-filter": "namespace" }, h("option", { value: "" }, "all"));
  const phaseSelect = h("select", { id: "filter-phase", "data-filter": "phase" }, h("option", { value: "" }, "all"), PHASES.map((p) => h("option", { value: p }, p)));
  const kindSelect = h("select", { id: "filter-kind", "data-filter": "kind" }, h("option", { value: "" }, "all"), ["local", "kubernetes", "flag", "flagger"].map((k) => h("option", { value: k }, k)));
  phaseSelect.value = filters.phase;
  kindSelect.value = filters.kind;
  const live = h("span", { class: "live", "aria-live": "off" }, "connecting…");
  for (const select of [nsSelect, phaseSelect, kindSelect]) {
    select.addEventListener("change", () => {
      filters[select.dataset.filter] = select.value;
      const query = new URLSearchParams(Object.entries(filters).filter(([, v]) => v));
      history.replaceState(null, "", `/rollouts${query.toString() ? `?${query}` : ""}`);
      applyFilters();
    });
  }
  fill(main,
    h("div", { class: "page-head" }, h("h1", {}, "Rollouts"), live),
    h("form", { class: "filters", role: "search", "aria-label": "Filter rollouts", onsubmit: (e) => e.preventDefault() },
      h("label", { for: "filter-namespace" }, "Namespace"), nsSelect,
      h("label", { for: "filter-phase" }, "Phase"), phaseSelect,
      h("label", { for: "filter-kind" }, "Kind"), kindSelect),
    h("div", { class: "table-wrap" },
      h("table", { class: "rollouts", id: "rollouts" },
        h("thead", {}, h("tr", {}, ["Name", "Kind", "Phase", "Progress", "Run", "Age", "Last message"].map((c) => h("th", { scope: "col", class: `col-${c.toLowerCase().replace(" ", "-")}` }, c)))),
        tbody)),
    empty);

  function render(rollout) {
    const { namespace, name } = rollout.metadata;
    const status = rollout.status || {};
    const tr = h("tr", { "data-rollout": keyOf(namespace, name), "data-phase": status.phase || "", "data-kind": kindOf(rollout), "data-namespace": namespace },
      h("th", { scope: "row", class: "col-name" }, h("a", { href: `/rollouts/${enc(namespace)}/${enc(name)}` }, h("span", { class: "ns" }, `${namespace}/`), name)),
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
      if (hadFocus) tr.querySelector("a").focus();
    }
    return tr;
  }

  function applyFilters() {
    let shown = 0;
    for (const { rollout, tr } of rows.values()) {
      const status = rollout.status || {};
      const visible = (!filters.namespace || rollout.metadata.namespace === filters.namespace)
        && (!filters.phase || status.phase === filters.phase)
        && (!filters.kind || kindOf(rollout) === filters.kind);
      tr.hidden = !visible;
      if (visible) shown += 1;
    }
    empty.hidden = shown > 0;
  }

  async function reload() {
    try {
      const items = await listAll("/api/v1/rollouts");
      rows.clear();
      tbody.replaceChildren(...items.map(render));
      const namespaces = [...new Set(items.map((r) => r.metadata.namespace))].sort();
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
      live.textContent = "live";
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
  live.textContent = "live";
  return close;
}

// === one rollout ===

/** Whether `cmd` is possible in the rollout's state (mirrors weir-core's commands.rs). */
function possible(cmd, rollout) {
  const status = rollout.status || {};
  const p = status.phase;
  switch (cmd) {
    case "promote": case "abort": return ACTIVE.includes(p);
    case "pause": return ["Waiting", "Progressing", "WaitingPromotion"].includes(p) && !status.paused;
    case "resume": return p === "Held" || p === "Waiting" || (["Progressing", "WaitingPromotion"].includes(p) && (status.paused || status.waitingForResume));
    case "retry": return p === "Failed" && Boolean(status.canaryRevision);
    case "open-gate": case "close-gate": return ACTIVE.includes(p);
    case "stop": return kindOf(rollout) === "flag" && ACTIVE.includes(p);
    default: return false;
  }
}

const EXPLAIN = {
  promote: "Promote: the new version gets all traffic now, skipping the remaining steps.",
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
  const judge = h("section", { "aria-labelledby": "judge-title" });
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
        h("dt", {}, "Target"), h("dd", {}, target.kind === "flag" ? [`flag `, h("a", { href: `/flags/${enc(ns)}/${enc(target.flag)}` }, target.flag), ` (${target.control} → ${target.variation})`] : target.kind || "–"),
        h("dt", {}, "Run"), h("dd", {}, String(status.run || 0), " started ", time(status.runStartedAt)),
        h("dt", {}, "Revisions"), h("dd", { class: "revisions" },
          h("span", {}, "primary ", h("code", {}, status.primaryRevision || "–")), " ",
          h("span", {}, "canary ", h("code", {}, status.canaryRevision || "–"))),
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
          await command(ns, name, { command: cmd, ...payload });
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
    const done = stepsDone(rollout, plan);
    const status = rollout.status || {};
    fill(timeline, h("h2", { id: "timeline-title" }, "Plan"),
      plan.kind === "iterations"
        ? h("p", {}, `${plan.name}: ${status.iterations || 0} of ${plan.iterations} iterations`)
        : h("ol", { class: "timeline" }, plan.steps.map((step, index) => {
          const state = step.promotion ? (status.phase === "WaitingPromotion" ? "current" : "") : index < done ? "done" : index === done && ACTIVE.includes(status.phase) ? "current" : "";
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
      points.length ? lineChart(points, { label: "canary weight (%) over time", max: 100, step: true }) : h("p", { class: "muted" }, "No history yet."));
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
    const points = events
      .filter((e) => e.evidence && e.evidence.verdict && e.evidence.verdict.evidence && typeof e.evidence.verdict.evidence.eValue === "number")
      .map((e) => ({ t: new Date(e.at).getTime(), v: e.evidence.verdict.evidence.eValue, threshold: e.evidence.verdict.evidence.threshold, outcome: e.evidence.verdict.outcome }));
    if (!points.length) {
      fill(judge, h("h2", { id: "judge-title" }, "Judge"), h("p", { class: "muted" }, "No judge's evidence in the history."));
      return;
    }
    const threshold = Number(points.at(-1).threshold) || 20;
    const log = (x) => Math.log10(Math.max(1e-6, x));
    const top = Math.max(log(threshold) * 1.2, ...points.map((p) => log(p.v)));
    const bottom = Math.min(0, ...points.map((p) => log(p.v)));
    fill(judge, h("h2", { id: "judge-title" }, "Judge: e-value against its threshold"),
      lineChart(points.map((p) => ({ t: p.t, w: log(p.v) })), { label: `log10 e-value over time; rolls back at ${threshold}`, min: bottom, max: top, threshold: log(threshold), format: (y) => (10 ** y).toPrecision(2) }),
      h("p", {}, `Latest: e-value ${points.at(-1).v.toPrecision(3)} (rolls back at ${threshold}), ${points.at(-1).outcome}.`));
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

/** A line chart as inline SVG: `points` `[{t, w}]`, y from `min` (0) to `max`. */
function lineChart(points, { label, min = 0, max = 100, step = false, threshold, format = (y) => `${Math.round(y)}%` }) {
  const width = 720, height = 180, left = 44, right = 8, topPad = 8, bottomPad = 22;
  const t0 = points[0].t;
  const t1 = Math.max(points.at(-1).t, Date.now());
  const span = Math.max(1, t1 - t0);
  const x = (t) => left + ((t - t0) / span) * (width - left - right);
  const y = (v) => topPad + (1 - (v - min) / Math.max(1e-9, max - min)) * (height - topPad - bottomPad);
  const coords = [];
  points.forEach((p, i) => {
    if (step && i > 0) coords.push(`${x(p.t)},${y(points[i - 1].w)}`);
    coords.push(`${x(p.t)},${y(p.w)}`);
  });
  if (step) coords.push(`${x(t1)},${y(points.at(-1).w)}`);
  const ticks = [min, (min + max) / 2, max];
  return h("figure", { class: "chart" },
    h("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": label, preserveAspectRatio: "none" },
      h("title", {}, label),
      ticks.map((v) => [h("line", { x1: left, x2: width - right, y1: y(v), y2: y(v), class: "grid" }), h("text", { x: left - 4, y: y(v) + 4, class: "axis", "text-anchor": "end" }, format(v))]),
      threshold !== undefined ? h("line", { x1: left, x2: width - right, y1: y(threshold), y2: y(threshold), class: "threshold" }) : null,
      h("polyline", { points: coords.join(" "), class: "series" }),
      h("text", { x: left, y: height - 4, class: "axis" }, new Date(t0).toLocaleTimeString()),
      h("text", { x: width - right, y: height - 4, class: "axis", "text-anchor": "end" }, new Date(t1).toLocaleTimeString())),
    h("figcaption", { class: "sr" }, label));
}
