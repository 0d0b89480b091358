"""Every configured MCP server, and what one caller sees of them: :class:`McpHub`, :class:`View`.

The hub owns one :class:`~proxy.mcp.upstream.Upstream` per server of ``mcp.servers``, started
with the app and stopped with it. A :class:`View` is what one client session is shown: the
aggregate (``/mcp``: every server the caller may use, names prefixed
``<server><tool_separator><name>``) or one server (``/mcp/{server}``: its names as they are),
filtered by the caller's grants (:meth:`~proxy.core.canonical.Principal.allows_tool`). A server
that is down is absent from a view's lists; a list of the aggregate never fails because one
server does (that server's items are left out and the failure logged). ``recent`` keeps the last
:data:`RECENT_CALLS` tool calls (:mod:`proxy.mcp.calls`) for the admin API.

Listeners (:meth:`McpHub.listen`) hear each server's list changes, to relay them to clients.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import mcp.types as types
from mcp.shared.exceptions import MCPError

from proxy.core.canonical import Principal
from proxy.core.metrics import Metrics
from proxy.mcp.config import McpConfig
from proxy.mcp.upstream import ListKind, ServerUnavailable, Upstream

Listener = Callable[[str, ListKind], None]
RECENT_CALLS = 100


class McpHub:
    """The configured servers (module docstring)."""

    def __init__(self, config: McpConfig, logger: Any, metrics: Metrics) -> None:
        self.config = config
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT_CALLS)
        self._listeners: set[Listener] = set()
        self._up = metrics.mcp_server_up
        self.upstreams = {
            name: Upstream(name, server, config, logger, self._changed, self._health)
            for name, server in config.servers.items()
        }
        for name in self.upstreams:
            self._up(name).set(0)

    def start(self) -> None:
        """Connect every server (in the background: the app does not wait for them)."""
        for upstream in self.upstreams.values():
            upstream.start()

    async def stop(self) -> None:
        """Disconnect every server; stdio processes are terminated."""
        for upstream in self.upstreams.values():
            await upstream.stop()

    def describe(self) -> list[dict[str, Any]]:
        """Each server as ``GET /admin/mcp`` shows it: name, transport, health, tools, restarts
        and the type of its last failure (never its URL, command, headers or environment)."""
        return [
            {
                "name": name,
                "transport": upstream.config.transport,
                "health": upstream.health,
                "tool_count": len(upstream.tools),
                "tools": [tool.name for tool in upstream.tools],
                "restarts": upstream.restarts,
                "last_error": upstream.last_error,
                "connected_at": upstream.connected_at,
                "price_per_call": upstream.config.price_per_call,
            }
            for name, upstream in self.upstreams.items()
        ]

    def listen(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(server, kind)`` on each list change; returns what stops it."""
        self._listeners.add(listener)
        return lambda: self._listeners.discard(listener)

    def _changed(self, server: str, kind: ListKind) -> None:
        for listener in list(self._listeners):
            listener(server, kind)

    def _health(self, server: str, up: bool) -> None:
        self._up(server).set(1 if up else 0)


class View:
    """What one caller sees: ``server`` None is the aggregate, else that one server.

    Names are mapped both ways (:meth:`public`, :meth:`resolve`); resource URIs are not
    renamed, so the aggregate remembers which server listed each (:meth:`resource_server`)."""

    def __init__(self, hub: McpHub, principal: Principal, server: str | None) -> None:
        self.hub = hub
        self.principal = principal
        self.server = server
        self.separator = hub.config.tool_separator
        self._resource_servers: dict[str, str] = {}

    def servers(self) -> Iterator[Upstream]:
        """The servers of this view the caller may use (up or not)."""
        upstreams = self.hub.upstreams
        names = upstreams if self.server is None else (self.server,)
        for name in names:
            if self.principal.allows_tool(name):
                yield upstreams[name]

    def public(self, server: str, name: str) -> str:
        """The name a client sees for ``server``'s ``name``."""
        return name if self.server is not None else f"{server}{self.separator}{name}"

    def resolve(self, public: str) -> tuple[Upstream, str] | None:
        """The server and the name behind ``public`` (None: no such server in this view)."""
        if self.server is not None:
            return self.hub.upstreams[self.server], public
        server, separator, name = public.partition(self.separator)
        upstream = self.hub.upstreams.get(server)
        if not separator or not name or upstream is None:
            return None
        return upstream, name

    def tools(self) -> list[types.Tool]:
        """The tools the caller may call, of the servers that are up (from their kept lists)."""
        found: list[types.Tool] = []
        for upstream in self.servers():
            for tool in upstream.tools:
                if self.principal.allows_tool(upstream.name, tool.name):
                    found.append(_renamed(tool, self.public(upstream.name, tool.name)))
        return found

    async def resources(self, logger: Any) -> list[types.Resource]:
        """The resources of the servers the caller may use (listed now)."""
        found: list[types.Resource] = []
        for upstream in self.servers():
            listed = await _listed(upstream, upstream.list_resources, logger)
            for resource in listed:
                self._resource_servers[str(resource.uri)] = upstream.name
                found.append(_renamed(resource, self.public(upstream.name, resource.name)))
        return found

    async def resource_templates(self, logger: Any) -> list[types.ResourceTemplate]:
        """The resource templates of the servers the caller may use (listed now)."""
        found: list[types.ResourceTemplate] = []
        for upstream in self.servers():
            listed = await _listed(upstream, upstream.list_resource_templates, logger)
            found += [_renamed(t, self.public(upstream.name, t.name)) for t in listed]
        return found

    async def prompts(self, logger: Any) -> list[types.Prompt]:
        """The prompts of the servers the caller may use (listed now)."""
        found: list[types.Prompt] = []
        for upstream in self.servers():
            listed = await _listed(upstream, upstream.list_prompts, logger)
            found += [_renamed(p, self.public(upstream.name, p.name)) for p in listed]
        return found

    async def resource_server(self, uri: str, logger: Any) -> Upstream | None:
        """The server whose resource ``uri`` is (listing them again when it is not known)."""
        if self.server is not None:
            return self.hub.upstreams[self.server]
        if uri not in self._resource_servers:
            await self.resources(logger)
        name = self._resource_servers.get(uri)
        return None if name is None else self.hub.upstreams[name]


def _renamed(item: Any, name: str) -> Any:
    return item if item.name == name else item.model_copy(update={"name": name})


async def _listed(upstream: Upstream, fetch: Callable[[], Any], logger: Any) -> list[Any]:
    """``fetch()``'s items, or none when the server is down or fails (logged)."""
    if upstream.health != "up":
        return []
    try:
        items: list[Any] = await fetch()
    except ServerUnavailable:
        return []
    except MCPError as error:
        if error.code != types.METHOD_NOT_FOUND:  # a server without the capability: empty
            logger.warning("mcp_list_failed", server=upstream.name, code=error.code)
        return []
    except Exception as exc:  # a transport failure: that server's items are left out
        logger.warning("mcp_list_failed", server=upstream.name, error=type(exc).__name__)
        return []
    return items
