// A flag's change history (readable diffs), its evaluations over time (an SVG chart with its
// text outside the scaled drawing, and the same counts as a table), and its triggers (secret URLs
// that turn it on or off: created with the URL shown once, listed, revoked).
import { enc, get, request } from "/ui/api.js";
import { age, confirmAction, errorBox, field, fill, h, time, toast } from "/ui/ui.js";
import { clauseText, ruleText, strategyText, valueText } from "/ui/flag_edit.js";

// === history ===

const ENABLED = { true: "on", false: "off" };

/** A field path of a flag as words: `spec.rules[0].clauses[1].values[0]` -> `rule 1, condition 2, value 1`. */
export function pathText(path) {
  const words = {
    enabled: "state", variations: "variation", offVariation: "served when off", targets: "targets", rules: "rule",
    clauses: "condition", values: "value", defaultStrategy: "default strategy", weights: "weights", variation: "variation",
    bucketBy: "bucket by", salt: "salt", name: "name", value: "value", description: "description", attribute: "attribute",
    op: "comparison", tags: "tags", metadata: "metadata",
  };
  const parts = [];
  for (const segment of path.replace(/^spec\./, "").split(".")) {
    const match = segment.match(/^([^[\]]+)((?:\[\d+\])*)$/);
    if (!match) { parts.push(segment); continue; }
    const [, name, indexes] = match;
    const numbers = [...indexes.matchAll(/\[(\d+)\]/g)].map((m) => Number(m[1]) + 1);
    const word = words[name] || name;
    parts.push(numbers.length ? `${word} ${numbers.join(", ")}` : word);
  }
  // "targets, on" reads better as "targets of on".
  return parts.join(", ").replace(/\b(targets|weights), (?=[^,]+$)/, "$1 of ");
}

/** Any value of a flag document as words: variations as `name (value)`, rules as sentences. */
function readable(value) {
  if (value === undefined || value === null) return "none";
  if (Array.isArray(value)) return value.length ? value.map(readable).join(", ") : "none";
  if (typeof value !== "object") return valueText(value);
  if ("name" in value && "value" in value) return `${value.name} (${valueText(value.value)})${value.description ? ` - ${value.description}` : ""}`;
  if (Array.isArray(value.clauses)) return `${value.name ? `${value.name}: ` : ""}${ruleText(value)}`;
  if ("attribute" in value && "op" in value) return clauseText(value);
  if (Object.keys(value).every((k) => k === "variation" || k === "weights")) return strategyText(value);
  return Object.entries(value).map(([k, v]) => `${k} ${readable(v)}`).join("; ");
}

function shown(path, value) {
  if (value === undefined || value === null) return h("span", { class: "muted" }, "none");
  if (path.endsWith("enabled") && typeof value === "boolean") return ENABLED[value];
  if (path.endsWith("weights") && typeof value === "object") return strategyText({ weights: value });
  if (typeof value === "number" && /weights\.[^.]+$/.test(path)) return `${value}%`;
  return readable(value);
}

/** One change of the history: who, when, what, each field before -> after. */
function changeItem(entry) {
  const change = entry.change || entry;
  const fields = change.changes || [];
  return h("li", { "data-change": String(entry.id ?? "") },
    h("p", { class: "change-head" }, h("strong", {}, change.action || "changed"), " by ", h("span", { class: "actor" }, change.actor || "unknown"),
      change.address ? ` (from ${change.address})` : null, ", ", time(change.at), change.version ? `, version ${change.version}` : null),
    fields.length ? h("ul", { class: "diff" }, fields.map((f) => h("li", {},
      h("span", { class: "diff-field", title: f.path }, pathText(f.path)), ": ",
      f.before === undefined || f.before === null ? [h("span", { class: "diff-added" }, "added "), h("ins", {}, shown(f.path, f.after))]
        : f.after === undefined || f.after === null ? [h("span", { class: "diff-removed" }, "removed "), h("del", {}, shown(f.path, f.before))]
          : [h("del", {}, shown(f.path, f.before)), " → ", h("ins", {}, shown(f.path, f.after))])))
      : h("p", { class: "muted" }, "No field changed."));
}

/** The history section; `reload()` fetches it again. */
export function historySection(ns, key) {
  const box = h("section", { "aria-labelledby": "flag-history-title", id: "flag-history" });
  let asked = 0;
  let retry = null;
  /**
   * Reads the history again; with `version`, until it has that version's change: the server
   * records a change just after it publishes it, so the first read may come a moment early
   * (a few tries, further apart each time).
   */
  async function reload(version, attempt = 0) {
    asked += 1;
    const mine = asked;
    clearTimeout(retry);
    try {
      const page = await get(`/api/v1/flags/${enc(ns)}/${enc(key)}/history?limit=50`);
      // An older answer arriving after a newer one is dropped.
      if (mine !== asked) return;
      const items = page.items || [];
      const newest = items.reduce((max, item) => Math.max(max, Number(item.version || 0)), 0);
      if (typeof version === "number" && newest < version && attempt < 6) {
        retry = setTimeout(() => reload(version, attempt + 1), 200 * 2 ** attempt);
      }
      fill(box, h("h2", { id: "flag-history-title" }, "History"),
        items.length ? h("ol", { class: "history flag-history" }, items.map(changeItem)) : h("p", { class: "muted" }, "No change recorded yet."),
        page.nextCursor ? h("p", { class: "muted" }, "Older changes: weir flag history.") : null);
    } catch (error) {
      fill(box, h("h2", { id: "flag-history-title" }, "History"), errorBox(error));
    }
  }
  return { box, reload };
}

// === evaluations ===

const RANGES = [["60", "the last hour", 1], ["360", "the last 6 hours", 5], ["1440", "the last 24 hours", 15]];
const COLOURS = ["#1f5fbf", "#b42318", "#1b7f3b", "#6941c6", "#a15c00", "#0e7490", "#be185d", "#4b5563"];

/**
 * Per-minute counts `{variation: {minute: count}}` from the API's answer, whichever of the shapes
 * it has: `{items: [{minute, variation, count}]}` or `{minutes: [{minute, counts: {v: n}}]}` or
 * `{variations: {v: [{minute, count}]}}`.
 */
function perMinute(answer) {
  const out = {};
  const add = (variation, minute, count) => {
    out[variation] = out[variation] || {};
    out[variation][minute] = (out[variation][minute] || 0) + Number(count || 0);
  };
  for (const row of answer.items || []) add(row.variation || row.variant, row.minute, row.count);
  for (const row of answer.minutes || []) for (const [v, n] of Object.entries(row.counts || {})) add(v, row.minute, n);
  for (const [v, rows] of Object.entries(answer.variations || {})) {
    if (Array.isArray(rows)) for (const row of rows) add(v, row.minute, row.count);
  }
  return out;
}

/** A minute as the API sends it (seconds or minutes since the epoch, or a time) to ms. */
function minuteMs(minute) {
  if (typeof minute === "string") return new Date(minute).getTime();
  return minute > 1e11 ? minute : minute > 1e8 ? minute * 1000 : minute * 60000;
}

/** The evaluations section: a range, the chart, its legend and totals, and the table. */
export function evaluationsSection(ns, key, variations) {
  const box = h("section", { "aria-labelledby": "flag-evaluations-title", id: "flag-evaluations" });
  const range = h("select", { id: "evaluations-range" }, RANGES.map(([v, t]) => h("option", { value: v }, t)));
  range.value = "60";
  const body = h("div", {});
  const refresh = h("button", { type: "button", class: "small", id: "evaluations-refresh", onclick: () => reload() }, "Refresh");
  fill(box, h("h2", { id: "flag-evaluations-title" }, "Evaluations over time"),
    h("div", { class: "filters" }, field("Period", range), refresh), body);
  async function reload() {
    const minutes = Number(range.value);
    const bucket = RANGES.find(([v]) => v === range.value)[2];
    const since = new Date(Date.now() - minutes * 60000);
    try {
      const answer = await get(`/api/v1/flags/${enc(ns)}/${enc(key)}/evaluations?since=${encodeURIComponent(since.toISOString())}`);
      if (Number(range.value) !== minutes) return;
      const counts = perMinute(answer);
      const names = [...new Set([...variations, ...Object.keys(counts)])];
      const end = Math.floor(Date.now() / 60000) * 60000;
      const start = end - (minutes - 1) * 60000;
      const buckets = [];
      for (let t = start; t <= end; t += bucket * 60000) buckets.push({ t, counts: Object.fromEntries(names.map((n) => [n, 0])) });
      for (const [name, byMinute] of Object.entries(counts)) {
        for (const [minute, count] of Object.entries(byMinute)) {
          const ms = minuteMs(Number.isNaN(Number(minute)) ? minute : Number(minute));
          const index = Math.floor((ms - start) / (bucket * 60000));
          if (index >= 0 && index < buckets.length) buckets[index].counts[name] += count;
        }
      }
      renderChart(body, names, buckets, bucket, minutes);
    } catch (error) {
      fill(body, errorBox(error));
    }
  }
  range.addEventListener("change", reload);
  return { box, reload };
}

function renderChart(body, names, buckets, bucket, minutes) {
  const wasOpen = Boolean(body.querySelector("details.chart-table[open]"));
  const max = Math.max(1, ...buckets.flatMap((b) => names.map((n) => b.counts[n])));
  const totals = Object.fromEntries(names.map((n) => [n, buckets.reduce((sum, b) => sum + b.counts[n], 0)]));
  const W = 1000;
  const H = 200;
  const x = (i) => (buckets.length <= 1 ? W / 2 : (i / (buckets.length - 1)) * W);
  const y = (v) => H - (v / max) * (H - 6) - 3;
  const svg = h("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", "aria-hidden": "true", focusable: "false", class: "evaluations-svg" },
    [0.25, 0.5, 0.75, 1].map((f) => h("line", { class: "grid", x1: 0, x2: W, y1: y(max * f), y2: y(max * f) })),
    names.map((n, i) => h("polyline", { class: `eval-series c${i % COLOURS.length}`, "data-variation": n,
      points: buckets.map((b, j) => `${x(j).toFixed(1)},${y(b.counts[n]).toFixed(1)}`).join(" ") })));
  const per = bucket === 1 ? "minute" : `${bucket} minutes`;
  const total = Object.values(totals).reduce((a, b) => a + b, 0);
  const label = `${total} evaluations in the last ${minutes / 60} hour${minutes > 60 ? "s" : ""}, per ${per}: ${names.map((n) => `${n} ${totals[n]}`).join(", ")}`;
  const table = h("table", { id: "evaluations-table" },
    h("caption", { class: "sr" }, `Evaluations per ${per} and variation`),
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "From"), names.map((n) => h("th", { scope: "col", class: "num" }, n)))),
    h("tbody", {}, buckets.filter((b) => names.some((n) => b.counts[n])).reverse().map((b) => h("tr", {},
      h("th", { scope: "row" }, time(new Date(b.t).toISOString())), names.map((n) => h("td", { class: "num" }, String(b.counts[n])))))));
  fill(body,
    h("figure", { class: "chart evaluations-chart", role: "group", "aria-label": label },
      h("div", { class: "chart-frame" },
        h("div", { class: "chart-y" }, h("span", {}, String(max)), h("span", {}, "0")),
        svg),
      h("div", { class: "chart-x" }, time(new Date(buckets[0].t).toISOString()), h("span", { class: "muted" }, `per ${per}`), h("span", {}, "now")),
      h("figcaption", {}, h("ul", { class: "legend" }, names.map((n, i) => h("li", {},
        h("span", { class: `swatch c${i % COLOURS.length}` }), h("strong", {}, n), ` ${totals[n]}`))))),
    h("details", { class: "chart-table", open: wasOpen }, h("summary", {}, "The counts as a table"),
      total ? h("div", { class: "table-wrap" }, table) : h("p", { class: "muted" }, "No evaluation in this period.")));
}

// === triggers ===

/** The triggers section: create (the URL shown once, with a copy button), list, revoke. */
export function triggersSection(ns, key, canManage) {
  const box = h("section", { "aria-labelledby": "flag-triggers-title", id: "flag-triggers" });
  const list = h("div", {});
  const created = h("div", { id: "trigger-created", "aria-live": "polite" });
  const base = `/api/v1/flags/${enc(ns)}/${enc(key)}/triggers`;
  const action = h("select", { id: "trigger-action", "data-path": "action" }, h("option", { value: "off" }, "Turn the flag off"), h("option", { value: "on" }, "Turn the flag on"));
  const description = h("input", { type: "text", id: "trigger-description", "data-path": "description", autocomplete: "off", placeholder: "e.g. PagerDuty: checkout errors" });
  const errors = h("div", {});
  const save = h("button", { type: "submit", class: "primary", id: "trigger-create" }, "Create trigger");
  const form = h("form", { class: "create", id: "trigger-form", "aria-labelledby": "trigger-form-title" },
    h("h3", { id: "trigger-form-title" }, "New trigger"),
    h("div", { class: "grid" }, field("What calling it does", action), field("Description", description)),
    errors, h("div", { class: "buttons" }, save));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    fill(errors);
    save.disabled = true;
    try {
      const answer = await request("POST", base, { action: action.value, description: description.value.trim() });
      const url = new URL(answer.url || answer.path || "", location.origin).toString();
      const urlBox = h("input", { type: "text", readonly: true, id: "trigger-url", class: "secret", value: url });
      const copy = h("button", { type: "button", class: "small", id: "trigger-copy", onclick: async () => {
        try {
          await navigator.clipboard.writeText(url);
          toast("URL copied");
        } catch {
          urlBox.select();
          toast("Select and copy the URL (the browser refused the clipboard)", "error");
        }
      } }, "Copy the URL");
      fill(created, h("div", { class: "notice", role: "status" },
        h("p", {}, h("strong", {}, "The trigger's URL is shown only now."), " Anyone who has it can ", action.value === "off" ? "turn the flag off" : "turn the flag on", " with a POST (", h("code", {}, "curl -X POST URL"), ")."),
        field("Trigger URL", urlBox), h("div", { class: "buttons" }, copy)));
      description.value = "";
      urlBox.focus();
      urlBox.select();
      await reload();
    } catch (error) {
      fill(errors, errorBox(error));
    } finally {
      save.disabled = false;
    }
  });
  let asked = 0;
  async function reload() {
    asked += 1;
    const mine = asked;
    try {
      const page = await get(base);
      if (mine !== asked) return;
      const items = page.items || [];
      fill(list, items.length ? h("div", { class: "table-wrap" }, h("table", { id: "triggers" },
        h("thead", {}, h("tr", {}, ["Trigger", "Does", "Created", "Last used", "Uses", ""].map((c) => h("th", { scope: "col" }, c)))),
        h("tbody", {}, items.map((t) => h("tr", { "data-trigger": t.id },
          h("th", { scope: "row" }, t.description || h("span", { class: "muted" }, t.id)),
          h("td", { "data-label": "Does" }, t.action === "on" ? "turns it on" : "turns it off"),
          h("td", { "data-label": "Created" }, age(t.createdAt), t.createdBy ? ` by ${t.createdBy}` : ""),
          h("td", { "data-label": "Last used" }, t.lastUsedAt ? age(t.lastUsedAt) : h("span", { class: "muted" }, "never")),
          h("td", { class: "num", "data-label": "Uses" }, String(t.uses || 0)),
          h("td", {}, canManage ? h("button", { type: "button", class: "small danger", id: `trigger-revoke-${t.id}`, onclick: async () => {
            const ok = await confirmAction(`Revoke the trigger "${t.description || t.id}"? Its URL stops working at once.`, "Revoke");
            if (!ok) return;
            try {
              await request("DELETE", `${base}/${enc(t.id)}`);
              toast("Trigger revoked");
              await reload();
            } catch (error) {
              toast(`Not revoked: ${error.message}`, "error");
            }
          } }, `Revoke ${t.description || t.id}`) : null)))))) : h("p", { class: "muted" }, "No trigger."));
    } catch (error) {
      fill(list, errorBox(error));
    }
  }
  fill(box, h("h2", { id: "flag-triggers-title" }, "Triggers"),
    h("p", { class: "muted" }, "A trigger is a secret URL an alerting system calls (POST) to turn this flag on or off; every call is in the history."),
    list, canManage ? [created, form] : h("p", { class: "muted" }, "Creating triggers needs a token with the admin scope."));
  return { box, reload };
}
