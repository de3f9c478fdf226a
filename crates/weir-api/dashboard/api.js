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

/** One request; the JSON answer (null for 204), or an ApiError. */
export async function request(method, path, payload) {
  const headers = { Accept: "application/json" };
  if (payload !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && session && session.csrf) headers["X-CSRF-Token"] = session.csrf;
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
  return answer.json();
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
 * missed changes or reconnected (the caller lists again). Returns a function that closes it.
 */
export function watch(path, handlers, onLagged) {
  const source = new EventSource(path, { withCredentials: true });
  let opened = false;
  for (const [name, handler] of Object.entries(handlers)) {
    source.addEventListener(name, (event) => {
      try {
        handler(JSON.parse(event.data));
      } catch (error) {
        console.error("weir: bad event", name, error);
      }
    });
  }
  source.addEventListener("lagged", () => onLagged && onLagged());
  source.addEventListener("open", () => {
    // A reconnection may have missed changes.
    if (opened && onLagged) onLagged();
    opened = true;
  });
  return () => source.close();
}

/** Sends a command to a rollout. */
export function command(ns, name, payload) {
  const body = { ...payload };
  // On an open server the history names the dashboard; with a token the server names the token.
  if (session && !session.auth) body.actor = "dashboard";
  return request("POST", `/api/v1/rollouts/${enc(ns)}/${enc(name)}/commands`, body);
}

export const enc = encodeURIComponent;
