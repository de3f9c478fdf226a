// Tokens (admin): list, create (the secret is shown once), revoke - via /api/v1/tokens.
import { allows, currentSession, enc, get, request } from "/ui/api.js";
import { confirmAction, errorBox, field, fill, h, showFieldErrors, time, toast } from "/ui/ui.js";

/** Whether a token can be used now (not revoked, not expired). */
const active = (t, now = Date.now()) => !t.revokedAt && !(t.expiresAt && new Date(t.expiresAt).getTime() <= now);

/**
 * What revoking `token` means for the session that asks: a warning when it is the session's
 * own token (logged out at once) and when no other admin token would remain (only `weir token
 * create --db` on the server's database can make one then).
 */
export function revokeWarning(token, tokens, session) {
  const own = Boolean(session && session.auth && session.name === token.name);
  const otherAdmins = tokens.filter((t) => t.name !== token.name && t.scope === "admin" && active(t));
  const lastAdmin = token.scope === "admin" && active(token) && otherAdmins.length === 0;
  const parts = [`Revoke token ${token.name}? Every client using it is refused at once.`];
  if (own) parts.push("This is the token of your own session: you will be logged out.");
  if (lastAdmin) parts.push("It is the last admin token: no one will be able to manage tokens from the API or this page; only `weir token create --db` on the server's database can make a new one.");
  return { text: parts.join(" "), own, lastAdmin };
}

export async function tokensPage(main) {
  document.title = "Tokens · weir";
  if (!allows("admin")) {
    // The server refuses the list and the form to anyone else; the page does not offer them.
    fill(main, h("div", { class: "page-head" }, h("h1", {}, "Tokens")),
      h("p", { class: "muted", id: "tokens-admin-only" }, "Tokens are managed with an admin token. Your session's scope does not allow it."));
    return null;
  }
  const list = h("div", {});
  const created = h("div", { "aria-live": "polite" });
  const nameInput = h("input", { type: "text", id: "token-name", required: true, autocomplete: "off", "data-path": "name" });
  const scope = h("select", { id: "token-scope", "data-path": "scope" }, ["read", "operate", "admin", "evaluate"].map((s) => h("option", { value: s }, s)));
  const namespaces = h("input", { type: "text", id: "token-namespaces", placeholder: "all", "data-path": "namespaces" });
  const expires = h("input", { type: "text", id: "token-expires", placeholder: "never, or e.g. 30d", "data-path": "expires" });
  const form = h("form", { class: "create", "aria-labelledby": "token-create-title" },
    h("h2", { id: "token-create-title" }, "Create a token"),
    h("div", { class: "grid" }, field("Name", nameInput), field("Scope", scope), field("Namespaces (comma-separated)", namespaces), field("Expires", expires)),
    h("div", { class: "buttons" }, h("button", { type: "submit", class: "primary" }, "Create token")),
    created);
  fill(main, h("div", { class: "page-head" }, h("h1", {}, "Tokens")),
    currentSession() && !currentSession().auth ? h("p", { class: "muted" }, "This server runs without tokens (open, loopback only). Create the first admin token with `weir token create` to turn on logins.") : null,
    list, form);

  async function reload() {
    try {
      const answer = await get("/api/v1/tokens");
      fill(list, h("div", { class: "table-wrap" }, h("table", { id: "tokens" },
        h("thead", {}, h("tr", {}, ["Name", "Scope", "Namespaces", "Created", "Expires", "Last used", "Revoked", ""].map((c) => h("th", { scope: "col" }, c)))),
        h("tbody", {}, answer.items.map((t) => h("tr", { "data-token": t.name },
          h("th", { scope: "row" }, t.name), h("td", { "data-label": "Scope" }, t.scope), h("td", { "data-label": "Namespaces" }, t.namespaces ? t.namespaces.join(", ") : "all"),
          h("td", { "data-label": "Created" }, time(t.createdAt)), h("td", { "data-label": "Expires" }, time(t.expiresAt)), h("td", { "data-label": "Last used" }, time(t.lastUsedAt)), h("td", { "data-label": "Revoked" }, time(t.revokedAt)),
          h("td", { class: "col-action" }, t.revokedAt ? "" : h("button", { type: "button", class: "danger small", "aria-label": `Revoke ${t.name}`, "data-revoke": t.name, onclick: async () => {
            const warning = revokeWarning(t, answer.items, currentSession());
            if (!(await confirmAction(warning.text, "Revoke"))) return;
            try {
              await request("DELETE", `/api/v1/tokens/${enc(t.name)}`);
              toast(`Token ${t.name} revoked`);
              // Revoking the session's own token ends the session: the next request asks for a token.
              reload();
            } catch (error) {
              toast(`Not revoked: ${error.message}`, "error");
            }
          } }, "Revoke"))))))));
    } catch (error) {
      fill(list, error.status === 404 ? h("p", { class: "muted" }, "This server has no token management.") : errorBox(error));
    }
  }
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    showFieldErrors(form, []);
    const body = { name: nameInput.value.trim(), scope: scope.value };
    const ns = namespaces.value.split(",").map((s) => s.trim()).filter(Boolean);
    if (ns.length) body.namespaces = ns;
    if (expires.value.trim()) body.expires = expires.value.trim();
    try {
      const token = await request("POST", "/api/v1/tokens", body);
      const secret = h("input", { type: "text", readonly: true, value: token.secret, id: "token-secret", class: "secret" });
      fill(created, h("div", { class: "notice", role: "alert" },
        h("p", {}, `Token ${token.name} created. Copy its secret now: it is not shown again.`),
        field("Secret", secret)));
      secret.select();
      reload();
    } catch (error) {
      const left = showFieldErrors(form, error.errors || []);
      fill(created, errorBox({ message: error.message, errors: left }));
    }
  });
  await reload();
  return null;
}
