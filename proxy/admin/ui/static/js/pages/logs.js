// Request log: the newest ledger records (GET /admin/spend/logs), filtered by key, team, model,
// status and cache result, each row expandable to every field the ledger keeps. The ledger
// holds no prompt or answer text, so none can be shown.

import { get } from "../api.js";
import { el, field, replace, table } from "../dom.js";
import { integer, money, ms, when } from "../format.js";

const PAGE_SIZE = 50;
const COLUMNS = [{ label: "" }, { label: "Time" }, { label: "Key" }, { label: "Team" }, { label: "Model" },
  { label: "Status", num: true }, { label: "Tokens in / out", num: true }, { label: "Cost", num: true },
  { label: "Duration", num: true }, { label: "Cache" }];

export async function render(root) {
  const f = {
    key: field("log-key", "Key id", { placeholder: "key_…" }),
    team: field("log-team", "Team"),
    model: field("log-model", "Model"),
    status: field("log-status", "Status", { options: [["", "any"], ["2xx", "2xx"], ["4xx", "4xx"], ["5xx", "5xx"], ["401", "401"], ["429", "429"]] }),
    cache: field("log-cache", "Cache", { options: [["", "any"], ["hit", "hit"], ["miss", "miss"], ["bypass", "bypass"], ["coalesced", "coalesced"]] }),
  };
  const apply = el("button", { type: "submit", text: "Filter" });
  const form = el("form", { class: "toolbar", "aria-label": "Log filters" }, Object.values(f).map((x) => x.wrap), apply);
  const { node, body } = table("Newest requests first", COLUMNS);
  const more = el("button", { type: "button", class: "quiet", text: "Older requests", disabled: true });
  root.append(form, node, el("div", { class: "pager" }, more));
  let cursor = null;

  const query = () => ({
    limit: PAGE_SIZE, key_id: f.key.input.value.trim(), team: f.team.input.value.trim(),
    model: f.model.input.value.trim(), status: f.status.input.value, cache: f.cache.input.value,
  });

  async function load(append) {
    const page = await get("/admin/spend/logs", { ...query(), cursor: append ? cursor : null });
    cursor = page.next;
    more.disabled = !cursor;
    const rows = page.data.flatMap(row);
    if (append) body.append(...rows);
    else replace(body, rows.length ? rows : el("tr", {}, el("td", { colspan: COLUMNS.length, text: "No requests match." })));
  }

  function row(record) {
    const detailId = `detail-${record.request_id}`.replace(/[^A-Za-z0-9_-]/g, "_");
    const detail = el("tr", { class: "detail", id: detailId, hidden: true },
      el("td", { colspan: COLUMNS.length }, el("dl", { class: "fields" },
        Object.entries(record).map(([name, value]) => [el("dt", { text: name }), el("dd", { class: "mono", text: value === null ? "null" : String(value) })]))));
    const toggle = el("button", { type: "button", class: "quiet", "aria-expanded": "false", "aria-controls": detailId,
      "aria-label": `Details of ${record.request_id}`, text: "▸" });
    toggle.addEventListener("click", () => {
      const open = toggle.getAttribute("aria-expanded") !== "true";
      toggle.setAttribute("aria-expanded", String(open));
      toggle.textContent = open ? "▾" : "▸";
      detail.hidden = !open;
    });
    const failed = record.status >= 400;
    return [el("tr", { dataset: { requestId: record.request_id } },
      el("td", {}, toggle),
      el("td", { text: when(record.time) }),
      el("td", { text: record.key_alias || record.key_id || "—" }),
      el("td", { text: record.team || "—" }),
      el("td", { text: record.model || "—" }),
      el("td", { class: "num" }, el("span", { class: failed ? "pill bad" : "pill ok", text: record.status })),
      el("td", { class: "num", text: `${integer(record.input_tokens + record.cache_read_tokens + record.cache_write_tokens)} / ${integer(record.output_tokens)}` }),
      el("td", { class: "num", text: money(record.cost_usd) }),
      el("td", { class: "num", text: ms(record.duration_ms) }),
      el("td", { text: record.cache || "—" })), detail];
  }

  form.addEventListener("submit", (event) => { event.preventDefault(); load(false); });
  more.addEventListener("click", () => load(true));
  await load(false);
}
