"""``/mcp`` and ``/mcp/{server}``: the gateway as an MCP server over streamable HTTP.

- ``POST``: one JSON-RPC message. ``initialize`` opens a session (its id in ``Mcp-Session-Id``;
  the protocol revision is the client's when the SDK knows it as a handshake revision, else the
  newest); every later message names it. A request is answered as ``application/json``, or as
  an SSE stream (``text/event-stream``) when it asks for progress (``_meta.progressToken``):
  the server's ``notifications/progress`` relayed under the client's token, then the answer. A
  notification is ``202``: ``notifications/cancelled`` ends the named request (the upstream
  server is told), ``notifications/initialized`` is noted.
- ``GET``: the session's stream of server notifications — ``notifications/tools/list_changed``
  (and the ``resources``/``prompts`` ones) when a server of its view changes its list or goes
  down or up; one stream per session (``409`` for a second).
- ``DELETE``: ends the session (``204``).

Every request needs the caller's key when the gateway demands keys (the same headers as the
model routes; ``401`` with a JSON-RPC error otherwise). A session id the key did not open is
``404`` (the client starts again); a request without one, ``400``. A batch (a JSON array) is
refused: the current revision has none. Errors are JSON-RPC errors (:mod:`proxy.mcp.faults`);
a failure of the gateway itself is ``INTERNAL_ERROR`` without details, and logged.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgspec
from aiohttp import web
from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION

from proxy.core.canonical import Principal
from proxy.core.errors import GatewayError
from proxy.mcp.faults import FORBIDDEN, UNAUTHORIZED, McpFault
from proxy.mcp.hub import McpHub, View
from proxy.mcp.methods import Methods
from proxy.mcp.sessions import Session, Sessions
from proxy.mcp.upstream import ListKind

SESSION_HEADER = "Mcp-Session-Id"
REQUEST_CANCELLED = -32800
_KEEPALIVE = 15.0  # seconds between comments on an idle GET stream
_JSON = msgspec.json.Encoder()
Authenticate = Callable[[Mapping[str, str]], Awaitable[Principal]]
Wrap = Callable[[str, Callable[[web.Request], Awaitable[web.StreamResponse]]], Any]


class McpRoutes:
    """The routes' handlers over one hub (module docstring). ``authenticate`` resolves a
    request's headers to its principal (raising a ``GatewayError``); ``logger`` gives the
    serving logger; ``request_id`` the request's id (``x-request-id``)."""

    def __init__(
        self,
        hub: McpHub,
        methods: Methods,
        authenticate: Authenticate,
        logger: Callable[[], Any],
        request_id: Callable[[web.Request], str],
        version: str,
    ) -> None:
        self._hub = hub
        self._methods = methods
        self._authenticate = authenticate
        self._logger = logger
        self._request_id = request_id
        self._version = version
        self.sessions = Sessions()
        self._unlisten = hub.listen(self._relay)

    def add_to(self, app: web.Application, wrap: Wrap) -> None:
        """Add ``/mcp`` and ``/mcp/{server}`` (POST, GET, DELETE) to ``app``, each handler
        wrapped by ``wrap(route, handler)``; their sessions close when the app shuts down."""
        for path in ("/mcp", "/mcp/{server}"):
            app.router.add_post(path, wrap(path, self.post))
            app.router.add_get(path, wrap(path, self.stream), allow_head=False)
            app.router.add_delete(path, wrap(path, self.delete))
        app.on_shutdown.append(self._shutdown)

    async def _shutdown(self, app: web.Application) -> None:
        self._unlisten()
        self.sessions.close()

    # -- POST -------------------------------------------------------------------------------

    async def post(self, request: web.Request) -> web.StreamResponse:
        """One JSON-RPC message (module docstring)."""
        request_id = self._request_id(request)
        scope = request.match_info.get("server")
        if scope is not None and scope not in self._hub.upstreams:
            return _error_response(404, None, INVALID_REQUEST, f"no MCP server {scope!r}")
        principal = await self._principal(request)
        if isinstance(principal, web.Response):
            return principal
        try:
            message = msgspec.json.decode(await request.read())
        except msgspec.DecodeError:
            return _error_response(400, None, PARSE_ERROR, "Parse error: the body is not JSON")
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return _error_response(
                400, None, INVALID_REQUEST, "Invalid Request: one JSON-RPC 2.0 message"
            )
        method = message.get("method")
        ident = message.get("id")
        if method is None:  # a response to a request of ours: the gateway sends none
            return web.Response(status=202)
        if not isinstance(method, str) or not isinstance(message.get("params", {}), dict | None):
            return _error_response(400, ident, INVALID_REQUEST, "Invalid Request")
        if method == "initialize" and ident is not None:
            return self._initialize(principal, scope, ident, message.get("params") or {})
        session = self._session(request, principal)
        if isinstance(session, web.Response):
            return session
        session.view.principal = principal  # the key's grants as they are now
        if ident is None:
            self._notification(session, method, message.get("params") or {})
            return web.Response(status=202)
        if not isinstance(ident, str | int) or isinstance(ident, bool):
            return _error_response(400, None, INVALID_REQUEST, "Invalid Request: id")
        response = await self._request(request, session, ident, method, message, request_id)
        response.headers["x-request-id"] = request_id
        return response

    def _initialize(
        self, principal: Principal, scope: str | None, ident: Any, params: dict[str, Any]
    ) -> web.Response:
        asked = params.get("protocolVersion")
        version = asked if asked in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION
        if scope is not None and not principal.allows_tool(scope):
            fault = McpFault(
                FORBIDDEN,
                f"this API key may not use the MCP server {scope!r}",
                status=403,
                reason="server_not_allowed",
            )
            return _json(403, {"jsonrpc": "2.0", "id": ident, "error": fault.error()})
        view = View(self._hub, principal, scope)
        session = self.sessions.open(principal.key_id, view, version)
        listing = {"listChanged": True}
        result = {
            "protocolVersion": version,
            "capabilities": {
                "tools": listing,
                "resources": {"listChanged": True, "subscribe": False},
                "prompts": listing,
                "logging": {},
            },
            "serverInfo": {
                "name": "crossway" if scope is None else f"crossway/{scope}",
                "version": self._version,
            },
        }
        response = _json(200, {"jsonrpc": "2.0", "id": ident, "result": result})
        response.headers[SESSION_HEADER] = session.id
        return response

    def _notification(self, session: Session, method: str, params: dict[str, Any]) -> None:
        if method == "notifications/cancelled":
            cancelled = params.get("requestId")
            if isinstance(cancelled, str | int) and not isinstance(cancelled, bool):
                session.cancel(cancelled)
        # notifications/initialized, roots/list_changed, progress of ours: nothing to do

    async def _request(
        self,
        request: web.Request,
        session: Session,
        ident: str | int,
        method: str,
        message: dict[str, Any],
        request_id: str,
    ) -> web.StreamResponse:
        params = message.get("params") or {}
        meta = params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        if isinstance(token, str | int) and not isinstance(token, bool) and method == "tools/call":
            return await self._streamed(request, session, ident, method, params, token, request_id)
        task = asyncio.ensure_future(
            self._methods.answer(session.view, method, params, None, request_id)
        )
        body = await self._outcome(session, ident, task)
        return _json(200, body)

    async def _streamed(
        self,
        request: web.Request,
        session: Session,
        ident: str | int,
        method: str,
        params: dict[str, Any],
        token: str | int,
        request_id: str,
    ) -> web.StreamResponse:
        """A request answered as an SSE stream: its progress, then its answer."""
        response = web.StreamResponse(
            headers={
                "content-type": "text/event-stream",
                "cache-control": "no-cache",
                "x-request-id": request_id,
            }
        )
        await response.prepare(request)
        lock = asyncio.Lock()

        async def relay(progress: float, total: float | None, message: str | None) -> None:
            update: dict[str, Any] = {"progressToken": token, "progress": progress}
            if total is not None:
                update["total"] = total
            if message is not None:
                update["message"] = message
            notice = {"jsonrpc": "2.0", "method": "notifications/progress", "params": update}
            async with lock:
                with contextlib.suppress(ConnectionError):
                    await response.write(_event(notice))

        task = asyncio.ensure_future(
            self._methods.answer(session.view, method, params, relay, request_id)
        )
        body = await self._outcome(session, ident, task)
        async with lock:
            with contextlib.suppress(ConnectionError):
                await response.write(_event(body))
                await response.write_eof()
        return response

    async def _outcome(
        self, session: Session, ident: str | int, task: asyncio.Future[dict[str, Any]]
    ) -> dict[str, Any]:
        """The JSON-RPC answer of ``task`` (cancelled by the client: an error it ignores)."""
        session.in_flight[ident] = task  # type: ignore[assignment]  # a Task, from ensure_future
        try:
            result = await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if ident not in session.cancelled or (current is not None and current.cancelling()):
                raise  # the client went away (or the app stops): not a cancellation it asked
            return _error_body(ident, REQUEST_CANCELLED, "Request cancelled")
        except McpFault as fault:
            return {"jsonrpc": "2.0", "id": ident, "error": fault.error()}
        except MCPError as error:  # the server's own error, relayed
            return {
                "jsonrpc": "2.0",
                "id": ident,
                "error": error.error.model_dump(mode="json", exclude_none=True),
            }
        except Exception:
            self._logger().exception("mcp_request_failed")
            return _error_body(ident, INTERNAL_ERROR, "Internal error")
        finally:
            session.in_flight.pop(ident, None)
            session.cancelled.discard(ident)
        return {"jsonrpc": "2.0", "id": ident, "result": result}

    # -- GET and DELETE ---------------------------------------------------------------------

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """The session's notification stream (module docstring)."""
        principal = await self._principal(request)
        if isinstance(principal, web.Response):
            return principal
        session = self._session(request, principal)
        if isinstance(session, web.Response):
            return session
        if session.streaming:
            return _error_response(409, None, INVALID_REQUEST, "this session has a stream open")
        response = web.StreamResponse(
            headers={"content-type": "text/event-stream", "cache-control": "no-cache"}
        )
        session.streaming = True
        try:
            await response.prepare(request)
            while True:
                try:
                    notice = await asyncio.wait_for(session.notifications.get(), _KEEPALIVE)
                except TimeoutError:
                    await response.write(b": keep-alive\n\n")
                    continue
                if notice is None:
                    break
                await response.write(_event(notice))
        except ConnectionError:
            pass
        finally:
            session.streaming = False
        return response

    async def delete(self, request: web.Request) -> web.StreamResponse:
        """End the session (module docstring)."""
        principal = await self._principal(request)
        if isinstance(principal, web.Response):
            return principal
        session = self._session(request, principal)
        if isinstance(session, web.Response):
            return session
        self.sessions.end(session)
        return web.Response(status=204)

    # -- shared -----------------------------------------------------------------------------

    async def _principal(self, request: web.Request) -> Principal | web.Response:
        try:
            return await self._authenticate(request.headers)
        except GatewayError as error:
            response = _error_response(error.status, None, UNAUTHORIZED, error.message)
            response.headers.update(error.response_headers())
            return response

    def _session(self, request: web.Request, principal: Principal) -> Session | web.Response:
        session_id = request.headers.get(SESSION_HEADER)
        if not session_id:
            return _error_response(400, None, INVALID_REQUEST, f"Bad Request: no {SESSION_HEADER}")
        session = self.sessions.get(session_id, principal.key_id)
        if session is None or session.view.server != request.match_info.get("server"):
            return _error_response(404, None, INVALID_REQUEST, "Session not found")
        return session

    def _relay(self, server: str, kind: ListKind) -> None:
        """A server's list changed: tell every session whose view shows that server."""
        notice = {"jsonrpc": "2.0", "method": f"notifications/{kind}/list_changed"}
        for session in self.sessions.all():
            view = session.view
            if (view.server is None or view.server == server) and view.principal.allows_tool(
                server
            ):
                session.notify(notice)


def _event(message: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + _JSON.encode(message) + b"\n\n"


def _json(status: int, body: dict[str, Any]) -> web.Response:
    return web.Response(status=status, body=_JSON.encode(body), content_type="application/json")


def _error_body(ident: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}


def _error_response(status: int, ident: Any, code: int, message: str) -> web.Response:
    return _json(status, _error_body(ident, code, message))
