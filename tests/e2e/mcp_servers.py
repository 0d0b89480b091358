"""Real MCP servers written with the MCP SDK, for the MCP gateway's end-to-end tests.

- :func:`tools_server`: tools (``echo``, ``add``, ``slow`` reporting progress, ``wait``
  until cancelled, ``grow`` adding a tool and announcing it, ``fail`` answering a tool error),
  a resource and a prompt; served over streamable HTTP (:func:`serve_http`) behind a bearer
  token, or over SSE.
- ``python -m tests.e2e.mcp_servers stdio``: a stdio server whose ``crash`` tool ends the
  process (what a supervisor must survive) and whose ``pid`` tool names it.
- ``python -m tests.e2e.mcp_servers http NAME``: :func:`tools_server` over streamable HTTP in a
  process of its own (a server a test can take down by ending it), its URL printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError


class Record:
    """What a test server saw: the tool calls that were cancelled, the ``Authorization``
    headers it was sent."""

    def __init__(self) -> None:
        self.cancelled: list[str] = []
        self.authorizations: list[str] = []


def tools_server(name: str, record: Record) -> MCPServer:
    """A server with tools, a resource and a prompt (module docstring)."""
    server = MCPServer(name)

    @server.tool()
    def echo(text: str) -> str:
        """Return the text."""
        return f"{name}:{text}"

    @server.tool()
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"{name}: sunny in {city}"

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @server.tool()
    async def slow(steps: int, ctx: Context) -> str:
        """Report progress ``steps`` times, then finish."""
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, f"step {step}")
        return "done"

    @server.tool()
    async def wait(label: str) -> str:
        """Wait until cancelled (recorded)."""
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            record.cancelled.append(label)
            raise
        return "waited"

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Add the tool ``grown`` and announce the change."""

        def grown() -> str:
            """A tool added while the server runs."""
            return "grown"

        server.add_tool(grown)
        await ctx.request_context.session.send_tool_list_changed()
        return "grew"

    @server.tool()
    def fail() -> str:
        """Always fails (a tool error)."""
        raise ToolError("this tool fails")

    @server.resource(f"note://{name}/readme", name="readme", mime_type="text/plain")
    def readme() -> str:
        return f"the {name} readme"

    @server.prompt()
    def greet(who: str) -> str:
        """A greeting."""
        return f"Hello {who}, from {name}"

    return server


def _guarded(app: Any, token: str | None, record: Record) -> Any:
    """``app`` behind ``Authorization: Bearer <token>`` (401 otherwise)."""

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and token is not None:
            headers = dict(scope["headers"])
            given = headers.get(b"authorization", b"").decode()
            record.authorizations.append(given)
            if given != f"Bearer {token}":
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await app(scope, receive, send)

    return guarded


@contextlib.asynccontextmanager
async def serve_http(
    server: MCPServer, transport: str, record: Record, token: str | None = None
) -> AsyncIterator[tuple[str, uvicorn.Server]]:
    """Serve ``server`` on a free port of 127.0.0.1 over ``transport`` (``streamable_http``
    or ``sse``); yields the URL the gateway connects to and the uvicorn server (set its
    ``should_exit`` to take the server down)."""
    if transport == "sse":
        app, path = server.sse_app(), "/sse"
    else:
        app, path = server.streamable_http_app(), "/mcp"
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        _guarded(app, token, record), log_level="warning", lifespan="on", ws="none"
    )
    running = uvicorn.Server(config)
    task = asyncio.ensure_future(running.serve(sockets=[sock]))
    while not running.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}{path}", running
    finally:
        running.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 5)
        sock.close()


def stdio_server() -> MCPServer:
    """The stdio server (module docstring)."""
    server = MCPServer("local")

    @server.tool()
    def pid() -> int:
        """This process's id."""
        return os.getpid()

    @server.tool()
    def crash() -> str:
        """End the process at once."""
        os._exit(3)

    @server.tool()
    def env(name: str) -> str:
        """Whether the variable ``name`` is set (never its value)."""
        return "set" if os.environ.get(name) else "unset"

    return server


async def _serve_forever(name: str) -> None:
    """Serve :func:`tools_server` over streamable HTTP and print its URL (one line)."""
    record = Record()
    async with serve_http(tools_server(name, record), "streamable_http", record) as (url, _):
        print(url, flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    if sys.argv[1:] == ["stdio"]:
        stdio_server().run("stdio")
    elif sys.argv[1:2] == ["http"]:
        asyncio.run(_serve_forever(sys.argv[2]))
