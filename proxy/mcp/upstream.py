"""One upstream MCP server, kept connected: :class:`Upstream`.

A supervisor task (:meth:`Upstream.start`) connects over the server's transport with the MCP
SDK's client (``streamable_http_client``, ``sse_client`` or ``stdio_client``, which starts the
process), runs the ``initialize`` handshake, lists its tools (every page) and keeps them; then
pings it every ``mcp.health_interval`` seconds. When the connection fails — the handshake, two
pings in a row, a call that finds it closed, a stdio process that exited — the server is
``down``: its tools disappear from every list and its calls fail with
:class:`ServerUnavailable`, while the supervisor connects again (a stdio server: starts it
again) after ``restart_backoff`` seconds, doubled per failure up to ``max_restart_backoff``.
:meth:`Upstream.stop` ends the supervisor, which closes the connection (the SDK terminates a
stdio process it started).

The server's ``notifications/tools/list_changed`` makes the supervisor list the tools again and
then tells ``on_change``; ``resources`` and ``prompts`` list changes are told at once (the
gateway does not keep those lists). Nothing here quotes a server's headers, environment or
URL: a failure is logged by the exception's type only.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal

import mcp.types as types
from mcp.client.session import ClientSession, IncomingMessage
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import CONNECTION_CLOSED

from proxy.mcp.config import McpConfig, McpServerConfig

Health = Literal["connecting", "up", "down", "stopped"]
ListKind = Literal["tools", "resources", "prompts"]
Progress = ProgressFnT
_MAX_PAGES = 100  # pages of one upstream list the gateway follows


class ServerUnavailable(Exception):
    """The server is not connected (down, or still connecting): its calls cannot be made."""

    def __init__(self, server: str) -> None:
        super().__init__(f"the MCP server {server!r} is unavailable")
        self.server = server


class Upstream:
    """One configured server (module docstring). ``health``, ``tools``, ``restarts`` (how
    many times it was connected again after the first time) and ``last_error`` (an exception
    type name) are read by the lists and ``GET /admin/mcp``."""

    def __init__(
        self,
        name: str,
        config: McpServerConfig,
        settings: McpConfig,
        logger: Any,
        on_change: Callable[[str, ListKind], None],
        on_health: Callable[[str, bool], None],
    ) -> None:
        self.name = name
        self.config = config
        self._settings = settings
        self._logger = logger
        self._on_change = on_change
        self._on_health = on_health
        self.health: Health = "connecting"
        self.tools: list[types.Tool] = []
        self.restarts = 0
        self.last_error: str | None = None
        self.connected_at: float | None = None
        self._session: ClientSession | None = None
        self._broken = asyncio.Event()
        self._tools_changed = asyncio.Event()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the supervisor (once)."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._supervise())

    async def stop(self) -> None:
        """End the supervisor and close the connection (a stdio process is terminated)."""
        self._stopping.set()
        task = self._task
        if task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), self.config.connect_timeout)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self.health = "stopped"

    # -- calls ------------------------------------------------------------------------------

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None, progress: Progress | None
    ) -> types.CallToolResult:
        """Call the tool ``name``; raises :class:`ServerUnavailable` when not connected (or
        when the connection closes meanwhile: the server is then reconnected), and the
        server's JSON-RPC error as :class:`MCPError`. Cancelling the awaiting task sends the
        server ``notifications/cancelled``."""
        session = self._connected()
        try:
            result = await session.call_tool(
                name,
                arguments,
                read_timeout_seconds=self.config.timeout,
                progress_callback=progress,
            )
        except MCPError as error:
            self._check_closed(error)
            raise
        if not isinstance(result, types.CallToolResult):  # an extension's result: not relayed
            raise MCPError(types.INTERNAL_ERROR, "the server answered with an unsupported result")
        return result

    async def list_resources(self) -> list[types.Resource]:
        """Every resource of the server (all pages)."""
        return await self._all_pages(
            lambda session, cursor: session.list_resources(params=_page(cursor)), "resources"
        )

    async def list_resource_templates(self) -> list[types.ResourceTemplate]:
        """Every resource template of the server (all pages)."""
        return await self._all_pages(
            lambda session, cursor: session.list_resource_templates(params=_page(cursor)),
            "resource_templates",
        )

    async def list_prompts(self) -> list[types.Prompt]:
        """Every prompt of the server (all pages)."""
        return await self._all_pages(
            lambda session, cursor: session.list_prompts(params=_page(cursor)), "prompts"
        )

    async def read_resource(self, uri: str) -> types.ReadResourceResult:
        """The resource at ``uri``."""
        session = self._connected()
        try:
            return await session.read_resource(uri)
        except MCPError as error:
            self._check_closed(error)
            raise

    async def get_prompt(
        self, name: str, arguments: dict[str, str] | None
    ) -> types.GetPromptResult:
        """The prompt ``name`` rendered with ``arguments``."""
        session = self._connected()
        try:
            return await session.get_prompt(name, arguments)
        except MCPError as error:
            self._check_closed(error)
            raise

    def _connected(self) -> ClientSession:
        session = self._session
        if session is None or self.health != "up":
            raise ServerUnavailable(self.name)
        return session

    def _check_closed(self, error: MCPError) -> None:
        """A call that found the connection closed marks the server down (reconnected)."""
        if error.code == CONNECTION_CLOSED:
            self._broken.set()
            raise ServerUnavailable(self.name) from None

    async def _all_pages(
        self, fetch: Callable[[ClientSession, str | None], Awaitable[Any]], field: str
    ) -> list[Any]:
        session = self._connected()
        items: list[Any] = []
        cursor: str | None = None
        try:
            for _ in range(_MAX_PAGES):
                result = await fetch(session, cursor)
                items += getattr(result, field)
                cursor = result.next_cursor
                if not cursor:
                    break
        except MCPError as error:
            self._check_closed(error)
            raise
        return items

    # -- the supervisor ---------------------------------------------------------------------

    async def _supervise(self) -> None:
        backoff = self._settings.restart_backoff
        first = True
        while not self._stopping.is_set():
            if not first:
                self.restarts += 1
            first = False
            try:
                async with self._connection() as session:
                    backoff = self._settings.restart_backoff  # connected: the next wait is short
                    await self._watch(session)
            except Exception as exc:  # any failure of a connection: connect again
                self.last_error = _error_name(exc)
                self._logger.warning("mcp_server_down", server=self.name, error=self.last_error)
            finally:
                self._went_down()
            if self._stopping.is_set():
                break
            with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), backoff)
            backoff = min(backoff * 2, self._settings.max_restart_backoff)

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[ClientSession]:
        """Connected and initialised, tools listed; the server is ``up`` inside."""
        self.health = "connecting"
        async with contextlib.AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(self._transport(stack))
            session = await stack.enter_async_context(
                ClientSession(
                    read,
                    write,
                    read_timeout_seconds=self.config.timeout,
                    message_handler=self._on_message,
                )
            )
            async with asyncio.timeout(self.config.connect_timeout):
                await session.initialize()
                self._session = session
                self.tools = await self._list_tools(session)
            self._broken.clear()
            self.health = "up"
            self.connected_at = time.time()
            self._on_health(self.name, True)
            self._logger.info("mcp_server_up", server=self.name, tools=len(self.tools))
            yield session

    def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        """The SDK's client transport for this server's config (an async context manager)."""
        config = self.config
        if config.transport == "stdio":
            command, *args = config.command
            return stdio_client(
                StdioServerParameters(
                    command=command, args=args, env=dict(config.env) or None, cwd=config.cwd
                )
            )
        assert config.url is not None  # check_mcp: an HTTP transport has a url
        if config.transport == "sse":
            return sse_client(
                config.url, headers=dict(config.headers), timeout=config.connect_timeout
            )
        client = create_mcp_http_client(headers=dict(config.headers))
        stack.push_async_callback(client.aclose)
        return streamable_http_client(config.url, http_client=client)

    async def _watch(self, session: ClientSession) -> None:
        """Until stopped or broken: ping every ``health_interval``; list the tools again when
        the server says they changed."""
        interval = self._settings.health_interval
        while not self._stopping.is_set():
            waits = [
                asyncio.ensure_future(event.wait())
                for event in (self._stopping, self._broken, self._tools_changed)
            ]
            try:
                await asyncio.wait(waits, timeout=interval, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for wait in waits:
                    wait.cancel()
            if self._stopping.is_set():
                return
            if self._broken.is_set():
                raise ConnectionError("the connection closed")
            if self._tools_changed.is_set():
                self._tools_changed.clear()
                self.tools = await self._list_tools(session)
                self._on_change(self.name, "tools")
                continue
            await self._ping(session)

    async def _ping(self, session: ClientSession) -> None:
        """Ping the server; a failed ping is tried once more at once (one request lost on a
        live connection is not a server down), a second failure raises."""
        for attempt in (1, 2):
            try:
                async with asyncio.timeout(self.config.timeout):
                    await session.send_ping()
                return
            except MCPError:
                if attempt == 2:
                    raise

    async def _list_tools(self, session: ClientSession) -> list[types.Tool]:
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            result = await session.list_tools(params=_page(cursor))
            tools += result.tools
            cursor = result.next_cursor
            if not cursor:
                break
        return tools

    async def _on_message(self, message: IncomingMessage) -> None:
        """The server's notifications: list changes are relayed; a transport error is left to
        the pings (a stream that failed may be reopened by the SDK)."""
        if isinstance(message, types.ToolListChangedNotification):
            self._tools_changed.set()
        elif isinstance(message, types.ResourceListChangedNotification):
            self._on_change(self.name, "resources")
        elif isinstance(message, types.PromptListChangedNotification):
            self._on_change(self.name, "prompts")

    def _went_down(self) -> None:
        was_up = self.health == "up"
        self._session = None
        self.tools = []
        self.connected_at = None
        self.health = "stopped" if self._stopping.is_set() else "down"
        self._on_health(self.name, False)
        if was_up:
            self._on_change(self.name, "tools")


def _page(cursor: str | None) -> types.PaginatedRequestParams | None:
    return None if cursor is None else types.PaginatedRequestParams(cursor=cursor)


def _error_name(exc: BaseException) -> str:
    """The type of the failure (the innermost of an exception group), never its text: that
    may quote a URL or a header."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return f"MCPError({exc.code})"
    return type(exc).__name__
