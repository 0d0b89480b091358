"""The MCP gateway assembled: :func:`add_mcp_gateway`, the app's one call.

It builds the :class:`~proxy.mcp.hub.McpHub` of ``mcp.servers`` (connected when the app starts,
disconnected — stdio processes terminated — when it stops), the governed tool calls
(:mod:`proxy.mcp.calls`), the methods and the routes ``/mcp`` and ``/mcp/{server}``
(:mod:`proxy.mcp.routes`), and the Responses API's MCP loop over them. Without servers in the
config it adds no route (the paths are 404).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from proxy import __version__
from proxy.core.metrics import Metrics
from proxy.core.tracing import NO_TRACER, Tracer
from proxy.mcp.calls import Ledger, ToolCalls
from proxy.mcp.config import McpConfig
from proxy.mcp.hub import McpHub
from proxy.mcp.methods import Methods
from proxy.mcp.responses_loop import McpToolLoop
from proxy.mcp.routes import Authenticate, McpRoutes, Wrap
from proxy.state.policy import SharedState

MCP_HUB: web.AppKey[McpHub] = web.AppKey("mcp_hub", McpHub)


def add_mcp_gateway(
    app: web.Application,
    config: McpConfig,
    *,
    state: SharedState,
    ledger: Ledger | None,
    metrics: Metrics,
    authenticate: Authenticate,
    logger: Callable[[], Any],
    request_id: Callable[[web.Request], str],
    wrap: Wrap,
    tracer: Callable[[], Tracer] = lambda: NO_TRACER,
) -> McpToolLoop:
    """Add the MCP gateway to ``app`` (module docstring); the loop that runs the Responses
    API's MCP tools on it (:mod:`proxy.mcp.responses_loop`; one that refuses every MCP tool when
    no server is configured). The hub is ``app[MCP_HUB]``; ``tracer`` gives the serving config's
    tracer (each tool call's span)."""
    if not config.servers:
        return McpToolLoop(None, None)
    hub = McpHub(config, logger(), metrics)
    prices = {name: server.price_per_call for name, server in config.servers.items()}
    calls = ToolCalls(state, ledger, metrics, logger(), prices, hub.recent, tracer)
    methods = Methods(calls, config.page_size, logger())
    routes = McpRoutes(hub, methods, authenticate, logger, request_id, __version__)
    routes.add_to(app, wrap)
    app[MCP_HUB] = hub

    async def start(app: web.Application) -> None:
        hub.start()

    async def stop(app: web.Application) -> None:
        await hub.stop()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    return McpToolLoop(hub, calls)
