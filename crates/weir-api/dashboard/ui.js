// Small helpers shared by the pages: elements, times, weights, the progress bar, dialogs.

/** An element: `h("a", {href: "/x", class: "y"}, "text", child, ...)`; text is never HTML. */
export function h(tag, attrs, ...children) {
  const svg = ["svg", "g", "line", "polyline", "rect", "circle", "text", "path", "title"].includes(tag);
  const node = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag) : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(node, child);
    else node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces the children of `node`. */
export function fill(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

const localFormat = new Intl.DateTimeFormat(undefined, {
  year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit",
});

/** A time in the viewer's zone, with the UTC value on hover. */
export function time(value) {
  if (!value) return h("span", { class: "muted" }, "–");
  const date = new Date(value);
  return h("time", { datetime: date.toISOString(), title: `${date.toISOString().replace(".000Z", "Z")} (UTC)` }, localFormat.format(date));
}

/** How long ago, as `5m`, `3h`, `2d`, with the UTC value on hover. */
export function age(value, now = Date.now()) {
  if (!value) return h("span", { class: "muted" }, "–");
  const date = new Date(value);
  const seconds = Math.max(0, Math.round((now - date.getTime()) / 1000));
  const text = seconds < 60 ? `${seconds}s` : seconds < 3600 ? `${Math.floor(seconds / 60)}m`
    : seconds < 86400 ? `${Math.floor(seconds / 3600)}h` : `${Math.floor(seconds / 86400)}d`;
  return h("time", { datetime: date.toISOString(), title: `${date.toISOString().replace(".000Z", "Z")} (UTC); ${localFormat.format(date)} here` }, text);
}

/** A weight as the API sends it (a number of percent) to `25%`. */
export function pct(weight) {
  return `${Number(weight || 0)}%`;
}

/** A phase's badge; its colour comes from the class. */
export function phase(name) {
  return h("span", { class: `phase phase-${String(name || "unknown").toLowerCase()}` }, name || "–");
}

/**
 * The plan as ticks: `marks` is a list of `{weight, kind, label}` (kind `step`, `pause`, `gate`,
 * `entry`, `done`), `current` the weight now; `complete`: the plan is behind the rollout (a
 * promoted run), drawn full in the colour of success. A bar of fixed height: updates never move
 * the layout.
 */
export function progress(marks, current, label, { complete = false } = {}) {
  const bar = h("div", { class: complete ? "bar bar-complete" : "bar", role: "progressbar", "aria-valuemin": "0", "aria-valuemax": "100", "aria-valuenow": String(Number(current || 0)), "aria-label": label || "canary weight", "data-weight": String(Number(current || 0)) });
  const filled = h("div", { class: "bar-fill" });
  filled.style.width = `${Math.min(100, Math.max(0, Number(current || 0)))}%`;
  bar.append(filled);
  for (const mark of marks) {
    const tick = h("span", { class: `tick tick-${mark.kind}`, title: mark.label || `${mark.weight}%` });
    tick.style.left = `${Math.min(100, Math.max(0, Number(mark.weight)))}%`;
    bar.append(tick);
  }
  return h("div", { class: "progress" }, bar, h("span", { class: "bar-text", "data-role": "weight" }, pct(current)));
}

/** Asks before doing; resolves to true when confirmed. Uses a modal <dialog> (keyboard: Esc cancels). */
export function confirmAction(text, okLabel = "Confirm") {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-ok").textContent = okLabel;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "cancel";
    dialog.showModal();
    document.getElementById("confirm-cancel").focus();
  });
}

let toastTimer = null;
/** A short message at the bottom of the screen, read out by screen readers. */
export function toast(text, kind = "ok") {
  const node = document.getElementById("toast");
  node.textContent = text;
  node.className = `toast show toast-${kind}`;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { node.className = "toast"; }, 6000);
}

/** An error box for an ApiError (message and every field at fault). */
export function errorBox(error) {
  return h("div", { class: "error", role: "alert" },
    h("strong", {}, error.message || String(error)),
    error.errors && error.errors.length ? h("ul", {}, error.errors.map((e) => h("li", {}, h("code", {}, e.path || "?"), ": ", e.message))) : null);
}

/**
 * Shows each of `errors` (`{path, message}`) next to the control whose `data-path` is its path
 * (or the nearest ancestor path), inside `form`; returns the errors nobody claimed.
 */
export function showFieldErrors(form, errors) {
  for (const old of form.querySelectorAll(".field-error")) old.remove();
  for (const input of form.querySelectorAll("[aria-invalid]")) input.removeAttribute("aria-invalid");
  const left = [];
  for (const error of errors) {
    let path = error.path || "";
    let target = null;
    while (path && !target) {
      target = form.querySelector(`[data-path="${CSS.escape(path)}"]`);
      if (!target) path = path.includes(".") || path.includes("[") ? path.replace(/(\.[^.[\]]*|\[\d+\])$/, "") : "";
    }
    if (!target) { left.push(error); continue; }
    const id = `err-${Math.random().toString(36).slice(2)}`;
    const note = h("p", { class: "field-error", id, role: "alert", "data-error-path": error.path }, error.message, " ", h("code", {}, error.path));
    target.setAttribute("aria-invalid", "true");
    target.setAttribute("aria-describedby", id);
    target.insertAdjacentElement("afterend", note);
  }
  return left;
}

/** A labelled control: `<label>` text then the control, tied by id. */
export function field(labelText, control, hint) {
  const id = control.id || `f-${Math.random().toString(36).slice(2)}`;
  control.id = id;
  return h("div", { class: "field" }, h("label", { for: id }, labelText), control, hint ? h("small", { class: "hint" }, hint) : null);
}
