"""The Bedrock Converse stream: AWS event-stream frames in, canonical chunks out.

A ``/converse-stream`` body is a sequence of AWS event-stream frames (the binary framing is
:mod:`proxy.providers.bedrock.eventstream`). :class:`ConverseStreamFrames` (one per stream, from
:meth:`~proxy.providers.bedrock.provider.BedrockProvider.stream_decoder`) turns them into
:class:`StreamEvent` values: an ``event`` frame by its ``:event-type``, an ``exception`` or
``error`` frame as ``exception:<type>`` with its ``{"message": …}`` payload. Corrupt framing is an
:class:`~proxy.core.errors.UpstreamError` (502, "upstream sent a malformed event stream: …"); a body
that ends mid-frame, :class:`~proxy.core.errors.UpstreamUnavailable`.

:class:`ConverseStreamParser` (one per stream, from
:meth:`~proxy.providers.bedrock.provider.BedrockProvider.stream_parser`) translates those events in
order into canonical :class:`~proxy.core.reply.Chunk` values: ``messageStart`` → the role chunk,
text, tool-use and reasoning deltas → content, tool-call and ``reasoning_content`` deltas (a tool
call's index counts tool calls, not content blocks), ``messageStop`` → the finish reason,
``metadata`` → a usage-only chunk. There is no end marker (it never raises
:class:`~proxy.providers.base.StreamEnd`): the stream is complete at its ``metadata`` event, and a
body that ends before it was cut (:meth:`ConverseStreamParser.end` raises
:class:`~proxy.core.errors.UpstreamUnavailable`). An in-band exception is raised as the provider's
classification of its AWS error type
(:meth:`~proxy.providers.bedrock.provider.BedrockProvider.classify`, with the HTTP status AWS gives
that type, else 500); a payload that does not decode is an
:class:`~proxy.core.errors.UpstreamError` (502, "upstream sent a malformed <event> event: …").

The usage struct, the stop-reason mapping (:func:`finish_reason`), the error-body fields
(:func:`error_fields`) and the id maker (:func:`new_id`) serve whole responses too:
:mod:`proxy.providers.bedrock.provider` imports them from here.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, NamedTuple

import msgspec
from msgspec import Struct

from proxy.core.canonical import FinishReason, Usage
from proxy.core.errors import UpstreamUnavailable
from proxy.core.reply import Chunk, ChunkChoice, Delta, FunctionCallDelta, ToolCallDelta
from proxy.providers.base import malformed
from proxy.providers.bedrock.eventstream import EventStreamDecoder, EventStreamError

if TYPE_CHECKING:
    from proxy.providers.bedrock.provider import BedrockProvider


# ---------------------------------------------------------------------------------------------
# Wire shapes (stream events; the usage and error bodies are whole responses' too)
# ---------------------------------------------------------------------------------------------


class WireUsage(Struct, rename="camel"):
    input_tokens: int | None = 0
    output_tokens: int | None = 0
    cache_read_input_tokens: int | None = 0
    cache_write_input_tokens: int | None = 0

    def canonical(self) -> Usage:
        return Usage(
            input=self.input_tokens or 0,
            cache_read=self.cache_read_input_tokens or 0,
            cache_write=self.cache_write_input_tokens or 0,
            output=self.output_tokens or 0,
        )


class _ToolStart(Struct, rename="camel"):
    tool_use_id: str
    name: str


class _Start(Struct, rename="camel"):
    tool_use: _ToolStart | None = None


class _BlockStart(Struct, rename="camel"):
    content_block_index: int = 0
    start: _Start | None = None


class _ToolInput(Struct):
    input: str = ""


class _ReasoningDelta(Struct):
    text: str | None = None


class _DeltaBody(Struct, rename="camel"):
    text: str | None = None
    tool_use: _ToolInput | None = None
    reasoning_content: _ReasoningDelta | None = None


class _BlockDelta(Struct, rename="camel"):
    delta: _DeltaBody
    content_block_index: int = 0


class _MessageStop(Struct, rename="camel"):
    stop_reason: str = "end_turn"


class _Metadata(Struct):
    usage: WireUsage | None = None


class _ErrorBody(Struct):
    message: str | None = None
    Message: str | None = None
    kind: str | None = msgspec.field(default=None, name="__type")


_BLOCK_START = msgspec.json.Decoder(_BlockStart)
_BLOCK_DELTA = msgspec.json.Decoder(_BlockDelta)
_MESSAGE_STOP = msgspec.json.Decoder(_MessageStop)
_METADATA = msgspec.json.Decoder(_Metadata)
_ERROR = msgspec.json.Decoder(_ErrorBody)
_ENCODER = msgspec.json.Encoder()

_FINISH: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
}
_EXCEPTION_PREFIX = "exception:"
_STREAM_EXCEPTION_STATUS = {
    "throttlingexception": 429,
    "validationexception": 400,
    "serviceunavailableexception": 503,
    "modelstreamerrorexception": 424,
    "internalserverexception": 500,
}


# ---------------------------------------------------------------------------------------------
# Streams
# ---------------------------------------------------------------------------------------------


class StreamEvent(NamedTuple):
    """One Converse stream event: its ``:event-type`` (``exception:<type>`` for errors) and
    its JSON payload."""

    event: str
    data: bytes


class ConverseStreamFrames:
    """Event-stream frames → :class:`StreamEvent` values, for one stream.

    An exception frame becomes ``exception:<type>`` with its ``{"message": …}`` payload. Corrupt
    framing is an :class:`UpstreamError`; a body that ends mid-frame, :class:`UpstreamUnavailable`.
    """

    __slots__ = ("_decoder", "_provider")

    def __init__(self, provider: str) -> None:
        self._provider = provider
        self._decoder = EventStreamDecoder()

    @property
    def pending(self) -> int:
        """Bytes held for a frame not yet complete."""
        return self._decoder.pending

    def feed(self, data: bytes) -> list[StreamEvent]:
        """The events ``data`` completes."""
        try:
            messages = self._decoder.feed(data)
        except EventStreamError as exc:
            raise malformed(self._provider, "event stream", exc) from None
        events: list[StreamEvent] = []
        for headers, payload in messages:
            message_type = headers.get(":message-type")
            if message_type == "event":
                events.append(StreamEvent(str(headers.get(":event-type", "")), payload))
            elif message_type == "exception":
                kind = str(headers.get(":exception-type", "exception"))
                events.append(StreamEvent(_EXCEPTION_PREFIX + kind, payload))
            elif message_type == "error":
                kind = str(headers.get(":error-code", "error"))
                text = str(headers.get(":error-message", ""))
                events.append(
                    StreamEvent(_EXCEPTION_PREFIX + kind, _ENCODER.encode({"message": text}))
                )
        return events

    def close(self) -> list[StreamEvent]:
        """At the end of the body: nothing more, or :class:`UpstreamUnavailable` mid-frame."""
        if self._decoder.pending:
            raise UpstreamUnavailable(
                "upstream closed the stream in the middle of an event", provider=self._provider
            )
        return []


class ConverseStreamParser:
    """Translates the events of one Converse stream, in order, into canonical chunks."""

    __slots__ = ("_created", "_done", "_id", "_provider", "_tools")

    def __init__(self, provider: BedrockProvider) -> None:
        self._provider = provider
        self._id = new_id()
        self._created = int(time.time())
        self._tools: dict[int, int] = {}
        self._done = False

    def parse_event(self, event: str, data: bytes) -> Chunk | None:
        """See :meth:`proxy.providers.base.StreamParser.parse_event`."""
        try:
            if event == "contentBlockDelta":
                return self._delta(_BLOCK_DELTA.decode(data))
            if event == "contentBlockStart":
                return self._start(_BLOCK_START.decode(data))
            if event == "messageStart":
                return self._chunk(Delta(role="assistant", content=""))
            if event == "messageStop":
                stop = _MESSAGE_STOP.decode(data).stop_reason
                return self._chunk(Delta(), finish_reason(stop, bool(self._tools)))
            if event == "metadata":
                self._done = True
                usage = _METADATA.decode(data).usage
                if usage is None:
                    return None
                return Chunk(self._id, "", [], self._created, usage=usage.canonical())
            if event.startswith(_EXCEPTION_PREFIX):
                kind = event[len(_EXCEPTION_PREFIX) :]
                status = _STREAM_EXCEPTION_STATUS.get(kind.lower(), 500)
                raise self._provider.classify(kind, error_fields(data)[0], status)
        except msgspec.DecodeError as exc:
            raise malformed(self._provider.name, f"{event} event", exc) from None
        return None

    def end(self) -> Chunk | None:
        """See :meth:`proxy.providers.base.StreamParser.end`: complete after ``metadata``."""
        if not self._done:
            raise UpstreamUnavailable(
                "upstream closed the stream before its metadata event",
                provider=self._provider.name,
            )
        return None

    def _start(self, start: _BlockStart) -> Chunk | None:
        if start.start is None or start.start.tool_use is None:
            return None
        tool = start.start.tool_use
        index = self._tool_index(start.content_block_index)
        call = ToolCallDelta(
            index=index,
            id=tool.tool_use_id,
            type="function",
            function=FunctionCallDelta(name=tool.name, arguments=""),
        )
        return self._chunk(Delta(tool_calls=[call]))

    def _delta(self, event: _BlockDelta) -> Chunk | None:
        delta = event.delta
        if delta.text is not None:
            return self._chunk(Delta(content=delta.text))
        if delta.tool_use is not None:
            index = self._tool_index(event.content_block_index)
            fragment = FunctionCallDelta(arguments=delta.tool_use.input)
            return self._chunk(Delta(tool_calls=[ToolCallDelta(index=index, function=fragment)]))
        if delta.reasoning_content is not None and delta.reasoning_content.text is not None:
            return self._chunk(Delta(reasoning_content=delta.reasoning_content.text))
        return None

    def _tool_index(self, block: int) -> int:
        """The tool-call number of content block ``block`` (numbered on first sight)."""
        index = self._tools.get(block)
        if index is None:
            index = self._tools[block] = len(self._tools)
        return index

    def _chunk(self, delta: Delta, finish: FinishReason | None = None) -> Chunk:
        return Chunk(self._id, "", [ChunkChoice(0, delta, finish)], self._created)


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def finish_reason(stop_reason: str, called_tools: bool) -> FinishReason:
    finish = _FINISH.get(stop_reason, "stop")
    if finish == "stop" and called_tools:
        return "tool_calls"
    return finish


def error_fields(body: bytes) -> tuple[str, str]:
    """The message (``message`` or ``Message``; raw text if not JSON) and the error type
    (``__type``, without its namespace) of an AWS error body."""
    try:
        error = _ERROR.decode(body)
    except msgspec.DecodeError:
        return body[:500].decode("utf-8", "replace").strip(), ""
    return error.message or error.Message or "", (error.kind or "").rsplit("#", 1)[-1]


def new_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"
