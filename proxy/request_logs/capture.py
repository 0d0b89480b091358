"""Where the request logs take a request's payloads: a link of the chain, placed just inside
the ``masking`` plugin (at the head of the chain when there is none).

So the request is taken as masking left it (placeholders, redacted values) and the answer as it
came back to masking, before placeholders were restored: a value the masking plugin replaced
never reaches a request log. A cache hit (the cache sits inside masking) is taken as the cache
answered it, which also holds placeholders. A masking plugin that also scans what the model
wrote (``output: scan``; :class:`Scrubs`) scrubs the kept answer the same way, so a value the
client got redacted is redacted in the log too. Of a stream, the link keeps the items handed out
(references; bytes counted against ``max_payload_bytes``, items past it not kept and the
answer marked truncated) and the finished hook folds them into one answer
(:func:`~proxy.cache.assemble.assemble`, partial: a stream cut short keeps what was sent). A
media stream (audio, image events) is not kept, as a whole media answer is not.

:class:`RequestCapture` is both the link (``__call__``) and the ``finished`` hook that builds
the record (:mod:`proxy.request_logs.records`) and hands it to the process's
:class:`~proxy.request_logs.service.RequestLogs`. Which requests are kept is decided per request
from its principal (:meth:`RequestCapture.mode`): the key's ``request_logs``, else its team's,
else ``telemetry.request_logs.store``. A request that never reached the link (refused before it,
or its body undecodable) is recorded with its metadata only, whatever the mode.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from typing import Any, Protocol, runtime_checkable

import msgspec

from proxy.cache.assemble import assemble
from proxy.cache.flight import decoded_chunks
from proxy.core.canonical import Accounting, Call, Message, Principal
from proxy.core.errors import GatewayError
from proxy.core.plugin import FinishedRequest, Next, Plugin
from proxy.core.redact import Redactor
from proxy.core.reply import Chunk, Embeddings, RawFrames, Reply, Response
from proxy.core.streams import BatchedStream, ReplyStream, batched, is_closable
from proxy.request_logs.config import StoreMode
from proxy.request_logs.records import RequestLogRecord, metadata_record, payload_text
from proxy.request_logs.service import RequestLogs

_MAX_IN_FLIGHT = 10_000  # captures waiting for their finished hook (a bound, never reached)


class Captured:
    """What the link saw of one request: the masked request, then the answer."""

    __slots__ = ("embeddings", "items", "kept_bytes", "messages", "model", "params", "response")

    def __init__(self, call: Call) -> None:
        self.model = call.model
        self.messages: list[Message] = call.messages
        self.params = call.params
        self.response: Response | None = None
        self.items: list[Chunk | RawFrames] = []
        self.kept_bytes = 0
        self.embeddings: Embeddings | None = None


@runtime_checkable
class Scrubs(Protocol):
    """A masking plugin that also rewrites what the model itself wrote (``output: scan``):
    ``scrub`` is that rewrite of a text, which a kept answer gets too."""

    def scrub(self, text: str) -> str:
        """``text`` with what the plugin would redact in an answer redacted."""
        ...


class RequestCapture:
    """See the module docstring. ``store`` is the config's default mode. ``scrub`` rewrites a
    kept answer's text as the masking plugin outside the link rewrites answers for the client
    (set by :func:`placed`; none: kept as it is)."""

    def __init__(
        self,
        logs: RequestLogs,
        store: StoreMode,
        redactor: Redactor,
        max_payload_bytes: int,
    ) -> None:
        self._logs = logs
        self._store = store
        self._redactor = redactor
        self._limit = max_payload_bytes
        self._captured: dict[int, tuple[Accounting, Captured]] = {}
        self.scrub: Callable[[str], str] | None = None

    def mode(self, principal: Principal) -> StoreMode:
        """What is kept of a request by ``principal``: its key's mode, else its team's, else
        the config's."""
        own = principal.request_logs
        return self._store if own is None else own

    async def __call__(self, call: Call, next: Next) -> Reply:
        """Keep the request (as masked) and the answer (before restoring) of a request whose
        mode is ``payloads``; pass any other on untouched."""
        if self.mode(call.principal) != "payloads":
            return await next(call)
        captured = Captured(call)
        kept = self._captured
        if len(kept) >= _MAX_IN_FLIGHT:
            del kept[_oldest(kept)]
        kept[id(call.accounting)] = (call.accounting, captured)
        reply = await next(call)
        if reply.response is not None:
            captured.response = reply.response
        elif reply.stream is not None and call.media is None:  # a media stream's is bytes
            reply.stream = RecordingStream(reply.stream, captured, self._limit)
        elif reply.embeddings is not None:
            captured.embeddings = reply.embeddings
        return reply

    def finished(self, request: FinishedRequest) -> None:
        """Build the record of ``request`` (metadata; payloads when taken) and queue it."""
        mode = self.mode(request.principal)
        captured = None
        call = request.call
        if call is not None:
            found = self._captured.pop(id(call.accounting), None)
            if found is not None and found[0] is call.accounting:
                captured = found[1]
        if mode == "none":
            return
        logs = self._logs
        record = metadata_record(request, logs.next_id(), mode)
        if mode == "payloads" and captured is not None:
            self._add_payloads(record, captured)
        logs.record(record)

    def _add_payloads(self, record: RequestLogRecord, captured: Captured) -> None:
        redactor, limit = self._redactor, self._limit
        request: dict[str, Any] = {
            "model": captured.model,
            "messages": msgspec.to_builtins(captured.messages),
        }
        params = msgspec.to_builtins(captured.params)
        if params:
            request["params"] = redactor.value(params)  # credential-named fields blanked
        record.request, cut_request = payload_text(request, redactor, limit)
        answer = _answer(captured)
        cut_answer = False
        if answer is not None:
            record.response, cut_answer = payload_text(answer, redactor, limit, self.scrub)
        record.truncated = cut_request or cut_answer or captured.kept_bytes > limit


def _oldest(kept: dict[int, tuple[Accounting, Captured]]) -> int:
    """The oldest key of ``kept`` (insertion order)."""
    return next(iter(kept))


def _answer(captured: Captured) -> dict[str, Any] | None:
    """The answer as JSON-ready builtins: the whole response, the stream folded into one, or
    what an embeddings answer was (its model, vector count and dimensions; never the vectors)."""
    response = captured.response
    if response is None and captured.items:
        try:
            chunks = decoded_chunks(captured.items)  # verbatim frames parsed
        except GatewayError:  # a frame the provider cannot read: the answer is not kept
            chunks = []
        response = assemble(chunks, partial=True)
    if response is not None:
        answer: dict[str, Any] = msgspec.to_builtins(
            msgspec.structs.replace(response, raw=None, raw_fingerprint=None)
        )
        return answer
    embeddings = captured.embeddings
    if embeddings is not None:
        vectors = embeddings.vectors
        return {
            "model": embeddings.model,
            "vectors": len(vectors),
            "dimensions": len(vectors[0]) if vectors else 0,
        }
    return None


class RecordingStream(ReplyStream, BatchedStream):
    """A reply stream whose items are also kept (references) in a :class:`Captured`, up to
    ``limit`` bytes of them (frames by their size, chunks by their text). Errors of the inner
    stream propagate unchanged; closing closes it. Of the fast paths of
    :mod:`proxy.core.streams` it keeps the batches and the verbatim frames (handed on as they
    are); it gives up end hooks."""

    __slots__ = ("_batches", "_captured", "_inner", "_limit")

    def __init__(self, inner: ReplyStream, captured: Captured, limit: int) -> None:
        self._inner = inner
        self._batches = batched(inner)
        self._captured = captured
        self._limit = limit

    @property
    def ended(self) -> bool:
        """See :class:`~proxy.core.streams.BatchedStream`."""
        return self._batches.ended

    async def next_batch(self, raw: bool) -> list[Chunk | RawFrames]:
        """See :class:`~proxy.core.streams.BatchedStream`."""
        batch = await self._batches.next_batch(raw)
        self._keep(batch)
        return batch

    def __aiter__(self) -> RecordingStream:
        return self

    async def __anext__(self) -> Chunk:
        chunk = await anext(self._inner)
        self._keep((chunk,))
        return chunk

    async def aclose(self) -> None:
        """Stop the stream and free its upstream connection."""
        inner = self._inner
        if is_closable(inner):
            await inner.aclose()

    def _keep(self, batch: Sequence[Chunk | RawFrames]) -> None:
        captured = self._captured
        if captured.kept_bytes > self._limit:
            return
        for item in batch:
            if isinstance(item, RawFrames):
                size = len(item.data)
            else:
                size = 64 + sum(len(choice.delta.content or "") for choice in item.choices)
            captured.kept_bytes += size
            if captured.kept_bytes > self._limit:
                return
            captured.items.append(item)


def placed(
    plugins: Sequence[Plugin],
    refs: Sequence[str],
    masking: Container[str],
    capture: RequestCapture,
) -> list[Plugin]:
    """The chain's links with ``capture`` just inside the last masking plugin (``refs`` are
    the plugins' config names, in order; ``masking`` the names the masking plugin goes by),
    else first; a masking plugin that :class:`Scrubs` answers scrubs the kept ones too."""
    at = 0
    for index, ref in enumerate(refs):
        if ref in masking:
            at = index + 1
    outer = plugins[at - 1] if at else None
    if isinstance(outer, Scrubs):
        capture.scrub = outer.scrub
    return [*plugins[:at], capture, *plugins[at:]]


def capture_for(
    logs: RequestLogs | None, store: StoreMode, redactor: Redactor, keyed: bool
) -> RequestCapture | None:
    """The capture link of a config, or None when nothing can be kept: no request logs, or
    the config keeps nothing and no key can ask for more (``keyed``: callers have keys)."""
    if logs is None or (store == "none" and not keyed):
        return None
    return RequestCapture(logs, store, redactor, logs.config.max_payload_bytes)
