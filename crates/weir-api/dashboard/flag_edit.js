// A flag's editors: the on/off toggle (with a confirmation), and a form for the variations,
// individual targets, rules (with a clause editor) and the default strategy. Saving PUTs the whole
// Flag document with `?expectedVersion=` (the version the page read), so a change made elsewhere
// in between is refused (409) rather than overwritten; the server validates and names each field
// at fault (docs/FLAGS.md, "A flag"), shown beside that field.
import { enc, request } from "/ui/api.js";
import { confirmAction, errorBox, field, fill, h, showFieldErrors, toast } from "/ui/ui.js";

/** The clause operators of weir-core's `ClauseOp`, with how the page reads them. */
export const OPS = [
  ["equals", "is"],
  ["in", "is one of"],
  ["startsWith", "starts with"],
  ["endsWith", "ends with"],
  ["matches", "matches the pattern"],
  ["gt", "is more than"],
  ["gte", "is at least"],
  ["lt", "is less than"],
  ["lte", "is at most"],
  ["semverEq", "is the version"],
  ["semverGt", "is a version after"],
  ["semverGte", "is the version or after"],
  ["semverLt", "is a version before"],
  ["semverLte", "is the version or before"],
];
const OP_TEXT = Object.fromEntries(OPS);
const NUMERIC_OPS = new Set(["gt", "gte", "lt", "lte"]);

/** Fields the server writes (ignored on a PUT; left out of what the page sends). */
const SERVER_FIELDS = ["version", "createdAt", "updatedAt", "rolledOutBy", "exposures", "outcomes"];

/** A value as text, for reading: strings as they are, anything else as written. */
export function valueText(value) {
  return typeof value === "string" ? value : JSON.stringify(value);
}

/** A strategy as text: `on`, or `on 20%, off 80%`. */
export function strategyText(strategy) {
  if (!strategy) return "–";
  if (strategy.variation) return strategy.variation;
  if (strategy.weights) return Object.entries(strategy.weights).map(([v, w]) => `${v} ${w}%`).join(", ");
  return "–";
}

/** A clause as a sentence: `country is one of DE, FR`. */
export function clauseText(clause) {
  return `${clause.attribute} ${OP_TEXT[clause.op] || clause.op} ${(clause.values || []).map(valueText).join(", ")}`;
}

/** A rule as a sentence: `If country is one of DE, FR and plan is pro: serve on`. */
export function ruleText(rule) {
  const clauses = (rule.clauses || []).map(clauseText);
  const condition = clauses.length ? `If ${clauses.join(" and ")}` : "Always";
  const serve = rule.weights ? `split ${strategyText({ weights: rule.weights })}` : `serve ${rule.variation || "–"}`;
  return `${condition}: ${serve}`;
}

/** The value type of a flag's variations: boolean, string, number or json. */
function typeOf(variations) {
  const types = new Set(variations.map((v) => (typeof v.value === "object" || v.value === undefined ? "json" : typeof v.value)));
  return types.size === 1 ? [...types][0] : "json";
}

/** `value` converted for a variation of `type`, as well as it goes. */
function convert(value, type) {
  if (type === "boolean") return value === true || value === "true";
  if (type === "number") {
    const number = Number(value);
    return Number.isFinite(number) ? number : 0;
  }
  if (type === "string") return typeof value === "string" ? value : JSON.stringify(value);
  return typeof value === "object" && value !== null ? value : {};
}

/** Text split into items by commas or line breaks, blanks dropped. */
function items(text) {
  return text.split(/[\n,]/).map((s) => s.trim()).filter(Boolean);
}

/** The flag as the API takes it back: the document without the server's fields. */
function documentOf(flag) {
  const doc = structuredClone(flag);
  for (const name of SERVER_FIELDS) delete doc[name];
  return doc;
}

/** PUTs `doc` as flag `ns/key` if the server still has `version`; the applied flag. */
export async function putFlag(ns, key, version, doc) {
  const applied = await request("PUT", `/api/v1/flags/${enc(ns)}/${enc(key)}?expectedVersion=${version}`, doc);
  return applied.flag;
}

/**
 * The on/off button: asks first, then PUTs the flag with only `enabled` changed. `onSaved(flag)`
 * gets the flag the server answers.
 */
export function toggleButton(ns, key, getFlag, onSaved) {
  const flag = getFlag();
  const on = flag.spec.enabled !== false;
  const off = flag.spec.offVariation || (flag.spec.variations[0] || {}).name;
  return h("button", {
    type: "button", class: on ? "danger" : "primary", id: "flag-toggle",
    onclick: async (event) => {
      const button = event.currentTarget;
      const current = getFlag();
      const turningOff = current.spec.enabled !== false;
      const ok = await confirmAction(turningOff
        ? `Turn flag ${key} off? Every evaluation will get "${off}" (reason DISABLED) until it is turned on again.`
        : `Turn flag ${key} on? Evaluations follow its targets, rules and default strategy again.`, turningOff ? "Turn off" : "Turn on");
      if (!ok) return;
      button.disabled = true;
      try {
        const doc = documentOf(current);
        doc.spec.enabled = !turningOff;
        const saved = await putFlag(ns, key, current.version, doc);
        toast(`Flag ${key} turned ${turningOff ? "off" : "on"} (version ${saved.version})`);
        onSaved(saved);
      } catch (error) {
        toast(`Not changed: ${error.message}`, "error");
        button.disabled = false;
      }
    },
  }, on ? "Turn off" : "Turn on");
}

/**
 * The editor of a flag's variations, targets, rules and default strategy. `onSaved(flag)` gets
 * the flag the server answers. Returns `{form, dirty(), stale(flag)}`: `stale` tells the editor
 * the server has a newer version while the reader has unsaved edits.
 */
export function flagEditor(ns, key, base, onSaved) {
  const draft = structuredClone(base.spec);
  draft.targets = draft.targets || {};
  draft.rules = draft.rules || [];
  let type = typeOf(draft.variations);
  let dirty = false;
  const rolledOut = Boolean(base.rolledOutBy);
  const body = h("div", {});
  const notice = h("div", { id: "flag-stale", "aria-live": "polite" });
  const errors = h("div", { id: "flag-errors" });
  const save = h("button", { type: "submit", class: "primary", id: "flag-save" }, "Save the flag");
  const form = h("form", { class: "create flag-editor", id: "flag-editor", "aria-labelledby": "flag-editor-title", novalidate: true },
    h("h2", { id: "flag-editor-title" }, "Edit the flag"),
    h("p", { class: "muted" }, "Changes take effect for every evaluation when saved. Saving sends the whole flag; a change made elsewhere since this page loaded is refused, not overwritten."),
    notice, body, errors, h("div", { class: "buttons" }, save));

  const names = () => draft.variations.map((v) => v.name);
  const changed = () => { dirty = true; };

  /** Rebuilds the form from the draft, keeping the focused control. */
  function render() {
    const focused = document.activeElement && form.contains(document.activeElement) ? document.activeElement.id : null;
    fill(body, tagsBox(), variationsBox(), targetsBox(), rulesBox(), defaultBox());
    if (focused) {
      const again = document.getElementById(focused);
      if (again) again.focus();
    }
  }

  /** Renames a variation everywhere the flag refers to it. */
  function rename(from, to) {
    if (from === to) return;
    if (draft.offVariation === from) draft.offVariation = to;
    if (from in draft.targets) { draft.targets[to] = draft.targets[from]; delete draft.targets[from]; }
    for (const strategy of [draft.defaultStrategy, ...draft.rules]) renameIn(strategy, from, to);
  }
  function renameIn(strategy, from, to) {
    if (!strategy) return;
    if (strategy.variation === from) strategy.variation = to;
    if (strategy.weights && from in strategy.weights) {
      strategy.weights = Object.fromEntries(Object.entries(strategy.weights).map(([n, w]) => [n === from ? to : n, w]));
    }
  }

  function valueControl(variation, i) {
    const path = `spec.variations[${i}].value`;
    const id = `var-${i}-value`;
    if (type === "boolean") {
      const select = h("select", { id, "data-path": path, onchange: (e) => { variation.value = e.target.value === "true"; changed(); } },
        h("option", { value: "true" }, "true"), h("option", { value: "false" }, "false"));
      select.value = String(variation.value === true);
      return select;
    }
    if (type === "json") {
      const area = h("textarea", { id, "data-path": path, rows: "3", spellcheck: "false" });
      area.value = JSON.stringify(variation.value, null, 2);
      area.addEventListener("input", () => {
        changed();
        try {
          variation.value = JSON.parse(area.value);
          area.removeAttribute("aria-invalid");
        } catch {
          area.setAttribute("aria-invalid", "true");
        }
      });
      return area;
    }
    const input = h("input", { id, "data-path": path, type: type === "number" ? "number" : "text", step: type === "number" ? "any" : null, autocomplete: "off" });
    input.value = String(variation.value);
    input.addEventListener("input", () => { variation.value = type === "number" ? Number(input.value) : input.value; changed(); });
    return input;
  }

  function tagsBox() {
    const tags = h("input", { type: "text", id: "flag-tags", "data-path": "spec.tags", autocomplete: "off", spellcheck: "false" });
    tags.value = (draft.tags || []).join(", ");
    tags.addEventListener("input", () => {
      const list = items(tags.value);
      if (list.length) draft.tags = list; else delete draft.tags;
      changed();
    });
    return h("div", { class: "grid" }, field("Tags", tags, "Separated by commas, lowercase (team:checkout, release/2026-11); the flags list filters by them."));
  }

  function variationsBox() {
    const typeSelect = h("select", { id: "var-type", disabled: rolledOut, onchange: () => {
      type = typeSelect.value;
      for (const v of draft.variations) v.value = convert(v.value, type);
      changed();
      render();
    } }, [["boolean", "true / false"], ["string", "text"], ["number", "number"], ["json", "JSON object or array"]].map(([v, t]) => h("option", { value: v }, t)));
    typeSelect.value = type;
    const offSelect = h("select", { id: "var-off", "data-path": "spec.offVariation", onchange: () => { draft.offVariation = offSelect.value; changed(); } },
      names().map((n) => h("option", { value: n }, n)));
    offSelect.value = draft.offVariation || names()[0] || "";
    return h("fieldset", { class: "editor-box", "data-path": "spec.variations" },
      h("legend", {}, "Variations"),
      rolledOut ? h("p", { class: "warn" }, `A rollout (${base.rolledOutBy}) moves this flag: its variations cannot change until that rollout ends or is deleted.`) : null,
      h("div", { class: "grid" }, field("Value type", typeSelect), field("Served when off", offSelect)),
      h("ol", { class: "editor-rows" }, draft.variations.map((variation, i) => {
        const name = h("input", { type: "text", id: `var-${i}-name`, "data-path": `spec.variations[${i}].name`, value: variation.name, required: true, autocomplete: "off", readonly: rolledOut });
        name.addEventListener("change", () => { const to = name.value.trim(); rename(variation.name, to); variation.name = to; changed(); render(); });
        const description = h("input", { type: "text", id: `var-${i}-description`, "data-path": `spec.variations[${i}].description`, value: variation.description || "", autocomplete: "off" });
        description.addEventListener("input", () => { if (description.value) variation.description = description.value; else delete variation.description; changed(); });
        const value = valueControl(variation, i);
        if (rolledOut) value.disabled = true;
        return h("li", { class: "editor-row" },
          field(`Variation ${i + 1} name`, name), field("Value", value), field("Description", description),
          h("button", { type: "button", class: "small", id: `var-${i}-remove`, disabled: rolledOut || draft.variations.length <= 2, title: draft.variations.length <= 2 ? "A flag has at least two variations" : null,
            onclick: () => { removeVariation(i); changed(); render(); } }, `Remove variation ${variation.name || i + 1}`));
      })),
      h("button", { type: "button", class: "small", id: "var-add", disabled: rolledOut, onclick: () => {
        let n = draft.variations.length + 1;
        while (names().includes(`variation-${n}`)) n += 1;
        draft.variations.push({ name: `variation-${n}`, value: convert(type === "boolean" ? false : type === "number" ? 0 : type === "string" ? "" : {}, type) });
        changed();
        render();
        document.getElementById(`var-${draft.variations.length - 1}-name`).focus();
      } }, "Add a variation"));
  }

  function removeVariation(i) {
    const [gone] = draft.variations.splice(i, 1);
    const first = names()[0];
    if (draft.offVariation === gone.name) delete draft.offVariation;
    delete draft.targets[gone.name];
    for (const strategy of [draft.defaultStrategy, ...draft.rules]) {
      if (strategy.variation === gone.name) strategy.variation = first;
      if (strategy.weights) delete strategy.weights[gone.name];
    }
  }

  function targetsBox() {
    return h("fieldset", { class: "editor-box", "data-path": "spec.targets" },
      h("legend", {}, "Individual targets"),
      h("p", { class: "hint" }, "Targeting keys listed under a variation always get it (one key a line, or separated by commas)."),
      h("div", { class: "grid" }, names().map((name, i) => {
        const area = h("textarea", { id: `targets-${i}`, "data-path": `spec.targets.${name}`, rows: "2", spellcheck: "false" });
        area.value = (draft.targets[name] || []).join("\n");
        area.addEventListener("input", () => {
          const keys = items(area.value);
          if (keys.length) draft.targets[name] = keys; else delete draft.targets[name];
          changed();
        });
        return field(`Keys that get ${name}`, area);
      })));
  }

  /** A strategy's editor: one variation, or weights per variation summing to 100%. */
  function strategyBox(strategy, prefix, path, legend) {
    const split = Boolean(strategy.weights);
    const one = h("input", { type: "radio", name: `${prefix}-kind`, id: `${prefix}-one`, value: "one", checked: !split, disabled: rolledOut && prefix === "default" });
    const many = h("input", { type: "radio", name: `${prefix}-kind`, id: `${prefix}-split`, value: "split", checked: split, disabled: rolledOut && prefix === "default" });
    const switchTo = (toSplit) => {
      if (toSplit && !strategy.weights) {
        const chosen = strategy.variation || names()[0];
        strategy.weights = Object.fromEntries(names().map((n) => [n, n === chosen ? 100 : 0]));
        delete strategy.variation;
      } else if (!toSplit && strategy.weights) {
        const top = Object.entries(strategy.weights).sort((a, b) => b[1] - a[1])[0];
        strategy.variation = top ? top[0] : names()[0];
        delete strategy.weights;
      }
      changed();
      render();
    };
    one.addEventListener("change", () => switchTo(false));
    many.addEventListener("change", () => switchTo(true));
    let choice;
    if (split) {
      const sum = h("p", { class: "weight-sum", id: `${prefix}-sum`, "aria-live": "polite" });
      const showSum = () => {
        const total = Object.values(strategy.weights).reduce((a, w) => a + Number(w || 0), 0);
        const rounded = Math.round(total * 1000) / 1000;
        sum.textContent = `Together: ${rounded}%${rounded === 100 ? "" : " (must be 100%)"}`;
        sum.className = rounded === 100 ? "weight-sum muted" : "weight-sum warn";
      };
      choice = h("div", { class: "weights", "data-path": `${path}.weights` },
        h("div", { class: "grid" }, names().map((name, i) => {
          const input = h("input", { type: "number", id: `${prefix}-weight-${i}`, "data-path": `${path}.weights.${name}`, min: "0", max: "100", step: "any", inputmode: "decimal", disabled: rolledOut && prefix === "default" });
          input.value = String(strategy.weights[name] ?? 0);
          input.addEventListener("input", () => {
            const number = Number(input.value);
            strategy.weights[name] = input.value === "" || Number.isNaN(number) ? input.value : number;
            changed();
            showSum();
          });
          return field(`${name} %`, input);
        })), sum);
      showSum();
    } else {
      const select = h("select", { id: `${prefix}-variation`, "data-path": `${path}.variation`, disabled: rolledOut && prefix === "default", onchange: () => { strategy.variation = select.value; changed(); } },
        names().map((n) => h("option", { value: n }, n)));
      select.value = strategy.variation || "";
      choice = field("Variation", select);
    }
    return h("fieldset", { class: "editor-box strategy", "data-path": path },
      h("legend", {}, legend),
      h("label", { for: one.id, class: "radio" }, one, " One variation"),
      h("label", { for: many.id, class: "radio" }, many, " Split by weights"),
      choice);
  }

  function rulesBox() {
    return h("fieldset", { class: "editor-box", "data-path": "spec.rules" },
      h("legend", {}, "Rules (the first that matches decides)"),
      draft.rules.length ? null : h("p", { class: "muted" }, "No rules."),
      h("ol", { class: "editor-rules" }, draft.rules.map((rule, r) => {
        const name = h("input", { type: "text", id: `rule-${r}-name`, "data-path": `spec.rules[${r}].name`, value: rule.name || "", autocomplete: "off" });
        name.addEventListener("input", () => { if (name.value) rule.name = name.value; else delete rule.name; changed(); });
        return h("li", { class: "editor-rule", "data-rule": String(r) },
          h("div", { class: "grid" }, field(`Rule ${r + 1} name (optional)`, name)),
          h("fieldset", { class: "clauses", "data-path": `spec.rules[${r}].clauses` },
            h("legend", {}, `Rule ${r + 1}: when all of these hold`),
            h("ol", { class: "editor-rows" }, rule.clauses.map((clause, c) => clauseRow(rule, clause, r, c))),
            h("button", { type: "button", class: "small", id: `rule-${r}-clause-add`, onclick: () => {
              rule.clauses.push({ attribute: "", op: "equals", values: [] });
              changed();
              render();
              document.getElementById(`rule-${r}-clause-${rule.clauses.length - 1}-attribute`).focus();
            } }, `Add a condition to rule ${r + 1}`)),
          strategyBox(rule, `rule-${r}`, `spec.rules[${r}]`, `Rule ${r + 1} serves`),
          h("div", { class: "buttons" },
            h("button", { type: "button", class: "small", id: `rule-${r}-up`, disabled: r === 0, onclick: () => { draft.rules.splice(r - 1, 0, draft.rules.splice(r, 1)[0]); changed(); render(); } }, `Move rule ${r + 1} up`),
            h("button", { type: "button", class: "small danger", id: `rule-${r}-remove`, onclick: () => { draft.rules.splice(r, 1); changed(); render(); } }, `Remove rule ${r + 1}`)));
      })),
      h("button", { type: "button", class: "small", id: "rule-add", onclick: () => {
        draft.rules.push({ clauses: [{ attribute: "", op: "equals", values: [] }], variation: names()[0] });
        changed();
        render();
        document.getElementById(`rule-${draft.rules.length - 1}-clause-0-attribute`).focus();
      } }, "Add a rule"));
  }

  function clauseRow(rule, clause, r, c) {
    const base = `spec.rules[${r}].clauses[${c}]`;
    const id = `rule-${r}-clause-${c}`;
    const attribute = h("input", { type: "text", id: `${id}-attribute`, "data-path": `${base}.attribute`, value: clause.attribute, autocomplete: "off" });
    attribute.addEventListener("input", () => { clause.attribute = attribute.value.trim(); changed(); });
    const op = h("select", { id: `${id}-op`, "data-path": `${base}.op` }, OPS.map(([value, text]) => h("option", { value }, `${text} (${value})`)));
    op.value = clause.op;
    const values = h("textarea", { id: `${id}-values`, "data-path": `${base}.values`, rows: "2", spellcheck: "false" });
    values.value = (clause.values || []).map(valueText).join("\n");
    const original = clause.values || [];
    const readValues = () => {
      clause.values = items(values.value).map((text, i) => {
        const number = Number(text);
        if (NUMERIC_OPS.has(clause.op) && text !== "" && Number.isFinite(number)) return number;
        // A value that was a number or a boolean and still reads the same keeps its type.
        const before = original[i];
        if (before !== undefined && typeof before !== "string" && valueText(before) === text) return before;
        return text;
      });
      changed();
    };
    values.addEventListener("input", readValues);
    op.addEventListener("change", () => { clause.op = op.value; readValues(); });
    return h("li", { class: "editor-row clause" },
      field("Attribute", attribute, "targetingKey, or a context attribute (device.os)"),
      field("Comparison", op),
      field("Values (one a line)", values),
      h("button", { type: "button", class: "small", id: `${id}-remove`, onclick: () => { rule.clauses.splice(c, 1); changed(); render(); } }, `Remove condition ${c + 1} of rule ${r + 1}`));
  }

  function defaultBox() {
    return h("div", {},
      rolledOut ? h("p", { class: "warn", id: "default-rolled-out" }, `The default strategy is moved by the rollout ${base.rolledOutBy}: it shows the weights in force now; change the rollout's schedule instead.`) : null,
      strategyBox(draft.defaultStrategy, "default", "spec.defaultStrategy", "Everyone else (default strategy)"));
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    fill(errors);
    showFieldErrors(form, []);
    const broken = form.querySelector("textarea[aria-invalid='true']");
    if (broken) {
      fill(errors, h("p", { class: "error", role: "alert" }, "A JSON value does not parse: see the field marked."));
      broken.focus();
      return;
    }
    const doc = documentOf(base);
    doc.spec = structuredClone(draft);
    if (!Object.keys(doc.spec.targets).length) delete doc.spec.targets;
    if (!doc.spec.rules.length) delete doc.spec.rules;
    save.disabled = true;
    try {
      const saved = await putFlag(ns, key, base.version, doc);
      dirty = false;
      toast(`Flag ${key} saved (version ${saved.version})`);
      onSaved(saved);
    } catch (error) {
      const left = showFieldErrors(form, error.errors || []);
      fill(errors, left.length || !(error.errors || []).length
        ? errorBox({ message: `Not saved: ${error.message}`, errors: left })
        : h("p", { class: "error", role: "alert" }, "Not saved: see the fields marked above."));
      const first = form.querySelector("[aria-invalid]");
      if (first) first.focus();
    } finally {
      save.disabled = false;
    }
  });
  form.addEventListener("input", changed);
  render();

  return {
    form,
    dirty: () => dirty,
    /** The server has `flag`, newer than what the edits started from. */
    stale(flag, reload) {
      fill(notice, h("div", { class: "error", role: "status" },
        `This flag changed elsewhere (now version ${flag.version}) while you were editing: saving will be refused. `,
        h("button", { type: "button", class: "small", id: "flag-reload", onclick: reload }, "Discard my edits and load it")));
    },
  };
}

/**
 * Sends `send(version)` for rollout `rollout` with the version the server has now, as long as its
 * spec is still the one the reader saw (`generation`): the engine bumps the version with every
 * status write, which must not refuse the reader's change; a change of the spec elsewhere does.
 */
export async function withRolloutVersion(rollout, send) {
  const { namespace, name } = rollout.metadata;
  for (let attempt = 0; ; attempt += 1) {
    const now = await request("GET", `/api/v1/rollouts/${enc(namespace)}/${enc(name)}`);
    if (rollout.generation && now.generation !== rollout.generation) {
      throw new Error(`the rollout ${name} was changed elsewhere since this page showed it: reload to see it`);
    }
    try {
      return await send(now.version);
    } catch (error) {
      if (error.status !== 409 || attempt >= 4) throw error;
    }
  }
}

/** Asks, then deletes rollout `ns/name` (the spec the page showed); true when deleted. */
export async function deleteRollout(rollout) {
  const { namespace, name } = rollout.metadata;
  const ok = await confirmAction(`Delete the rollout ${namespace}/${name}? Its schedule will not run; the flag keeps the strategy it has now.`, "Delete");
  if (!ok) return false;
  await withRolloutVersion(rollout, (version) => request("DELETE", `/api/v1/rollouts/${enc(namespace)}/${enc(name)}?expectedVersion=${version}`));
  toast(`Rollout ${name} deleted`);
  return true;
}
