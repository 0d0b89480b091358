"""``GET /admin/mcp`` (master key): the MCP gateway's servers, their health and tools, and the
latest tool calls.

``{"servers": [{"name", "transport", "health", "tool_count", "tools", "restarts",
"last_error", "connected_at", "price_per_call"}], "recent_calls": [{"time", "server", "tool",
"key_alias", "team", "result", "status", "duration_ms", "bytes"}]}`` — ``health`` is
``connecting``, ``up``, ``down`` or ``stopped``; ``last_error`` the type of the last failure
(never its text); the calls newest first, at most 100, since the process started (the spend
ledger keeps them all: ``GET /admin/spend/logs``). A server's URL, command, headers and
environment are never shown. Without ``mcp.servers``: ``{"servers": [], "recent_calls": []}``.
"""

from __future__ import annotations

from aiohttp import web

from proxy.admin.guard import admin_route, json_response
from proxy.mcp.gateway import MCP_HUB


@admin_route
async def list_mcp(request: web.Request) -> web.Response:
    """``GET /admin/mcp``."""
    hub = request.app.get(MCP_HUB)
    if hub is None:
        return json_response({"servers": [], "recent_calls": []})
    return json_response({"servers": hub.describe(), "recent_calls": list(hub.recent)})


ROUTES = (("GET", "/admin/mcp", list_mcp),)
