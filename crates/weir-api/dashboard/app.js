// The dashboard's entry: the session (login), the header, and the page for the URL.
import { ApiError, allows, connectionState, currentSession, loadSession, login, logout } from "/ui/api.js";
import { errorBox, field, fill, h } from "/ui/ui.js";
import { rolloutPage, rolloutsPage } from "/ui/rollouts.js";
import { flagPage, flagsPage } from "/ui/flags.js";
import { tokensPage } from "/ui/tokens.js";

const main = document.getElementById("main");
let cleanup = null;
let sessionLoaded = false;

function navigate(path) {
  history.pushState(null, "", path);
  route();
}

// Links inside the page change the URL without reloading (live streams are closed and reopened).
document.addEventListener("click", (event) => {
  const link = event.target.closest("a[href]");
  if (!link || event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  if (link.origin !== location.origin || link.target || link.pathname.startsWith("/api/")) return;
  event.preventDefault();
  navigate(link.pathname + link.search);
});
window.addEventListener("popstate", route);
// Back from the back-forward cache: the page's streams were closed when it was left; load again.
window.addEventListener("pageshow", (event) => { if (event.persisted) route(); });
window.addEventListener("weir:navigate", (event) => navigate(event.detail));
window.addEventListener("weir:unauthorized", () => {
  // The session ended (expired, revoked): ask for a token again.
  sessionLoaded = false;
  route();
});

// The connection indicator (docs/DASHBOARD.md, "The connection"): live, reconnecting or
// offline with the age of the last update, redrawn on every change and every second.
const CONNECTION_WORDS = { connecting: "connecting…", live: "live", reconnecting: "reconnecting…", offline: "offline" };

function ago(then, now = Date.now()) {
  const seconds = Math.max(0, Math.round((now - then) / 1000));
  return seconds < 60 ? `${seconds}s` : seconds < 3600 ? `${Math.floor(seconds / 60)}m` : `${Math.floor(seconds / 3600)}h`;
}

function renderConnection() {
  const { state, lastUpdate } = connectionState();
  const box = document.getElementById("connection");
  box.hidden = state === "idle";
  box.dataset.state = state;
  const words = CONNECTION_WORDS[state] || state;
  const stateNode = document.getElementById("connection-state");
  // Only a change of state is announced; the age ticks outside the live region.
  if (stateNode.textContent !== words) stateNode.textContent = words;
  const ageNode = document.getElementById("connection-age");
  const stale = state === "reconnecting" || state === "offline";
  ageNode.textContent = stale ? (lastUpdate ? `last update ${ago(lastUpdate)} ago` : "no update yet") : "";
  ageNode.title = stale && lastUpdate ? `${new Date(lastUpdate).toISOString()} (UTC)` : "";
  document.body.dataset.connection = state;
}
window.addEventListener("weir:connection", renderConnection);
setInterval(renderConnection, 1000);

function renderHeader() {
  const session = currentSession();
  const who = document.getElementById("who");
  document.getElementById("nav-tokens").hidden = !(session && allows("admin"));
  const section = location.pathname.split("/")[1] || "rollouts";
  for (const link of document.querySelectorAll("[data-nav]")) {
    if (link.dataset.nav === section) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (!session) {
    fill(who);
  } else if (!session.auth) {
    fill(who, h("span", { class: "muted", title: "This server has no tokens: anyone who reaches it may do anything (it listens on loopback only)." }, "open server"));
  } else {
    fill(who, h("span", { id: "session-name" }, `${session.name} (${session.scope}${session.namespaces ? `: ${session.namespaces.join(", ")}` : ""})`), " ",
      h("button", { type: "button", class: "small", id: "logout", onclick: async () => { await logout(); sessionLoaded = false; navigate("/login"); } }, "Log out"));
  }
}

function loginPage(problem) {
  document.title = "Log in · weir";
  const token = h("input", { type: "password", id: "login-token", autocomplete: "current-password", required: true, spellcheck: "false" });
  const errors = h("div", {});
  if (problem) errors.append(errorBox(problem));
  const form = h("form", { class: "login", id: "login-form", "aria-labelledby": "login-title" },
    h("h1", { id: "login-title" }, "Log in to weir"),
    h("p", {}, "Paste an API token (", h("code", {}, "weir token create"), "). The browser keeps a session cookie; the token is not stored."),
    field("Token", token), errors,
    h("div", { class: "buttons" }, h("button", { type: "submit", class: "primary", id: "login-submit" }, "Log in")));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    // Not ready until the answer is in (and the next page has loaded, or the error is shown).
    document.body.dataset.ready = "false";
    try {
      await login(token.value.trim());
      sessionLoaded = true;
      const back = new URLSearchParams(location.search).get("next");
      navigate(back && back.startsWith("/") && !back.startsWith("//") ? back : "/rollouts");
    } catch (error) {
      fill(errors, errorBox(error instanceof ApiError && error.status === 401 ? { message: "That token is not valid (unknown, expired or revoked)." } : error));
      token.focus();
      document.body.dataset.ready = "true";
    }
  });
  fill(main, form);
  renderHeader();
  token.focus();
  document.body.dataset.page = "login";
  document.body.dataset.ready = "true";
}

async function route() {
  document.body.dataset.ready = "false";
  if (cleanup) cleanup();
  cleanup = null;
  if (!sessionLoaded) {
    try {
      await loadSession();
      sessionLoaded = true;
    } catch (error) {
      fill(main, h("h1", {}, "weir"), errorBox(error));
      return;
    }
  }
  const parts = location.pathname.split("/").filter(Boolean).map(decodeURIComponent);
  if (!currentSession()) {
    if (parts[0] !== "login") history.replaceState(null, "", `/login?next=${encodeURIComponent(location.pathname + location.search)}`);
    loginPage();
    return;
  }
  renderHeader();
  let page;
  try {
    if (parts.length === 0 || (parts[0] === "rollouts" && parts.length === 1)) page = rolloutsPage(main);
    else if (parts[0] === "rollouts" && parts.length === 3) page = rolloutPage(main, parts[1], parts[2]);
    else if (parts[0] === "flags" && parts.length === 1) page = flagsPage(main);
    else if (parts[0] === "flags" && parts.length === 3) page = flagPage(main, parts[1], parts[2]);
    else if (parts[0] === "tokens") page = tokensPage(main);
    else if (parts[0] === "login") {
      navigate("/rollouts");
      return;
    } else {
      fill(main, h("h1", {}, "Not found"), h("p", {}, h("a", { href: "/rollouts" }, "Go to the rollouts")));
      return;
    }
    const path = location.pathname;
    const close = await page;
    // The reader may have moved on while the page loaded.
    if (location.pathname !== path) {
      if (close) close();
      return;
    }
    cleanup = close;
    document.body.dataset.page = parts[0] || "rollouts";
    document.body.dataset.ready = "true";
  } catch (error) {
    fill(main, errorBox(error));
  }
}

route();
