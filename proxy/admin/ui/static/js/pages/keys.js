// Keys: a filterable, paginated table of virtual keys (GET /admin/keys?limit=…), and creating,
// editing, blocking and revoking them through the same admin API a script would use.

import { call, get } from "../api.js";
import { announce, el, field, replace, table } from "../dom.js";
import { PERIODS, budgetOf, confirmAction, copy, list, modal, positive } from "../forms.js";
import { budget, limits, models, moneyShort, when } from "../format.js";

const PAGE_SIZE = 50;
const COLUMNS = [
  { label: "Alias" }, { label: "Key" }, { label: "Team" }, { label: "Models" }, { label: "Limits" },
  { label: "Budget" }, { label: "Spent", num: true }, { label: "Last used" }, { label: "Status" }, { label: "Actions" },
];

export async function render(root) {
  const teams = (await get("/admin/teams")).data.map((t) => t.id);
  root.append(keysPanel({ teams }));
}

function status(key) {
  if (key.blocked) return el("span", { class: "pill bad", text: "blocked" });
  if (key.expires_at && new Date(key.expires_at) <= new Date()) return el("span", { class: "pill bad", text: "expired" });
  return el("span", { class: "pill ok", text: "active" });
}

/** The keys table with its filters; `team` fixes the team filter (the Teams page). */
export function keysPanel({ teams = [], team = null } = {}) {
  const search = field("keys-q", "Search", { type: "search", placeholder: "alias, id, prefix or user" });
  const teamFilter = team ? null : field("keys-team", "Team", { options: [["", "any team"], ...teams.map((t) => [t, t])] });
  const statusFilter = field(team ? `keys-status-${team}` : "keys-status", "Status",
    { options: [["", "any status"], ["active", "active"], ["blocked", "blocked"], ["expired", "expired"]] });
  const create = el("button", { type: "button", text: "Create key" });
  const counter = el("p", { class: "hint", "aria-live": "polite" });
  const { node: tableNode, body } = table(team ? `Keys of team ${team}` : "Virtual keys, newest first", COLUMNS);
  const previous = el("button", { type: "button", class: "quiet", text: "Previous page", disabled: true });
  const next = el("button", { type: "button", class: "quiet", text: "Next page", disabled: true });
  const cursors = [null]; // the cursor of each page seen, for going back
  let position = 0;
  let following = null;

  const query = () => ({
    limit: PAGE_SIZE, q: search.input.value.trim(), status: statusFilter.input.value,
    team: team || (teamFilter ? teamFilter.input.value : ""),
  });

  async function load() {
    const page = await get("/admin/keys", { ...query(), cursor: cursors[position] });
    following = page.next;
    replace(body, page.data.length ? page.data.map(row) : el("tr", {}, el("td", { colspan: COLUMNS.length, text: "No keys match." })));
    counter.textContent = `${page.total} key${page.total === 1 ? "" : "s"} · page ${position + 1}`;
    previous.disabled = position === 0;
    next.disabled = !following;
  }

  function restart() {
    cursors.length = 1;
    position = 0;
    return load();
  }

  function row(key) {
    const readOnly = key.source === "config";
    const actions = readOnly
      ? el("span", { class: "hint", text: "config file" })
      : el("div", { class: "actions" },
        el("button", { type: "button", class: "quiet", text: "Edit", "aria-label": `Edit ${key.alias || key.id}`, on: { click: () => edit(key) } }),
        el("button", { type: "button", class: "quiet", text: key.blocked ? "Unblock" : "Block", "aria-label": `${key.blocked ? "Unblock" : "Block"} ${key.alias || key.id}`, on: { click: () => block(key) } }),
        el("button", { type: "button", class: "danger", text: "Revoke", "aria-label": `Revoke ${key.alias || key.id}`, on: { click: () => revoke(key) } }));
    return el("tr", { dataset: { keyId: key.id } },
      el("td", { class: "alias", text: key.alias || "—" }),
      el("td", {}, el("span", { class: "mono", text: `${key.key_prefix}…` }), el("br"), el("span", { class: "hint mono", text: key.id })),
      el("td", { text: key.team || "—" }),
      el("td", { text: models(key.models) }),
      el("td", { text: limits(key) }),
      el("td", { text: budget(key.budget) }),
      el("td", { class: "num", text: moneyShort(key.spend_usd) }),
      el("td", { text: when(key.last_used_at) }),
      el("td", {}, status(key)),
      el("td", {}, actions));
  }

  async function block(key) {
    await call("PATCH", `/admin/keys/${encodeURIComponent(key.id)}`, { body: { blocked: !key.blocked } });
    announce(`${key.alias || key.id} ${key.blocked ? "unblocked" : "blocked"}`);
    await load();
  }

  async function revoke(key) {
    const name = key.alias || key.id;
    if (!(await confirmAction("Revoke key", `Revoke ${name}? Clients using it get 401 from now on. This cannot be undone.`, "Revoke"))) return;
    await call("DELETE", `/admin/keys/${encodeURIComponent(key.id)}`);
    announce(`${name} revoked`);
    await load();
  }

  async function edit(key) {
    const f = {
      alias: field("edit-alias", "Alias", { value: key.alias || "" }),
      models: field("edit-models", "Models", { value: (key.models || []).join(", "), hint: "Comma-separated; empty = every model" }),
      rpm: field("edit-rpm", "Requests per minute", { type: "number", min: 1, value: key.rpm ?? "" }),
      tpm: field("edit-tpm", "Tokens per minute", { type: "number", min: 1, value: key.tpm ?? "" }),
      parallel: field("edit-parallel", "Parallel requests", { type: "number", min: 1, value: key.max_parallel ?? "" }),
      budget: field("edit-budget", "Budget (USD)", { type: "number", min: 0, step: "any", value: key.budget ? key.budget.max_usd : "" }),
      period: field("edit-period", "Budget period", { options: PERIODS, value: key.budget ? key.budget.period : "1mo" }),
    };
    const body = [el("div", { class: "row" }, f.alias.wrap, f.models.wrap), el("div", { class: "row" }, f.rpm.wrap, f.tpm.wrap, f.parallel.wrap),
      el("div", { class: "row" }, f.budget.wrap, f.period.wrap)];
    await modal(`Edit ${key.alias || key.id}`, body, [["cancel", "Cancel", "quiet"], ["save", "Save"]], async () => {
      const changes = {
        alias: f.alias.input.value.trim() || null,
        models: list(f.models.input.value),
        rpm: positive(f.rpm.input.value, "rpm"),
        tpm: positive(f.tpm.input.value, "tpm"),
        max_parallel: positive(f.parallel.input.value, "max_parallel"),
        budget: budgetOf(f.budget.input.value, f.period.input.value),
      };
      await call("PATCH", `/admin/keys/${encodeURIComponent(key.id)}`, { body: changes });
      announce("Key saved");
      await load();
      return true;
    });
  }

  async function createKey() {
    const f = {
      alias: field("new-alias", "Alias"),
      team: field("new-team", "Team", { options: [["", "no team"], ...teams.map((t) => [t, t])], value: team || "" }),
      user: field("new-user", "User"),
      models: field("new-models", "Models", { hint: "Comma-separated; empty = every model" }),
      rpm: field("new-rpm", "Requests per minute", { type: "number", min: 1 }),
      tpm: field("new-tpm", "Tokens per minute", { type: "number", min: 1 }),
      parallel: field("new-parallel", "Parallel requests", { type: "number", min: 1 }),
      budget: field("new-budget", "Budget (USD)", { type: "number", min: 0, step: "any" }),
      period: field("new-period", "Budget period", { options: PERIODS, value: "1mo" }),
      expires: field("new-expires", "Expires (UTC)", { type: "datetime-local" }),
    };
    const body = [el("div", { class: "row" }, f.alias.wrap, f.team.wrap, f.user.wrap), f.models.wrap,
      el("div", { class: "row" }, f.rpm.wrap, f.tpm.wrap, f.parallel.wrap),
      el("div", { class: "row" }, f.budget.wrap, f.period.wrap, f.expires.wrap)];
    let created = null;
    await modal("Create key", body, [["cancel", "Cancel", "quiet"], ["create", "Create"]], async () => {
      const fields = {
        alias: f.alias.input.value.trim() || null,
        team: f.team.input.value || null,
        user: f.user.input.value.trim() || null,
        models: list(f.models.input.value),
        rpm: positive(f.rpm.input.value, "rpm"),
        tpm: positive(f.tpm.input.value, "tpm"),
        max_parallel: positive(f.parallel.input.value, "max_parallel"),
        budget: budgetOf(f.budget.input.value, f.period.input.value),
        expires_at: f.expires.input.value ? `${f.expires.input.value}:00Z` : null,
      };
      created = await call("POST", "/admin/keys", { body: Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== null)) });
      return true;
    });
    if (!created) return;
    await showOnce(created);
    await restart();
  }

  async function showOnce(created) {
    const secret = el("input", { id: "new-key-secret", type: "text", readonly: true, value: created.key, "aria-describedby": "new-key-warning", spellcheck: "false" });
    const copied = el("span", { class: "hint", "aria-live": "polite" });
    const copyButton = el("button", { type: "button", text: "Copy", on: { click: async () => { copied.textContent = (await copy(created.key, secret)) ? "Copied." : "Select the key and copy it."; } } });
    await modal(`Key created: ${created.alias || created.id}`, [
      el("p", { class: "notice", id: "new-key-warning", text: "Copy this key now: it is shown this once and cannot be recovered (the gateway keeps only its hash)." }),
      el("label", { for: "new-key-secret", text: "The new key" }),
      el("div", { class: "secret" }, secret, copyButton), copied,
    ], [["done", "I have copied it"]]);
    secret.value = "";
  }

  let typing = null;
  search.input.addEventListener("input", () => { window.clearTimeout(typing); typing = window.setTimeout(() => restart(), 250); });
  statusFilter.input.addEventListener("change", restart);
  if (teamFilter) teamFilter.input.addEventListener("change", restart);
  previous.addEventListener("click", () => { position -= 1; load(); });
  next.addEventListener("click", () => { cursors[position + 1] = following; position += 1; load(); });
  create.addEventListener("click", createKey);

  const panel = el("div", { class: "keys-panel" },
    el("div", { class: "toolbar" }, el("div", { class: "field grow" }, search.wrap), teamFilter && teamFilter.wrap, statusFilter.wrap, create),
    counter, tableNode, el("div", { class: "pager" }, previous, next));
  load().catch((error) => panel.append(el("p", { class: "error", role: "alert", text: error.message })));
  return panel;
}
