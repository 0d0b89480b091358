// Kept requests (telemetry.request_logs, GET /admin/requests): the newest first, filtered by
// key, team, model and status; and one request on one page (#/requests/<id>, GET
// /admin/requests/<id>): its timing — total, upstream, the gateway's own overhead, time to first
// token —, cost and tokens, trace id, and its payloads as they were stored (after masking, every
// secret redacted; none under store: metadata). Payloads are shown as text, never as markup.

import { get } from "../api.js";
import { el, field, replace, table } from "../dom.js";
import { integer, money, ms, when } from "../format.js";

const PAGE_SIZE = 50;
const COLUMNS = [{ label: "Time" }, { label: "Request" }, { label: "Key" }, { label: "Team" }, { label: "Model" },
  { label: "Status", num: true }, { label: "Kept" }, { label: "Cost", num: true },
  { label: "Duration", num: true }, { label: "Overhead", num: true }];

export async function render(root, [id]) {
  if (id) return detail(root, id);
  const f = {
    key: field("req-key", "Key id", { placeholder: "key_…" }),
    team: field("req-team", "Team"),
    model: field("req-model", "Model"),
    status: field("req-status", "Status", { options: [["", "any"], ["2xx", "2xx"], ["4xx", "4xx"], ["5xx", "5xx"]] }),
  };
  const apply = el("button", { type: "submit", text: "Filter" });
  const form = el("form", { class: "toolbar", "aria-label": "Kept request filters" }, Object.values(f).map((x) => x.wrap), apply);
  const { node, body } = table("Kept requests, newest first", COLUMNS);
  const more = el("button", { type: "button", class: "quiet", text: "Older requests", disabled: true });
  root.append(form, node, el("div", { class: "pager" }, more));
  let cursor = null;

  async function load(append) {
    const page = await get("/admin/requests", {
      limit: PAGE_SIZE, key_id: f.key.input.value.trim(), team: f.team.input.value.trim(),
      model: f.model.input.value.trim(), status: f.status.input.value, cursor: append ? cursor : null,
    });
    cursor = page.next;
    more.disabled = !cursor;
    const rows = page.data.map(row);
    if (append) body.append(...rows);
    else replace(body, rows.length ? rows : el("tr", {}, el("td", { colspan: COLUMNS.length, text: "No kept request matches." })));
  }

  form.addEventListener("submit", (event) => { event.preventDefault(); load(false); });
  more.addEventListener("click", () => load(true));
  await load(false);
  return null;
}

function row(record) {
  return el("tr", { dataset: { requestId: record.request_id } },
    el("td", { text: when(record.time) }),
    el("td", {}, el("a", { href: `#/requests/${encodeURIComponent(record.id)}`, text: record.request_id })),
    el("td", { text: record.key_alias || record.key_id || "—" }),
    el("td", { text: record.team || "—" }),
    el("td", { text: record.model || "—" }),
    el("td", { class: "num" }, el("span", { class: record.status >= 400 ? "pill bad" : "pill ok", text: record.status })),
    el("td", { text: record.store }),
    el("td", { class: "num", text: money(record.cost_usd) }),
    el("td", { class: "num", text: ms(record.duration_ms) }),
    el("td", { class: "num", text: ms(record.overhead_ms) }));
}

async function detail(root, id) {
  const record = await get(`/admin/requests/${encodeURIComponent(id)}`);
  const facts = [
    ["Request id", record.request_id], ["Time", when(record.time)],
    ["Key", record.key_alias || record.key_id || "—"], ["Team", record.team || "—"],
    ["Model", record.model || "—"], ["Served by", record.provider ? `${record.provider}/${record.upstream_model}` : "—"],
    ["Status", record.error_code ? `${record.status} ${record.error_code}` : String(record.status)],
    ["Streamed", record.stream ? "yes" : "no"], ["Attempts", String(record.attempts)],
    ["Cache", record.cache || "—"], ["Trace id", record.trace_id || "—"], ["Kept", record.store],
  ];
  const timing = [
    ["Total", ms(record.duration_ms)], ["Waiting on upstreams", ms(record.upstream_ms)],
    ["Gateway overhead", ms(record.overhead_ms)], ["Time to first token", ms(record.ttft_ms)],
  ];
  const spend = [
    ["Cost", money(record.cost_usd)], ["Tokens in", integer(record.input_tokens)], ["Tokens out", integer(record.output_tokens)],
  ];
  root.append(
    el("p", {}, el("a", { href: "#/requests", text: "All kept requests" })),
    section("request-summary", "Request", list(facts)),
    section("request-timing", "Timing", list(timing),
      el("label", { for: "overhead-share", text: "Gateway overhead in the total" }),
      el("meter", { id: "overhead-share", min: 0, max: record.duration_ms || 1, value: record.overhead_ms || 0 })),
    section("request-cost", "Cost", list(spend)),
    section("request-payload", "Request payload", payload(record.request, record)),
    section("request-answer", "Answer", payload(record.response, record)),
  );
  return null;
}

function section(id, title, ...children) {
  return el("section", { id, "aria-labelledby": `${id}-title` }, el("h2", { id: `${id}-title`, text: title }), children);
}

function list(pairs) {
  return el("dl", { class: "fields" }, pairs.map(([name, value]) => [el("dt", { text: name }), el("dd", { class: "mono", text: value })]));
}

function payload(value, record) {
  if (value === null || value === undefined) {
    const why = record.store === "payloads" ? "Not taken: the request ended before the gateway sent it on." : "Not kept: this request's mode is metadata.";
    return el("p", { class: "hint", text: why });
  }
  const text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
  return [record.truncated ? el("p", { class: "hint", text: `Cut at the configured max_payload_bytes.` }) : null,
    el("pre", { class: "payload mono", tabindex: 0, text })];
}
