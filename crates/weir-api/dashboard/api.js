// The API, the session and the live streams: the only place that talks to the server.

/** The session: GET /api/v1/session decides (docs/DASHBOARD.md, "Login"). */
let session = null;

const OPEN = { name: "anonymous", scope: "admin", namespaces: null, expires: null, csrf: null, auth: false };
const RANKS = { evaluate: 0, read: 1, operate: 2, admin: 3 };

/** An error answer of the API: its status, code, message and the fields at fault. */
export class ApiError extends Error {
  constructor(status, body) {
    const detail = (body && body.error) || {};
    super(detail.message || `HTTP ${status}`);
    this.status = status;
    this.code = detail.code || "error";
    this.errors = Array.isArray(detail.errors) ? detail.errors : [];
  }
}

/**
 * Loads the session: the JSON of GET /api/v1/session; a server without sessions (404) is an
 * open server; `null` when a login is needed (401).
 */
export async function loadSession() {
  const answer = await fetch("/api/v1/session", { headers: { Accept: "application/json" }, credentials: "same-origin" });
  if (answer.status === 404) {
    session = { ...OPEN };
  } else if (answer.status === 401) {
    session = null;
  } else if (answer.ok) {
    session = await answer.json();
  } else {
    throw new ApiError(answer.status, await body(answer));
  }
  return session;
}

export function currentSession() {
  return session;
}

/** Whether the session's scope includes `scope` (read < operate < admin). */
export function allows(scope) {
  return session !== null && (RANKS[session.scope] ?? -1) >= RANKS[scope];
}

/** Whether the session may see namespace `ns` (a token limited to namespaces). */
export function inScope(ns) {
  return session !== null && (!Array.isArray(session.namespaces) || session.namespaces.includes(ns));
}

export async function login(token) {
  const answer = await fetch("/api/v1/session", {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json" },
    credentials: "same-origin",
    body: JSON.stringify({ token }),
  });
  if (!answer.ok) throw new ApiError(answer.status, await body(answer));
  session = await answer.json();
  return session;
}

export async function logout() {
  await request("DELETE", "/api/v1/session").catch(() => {});
  session = null;
}

async function body(answer) {
  const text = await answer.text();
  try {
    return JSON.parse(text);
  } catch {
    return { error: { code: "error", message: text || `HTTP ${answer.status}` } };
  }
}

// === the connection ===

/**
 * How the page's live data stands (docs/DASHBOARD.md, "The connection"): `idle` (no stream
 * open), `connecting`, `live`, `reconnecting` (the stream broke; retrying) or `offline`
 * (retrying for longer than OFFLINE_AFTER, or the browser says it is offline); `lastUpdate`
 * is when data last came from the server (an event, a keep-alive or an answer).
 */
const connection = { state: "idle", lastUpdate: null, downSince: null };
/** Failing to reconnect for this long (ms) counts as offline. */
const OFFLINE_AFTER = 10000;
let streams = 0;

function setConnection(state) {
  if (connection.state === state) return;
  connection.state = state;
  window.dispatchEvent(new CustomEvent("weir:connection"));
}

/** Data came from the server now. */
function touched() {
  connection.lastUpdate = Date.now();
  window.dispatchEvent(new CustomEvent("weir:connection"));
}

/** The connection's state and when data last came (`{state, lastUpdate, downSince}`). */
export function connectionState() {
  // Reconnecting for too long is offline, whether or not a retry has failed since.
  if (connection.state === "reconnecting" && connection.downSince !== null && Date.now() - connection.downSince >= OFFLINE_AFTER) {
    setConnection("offline");
  }
  return { ...connection };
}

window.addEventListener("offline", () => { if (streams > 0) setConnection("offline"); });

/** One request; the JSON answer (null for 204), or an ApiError. */
export async function request(method, path, payload) {
  const headers = { Accept: "application/json" };
  if (payload !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && session && session.csrf) headers["X-CSRF-Token"] = session.csrf;
  // On an open server the history names the dashboard; with a token the server names the token.
  if (method !== "GET" && session && !session.auth) headers["X-Weir-Actor"] = "dashboard";
  const answer = await fetch(path, {
    method,
    headers,
    credentials: "same-origin",
    body: payload === undefined ? undefined : JSON.stringify(payload),
  });
  if (answer.status === 401) {
    window.dispatchEvent(new CustomEvent("weir:unauthorized"));
  }
  if (!answer.ok) throw new ApiError(answer.status, await body(answer));
  if (answer.status === 204) return null;
  const json = await answer.json();
  if (method === "GET") touched();
  return json;
}

export const get = (path) => request("GET", path);

/** Every item of a paged list (`nextCursor`), at most `max`. */
export async function listAll(path, max = 2000) {
  const items = [];
  let cursor = null;
  do {
    const sep = path.includes("?") ? "&" : "?";
    const page = await get(`${path}${sep}limit=500${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
    items.push(...page.items);
    cursor = page.nextCursor || null;
  } while (cursor && items.length < max);
  return items;
}

/**
 * Server-Sent Events of `path`: `handlers[name](data)` per event; `onLagged` when the stream
 * missed changes or reconnected (the caller lists again: a re-sync). Returns a function that
 * closes it. The page retries a broken stream itself (1 s, doubling to 10 s) rather than leave
 * it to the browser, whose silent retries would hide an outage: the connection's state says
 * what is going on.
 */
export function watch(path, handlers, onLagged) {
  let source = null;
  let closed = false;
  let retry = null;
  let attempts = 0;
  let opened = false;
  let downSince = null;
  streams += 1;
  setConnection("connecting");
  const open = () => {
    source = new EventSource(path, { withCredentials: true });
    for (const [name, handler] of Object.entries(handlers)) {
      source.addEventListener(name, (event) => {
        touched();
        try {
          handler(JSON.parse(event.data));
        } catch (error) {
          console.error("weir: bad event", name, error);
        }
      });
    }
    source.addEventListener("lagged", () => { touched(); if (onLagged) onLagged(); });
    source.addEventListener("open", () => {
      attempts = 0;
      downSince = null;
      connection.downSince = null;
      setConnection("live");
      touched();
      // A reconnection may have missed changes: list again.
      if (opened && onLagged) onLagged();
      opened = true;
    });
    source.addEventListener("error", () => {
      if (closed) return;
      source.close();
      if (downSince === null) downSince = Date.now();
      connection.downSince = downSince;
      setConnection(Date.now() - downSince >= OFFLINE_AFTER || navigator.onLine === false ? "offline" : "reconnecting");
      attempts += 1;
      clearTimeout(retry);
      retry = setTimeout(open, Math.min(1000 * 2 ** (attempts - 1), 10000));
    });
  };
  // Leaving the page closes the stream at once: a browser keeps few connections per server,
  // and a stream of a page left behind (or frozen in the back-forward cache) would hold one.
  const hide = () => {
    clearTimeout(retry);
    if (source) source.close();
  };
  window.addEventListener("pagehide", hide);
  open();
  return () => {
    closed = true;
    window.removeEventListener("pagehide", hide);
    hide();
    streams -= 1;
    if (streams === 0) setConnection("idle");
  };
}

/** Sends a command to a rollout. */
export function command(ns, name, payload) {
  const body = { ...payload };
  // On an open server the history names the dashboard; with a token the server names the token.
  if (session && !session.auth) body.actor = "dashboard";
  return request("POST", `/api/v1/rollouts/${enc(ns)}/${enc(name)}/commands`, body);
}

export const enc = encodeURIComponent;
