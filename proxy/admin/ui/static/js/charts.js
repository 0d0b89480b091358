// Small charts over uPlot (vendor/uPlot.iife.min.js, MIT): sparklines of the overview series
// and the spend page's stacked bars per day. Each chart also has a text alternative.

import { el } from "./dom.js";

const PALETTE = ["#1f4e8c", "#c2410c", "#15803d", "#7e22ce", "#b91c1c", "#0e7490", "#a16207", "#4b5563"];
export const colour = (index) => PALETTE[index % PALETTE.length];

function width(node, fallback) {
  return Math.max(Math.floor(node.getBoundingClientRect().width) || fallback, 160);
}

/** A sparkline of `values` over `times` (UNIX seconds) in `node`, labelled `label`. */
export function sparkline(node, label, times, values, format) {
  node.replaceChildren();
  node.setAttribute("role", "img");
  const known = values.filter((v) => v !== null);
  const last = known.length ? format(known[known.length - 1]) : "no data";
  node.setAttribute("aria-label", `${label}, last hour: ${known.length} points, latest ${last}`);
  if (!window.uPlot || times.length < 2) {
    node.append(el("span", { class: "hint", text: times.length < 2 ? "collecting…" : "" }));
    return null;
  }
  return new window.uPlot({
    width: width(node, 200), height: 60, legend: { show: false }, cursor: { show: false },
    scales: { x: { time: true } },
    axes: [{ show: false }, { show: false }],
    series: [{}, { stroke: colour(0), fill: "rgba(31, 78, 140, .12)", width: 1.5, spanGaps: false }],
  }, [times, values], node);
}

/**
 * Stacked bars per day in `node`: `days` (YYYY-MM-DD), `groups` (names) and `values[g][d]`
 * (USD). uPlot draws the bars; the stacking is done here (each band the sum of those below).
 */
export function stackedBars(node, days, groups, values) {
  node.replaceChildren();
  if (!window.uPlot || !days.length) {
    node.append(el("p", { class: "hint", text: "No spend in this range." }));
    return null;
  }
  const xs = days.map((day) => Date.parse(`${day}T00:00:00Z`) / 1000);
  const stacked = [];
  let below = days.map(() => 0);
  for (const row of values) {
    below = below.map((sum, i) => sum + (row[i] || 0));
    stacked.push(below);
  }
  const bars = window.uPlot.paths.bars({ size: [0.7, 60] });
  const series = [{}];
  // Drawn from the tallest band down, so that each shorter one covers the one above it.
  const data = [xs];
  for (let g = groups.length - 1; g >= 0; g -= 1) {
    series.push({ label: groups[g], fill: colour(g), stroke: colour(g), paths: bars, points: { show: false },
      value: (u, v, s, i) => (i === null ? "" : `$${(values[g][i] || 0).toFixed(4)}`) });
    data.push(stacked[g]);
  }
  return new window.uPlot({
    width: width(node, 600), height: 260, legend: { show: true },
    scales: { x: { time: true, range: (u, min, max) => [min - 43200, max + 43200] } },
    axes: [{}, { values: (u, ticks) => ticks.map((t) => `$${t}`), size: 70 }],
    series,
  }, data, node);
}
