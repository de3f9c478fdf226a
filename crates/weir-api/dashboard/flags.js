// The flags list, a flag's page, and creating a progressive rollout of a flag the seed's two
// ways: manual entries (time + weight) or a template (start, interval, increments).
import { allows, enc, get, listAll, request, watch } from "/ui/api.js";
import { age, errorBox, field, fill, h, pct, phase, showFieldErrors, time, toast } from "/ui/ui.js";
import { expandManual, expandTemplate, INTERVALS, MIN_GAP_SECONDS, planOf, toLocalInput } from "/ui/schedule.js";

function strategyText(strategy) {
  if (!strategy) return "–";
  if (strategy.variation) return strategy.variation;
  if (strategy.weights) return Object.entries(strategy.weights).map(([v, w]) => `${v} ${w}%`).join(", ");
  return "–";
}

export async function flagsPage(main) {
  document.title = "Flags · weir";
  const tbody = h("tbody", {});
  const status = h("div", {});
  fill(main, h("div", { class: "page-head" }, h("h1", {}, "Flags")), status,
    h("div", { class: "table-wrap" }, h("table", { id: "flags" },
      h("thead", {}, h("tr", {}, ["Flag", "State", "Default strategy", "Variations", "Rollout", "Updated"].map((c) => h("th", { scope: "col" }, c)))),
      tbody)));
  async function reload() {
    try {
      const items = await listAll("/api/v1/flags");
      fill(status);
      tbody.replaceChildren(...items.map((flag) => {
        const { namespace, name } = flag.metadata;
        return h("tr", { "data-flag": `${namespace}/${name}` },
          h("th", { scope: "row" }, h("a", { href: `/flags/${enc(namespace)}/${enc(name)}` }, h("span", { class: "ns" }, `${namespace}/`), name)),
          h("td", {}, flag.spec.enabled === false ? h("span", { class: "phase phase-failed" }, "off") : h("span", { class: "phase phase-succeeded" }, "on")),
          h("td", {}, strategyText(flag.spec.defaultStrategy)),
          h("td", {}, (flag.spec.variations || []).map((v) => v.name).join(", ")),
          h("td", {}, flag.rolledOutBy ? h("a", { href: `/rollouts/${flag.rolledOutBy.split("/").map(enc).join("/")}` }, flag.rolledOutBy) : "–"),
          h("td", {}, age(flag.updatedAt)));
      }));
      if (!items.length) status.append(h("p", { class: "muted" }, "No flags yet (weir apply -f a Flag document)."));
    } catch (error) {
      fill(status, errorBox(error));
    }
  }
  await reload();
  let timer = null;
  return watch("/api/v1/flags/watch", { flag: () => { clearTimeout(timer); timer = setTimeout(reload, 200); } }, reload);
}

export async function flagPage(main, ns, key) {
  document.title = `${key} · flags · weir`;
  const path = `/api/v1/flags/${enc(ns)}/${enc(key)}`;
  let flag;
  try {
    flag = await get(path);
  } catch (error) {
    fill(main, h("h1", {}, `${ns}/${key}`), errorBox(error), h("p", {}, h("a", { href: "/flags" }, "Back to the flags")));
    return null;
  }
  const details = h("section", { "aria-label": "The flag" });
  const rolloutsSection = h("section", { "aria-labelledby": "flag-rollouts-title" });
  fill(main,
    h("p", { class: "crumbs" }, h("a", { href: "/flags" }, "Flags"), " / ", `${ns}/`),
    h("h1", {}, key),
    details, rolloutsSection,
    allows("admin") ? createForm(ns, key, flag) : h("p", { class: "muted" }, "Creating a rollout needs a token with the admin scope."));

  function renderFlag() {
    const spec = flag.spec;
    fill(details,
      h("dl", { class: "facts" },
        h("dt", {}, "State"), h("dd", {}, spec.enabled === false ? "off" : "on"),
        h("dt", {}, "Default strategy"), h("dd", { id: "flag-strategy" }, strategyText(spec.defaultStrategy), flag.rolledOutBy ? [" (rolled out by ", h("a", { href: `/rollouts/${flag.rolledOutBy.split("/").map(enc).join("/")}` }, flag.rolledOutBy), ")"] : null),
        h("dt", {}, "Updated"), h("dd", {}, time(flag.updatedAt))),
      h("h2", {}, "Variations"),
      h("div", { class: "table-wrap" }, h("table", {}, h("thead", {}, h("tr", {}, ["Name", "Value", "Description", "Evaluations"].map((c) => h("th", { scope: "col" }, c)))),
        h("tbody", {}, (spec.variations || []).map((v) => h("tr", {}, h("th", { scope: "row" }, v.name), h("td", {}, h("code", {}, JSON.stringify(v.value))), h("td", {}, v.description || ""), h("td", { class: "num" }, String((flag.exposures || {})[v.name] || 0))))))),
      h("h2", {}, "Targeting"),
      Object.keys(spec.targets || {}).length ? h("ul", {}, Object.entries(spec.targets).map(([v, users]) => h("li", {}, h("strong", {}, v), `: ${users.join(", ")}`))) : h("p", { class: "muted" }, "No individual targets."),
      (spec.rules || []).length ? h("details", {}, h("summary", {}, `${spec.rules.length} rule(s)`), h("pre", {}, JSON.stringify(spec.rules, null, 2))) : h("p", { class: "muted" }, "No rules."));
  }

  async function renderRollouts() {
    try {
      const page = await get(`/api/v1/flag-rollouts?namespace=${enc(ns)}&flag=${enc(key)}&order=-created&limit=100`);
      fill(rolloutsSection, h("h2", { id: "flag-rollouts-title" }, "Its rollouts"),
        page.items.length ? h("ul", { class: "flag-rollouts" }, page.items.map((r) => h("li", {},
          h("a", { href: `/rollouts/${enc(r.metadata.namespace)}/${enc(r.metadata.name)}` }, r.metadata.name), " ",
          phase(r.status && r.status.phase), " ",
          r.schedule ? `${r.schedule.type}, ${r.schedule.state}, ${r.schedule.done} of ${r.schedule.total} entries, ${pct(r.schedule.weight)} now` : "",
          r.schedule && r.schedule.next ? [", next ", pct(r.schedule.next.weight), " at ", time(r.schedule.next.at)] : null)))
          : h("p", { class: "muted" }, "No rollout of this flag yet."));
    } catch (error) {
      fill(rolloutsSection, errorBox(error));
    }
  }

  renderFlag();
  await renderRollouts();
  let timer = null;
  const closeFlag = watch(`/api/v1/flags/watch?namespace=${enc(ns)}`, {
    flag: async (change) => {
      if (change.key !== key) return;
      flag = await get(path).catch(() => flag);
      renderFlag();
    },
  });
  const closeRollouts = watch(`/api/v1/watch?namespace=${enc(ns)}`, {
    status: () => { clearTimeout(timer); timer = setTimeout(renderRollouts, 200); },
  }, renderRollouts);
  return () => { closeFlag(); closeRollouts(); };
}

/** The form that creates a progressive rollout of the flag (POST /api/v1/rollouts). */
function createForm(ns, key, flag) {
  const variations = (flag.spec.variations || []).map((v) => v.name);
  const start = new Date(Date.now() + 3600 * 1000);
  start.setMinutes(0, 0, 0);
  const name = h("input", { type: "text", id: "new-name", value: `${key}-rollout`, required: true, "data-path": "metadata.name", autocomplete: "off" });
  const control = h("select", { id: "new-control", "data-path": "spec.target.control" }, variations.map((v) => h("option", { value: v }, v)));
  const variation = h("select", { id: "new-variation", "data-path": "spec.target.variation" }, variations.map((v) => h("option", { value: v }, v)));
  if (variations.length > 1) variation.value = variations[1];
  const modeManual = h("input", { type: "radio", name: "mode", id: "mode-manual", value: "manual" });
  const modeTemplate = h("input", { type: "radio", name: "mode", id: "mode-template", value: "template", checked: true });

  const rowsBox = h("div", { class: "manual-rows", "data-path": "spec.plan.schedule.manual" });
  const rows = [];
  function addRow(at, weight) {
    const index = rows.length;
    const atInput = h("input", { type: "datetime-local", value: at, step: "60", required: true });
    const weightInput = h("input", { type: "number", value: weight, min: "0", max: "100", step: "any", inputmode: "decimal", required: true });
    const remove = h("button", { type: "button", class: "small", "aria-label": `Remove entry ${index + 1}`, onclick: () => { rows.splice(rows.indexOf(row), 1); row.box.remove(); renumber(); update(); } }, "Remove");
    const row = { atInput, weightInput, box: null };
    row.box = h("div", { class: "manual-row" }, field(`Entry ${index + 1} time`, atInput), field("Weight %", weightInput), remove);
    rows.push(row);
    rowsBox.append(row.box);
    renumber();
  }
  function renumber() {
    rows.forEach((row, i) => {
      row.atInput.dataset.path = `spec.plan.schedule.manual[${i}].at`;
      row.weightInput.dataset.path = `spec.plan.schedule.manual[${i}].weight`;
      row.box.querySelector("label").textContent = `Entry ${i + 1} time`;
    });
  }
  addRow(toLocalInput(start), "10");
  addRow(toLocalInput(new Date(start.getTime() + 86400000)), "50");
  addRow(toLocalInput(new Date(start.getTime() + 2 * 86400000)), "100");

  const tStart = h("input", { type: "datetime-local", id: "tpl-start", value: toLocalInput(start), step: "60", required: true, "data-path": "spec.plan.schedule.template.start" });
  const tInterval = h("select", { id: "tpl-interval", "data-path": "spec.plan.schedule.template.interval" }, Object.keys(INTERVALS).map((i) => h("option", { value: i }, i)));
  tInterval.value = "daily";
  const tIncrements = h("input", { type: "number", id: "tpl-increments", value: "20", min: "0", max: "100", step: "any", inputmode: "decimal", required: true, "data-path": "spec.plan.schedule.template.increments" });

  const manualBox = h("fieldset", { class: "mode-box", id: "manual-box" }, h("legend", {}, "Manual entries (time in your zone, weight of the new variation)"), rowsBox,
    h("button", { type: "button", class: "small", onclick: () => { const last = rows.at(-1); const next = last ? new Date(new Date(last.atInput.value).getTime() + 86400000) : start; addRow(toLocalInput(next), "100"); update(); } }, "Add entry"));
  const templateBox = h("fieldset", { class: "mode-box", id: "template-box" }, h("legend", {}, "Template"),
    field("Start (your time zone)", tStart), field("Interval", tInterval), field("Increments (% per interval)", tIncrements, "The weight grows by this much every interval until it reaches 100%."));
  const preview = h("div", { id: "schedule-preview", "aria-live": "polite" });
  const errors = h("div", { id: "create-errors" });
  const save = h("button", { type: "submit", class: "primary", id: "create-save" }, "Create rollout");
  const form = h("form", { class: "create", id: "create-rollout", "aria-labelledby": "create-title", novalidate: true },
    h("h2", { id: "create-title" }, "Create a progressive rollout"),
    h("div", { class: "grid" }, field("Rollout name", name), field("From (control)", control), field("To (variation)", variation)),
    h("fieldset", { class: "modes", "data-path": "spec.plan.schedule" }, h("legend", {}, "Schedule"),
      h("label", { for: "mode-template", class: "radio" }, modeTemplate, " Template setting"),
      h("label", { for: "mode-manual", class: "radio" }, modeManual, " Manual setting")),
    templateBox, manualBox,
    h("h3", {}, "Preview"), preview, errors,
    h("div", { class: "buttons" }, save));

  const mode = () => (modeManual.checked ? "manual" : "template");
  function readManual() {
    return rows.map((row) => ({ at: row.atInput.value, weight: row.weightInput.value }));
  }
  function update() {
    manualBox.hidden = mode() !== "manual";
    templateBox.hidden = mode() !== "template";
    const entries = mode() === "manual" ? expandManual(readManual()) : expandTemplate({ start: tStart.value, interval: tInterval.value, increments: tIncrements.value });
    const notes = [];
    if (mode() === "template" && !(Number(tIncrements.value) > 0)) notes.push("Increments must be more than 0% (the server will say so too); no entries.");
    if (mode() === "manual") {
      for (let i = 1; i < entries.length; i += 1) {
        const gap = (entries[i].at - entries[i - 1].at) / 1000;
        if (gap < MIN_GAP_SECONDS) notes.push(`Entry ${i + 1} is ${gap < 0 ? "before" : `${gap}s after`} entry ${i}; entries go up in time, at least 5 minutes apart.`);
      }
    }
    fill(preview,
      entries.length ? h("ol", { class: "preview" }, entries.slice(0, 60).map((e, i) => h("li", { "data-entry": String(i) }, time(e.at), " → ", h("strong", {}, pct(e.weight))))) : h("p", { class: "muted" }, "No entries."),
      entries.length > 60 ? h("p", { class: "muted" }, `… ${entries.length - 60} more`) : null,
      h("p", { class: "muted", id: "preview-count" }, `${entries.length} ${entries.length === 1 ? "entry" : "entries"}${entries.length ? `, ending at ${pct(entries.at(-1).weight)}` : ""}`),
      notes.map((n) => h("p", { class: "warn" }, n)));
  }
  form.addEventListener("input", update);
  form.addEventListener("change", update);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    fill(errors);
    showFieldErrors(form, []);
    const rolloutDoc = {
      apiVersion: "weir.dev/v1alpha1",
      kind: "Rollout",
      metadata: { name: name.value.trim(), namespace: ns },
      spec: {
        target: { kind: "flag", flag: key, control: control.value, variation: variation.value },
        plan: planOf(mode(), readManual(), { start: tStart.value, interval: tInterval.value, increments: tIncrements.value }),
      },
    };
    save.disabled = true;
    try {
      const applied = await request("POST", "/api/v1/rollouts", rolloutDoc);
      toast(`Rollout ${applied.rollout.metadata.name} ${applied.outcome || "created"}`);
      window.dispatchEvent(new CustomEvent("weir:navigate", { detail: `/rollouts/${enc(ns)}/${enc(applied.rollout.metadata.name)}` }));
    } catch (error) {
      const left = showFieldErrors(form, error.errors || []);
      fill(errors, left.length || !(error.errors || []).length ? errorBox({ message: error.message, errors: left }) : h("p", { class: "error", role: "alert" }, "Not saved: see the fields marked above."));
      const first = form.querySelector("[aria-invalid]");
      if (first) first.focus();
    } finally {
      save.disabled = false;
    }
  });
  update();
  return form;
}
