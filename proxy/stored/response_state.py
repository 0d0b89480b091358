"""The Responses API's conversation state: continuing a stored response, storing new ones, and
the ``GET`` / ``DELETE /v1/responses/{id}`` and ``GET …/{id}/input_items`` they allow.

:class:`ResponseState` runs around the plugin chain for every Responses call:

- ``previous_response_id`` names a stored response of the caller: its conversation (input and
  output, without its instructions) is put before this request's input — after this request's
  instructions — before any plugin sees the call, so masking, caching and limits see what the
  upstream will. A response that does not exist, has expired or belongs to another key is a 400
  ``previous_response_not_found`` (OpenAI's answer; it does not say which).
- ``tools`` of type ``mcp`` are run by the gateway's MCP loop around the chain
  (:mod:`proxy.mcp.responses_loop`).
- ``store`` (true unless the request says false) keeps the response once it is complete: a whole
  reply before it is sent, a stream when its last chunk has arrived (before the client gets
  ``response.completed``), so a client may chain on it at once. A stream that fails or whose
  client goes away is not stored; a response too large for the store is answered but not kept.
  ``store: false`` stores nothing. A store that cannot be read is a 503
  ``response_store_unavailable`` for what needs it (a continued response, ``GET``, ``DELETE``).

The caller is identified by ``authenticate(headers)`` — the auth plugin's, when the chain has
one that offers it (:func:`proxy.core.plugin.authentication`), else the anonymous principal. A
record is written under ``call.principal.key_id`` as the chain left it. Both agree when the auth
plugin offers ``authenticate``; if they ever disagree, lookups miss (a 400 or 404), never cross
keys.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from proxy.core.canonical import Call, Message, Principal
from proxy.core.errors import BadRequest, GatewayError, NotFound
from proxy.core.plugin import Authenticate, Next
from proxy.core.reply import Chunk, RawFrames, Reply
from proxy.core.streams import BatchedStream, ReplyStream, batched, is_closable
from proxy.dialects.responses import envelope_of, whole_response
from proxy.dialects.responses.objects import ENCODER, DeletedResponse, Envelope
from proxy.dialects.responses.output import OutputBuilder
from proxy.dialects.responses.stream import final_response
from proxy.mcp.responses_loop import McpToolLoop
from proxy.stored.response_store import ResponseStore, StoredResponse

_MESSAGES = msgspec.json.Decoder(list[Message])


class ResponseState:
    """See the module docstring. ``logger()`` gives the logger told of responses that could
    not be stored (the current config's)."""

    def __init__(self, store: ResponseStore, logger: Callable[[], Any]) -> None:
        self._store = store
        self._logger = logger
        self.mcp = McpToolLoop(None, None)
        """Runs a call's MCP tools (:mod:`proxy.mcp.responses_loop`); the app sets the one of
        its MCP gateway."""

    async def _answer(self, call: Call, envelope: Envelope, chain: Next) -> Reply:
        """``chain``'s reply, through the MCP loop when the request names MCP tools."""
        if envelope.mcp:
            return await self.mcp.run(call, envelope, chain)
        return await chain(call)

    async def run(self, call: Call, chain: Next, authenticate: Authenticate) -> Reply:
        """Answer a Responses ``call`` through ``chain``, continuing and storing as asked."""
        envelope = envelope_of(call)
        if not envelope.model:  # the request named none: the route resolved the default
            envelope.model = call.model
        at = 1 if envelope.instructions else 0  # history goes after this request's instructions
        history: list[Message] = []
        if envelope.previous_response_id is not None:
            principal = await authenticate(call.client_headers)
            history = await self.history(envelope.previous_response_id, principal)
            call.messages[at:at] = history
        if not envelope.store:
            return await self._answer(call, envelope, chain)
        conversation = ENCODER.encode(call.messages[at:])  # before any plugin changes the call
        given = ENCODER.encode(call.messages[at + len(history) :])
        reply = await self._answer(call, envelope, chain)
        owner = call.principal.key_id
        if reply.response is not None:
            body = ENCODER.encode(whole_response(call, reply))
            call.dialect_state["encoded"] = (reply.response, body)  # the client's body too
            message = _turn(reply.response.choices[0].message)
            record = StoredResponse(owner, body, _append(conversation, message), given)
            await self._remember(envelope.id, record)
            return reply
        assert reply.stream is not None

        async def on_complete(builder: OutputBuilder) -> None:
            body = ENCODER.encode(final_response(envelope, builder, reply.model))
            messages = _append(conversation, builder.message())
            await self._remember(envelope.id, StoredResponse(owner, body, messages, given))

        builder = OutputBuilder(envelope.id, emit=True)
        call.dialect_state["builder"] = builder  # the stream encoder frames what it builds
        stream = _RecordingStream(reply.stream, builder, on_complete)
        return msgspec.structs.replace(reply, stream=stream)

    async def fetch(self, response_id: str, principal: Principal) -> bytes:
        """The stored response object (``GET``); :class:`NotFound` if the caller has none, a 503
        ``response_store_unavailable`` if the store cannot answer."""
        return (await self.record(response_id, principal)).body

    async def record(self, response_id: str, principal: Principal) -> StoredResponse:
        """The caller's stored record of ``response_id``; :class:`NotFound` if it has none, a
        503 ``response_store_unavailable`` if the store cannot answer."""
        record = await self._lookup(response_id, principal)
        if record is None:
            raise _not_found(response_id)
        return record

    async def input_of(self, response_id: str, principal: Principal) -> list[Message]:
        """What the caller's stored response's request contributed (``input_items``); errors
        as :meth:`record`."""
        return _MESSAGES.decode((await self.record(response_id, principal)).input or b"[]")

    async def delete(self, response_id: str, principal: Principal) -> bytes:
        """Delete the caller's stored response (``DELETE``); :class:`NotFound` if there is none,
        a 503 ``response_store_unavailable`` if the store cannot answer."""
        try:
            deleted = await self._store.delete(response_id, principal.key_id)
        except Exception:
            raise self._unavailable(response_id) from None
        if not deleted:
            raise _not_found(response_id)
        return ENCODER.encode(DeletedResponse(id=response_id))

    async def _lookup(self, response_id: str, principal: Principal) -> StoredResponse | None:
        try:
            return await self._store.get(response_id, principal.key_id)
        except Exception:
            raise self._unavailable(response_id) from None

    def _unavailable(self, response_id: str) -> GatewayError:
        self._logger().exception("response_store_failed", response_id=response_id)
        return GatewayError(
            "stored responses cannot be read now: try again",
            status=503,
            code="response_store_unavailable",
        )

    async def history(self, response_id: str, principal: Principal) -> list[Message]:
        """The conversation through the caller's stored response (what a later request's
        ``previous_response_id`` continues); a 400 ``previous_response_not_found`` if it has
        none."""
        record = await self._lookup(response_id, principal)
        if record is None:
            raise BadRequest(
                f"Previous response with id {response_id!r} not found.",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        return _MESSAGES.decode(record.messages)

    async def _remember(self, response_id: str, record: StoredResponse) -> bool:
        try:
            kept = await self._store.put(response_id, record)
        except Exception:  # a store outage must not fail a response that was generated
            self._logger().exception("response_store_failed", response_id=response_id)
            return False
        if not kept:
            self._logger().warning(
                "response_not_stored", response_id=response_id, bytes=record.size, why="too large"
            )
        return kept

    async def remember(self, response_id: str, record: StoredResponse) -> bool:
        """Store ``record`` (a background response's state); False, logged, when the store
        cannot answer or the record is too large to keep."""
        return await self._remember(response_id, record)

    @property
    def store(self) -> ResponseStore:
        """Where the responses are stored."""
        return self._store


def _not_found(response_id: str) -> NotFound:
    return NotFound(f"Response with id {response_id!r} not found.", param="response_id")


def _turn(message: Message) -> Message:
    """What of an upstream's answer a later turn sends back: content, calls, reasoning, refusal
    (only those that are set; an upstream's ``refusal: null`` is not repeated)."""
    return Message(
        role="assistant",
        content=message.content,
        tool_calls=message.tool_calls,
        refusal=message.refusal or msgspec.UNSET,
        reasoning_content=message.reasoning_content or msgspec.UNSET,
    )


def _append(conversation: bytes, message: Message) -> bytes:
    """The JSON array ``conversation`` with ``message`` appended (no decode of the array)."""
    item = ENCODER.encode(message)
    return conversation[:-1] + (b"," if len(conversation) > 2 else b"") + item + b"]"


class _RecordingStream(ReplyStream, BatchedStream):
    """A reply stream that feeds every chunk to ``builder`` before handing it on (the call's
    stream encoder frames the builder's events: the output is assembled once), and calls
    ``on_complete`` once the stream ended normally. It forwards
    :class:`~proxy.core.streams.BatchedStream` and ``aclose``. Of the fast paths of
    :mod:`proxy.core.streams` it gives up the verbatim frames (it reads decoded chunks, which
    it must see; the Responses encoder has no relay anyway) and end hooks."""

    __slots__ = ("_batches", "_builder", "_done", "_inner", "_on_complete")

    def __init__(
        self,
        inner: ReplyStream,
        builder: OutputBuilder,
        on_complete: Callable[[OutputBuilder], Awaitable[None]],
    ) -> None:
        self._inner = inner
        self._batches = batched(inner)
        self._builder = builder
        self._on_complete = on_complete
        self._done = False

    @property
    def ended(self) -> bool:
        """See :class:`~proxy.core.streams.BatchedStream`."""
        return self._batches.ended

    async def next_batch(self, raw: bool) -> list[Chunk | RawFrames]:
        """See :class:`~proxy.core.streams.BatchedStream`."""
        batch = await self._batches.next_batch(False)
        add = self._builder.add
        for chunk in batch:
            add(chunk)  # type: ignore[arg-type]
        if not batch:
            await self._complete()
        return batch

    def __aiter__(self) -> _RecordingStream:
        return self

    async def __anext__(self) -> Chunk:
        try:
            chunk = await anext(self._inner)
        except StopAsyncIteration:
            await self._complete()
            raise
        self._builder.add(chunk)
        return chunk

    async def aclose(self) -> None:
        """Close the stream it wraps."""
        inner = self._inner
        if is_closable(inner):  # a plugin's plain iterator has nothing to close
            with contextlib.suppress(StopAsyncIteration):
                await inner.aclose()

    async def _complete(self) -> None:
        if self._done:
            return
        self._done = True
        self._builder.close()
        await self._on_complete(self._builder)
