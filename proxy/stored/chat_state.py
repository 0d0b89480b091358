"""Stored chat completions: keeping a ``store: true`` completion, and what the routes over them
answer (list, retrieve, update, delete, the messages list).

:meth:`ChatState.run` runs around the plugin chain for every chat call. A call the chat dialect
marked ``store: true`` (:data:`~proxy.dialects.openai_chat.STORE`) is kept once it is complete:
a whole reply before it is sent, a stream when its last chunk has arrived, assembled into the
completion it amounts to (:func:`~proxy.cache.assemble.assemble`; a stream cut short, or one
without usage, is not). The record holds the completion as the client received it plus its
``metadata``, and the request's messages as the client sent them (before any plugin changed
them), each with the id ``<completion id>-<index>``. A store that cannot be written is logged
and the completion still answered; one too large for the store is answered and not kept (a
warning). Other calls pass straight through.

The reads answer bytes in OpenAI's shapes; each names the caller's key: another key's record
is a 404 like a missing one. A store that cannot be read is a 503
``chat_completion_store_unavailable``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from proxy.cache.assemble import assemble
from proxy.core.canonical import Call, Principal
from proxy.core.errors import GatewayError, NotFound
from proxy.core.plugin import Next
from proxy.core.reply import Chunk, Encoded, RawFrames, Reply
from proxy.core.streams import BatchedStream, ReplyStream, batched, is_closable
from proxy.dialects.base import bad_request, invalid
from proxy.dialects.openai_chat import METADATA_KEY_LENGTH, STORE, Metadata, OpenAIChatDialect
from proxy.stored.chat_store import MAX_PAGE, ChatStore, Order, Query, StoredChat
from proxy.stored.pages import page_of, query_limit, query_order

_DIALECT = OpenAIChatDialect()
_ENCODER = msgspec.json.Encoder()
_OBJECT = msgspec.json.Decoder(dict[str, Any])
_ITEMS = msgspec.json.Decoder(list[dict[str, Any]])


class _Update(msgspec.Struct, forbid_unknown_fields=True):
    metadata: Metadata | None


_UPDATE = msgspec.json.Decoder(_Update)
_UNKNOWN_FIELD = re.compile(r"unknown field `([^`]*)`")


class ChatState:
    """See the module docstring. ``logger()`` gives the logger told of completions that could
    not be stored (the current config's)."""

    def __init__(self, store: ChatStore, logger: Callable[[], Any]) -> None:
        self._store = store
        self._logger = logger

    async def run(self, call: Call, chain: Next) -> Reply:
        """Answer a chat ``call`` through ``chain``, storing it when it asked."""
        metadata: dict[str, str] | None = call.dialect_state.get(STORE)
        if metadata is None:
            return await chain(call)
        sent = msgspec.to_builtins(call.messages)  # as the client sent them
        model = call.model
        reply = await chain(call)
        owner = call.principal.key_id
        if reply.response is not None:
            body = _DIALECT.encode_response(call, reply)
            encoded = Encoded(dialect=_DIALECT.name, response=reply.response, body=body)
            await self._remember(owner, model, metadata, body, sent)
            return msgspec.structs.replace(reply, encoded=encoded)
        if reply.stream is None:
            return reply

        async def on_complete(chunks: list[Chunk]) -> None:
            response = assemble(chunks)
            if response is None:
                self._logger().warning("chat_completion_not_stored", why="stream incomplete")
                return
            whole = msgspec.structs.replace(reply, stream=None, response=response)
            body = _DIALECT.encode_response(call, whole)
            await self._remember(owner, model, metadata, body, sent)

        return msgspec.structs.replace(reply, stream=_RecordingStream(reply.stream, on_complete))

    async def listing(self, principal: Principal, query: dict[str, str]) -> bytes:
        """``GET /v1/chat/completions``: the caller's stored completions, filtered by ``model``
        and ``metadata[<key>]``, paged by ``after``, ``limit`` (1 to 100; default 20) and
        ``order`` (``asc``, the default, or ``desc``). A bad ``limit`` or ``order`` is a 400
        naming it."""
        wanted = {
            key[len("metadata[") : -1]: value
            for key, value in query.items()
            if key.startswith("metadata[") and key.endswith("]")
        }
        search = Query(
            owner=principal.key_id,
            model=query.get("model"),
            metadata=wanted,
            after=query.get("after"),
            limit=query_limit(query.get("limit"), MAX_PAGE),
            order=query_order(query.get("order")),
        )
        try:
            records, more = await self._store.search(search)
        except Exception:
            raise self._unavailable() from None
        return page_of([record.body for record in records], [r.id for r in records], more)

    async def fetch(self, completion_id: str, principal: Principal) -> bytes:
        """``GET /v1/chat/completions/{id}``: the stored completion object."""
        return (await self._record(completion_id, principal)).body

    async def messages(
        self, completion_id: str, principal: Principal, query: dict[str, str]
    ) -> bytes:
        """``GET /v1/chat/completions/{id}/messages``: its request's messages, paged by
        ``after``, ``limit`` and ``order`` as :meth:`listing`."""
        record = await self._record(completion_id, principal)
        limit = query_limit(query.get("limit"), MAX_PAGE)
        items = _ITEMS.decode(record.messages)
        items = _after(items, query.get("after"), query_order(query.get("order")))
        page = items[:limit]
        ids = [item["id"] for item in page]
        return page_of([_ENCODER.encode(item) for item in page], ids, len(items) > limit)

    async def update(self, completion_id: str, principal: Principal, body: bytes) -> bytes:
        """``POST /v1/chat/completions/{id}``: replace its ``metadata`` (the only field the API
        lets a client change; null clears it); answers the updated completion. Any other field,
        or metadata beyond OpenAI's bounds, is a 400 naming it (checked before the lookup)."""
        try:
            metadata = dict(_UPDATE.decode(body).metadata or {})
        except msgspec.DecodeError as exc:
            unknown = _UNKNOWN_FIELD.search(str(exc))
            if unknown is not None:
                raise invalid("only metadata may be updated", unknown.group(1)) from None
            raise bad_request(exc) from None
        if any(len(key) > METADATA_KEY_LENGTH for key in metadata):
            raise invalid(f"keys must be at most {METADATA_KEY_LENGTH} characters", "metadata")
        record = await self._record(completion_id, principal)
        updated = _with_metadata(record.body, metadata)
        try:
            found = await self._store.update(completion_id, record.owner, metadata, updated)
        except Exception:
            raise self._unavailable() from None
        if not found:
            raise _not_found(completion_id)
        return updated

    async def delete(self, completion_id: str, principal: Principal) -> bytes:
        """``DELETE /v1/chat/completions/{id}``: ``{"object": "chat.completion.deleted", "id",
        "deleted": true}``, or 404."""
        try:
            deleted = await self._store.delete(completion_id, principal.key_id)
        except Exception:
            raise self._unavailable() from None
        if not deleted:
            raise _not_found(completion_id)
        return _ENCODER.encode(
            {"object": "chat.completion.deleted", "id": completion_id, "deleted": True}
        )

    async def _record(self, completion_id: str, principal: Principal) -> StoredChat:
        try:
            record = await self._store.get(completion_id, principal.key_id)
        except Exception:
            raise self._unavailable() from None
        if record is None:
            raise _not_found(completion_id)
        return record

    def _unavailable(self) -> GatewayError:
        self._logger().exception("chat_completion_store_failed")
        return GatewayError(
            "stored chat completions cannot be read now: try again",
            status=503,
            code="chat_completion_store_unavailable",
        )

    async def _remember(
        self,
        owner: str | None,
        model: str,
        metadata: dict[str, str],
        body: bytes,
        sent: list[dict[str, Any]],
    ) -> None:
        stored = _with_metadata(body, metadata)
        completion_id = str(_OBJECT.decode(stored).get("id", ""))
        record = StoredChat(
            owner=owner,
            id=completion_id,
            model=model,
            metadata=metadata,
            body=stored,
            messages=_ENCODER.encode(_message_items(completion_id, sent)),
        )
        try:
            kept = await self._store.put(record)
        except Exception:  # a store outage must not fail a completion that was generated
            self._logger().exception("chat_completion_store_failed", completion_id=completion_id)
            return
        if not kept:
            self._logger().warning(
                "chat_completion_not_stored", completion_id=completion_id, why="too large"
            )


def _not_found(completion_id: str) -> NotFound:
    return NotFound(f"Chat completion with id {completion_id!r} not found.", param="completion_id")


def _with_metadata(body: bytes, metadata: dict[str, str]) -> bytes:
    """The completion object ``body`` with its ``metadata`` member set."""
    completion = _OBJECT.decode(body)
    completion["metadata"] = metadata
    return _ENCODER.encode(completion)


def _message_items(completion_id: str, sent: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages list's items (OpenAI's shape): each message with ``id``, its text as
    ``content`` and its parts, when it sent parts, as ``content_parts``."""
    items = []
    for index, message in enumerate(sent):
        content = message.get("content")
        parts = content if isinstance(content, list) else None
        if parts is not None:
            content = "".join(p.get("text", "") for p in parts if p.get("type") == "text")
        items.append(
            {
                **message,
                "id": f"{completion_id}-{index}",
                "content": content,
                "name": message.get("name"),
                "content_parts": parts,
            }
        )
    return items


def _after(items: list[dict[str, Any]], after: str | None, order: Order) -> list[dict[str, Any]]:
    """``items`` in ``order``, from the one after the id ``after`` (none when it is absent)."""
    ordered = items if order == "asc" else items[::-1]
    if after is None:
        return ordered
    ids = [item["id"] for item in ordered]
    return ordered[ids.index(after) + 1 :] if after in ids else []


class _RecordingStream(ReplyStream, BatchedStream):
    """A reply stream that keeps every chunk it hands on and calls ``on_complete`` with them
    once the stream ended normally (a failure or an early close stores nothing). It forwards
    :class:`~proxy.core.streams.BatchedStream` and ``aclose``; it gives up the verbatim frames
    (it must read decoded chunks) and end hooks."""

    __slots__ = ("_batches", "_chunks", "_done", "_inner", "_on_complete")

    def __init__(
        self, inner: ReplyStream, on_complete: Callable[[list[Chunk]], Awaitable[None]]
    ) -> None:
        self._inner = inner
        self._batches = batched(inner)
        self._chunks: list[Chunk] = []
        self._on_complete = on_complete
        self._done = False

    @property
    def ended(self) -> bool:
        """See :class:`~proxy.core.streams.BatchedStream`."""
        return self._batches.ended

    async def next_batch(self, raw: bool) -> list[Chunk | RawFrames]:
        """See :class:`~proxy.core.streams.BatchedStream`."""
        batch = await self._batches.next_batch(False)
        self._chunks.extend(batch)  # type: ignore[arg-type]  # raw=False: chunks only
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
        self._chunks.append(chunk)
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
        chunks, self._chunks = self._chunks, []
        await self._on_complete(chunks)
