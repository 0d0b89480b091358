"""The Responses API's stream: named server-sent events, each with its ``sequence_number``.

``response.created`` and ``response.in_progress`` open it (the response with empty output), then
the items the gateway's MCP loop made (``envelope.mcp_output``: each ``output_item.added`` and
``done`` with their ``response.mcp_list_tools.*`` / ``response.mcp_call.*`` events between, at
output indexes 0…k-1; the model's items follow them), the
output item events of :mod:`proxy.dialects.responses.output` follow as deltas arrive, and one
terminal event ends it: ``response.completed``, ``response.incomplete`` (a length or
content-filter stop) or ``response.failed`` (a failure mid-stream: the output so far, the
error's code and message). There is no ``[DONE]``. Every frame is ``event: <type>`` plus
``data: <json>``; ``sequence_number`` counts from 0 without gaps. While the upstream is silent an
SSE comment keeps intermediaries from closing the connection (clients ignore it).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import get_args

from msgspec import Struct

from proxy.core.errors import GatewayError
from proxy.core.reply import Chunk
from proxy.core.sse import encode_named_frame
from proxy.dialects.responses.objects import (
    ENCODER,
    Envelope,
    McpCallItem,
    McpListToolsItem,
    OutputItem,
    ResponseError,
    ResponseObject,
    response_object,
    status_of,
)
from proxy.dialects.responses.output import (
    ItemEvent,
    McpCallCompleted,
    McpCallFailed,
    McpCallInProgress,
    McpListToolsCompleted,
    McpListToolsFailed,
    McpListToolsInProgress,
    OutputBuilder,
    OutputItemAdded,
    OutputItemDone,
)

KEEPALIVE_SECONDS = 15.0
KEEPALIVE_FRAME = b": keep-alive\n\n"


class ResponseCreated(Struct, tag="response.created", tag_field="type"):
    response: ResponseObject
    sequence_number: int = 0


class ResponseInProgress(Struct, tag="response.in_progress", tag_field="type"):
    response: ResponseObject
    sequence_number: int = 0


class ResponseCompleted(Struct, tag="response.completed", tag_field="type"):
    response: ResponseObject
    sequence_number: int = 0


class ResponseIncomplete(Struct, tag="response.incomplete", tag_field="type"):
    response: ResponseObject
    sequence_number: int = 0


class ResponseFailed(Struct, tag="response.failed", tag_field="type"):
    response: ResponseObject
    sequence_number: int = 0


_Event = (
    ItemEvent
    | ResponseCreated
    | ResponseInProgress
    | ResponseCompleted
    | ResponseIncomplete
    | ResponseFailed
)
"""Every event a stream frames (each has a ``sequence_number``)."""


def final_response(envelope: Envelope, builder: OutputBuilder, model: str) -> ResponseObject:
    """The response object of a stream that ended normally (``builder`` closed)."""
    status, incomplete = status_of(builder.finish_reason)
    return response_object(
        envelope,
        model=builder.model or model,
        output=builder.items(),
        status=status,
        usage=builder.usage,
        incomplete=incomplete,
    )


class ResponsesStreamEncoder:
    """Encodes one streamed reply (see the module docstring).

    It assembles the output with its own :class:`OutputBuilder`, or frames the events of
    ``builder`` when one is given: then whoever gave it feeds it every chunk before the encoder
    sees that chunk (the conversation state's recording stream, which needs the same output to
    store), and the encoder only frames what the builder emitted.
    """

    __slots__ = ("_builder", "_envelope", "_feeds", "_model", "_sequence", "_started")
    keepalive = KEEPALIVE_SECONDS

    def __init__(
        self, envelope: Envelope, model: str, builder: OutputBuilder | None = None
    ) -> None:
        """``model`` names the serving model until the upstream's chunks name it."""
        self._envelope = envelope
        self._model = model
        self._feeds = builder is None
        self._builder = OutputBuilder(envelope.id, emit=True) if builder is None else builder
        self._sequence = 0
        self._started = False

    def chunk(self, chunk: Chunk) -> bytes:
        """See :meth:`proxy.dialects.base.StreamEncoder.chunk`."""
        builder = self._builder
        if self._feeds:
            builder.add(chunk)
        out = self._start()
        if builder.events:
            out += self._drain()
        return out

    def end(self) -> bytes:
        """See :meth:`proxy.dialects.base.StreamEncoder.end`: every item closed, then
        ``response.completed`` or ``response.incomplete`` with the whole response."""
        out = self._start()
        builder = self._builder
        builder.close()
        out += self._drain()
        response = final_response(self._envelope, builder, self._model)
        terminal = ResponseIncomplete if response.status == "incomplete" else ResponseCompleted
        return out + self._frame(terminal(response))

    def ping(self) -> bytes:
        """See :meth:`proxy.dialects.base.StreamEncoder.ping`: an SSE comment."""
        return KEEPALIVE_FRAME

    def error(self, error: GatewayError) -> bytes:
        """See :meth:`proxy.dialects.base.StreamEncoder.error`: ``response.failed`` with the
        output so far (unfinished items ``incomplete``) and the error."""
        out = self._start()
        response = response_object(
            self._envelope,
            model=self._builder.model or self._model,
            output=self._builder.items(final=True),
            status="failed",
            usage=self._builder.usage,
            error=ResponseError.of(error),
        )
        return out + self._frame(ResponseFailed(response))

    def _start(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        response = response_object(
            self._envelope,
            model=self._builder.model or self._model,
            output=[],
            status="in_progress",
        )
        out = self._frame(ResponseCreated(response)) + self._frame(ResponseInProgress(response))
        for index, item in enumerate(self._envelope.mcp_output):  # the gateway's MCP items
            out += self._frame(OutputItemAdded(index, item))
            for event in _mcp_events(item, index):
                out += self._frame(event)
            out += self._frame(OutputItemDone(index, item))
        return out

    def _drain(self) -> bytes:
        events = self._builder.events
        frame = self._frame
        shift = len(self._envelope.mcp_output)  # the model's items follow the MCP items
        if shift:
            for event in events:
                event.output_index += shift
        out = b"".join([frame(event) for event in events])
        events.clear()
        return out

    def _frame(self, event: _Event) -> bytes:
        event.sequence_number = self._sequence
        self._sequence += 1
        return _HEADS[type(event)] + ENCODER.encode(event) + b"\n\n"


def _mcp_events(item: OutputItem, index: int) -> tuple[ItemEvent, ...]:
    """An MCP item's own events, between its ``added`` and ``done`` (as OpenAI sends them)."""
    if isinstance(item, McpListToolsItem):
        end: ItemEvent = (
            McpListToolsFailed(item.id, index)
            if item.error is not None
            else McpListToolsCompleted(item.id, index)
        )
        return McpListToolsInProgress(item.id, index), end
    if isinstance(item, McpCallItem):
        end = (
            McpCallFailed(item.id, index)
            if item.status == "failed"
            else McpCallCompleted(item.id, index)
        )
        return McpCallInProgress(item.id, index), end
    return ()


def _head(kind: type[Struct]) -> bytes:
    tag = kind.__struct_config__.tag
    assert isinstance(tag, str)
    return encode_named_frame(tag, b"")[:-2]


_LIFECYCLE = (ResponseCreated, ResponseInProgress, ResponseCompleted, ResponseIncomplete)
_HEADS: Mapping[type, bytes] = MappingProxyType(
    {kind: _head(kind) for kind in (*_LIFECYCLE, ResponseFailed, *get_args(ItemEvent))}
)
"""``event: <type>\ndata: `` for every event class, built once."""
