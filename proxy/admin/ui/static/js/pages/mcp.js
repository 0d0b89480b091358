// MCP: the MCP gateway's servers (health, transport, tools, restarts), every tool, and the latest
// tool calls (GET /admin/mcp). Every value is put in as text: a server's tool names are its own.

import { get } from "../api.js";
import { el, replace, table } from "../dom.js";
import { number } from "../format.js";

const HEALTH = { up: "pill ok", connecting: "pill muted", down: "pill bad", stopped: "pill muted" };

const SERVER_COLUMNS = [{ label: "Server" }, { label: "Transport" }, { label: "Health" },
  { label: "Tools", num: true }, { label: "Restarts", num: true }, { label: "Last failure" },
  { label: "USD per call", num: true }];
const CALL_COLUMNS = [{ label: "Time" }, { label: "Server" }, { label: "Tool" }, { label: "Key" },
  { label: "Team" }, { label: "Result" }, { label: "Status", num: true }, { label: "ms", num: true },
  { label: "Bytes", num: true }];

const empty = (columns, text) => el("tr", {}, el("td", { colspan: columns.length, text }));

export async function render(root) {
  const data = await get("/admin/mcp");
  const servers = table("MCP servers", SERVER_COLUMNS);
  replace(servers.body, data.servers.length ? data.servers.map((s) => el("tr", {},
    el("th", { scope: "row", text: s.name }),
    el("td", { text: s.transport }),
    el("td", {}, el("span", { class: HEALTH[s.health] || "pill muted", text: s.health })),
    el("td", { class: "num", text: number(s.tool_count) }),
    el("td", { class: "num", text: number(s.restarts) }),
    el("td", { class: "mono", text: s.last_error || "" }),
    el("td", { class: "num", text: number(s.price_per_call) }))) : empty(SERVER_COLUMNS, "No MCP servers in the config."));
  const tools = table("Tools by server", [{ label: "Server" }, { label: "Tool" }]);
  const toolRows = data.servers.flatMap((s) => s.tools.map((tool) => el("tr", {},
    el("td", { text: s.name }), el("td", { class: "mono", text: tool }))));
  replace(tools.body, toolRows.length ? toolRows : empty([1, 2], "No tools listed (no server is up)."));
  const calls = table("Latest tool calls, newest first", CALL_COLUMNS);
  replace(calls.body, data.recent_calls.length ? data.recent_calls.map((c) => el("tr", {},
    el("td", { text: new Date(c.time * 1000).toISOString().replace("T", " ").slice(0, 19) }),
    el("td", { text: c.server }),
    el("td", { class: "mono", text: c.tool }),
    el("td", { text: c.key_alias || "" }),
    el("td", { text: c.team || "" }),
    el("td", { text: c.result }),
    el("td", { class: "num", text: String(c.status) }),
    el("td", { class: "num", text: number(c.duration_ms) }),
    el("td", { class: "num", text: c.bytes == null ? "" : number(c.bytes) }))) : empty(CALL_COLUMNS, "No tool calls yet."));
  root.append(servers.node, el("h2", { text: "Tools" }), tools.node, el("h2", { text: "Latest tool calls" }), calls.node);
}
