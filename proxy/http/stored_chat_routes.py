"""The stored chat completions' routes, and the ``around`` that stores them.

- ``GET /v1/chat/completions``: the caller's stored completions (``model``,
  ``metadata[<key>]``, ``after``, ``limit``, ``order``).
- ``GET /v1/chat/completions/{id}``: one of them; ``POST`` replaces its ``metadata``;
  ``DELETE`` deletes it.
- ``GET /v1/chat/completions/{id}/messages``: its request's messages (``after``, ``limit``,
  ``order``).

Each also answers without the ``/v1`` prefix, as the other OpenAI routes do. What each answers is
:class:`~proxy.stored.chat_state.ChatState`'s; errors are OpenAI's error JSON. The caller is
identified by the snapshot's ``authenticate`` (the auth plugin's, or anonymous) before anything
else is read: a request without a valid key is a 401 and its body is never read.
:func:`with_chat_state` is the chat dialect's ``around`` (it stores ``store: true`` calls).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from proxy.core.canonical import Call, Principal
from proxy.core.errors import GatewayError, InternalError
from proxy.core.reply import Reply
from proxy.db import Database
from proxy.http.edges import error_response
from proxy.runtime.config import ResponsesConfig
from proxy.runtime.snapshot import Snapshot
from proxy.stored.chat_completions_db import DatabaseChatStore
from proxy.stored.chat_state import ChatState
from proxy.stored.chat_store import ChatStore, MemoryChatStore

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Plain = Callable[[str, Handler], Handler]
_JSON = "application/json"


def with_chat_state(state: ChatState) -> Callable[[Call, Snapshot], Awaitable[Reply]]:
    """Chat calls run their chain inside the stored completions' state (store when asked)."""

    async def around(call: Call, snapshot: Snapshot) -> Reply:
        return await state.run(call, snapshot.chain)

    return around


def chat_store(config: ResponsesConfig, database: Database, uses_database: bool) -> ChatStore:
    """Where stored chat completions go: as stored responses do (the ``responses`` section's
    ``store``, ``ttl`` and bounds; ``auto`` follows ``uses_database``), in a store of their
    own."""
    if config.store == "database" or (config.store == "auto" and uses_database):
        return DatabaseChatStore(
            database,
            ttl=config.ttl,
            max_entries=config.max_entries,
            max_bytes=config.max_bytes,
            max_entries_per_owner=config.max_entries_per_owner,
            max_bytes_per_owner=config.max_bytes_per_owner,
        )
    return MemoryChatStore(
        ttl=config.ttl,
        max_entries=config.max_entries,
        max_bytes=config.max_bytes,
        max_entries_per_owner=config.max_entries_per_owner,
        max_bytes_per_owner=config.max_bytes_per_owner,
    )


class StoredChatRoutes:
    """The handlers (see the module docstring). ``snapshot()`` gives the current runtime
    snapshot; ``read_body`` reads a request body under the server's limits."""

    def __init__(
        self,
        snapshot: Callable[[], Snapshot],
        state: ChatState,
        read_body: Callable[[web.Request], Awaitable[bytes]],
    ) -> None:
        self._snapshot = snapshot
        self._state = state
        self._read_body = read_body

    def add_to(self, app: web.Application, plain: Plain) -> None:
        """Route the handlers on ``app``, each wrapped by ``plain`` (request id, metrics)."""
        for prefix in ("/v1", ""):
            listing = f"{prefix}/chat/completions"
            app.router.add_get(listing, plain(listing, self.list))
            one = f"{prefix}/chat/completions/{{completion_id}}"
            for method in ("GET", "POST", "DELETE"):
                app.router.add_route(method, one, plain(one, self.one))
            messages = f"{one}/messages"
            app.router.add_get(messages, plain(messages, self.messages))

    async def list(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/chat/completions``."""
        return await self._answer(
            request, lambda principal: self._state.listing(principal, dict(request.query))
        )

    async def messages(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/chat/completions/{completion_id}/messages``."""
        completion_id = request.match_info["completion_id"]
        return await self._answer(
            request,
            lambda principal: self._state.messages(completion_id, principal, dict(request.query)),
        )

    async def one(self, request: web.Request) -> web.StreamResponse:
        """``GET`` / ``POST`` / ``DELETE /v1/chat/completions/{completion_id}``."""
        completion_id = request.match_info["completion_id"]
        state = self._state
        if request.method == "DELETE":
            return await self._answer(request, lambda p: state.delete(completion_id, p))
        if request.method == "GET":
            return await self._answer(request, lambda p: state.fetch(completion_id, p))

        async def update(principal: Principal) -> bytes:
            body = await self._read_body(request)
            return await state.update(completion_id, principal, body)

        return await self._answer(request, update)

    async def _answer(
        self, request: web.Request, produce: Callable[[Principal], Awaitable[bytes]]
    ) -> web.StreamResponse:
        """Authenticate, then answer what ``produce(principal)`` makes, or the error in
        OpenAI's shape (an unexpected failure is logged and a 500)."""
        snapshot = self._snapshot()
        try:
            principal = await snapshot.authenticate(request.headers)
            body = await produce(principal)
        except GatewayError as error:
            return error_response(error, anthropic_shape=False)
        except Exception:
            snapshot.logger.exception("unhandled_error", route="stored_chat_completions")
            return error_response(InternalError("internal gateway error"), anthropic_shape=False)
        return web.Response(body=body, headers={"content-type": _JSON})
