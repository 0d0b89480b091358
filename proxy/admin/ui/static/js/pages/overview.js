// Overview: what the gateway is doing now (GET /admin/overview), refreshed every few seconds.

import { get } from "../api.js";
import { sparkline } from "../charts.js";
import { el } from "../dom.js";
import { integer, moneyShort, ms, number, percent } from "../format.js";

export const REFRESH_MS = 5000;

const CARDS = [
  { id: "rps", label: "Requests per second", value: (o) => number(o.now.requests_per_second), series: "requests_per_second", format: number },
  { id: "errors", label: "Error rate", value: (o) => percent(o.now.error_rate), series: "error_rate", format: percent },
  { id: "latency", label: "Latency p50 / p99", value: (o) => `${ms(o.now.latency_p50_ms)} / ${ms(o.now.latency_p99_ms)}`, series: "latency_p99_ms", format: ms },
  { id: "overhead", label: "Gateway overhead p50 / p99", value: (o) => `${ms(o.now.overhead_p50_ms)} / ${ms(o.now.overhead_p99_ms)}`, series: "overhead_p99_ms", format: ms },
  { id: "tokens", label: "Tokens today", value: (o) => integer(o.today ? o.today.tokens : null), series: "tokens_per_second", format: number },
  { id: "spend", label: "Spend today", value: (o) => moneyShort(o.today ? o.today.cost_usd : null), series: "cost_usd", format: moneyShort },
  { id: "cache", label: "Cache hit rate", value: (o) => percent(o.now.cache_hit_rate) },
  { id: "limited", label: "Rate-limited (last minute / total)", value: (o) => `${integer(o.now.rate_limited)} / ${integer(o.totals.rate_limited)}` },
  { id: "budget", label: "Budget rejections (last minute / total)", value: (o) => `${integer(o.now.budget_rejected)} / ${integer(o.totals.budget_rejected)}` },
  { id: "requests", label: "Requests since start", value: (o) => integer(o.totals.requests) },
];

export async function render(root) {
  const stamp = el("p", { class: "hint", id: "overview-time" });
  const cards = el("div", { class: "cards" });
  const nodes = {};
  for (const card of CARDS) {
    const value = el("p", { class: "value", id: `card-${card.id}`, text: "…" });
    const chart = card.series ? el("div", { class: "chart", dataset: { series: card.series } }) : null;
    nodes[card.id] = { value, chart };
    cards.append(el("div", { class: "card" }, el("p", { class: "label", text: card.label }), value, chart));
  }
  root.append(stamp, cards);
  const charts = {};

  async function refresh() {
    const data = await get("/admin/overview");
    const times = data.series.time;
    for (const card of CARDS) {
      const { value, chart } = nodes[card.id];
      value.textContent = card.value(data);
      if (!chart) continue;
      const values = data.series[card.series];
      const existing = charts[card.id];
      if (existing && times.length >= 2) existing.setData([times, values]);
      else charts[card.id] = sparkline(chart, card.label, times, values, card.format);
    }
    stamp.textContent = `Updated ${new Date(data.time).toLocaleTimeString()} · charts: the last hour, one point per ${data.series.interval_seconds} s · refreshes every ${REFRESH_MS / 1000} s`;
  }

  await refresh();
  const timer = window.setInterval(() => refresh().catch(() => {}), REFRESH_MS);
  return () => window.clearInterval(timer);
}
