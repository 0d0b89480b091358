// Models: every alias, its deployments, their readiness and health (ejected, cooldown left) and
// prices (GET /admin/models).

import { get } from "../api.js";
import { el, replace, table } from "../dom.js";
import { number } from "../format.js";

const COLUMNS = [{ label: "Alias" }, { label: "Deployment" }, { label: "Weight", num: true }, { label: "Provider" },
  { label: "Health" }, { label: "Input $/M", num: true }, { label: "Cached input $/M", num: true },
  { label: "Output $/M", num: true }];

function health(deployment) {
  if (!deployment.provider_ready) return el("span", { class: "pill bad", text: "not ready" });
  if (deployment.health === "ejected") return el("span", { class: "pill bad", text: `ejected · ${number(deployment.cooldown_seconds)} s left` });
  if (deployment.health === "unknown") return el("span", { class: "pill muted", text: "unknown (state store down)" });
  return el("span", { class: "pill ok", text: "healthy" });
}

const price = (p, name) => (p ? number(p[name]) : "unpriced");

export async function render(root) {
  const data = await get("/admin/models");
  const { node, body } = table("Aliases and their deployments; prices in USD per million tokens", COLUMNS);
  const rows = [];
  for (const alias of data.data) {
    alias.deployments.forEach((d, i) => {
      rows.push(el("tr", {},
        i === 0 ? el("th", { scope: "row", rowspan: alias.deployments.length },
          alias.alias, " ", el("span", { class: alias.routable ? "pill ok" : "pill bad", text: alias.routable ? "routable" : "no route" })) : null,
        el("td", { class: "mono", text: d.target }),
        el("td", { class: "num", text: number(d.weight) }),
        el("td", { text: d.provider }),
        el("td", {}, health(d)),
        el("td", { class: "num", text: price(d.prices, "input") }),
        el("td", { class: "num", text: price(d.prices, "cache_read") }),
        el("td", { class: "num", text: price(d.prices, "output") })));
    });
  }
  replace(body, rows.length ? rows : el("tr", {}, el("td", { colspan: COLUMNS.length, text: "No aliases in the config." })));
  const providers = table("Providers", [{ label: "Provider" }, { label: "Type" }, { label: "Ready" }]);
  replace(providers.body, data.providers.map((p) => el("tr", {}, el("th", { scope: "row", text: p.name }), el("td", { text: p.type }),
    el("td", {}, el("span", { class: p.ready ? "pill ok" : "pill bad", text: p.ready ? "ready" : "not ready" })))));
  root.append(node, el("h2", { text: "Providers" }), providers.node);
}
