// The flags list, a flag's page (its on/off toggle and editors: flag_edit.js), its rollouts (a
// waiting schedule edited or deleted), and creating a progressive rollout of a flag the seed's two
// ways: manual entries (time + weight) or a template (start, interval, increments).
import { allows, enc, get, listAll, request, watch } from "/ui/api.js";
import { age, errorBox, field, fill, h, pct, phase, showFieldErrors, time, toast } from "/ui/ui.js";
import { expandManual, expandTemplate, INTERVALS, MIN_GAP_SECONDS, planOf, toLocalInput } from "/ui/schedule.js";
import { evaluationsSection, historySection, triggersSection } from "/ui/flag_extras.js";
import { deleteRollout, flagEditor, withRolloutVersion, ruleText, strategyText, toggleButton, valueText } from "/ui/flag_edit.js";

export async function flagsPage(main) {
  document.title = "Flags · weir";
  const tbody = h("tbody", {});
  const status = h("div", {});
  const params = new URLSearchParams(location.search);
  const search = h("input", { type: "search", id: "flag-search", value: params.get("search") || "", autocomplete: "off", spellcheck: "false" });
  const tagSelect = h("select", { id: "flag-tag" }, h("option", { value: "" }, "any tag"));
  const wantedTag = params.get("tag") || "";
  const filters = h("form", { class: "filters", role: "search", "aria-label": "Find flags", onsubmit: (event) => event.preventDefault() },
    field("Search keys, tags and descriptions", search), field("Tag", tagSelect));
  const count = h("p", { class: "muted", id: "flags-count", "aria-live": "polite" });
  fill(main, h("div", { class: "page-head" }, h("h1", {}, "Flags")), filters, status, count,
    h("div", { class: "table-wrap" }, h("table", { id: "flags" },
      h("thead", {}, h("tr", {}, ["Flag", "State", "Default strategy", "Variations", "Rollout", "Updated"].map((c) => h("th", { scope: "col" }, c)))),
      tbody)));
  /** The filters in the address, so a filtered list can be bookmarked. */
  function query() {
    const next = new URLSearchParams();
    if (search.value.trim()) next.set("search", search.value.trim());
    const tag = tagSelect.value || (tagSelect.options.length <= 1 ? wantedTag : "");
    if (tag) next.set("tag", tag);
    return next;
  }
  async function reload() {
    const wanted = query();
    try {
      const [items, every] = await Promise.all([
        listAll(`/api/v1/flags${wanted.toString() ? `?${wanted}` : ""}`),
        wanted.toString() ? listAll("/api/v1/flags") : null,
      ]);
      if (query().toString() !== wanted.toString()) return;
      // Every tag of every flag, to choose from.
      const tags = [...new Set((every || items).flatMap((flag) => flag.spec.tags || []))].sort();
      const chosen = wanted.get("tag") || "";
      if (chosen && !tags.includes(chosen)) tags.unshift(chosen);
      const options = ["", ...tags];
      if (options.join("\n") !== [...tagSelect.options].map((o) => o.value).join("\n")) {
        tagSelect.replaceChildren(...options.map((t) => h("option", { value: t }, t || "any tag")));
      }
      tagSelect.value = chosen;
      fill(status);
      tbody.replaceChildren(...items.map((flag) => {
        const { namespace, name } = flag.metadata;
        return h("tr", { "data-flag": `${namespace}/${name}` },
          h("th", { scope: "row" }, h("a", { href: `/flags/${enc(namespace)}/${enc(name)}` }, h("span", { class: "ns" }, `${namespace}/`), name),
            (flag.spec.tags || []).length ? h("span", { class: "flag-tags" }, flag.spec.tags.map((t) => h("a", { class: "flag-tag", href: `/flags?tag=${enc(t)}`, "aria-label": `Flags tagged ${t}` }, t))) : null),
          h("td", {}, flag.spec.enabled === false ? h("span", { class: "phase phase-failed" }, "off") : h("span", { class: "phase phase-succeeded" }, "on")),
          h("td", {}, strategyText(flag.spec.defaultStrategy)),
          h("td", {}, (flag.spec.variations || []).map((v) => v.name).join(", ")),
          h("td", {}, flag.rolledOutBy ? h("a", { href: `/rollouts/${flag.rolledOutBy.split("/").map(enc).join("/")}` }, flag.rolledOutBy) : "–"),
          h("td", {}, age(flag.updatedAt)));
      }));
      fill(count, wanted.toString() ? `${items.length} ${items.length === 1 ? "flag matches" : "flags match"}` : "");
      if (!items.length) status.append(h("p", { class: "muted" }, wanted.toString() ? "No flag matches." : "No flags yet (weir apply -f a Flag document)."));
    } catch (error) {
      fill(status, errorBox(error));
    }
  }
  let typing = null;
  const refilter = () => {
    // Typing just before following a link: the list is gone, the address is the next page's.
    if (location.pathname !== "/flags") return;
    const next = query().toString();
    history.replaceState(null, "", `/flags${next ? `?${next}` : ""}`);
    reload();
  };
  search.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(refilter, 200);
  });
  tagSelect.addEventListener("change", refilter);
  await reload();
  let timer = null;
  const close = watch("/api/v1/flags/watch", { flag: () => { clearTimeout(timer); timer = setTimeout(reload, 200); } }, reload);
  return () => { clearTimeout(typing); clearTimeout(timer); close(); };
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
  const admin = allows("admin");
  const details = h("section", { "aria-label": "The flag" });
  const editorBox = h("section", { "aria-label": "Editing" });
  const rolloutsSection = h("section", { "aria-labelledby": "flag-rollouts-title" });
  const scheduleEditBox = h("div", { id: "schedule-edit-box" });
  const createBox = h("div", { id: "create-box" });
  let created = null;
  const evaluations = evaluationsSection(ns, key, (flag.spec.variations || []).map((v) => v.name));
  const triggers = triggersSection(ns, key, admin);
  const changes = historySection(ns, key);
  fill(main,
    h("p", { class: "crumbs" }, h("a", { href: "/flags" }, "Flags"), " / ", `${ns}/`),
    h("h1", {}, key),
    details, evaluations.box, editorBox, rolloutsSection, scheduleEditBox, createBox, triggers.box, changes.box);

  let editor = null;
  let rolloutNames = null;
  /** Takes the flag the server has now: the summary follows, the editor too unless edited. */
  function take(next) {
    const newer = next.version !== flag.version;
    flag = next;
    renderFlag();
    // A change may be a trigger's use: its count moves too.
    if (newer) { changes.reload(flag.version); triggers.reload(); }
    if (!admin) return;
    if (!editor || !editor.dirty()) buildEditor();
    else if (newer) editor.stale(flag, buildEditor);
  }
  function buildEditor() {
    const focused = document.activeElement && editorBox.contains(document.activeElement) ? document.activeElement.id : null;
    editor = flagEditor(ns, key, flag, take);
    fill(editorBox, editor.form);
    const again = focused && document.getElementById(focused);
    if (again) again.focus();
  }

  function renderFlag() {
    const spec = flag.spec;
    const on = spec.enabled !== false;
    const focused = document.activeElement && details.contains(document.activeElement) ? document.activeElement.id : null;
    fill(details,
      h("dl", { class: "facts" },
        h("dt", {}, "State"), h("dd", { class: "flag-state" }, h("span", { id: "flag-state", class: `phase ${on ? "phase-succeeded" : "phase-failed"}` }, on ? "on" : "off"),
          admin ? [" ", toggleButton(ns, key, () => flag, take)] : h("span", { class: "muted" }, " (turning it on or off needs a token with the admin scope)")),
        (spec.tags || []).length ? [h("dt", {}, "Tags"), h("dd", { id: "flag-tags-shown" }, h("span", { class: "flag-tags" }, spec.tags.map((t) => h("span", { class: "flag-tag" }, t))))] : null,
        h("dt", {}, "Served when off"), h("dd", {}, spec.offVariation || (spec.variations[0] || {}).name || "–"),
        h("dt", {}, "Default strategy"), h("dd", { id: "flag-strategy" }, strategyText(spec.defaultStrategy), flag.rolledOutBy ? [" (rolled out by ", h("a", { href: `/rollouts/${flag.rolledOutBy.split("/").map(enc).join("/")}` }, flag.rolledOutBy), ")"] : null),
        h("dt", {}, "Version"), h("dd", { id: "flag-version" }, String(flag.version)),
        h("dt", {}, "Updated"), h("dd", {}, time(flag.updatedAt))),
      h("h2", {}, "Variations"),
      h("div", { class: "table-wrap" }, h("table", { id: "flag-variations" }, h("thead", {}, h("tr", {}, ["Name", "Value", "Description", "Evaluations"].map((c) => h("th", { scope: "col" }, c)))),
        h("tbody", {}, (spec.variations || []).map((v) => h("tr", {}, h("th", { scope: "row" }, v.name), h("td", {}, h("code", {}, valueText(v.value))), h("td", {}, v.description || ""), h("td", { class: "num" }, String((flag.exposures || {})[v.name] || 0))))))),
      h("h2", {}, "Targeting"),
      Object.keys(spec.targets || {}).length ? h("ul", { id: "flag-targets" }, Object.entries(spec.targets).map(([v, users]) => h("li", {}, h("strong", {}, v), `: ${users.join(", ")}`))) : h("p", { class: "muted" }, "No individual targets."),
      (spec.rules || []).length
        ? h("ol", { id: "flag-rules", class: "rules" }, spec.rules.map((rule) => h("li", {}, rule.name ? [h("strong", {}, rule.name), ": "] : null, ruleText(rule))))
        : h("p", { class: "muted" }, "No rules."));
    if (focused) {
      const again = document.getElementById(focused);
      if (again) again.focus();
    }
  }

  async function renderRollouts() {
    try {
      const page = await get(`/api/v1/flag-rollouts?namespace=${enc(ns)}&flag=${enc(key)}&order=-created&limit=100`);
      const focused = document.activeElement && rolloutsSection.contains(document.activeElement) ? document.activeElement.id : null;
      // A rollout created or gone changes what the flag says (rolledOutBy) without a new version.
      const names = page.items.map((r) => `${r.metadata.name}:${r.schedule ? r.schedule.state : ""}`).join(",");
      if (rolloutNames !== null && names !== rolloutNames) get(path).then(take, () => {});
      rolloutNames = names;
      fill(rolloutsSection, h("h2", { id: "flag-rollouts-title" }, "Its rollouts"),
        page.items.length ? h("ul", { class: "flag-rollouts" }, page.items.map((r) => {
          const waiting = r.schedule && r.schedule.state === "WAITING";
          return h("li", { "data-rollout": r.metadata.name },
            h("a", { href: `/rollouts/${enc(r.metadata.namespace)}/${enc(r.metadata.name)}` }, r.metadata.name), " ",
            phase(r.status && r.status.phase), " ",
            r.schedule ? `${r.schedule.type}, ${r.schedule.state}, ${r.schedule.done} of ${r.schedule.total} entries, ${pct(r.schedule.weight)} now` : "",
            r.schedule && r.schedule.next ? [", next ", pct(r.schedule.next.weight), " at ", time(r.schedule.next.at)] : null,
            waiting && admin ? h("span", { class: "buttons inline" },
              h("button", { type: "button", class: "small", id: `schedule-edit-${r.metadata.name}`, onclick: () => openScheduleEditor(r) }, `Edit the schedule of ${r.metadata.name}`),
              h("button", { type: "button", class: "small danger", id: `schedule-delete-${r.metadata.name}`, onclick: async () => {
                try {
                  if (await deleteRollout(r)) { fill(scheduleEditBox); await renderRollouts(); }
                } catch (error) {
                  toast(`Not deleted: ${error.message}`, "error");
                }
              } }, `Delete ${r.metadata.name}`)) : null);
        }))
          : h("p", { class: "muted" }, "No rollout of this flag yet."));
      if (focused) {
        const again = document.getElementById(focused);
        if (again) again.focus();
      }
      // A flag is rolled out by one rollout at a time: no form while it has one.
      if (!admin) {
        fill(createBox, h("p", { class: "muted" }, "Creating a rollout needs a token with the admin scope."));
      } else if (page.items.length) {
        fill(createBox, h("p", { class: "muted", id: "create-refused" }, `This flag already has a rollout (${page.items.map((r) => r.metadata.name).join(", ")}); delete it to create another.`));
      } else if (!createBox.contains(created) || !created) {
        created = created || createForm(ns, key, flag);
        fill(createBox, created);
      }
    } catch (error) {
      fill(rolloutsSection, errorBox(error));
    }
  }

  function openScheduleEditor(rollout) {
    fill(scheduleEditBox, editScheduleForm(rollout, async () => { fill(scheduleEditBox); await renderRollouts(); }));
    const first = scheduleEditBox.querySelector("input:checked, input");
    if (first) first.focus();
  }

  renderFlag();
  if (admin) buildEditor();
  await Promise.all([renderRollouts(), evaluations.reload(), triggers.reload(), changes.reload()]);
  // Evaluations are counted per minute (the server adds them up every few seconds).
  const counting = setInterval(() => { evaluations.reload(); triggers.reload(); }, 30000);
  let timer = null;
  const closeFlag = watch(`/api/v1/flags/watch?namespace=${enc(ns)}`, {
    flag: async (change) => {
      if (change.key !== key || change.version === flag.version) return;
      const next = await get(path).catch(() => null);
      if (next) take(next);
    },
  });
  const closeRollouts = watch(`/api/v1/watch?namespace=${enc(ns)}`, {
    status: () => { clearTimeout(timer); timer = setTimeout(renderRollouts, 200); },
  }, renderRollouts);
  return () => { closeFlag(); closeRollouts(); clearInterval(counting); };
}

/**
 * The schedule's fields (template or manual rows) with the preview; ids start with `prefix` so
 * two forms can share a page. `initial`: `{mode, manual: [{at, weight}], template}`.
 */
function scheduleFields(prefix, initial) {
  const modeManual = h("input", { type: "radio", name: `${prefix}mode`, id: `${prefix}mode-manual`, value: "manual", checked: initial.mode === "manual" });
  const modeTemplate = h("input", { type: "radio", name: `${prefix}mode`, id: `${prefix}mode-template`, value: "template", checked: initial.mode !== "manual" });
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
      row.box.querySelector("button").setAttribute("aria-label", `Remove entry ${i + 1}`);
    });
  }
  for (const row of initial.manual) addRow(row.at, row.weight);
  const tStart = h("input", { type: "datetime-local", id: `${prefix}tpl-start`, value: initial.template.start, step: "60", required: true, "data-path": "spec.plan.schedule.template.start" });
  const tInterval = h("select", { id: `${prefix}tpl-interval`, "data-path": "spec.plan.schedule.template.interval" }, Object.keys(INTERVALS).map((i) => h("option", { value: i }, i)));
  tInterval.value = initial.template.interval;
  const tIncrements = h("input", { type: "number", id: `${prefix}tpl-increments`, value: initial.template.increments, min: "0", max: "100", step: "any", inputmode: "decimal", required: true, "data-path": "spec.plan.schedule.template.increments" });
  const manualBox = h("fieldset", { class: "mode-box", id: `${prefix}manual-box` }, h("legend", {}, "Manual entries (time in your zone, weight of the new variation)"), rowsBox,
    h("button", { type: "button", class: "small", onclick: () => { const last = rows.at(-1); const next = last ? new Date(new Date(last.atInput.value).getTime() + 86400000) : new Date(Date.now() + 3600000); addRow(toLocalInput(next), "100"); update(); } }, "Add entry"));
  const templateBox = h("fieldset", { class: "mode-box", id: `${prefix}template-box` }, h("legend", {}, "Template"),
    field("Start (your time zone)", tStart), field("Interval", tInterval), field("Increments (% per interval)", tIncrements, "The weight grows by this much every interval until it reaches 100%."));
  const preview = h("div", { id: `${prefix}schedule-preview`, "aria-live": "polite" });
  const mode = () => (modeManual.checked ? "manual" : "template");
  const readManual = () => rows.map((row) => ({ at: row.atInput.value, weight: row.weightInput.value }));
  const readTemplate = () => ({ start: tStart.value, interval: tInterval.value, increments: tIncrements.value });
  function update() {
    manualBox.hidden = mode() !== "manual";
    templateBox.hidden = mode() !== "template";
    const entries = mode() === "manual" ? expandManual(readManual()) : expandTemplate(readTemplate());
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
      h("p", { class: "muted", id: `${prefix}preview-count` }, `${entries.length} ${entries.length === 1 ? "entry" : "entries"}${entries.length ? `, ending at ${pct(entries.at(-1).weight)}` : ""}`),
      notes.map((n) => h("p", { class: "warn" }, n)));
  }
  return {
    parts: [
      h("fieldset", { class: "modes", "data-path": "spec.plan.schedule" }, h("legend", {}, "Schedule"),
        h("label", { for: modeTemplate.id, class: "radio" }, modeTemplate, " Template setting"),
        h("label", { for: modeManual.id, class: "radio" }, modeManual, " Manual setting")),
      templateBox, manualBox,
      h("h3", {}, "Preview"), preview],
    update,
    plan: () => planOf(mode(), readManual(), readTemplate()),
  };
}

/** Where a new schedule starts by default: the next full hour. */
function defaultStart() {
  const start = new Date(Date.now() + 3600 * 1000);
  start.setMinutes(0, 0, 0);
  return start;
}

/** Sends `form`'s document, showing the server's errors by their fields; the answer or null. */
async function submit(form, errors, save, send) {
  fill(errors);
  showFieldErrors(form, []);
  save.disabled = true;
  try {
    return await send();
  } catch (error) {
    const left = showFieldErrors(form, error.errors || []);
    fill(errors, left.length || !(error.errors || []).length ? errorBox({ message: error.message, errors: left }) : h("p", { class: "error", role: "alert" }, "Not saved: see the fields marked above."));
    const first = form.querySelector("[aria-invalid]");
    if (first) first.focus();
    return null;
  } finally {
    save.disabled = false;
  }
}

/** The form that edits a waiting schedule (PUT /api/v1/rollouts/NS/NAME, the version read). */
function editScheduleForm(rollout, done) {
  const { namespace, name } = rollout.metadata;
  const schedule = (rollout.spec.plan && rollout.spec.plan.schedule) || {};
  const start = defaultStart();
  const initial = {
    mode: schedule.manual ? "manual" : "template",
    manual: (schedule.manual || [{ at: start.toISOString(), weight: 100 }]).map((e) => ({ at: toLocalInput(new Date(e.at)), weight: String(e.weight) })),
    template: schedule.template
      ? { start: toLocalInput(new Date(schedule.template.start)), interval: schedule.template.interval, increments: String(schedule.template.increments) }
      : { start: toLocalInput(start), interval: "daily", increments: "20" },
  };
  const fields = scheduleFields("edit-", initial);
  const errors = h("div", { id: "edit-errors" });
  const save = h("button", { type: "submit", class: "primary", id: "edit-save" }, "Save the schedule");
  const cancel = h("button", { type: "button", id: "edit-cancel", onclick: done }, "Cancel");
  const form = h("form", { class: "create", id: "edit-schedule", "aria-labelledby": "edit-title", novalidate: true },
    h("h2", { id: "edit-title" }, `Edit the schedule of ${name}`),
    h("p", { class: "muted" }, "The rollout waits for its first entry: its schedule can still change."),
    fields.parts, errors, h("div", { class: "buttons" }, save, cancel));
  form.addEventListener("input", fields.update);
  form.addEventListener("change", fields.update);
  form.addEventListener("keydown", (event) => { if (event.key === "Escape") done(); });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const doc = { apiVersion: rollout.apiVersion || "weir.dev/v1alpha1", kind: "Rollout", metadata: rollout.metadata, spec: { ...rollout.spec, plan: fields.plan() } };
    const applied = await submit(form, errors, save, () => withRolloutVersion(rollout, (version) => request("PUT", `/api/v1/rollouts/${enc(namespace)}/${enc(name)}?expectedVersion=${version}`, doc)));
    if (applied) {
      toast(`Schedule of ${name} saved`);
      await done();
    }
  });
  fields.update();
  return form;
}

/** The form that creates a progressive rollout of the flag (POST /api/v1/rollouts). */
function createForm(ns, key, flag) {
  const variations = (flag.spec.variations || []).map((v) => v.name);
  const start = defaultStart();
  const name = h("input", { type: "text", id: "new-name", value: `${key}-rollout`, required: true, "data-path": "metadata.name", autocomplete: "off" });
  const control = h("select", { id: "new-control", "data-path": "spec.target.control" }, variations.map((v) => h("option", { value: v }, v)));
  const variation = h("select", { id: "new-variation", "data-path": "spec.target.variation" }, variations.map((v) => h("option", { value: v }, v)));
  if (variations.length > 1) variation.value = variations[1];
  const fields = scheduleFields("", {
    mode: "template",
    manual: [0, 1, 2].map((day) => ({ at: toLocalInput(new Date(start.getTime() + day * 86400000)), weight: ["10", "50", "100"][day] })),
    template: { start: toLocalInput(start), interval: "daily", increments: "20" },
  });
  const errors = h("div", { id: "create-errors" });
  const save = h("button", { type: "submit", class: "primary", id: "create-save" }, "Create rollout");
  const form = h("form", { class: "create", id: "create-rollout", "aria-labelledby": "create-title", novalidate: true },
    h("h2", { id: "create-title" }, "Create a progressive rollout"),
    h("div", { class: "grid" }, field("Rollout name", name), field("From (control)", control), field("To (variation)", variation)),
    fields.parts, errors,
    h("div", { class: "buttons" }, save));
  form.addEventListener("input", fields.update);
  form.addEventListener("change", fields.update);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const rolloutDoc = {
      apiVersion: "weir.dev/v1alpha1",
      kind: "Rollout",
      metadata: { name: name.value.trim(), namespace: ns },
      spec: {
        target: { kind: "flag", flag: key, control: control.value, variation: variation.value },
        plan: fields.plan(),
      },
    };
    const applied = await submit(form, errors, save, () => request("POST", "/api/v1/rollouts", rolloutDoc));
    if (applied) {
      toast(`Rollout ${applied.rollout.metadata.name} ${applied.outcome || "created"}`);
      window.dispatchEvent(new CustomEvent("weir:navigate", { detail: `/rollouts/${enc(ns)}/${enc(applied.rollout.metadata.name)}` }));
    }
  });
  fields.update();
  return form;
}
