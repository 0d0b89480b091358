// Spend: totals by team, key, model, provider or day over a range (GET /admin/spend), a stacked
// bar chart per day, and the same rows as CSV.

import { get } from "../api.js";
import { stackedBars } from "../charts.js";
import { toCsv, download } from "../csv.js";
import { el, field, replace, table } from "../dom.js";
import { integer, money, moneyShort, utcDay } from "../format.js";

const GROUPS = [["team", "Team"], ["key", "Key"], ["model", "Model"], ["provider", "Provider"], ["day", "Day"]];
const LABEL = { team: "team", key: "key_id", model: "model", provider: "provider", day: "day" };
const MANY = new Set(["key"]); // groups too many to stack per day
const STACKED = 7; // groups drawn apart in the chart; the rest are summed as "other"
const NUMBERS = ["requests", "input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens", "reasoning_tokens", "cost_usd", "saved_usd"];

/** `rows` of one group each summed over their days, largest cost first. */
function perGroup(rows, name) {
  const sums = new Map();
  for (const row of rows) {
    const key = row[name] ?? null;
    const sum = sums.get(key) || Object.fromEntries([[name, key], ...NUMBERS.map((n) => [n, 0])]);
    for (const n of NUMBERS) sum[n] += row[n] || 0;
    sums.set(key, sum);
  }
  for (const sum of sums.values()) {  // money to the nano-dollar, as the API gives it
    sum.cost_usd = Math.round(sum.cost_usd * 1e9) / 1e9;
    sum.saved_usd = Math.round(sum.saved_usd * 1e9) / 1e9;
  }
  return [...sums.values()].sort((a, b) => b.cost_usd - a.cost_usd);
}

export async function render(root) {
  const from = field("spend-from", "From (UTC)", { type: "date", value: utcDay(-29) });
  const to = field("spend-to", "To (UTC, inclusive)", { type: "date", value: utcDay(0) });
  const by = field("spend-by", "Group by", { options: GROUPS, value: "team" });
  const exportButton = el("button", { type: "button", class: "quiet", text: "Export CSV" });
  const summary = el("p", { class: "hint", id: "spend-summary", "aria-live": "polite" });
  const chart = el("div", { class: "chart", role: "img" });
  const holder = el("div");
  root.append(el("form", { class: "toolbar", "aria-label": "Spend range" }, from.wrap, to.wrap, by.wrap, exportButton),
    summary, el("h2", { text: "Spend per day" }), chart, el("h2", { text: "Totals" }), holder);
  let shown = { rows: [], group: "team" };

  const range = () => {
    const end = new Date(`${to.input.value}T00:00:00Z`);
    end.setUTCDate(end.getUTCDate() + 1);
    return { from: from.input.value, to: end.toISOString().slice(0, 10) };
  };

  async function load() {
    const group = by.input.value;
    let daily;
    let totals;
    if (MANY.has(group)) { // thousands of keys: the chart shows the days, the table the keys
      [daily, totals] = await Promise.all([get("/admin/spend", { ...range(), group_by: "day" }), get("/admin/spend", { ...range(), group_by: group })]);
    } else { // one question: the sums per day and group; the totals per group add them up
      daily = await get("/admin/spend", { ...range(), group_by: group === "day" ? "day" : `day,${group}` });
      totals = { data: group === "day" ? daily.data : perGroup(daily.data, LABEL[group]), total: daily.total };
    }
    shown = { rows: totals.data, group };
    summary.textContent = `${integer(totals.total.requests)} requests · ${money(totals.total.cost_usd)} spent · ${money(totals.total.saved_usd)} saved by the cache`;
    drawChart(MANY.has(group) ? "day" : group, daily.data);
    const name = LABEL[group];
    const { node, body } = table(`Spend by ${group}, largest first`, [{ label: group }, { label: "Requests", num: true },
      { label: "Input tokens", num: true }, { label: "Output tokens", num: true }, { label: "Cost", num: true }, { label: "Saved", num: true }], "spend-totals");
    replace(body, totals.data.length ? totals.data.map((r) => el("tr", {},
      el("th", { scope: "row", text: r[name] ?? "(none)" }), el("td", { class: "num", text: integer(r.requests) }),
      el("td", { class: "num", text: integer(r.input_tokens + r.cache_read_tokens + r.cache_write_tokens) }),
      el("td", { class: "num", text: integer(r.output_tokens) }), el("td", { class: "num", text: money(r.cost_usd) }),
      el("td", { class: "num", text: money(r.saved_usd) })))
      : el("tr", {}, el("td", { colspan: 6, text: "No spend in this range." })));
    replace(holder, node);
  }

  function everyDay() {
    const days = [];
    const { from: start, to: end } = range();
    for (let day = new Date(`${start}T00:00:00Z`); day < new Date(`${end}T00:00:00Z`) && days.length < 400; day.setUTCDate(day.getUTCDate() + 1)) {
      days.push(day.toISOString().slice(0, 10));
    }
    return days;
  }

  function drawChart(group, rows) {
    const days = rows.length ? everyDay() : [];
    const name = LABEL[group];
    const totals = new Map();
    for (const r of rows) totals.set(r[name] ?? "(none)", (totals.get(r[name] ?? "(none)") || 0) + r.cost_usd);
    const ranked = [...totals.entries()].sort((a, b) => b[1] - a[1]).map(([g]) => g);
    const groups = group === "day" ? ["spend"] : ranked.slice(0, STACKED);
    if (group !== "day" && ranked.length > STACKED) groups.push("other");
    const index = new Map(groups.map((g, i) => [g, i]));
    const values = groups.map(() => days.map(() => 0));
    for (const r of rows) {
      const g = group === "day" ? "spend" : (r[name] ?? "(none)");
      const at = index.has(g) ? index.get(g) : index.get("other");
      values[at][days.indexOf(r.day)] += r.cost_usd;
    }
    chart.setAttribute("aria-label", `Spend per day, stacked by ${group}: ${days.length} days`);
    stackedBars(chart, days, groups, values);
  }

  exportButton.addEventListener("click", () => {
    const columns = [LABEL[shown.group], ...NUMBERS];
    download(`crossway-spend-by-${shown.group}-${from.input.value}-${to.input.value}.csv`, toCsv(columns, shown.rows));
  });
  for (const input of [from.input, to.input, by.input]) input.addEventListener("change", () => load());
  await load();
}
