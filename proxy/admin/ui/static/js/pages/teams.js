// Teams: every team with its limits, budget and spend; each team's keys; create, edit, delete.

import { call, get } from "../api.js";
import { announce, el, field, replace, table } from "../dom.js";
import { PERIODS, budgetOf, confirmAction, list, modal, positive } from "../forms.js";
import { budget, integer, limits, models, moneyShort } from "../format.js";
import { keysPanel } from "./keys.js";

const COLUMNS = [{ label: "Team" }, { label: "Models" }, { label: "Limits" }, { label: "Budget" },
  { label: "Spent", num: true }, { label: "Requests", num: true }, { label: "Source" }, { label: "Actions" }];

export async function render(root) {
  const create = el("button", { type: "button", text: "Create team" });
  const { node, body } = table("Teams, with spend over all time", COLUMNS);
  const members = el("section", { "aria-live": "polite" });
  root.append(el("div", { class: "toolbar" }, create), node, members);

  async function load() {
    const [teams, spend] = await Promise.all([get("/admin/teams"), get("/admin/spend", { group_by: "team" })]);
    const spent = new Map(spend.data.map((r) => [r.team, r]));
    replace(body, teams.data.length ? teams.data.map((team) => row(team, spent.get(team.id), teams.data))
      : el("tr", {}, el("td", { colspan: COLUMNS.length, text: "No teams yet." })));
  }

  function row(team, spend, all) {
    const editable = team.source !== "config";
    return el("tr", { dataset: { team: team.id } },
      el("th", { scope: "row", text: team.id }),
      el("td", { text: models(team.models) }),
      el("td", { text: limits(team) }),
      el("td", { text: budget(team.budget) }),
      el("td", { class: "num", text: moneyShort(spend ? spend.cost_usd : 0) }),
      el("td", { class: "num", text: integer(spend ? spend.requests : 0) }),
      el("td", { text: team.source }),
      el("td", {}, el("div", { class: "actions" },
        el("button", { type: "button", class: "quiet", text: "Keys", "aria-label": `Keys of ${team.id}`, on: { click: () => showKeys(team, all) } }),
        editable && el("button", { type: "button", class: "quiet", text: "Edit", "aria-label": `Edit ${team.id}`, on: { click: () => edit(team) } }),
        editable && el("button", { type: "button", class: "danger", text: "Delete", "aria-label": `Delete ${team.id}`, on: { click: () => remove(team) } }))));
  }

  function showKeys(team, all) {
    replace(members, el("h2", { text: `Keys of ${team.id}` }), keysPanel({ team: team.id, teams: all.map((t) => t.id) }));
    members.querySelector("h2").setAttribute("tabindex", "-1");
    members.querySelector("h2").focus();
  }

  function teamFields(team) {
    return {
      id: team ? null : field("team-id", "Team id", { required: true, pattern: "[A-Za-z0-9][A-Za-z0-9._-]{0,63}" }),
      models: field("team-models", "Models", { value: team && team.models ? team.models.join(", ") : "", hint: "Comma-separated; empty = every model" }),
      rpm: field("team-rpm", "Requests per minute", { type: "number", min: 1, value: team?.rpm ?? "" }),
      tpm: field("team-tpm", "Tokens per minute", { type: "number", min: 1, value: team?.tpm ?? "" }),
      parallel: field("team-parallel", "Parallel requests", { type: "number", min: 1, value: team?.max_parallel ?? "" }),
      budget: field("team-budget", "Budget (USD)", { type: "number", min: 0, step: "any", value: team?.budget ? team.budget.max_usd : "" }),
      period: field("team-period", "Budget period", { options: PERIODS, value: team?.budget ? team.budget.period : "1mo" }),
    };
  }

  const values = (f) => ({
    models: list(f.models.input.value),
    rpm: positive(f.rpm.input.value, "rpm"),
    tpm: positive(f.tpm.input.value, "tpm"),
    max_parallel: positive(f.parallel.input.value, "max_parallel"),
    budget: budgetOf(f.budget.input.value, f.period.input.value),
  });
  const layout = (f) => [f.id && f.id.wrap, f.models.wrap, el("div", { class: "row" }, f.rpm.wrap, f.tpm.wrap, f.parallel.wrap),
    el("div", { class: "row" }, f.budget.wrap, f.period.wrap)];

  create.addEventListener("click", async () => {
    const f = teamFields(null);
    await modal("Create team", layout(f), [["cancel", "Cancel", "quiet"], ["create", "Create"]], async () => {
      await call("POST", "/admin/teams", { body: { id: f.id.input.value.trim(), ...values(f) } });
      announce("Team created");
      await load();
      return true;
    });
  });

  async function edit(team) {
    const f = teamFields(team);
    await modal(`Edit ${team.id}`, layout(f), [["cancel", "Cancel", "quiet"], ["save", "Save"]], async () => {
      await call("PATCH", `/admin/teams/${encodeURIComponent(team.id)}`, { body: values(f) });
      announce("Team saved");
      await load();
      return true;
    });
  }

  async function remove(team) {
    if (!(await confirmAction("Delete team", `Delete ${team.id}? A team with keys cannot be deleted.`, "Delete"))) return;
    try {
      await call("DELETE", `/admin/teams/${encodeURIComponent(team.id)}`);
      announce("Team deleted");
    } catch (error) {
      members.replaceChildren(el("p", { class: "error", role: "alert", text: error.message }));
    }
    await load();
  }

  await load();
}
