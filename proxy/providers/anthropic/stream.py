"""The Anthropic Messages stream: SSE events in, canonical chunks out.

A streaming ``/v1/messages`` answer is SSE; each event's data is one JSON object tagged by ``type``
(``message_start``, ``content_block_start``, ``content_block_delta``, ``content_block_stop``,
``message_delta``, ``message_stop``, ``ping``, ``error``). :class:`AnthropicStreamParser` (one per
stream, from :meth:`~proxy.providers.anthropic.provider.AnthropicProvider.stream_parser`) translates
them in order into canonical :class:`~proxy.core.reply.Chunk` values: ``message_start`` → the
role chunk with the usage it announced as ``input_usage``; text and thinking → content and
``reasoning_content`` deltas; each ``tool_use`` block → the next tool call, whose
``input_json_delta`` fragments become its argument deltas; ``message_delta`` → the finish reason
(per :data:`FINISH_REASONS`) and the matched stop sequence, its cumulative usage kept;
``message_stop`` → a usage-only chunk. ``ping``, ``content_block_stop`` and unknown event types
carry nothing.

How it ends: the parser never raises :class:`~proxy.providers.base.StreamEnd`; a body that ends
after ``message_stop`` is complete, one that ends before it was cut
(:meth:`AnthropicStreamParser.end` raises :class:`~proxy.core.errors.UpstreamUnavailable`). An
in-band ``error`` event is raised as the provider's classification
(:meth:`~proxy.providers.anthropic.provider.AnthropicProvider.classify`) of the status its error
type stands for (500 when unknown); event data that does not decode is an
:class:`~proxy.core.errors.UpstreamError` (502, "upstream sent a malformed stream event: …").

The wire message, block, usage and error structs and the stop-reason mapping
(:func:`finish_reason`, :func:`matched_stop`) serve whole responses too:
:mod:`proxy.providers.anthropic.provider` imports them from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

from proxy.core.canonical import FinishReason, Usage
from proxy.core.errors import UpstreamUnavailable
from proxy.core.reply import Chunk, ChunkChoice, Delta, FunctionCallDelta, ToolCallDelta
from proxy.providers.base import malformed

if TYPE_CHECKING:
    from proxy.providers.anthropic.provider import AnthropicProvider


FINISH_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
"""Anthropic ``stop_reason`` → canonical finish reason (anything else: ``stop``)."""

_STATUS_BY_TYPE: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


# --- wire shapes (stream events; message, block, usage and error are responses' too) -------------


class WireUsage(Struct):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None

    def canonical(self) -> Usage:
        return Usage(
            input=self.input_tokens or 0,
            cache_read=self.cache_read_input_tokens or 0,
            cache_write=self.cache_creation_input_tokens or 0,
            output=self.output_tokens or 0,
        )

    def update(self, later: WireUsage) -> None:
        """Take ``later``'s counts where it has them (``message_delta`` counts are cumulative)."""
        for field in self.__struct_fields__:
            value = getattr(later, field)
            if value is not None:
                setattr(self, field, value)


class WireBlock(Struct):
    type: str
    text: str = ""
    thinking: str = ""
    id: str = ""
    name: str = ""
    input: Raw | UnsetType = UNSET


class WireMessage(Struct):
    id: str = ""
    model: str = ""
    content: list[WireBlock] = msgspec.field(default_factory=list)
    stop_reason: str | None = None
    stop_sequence: str | None = None
    usage: WireUsage | None = None


class _WireDelta(Struct):
    type: str = ""
    text: str = ""
    partial_json: str = ""
    thinking: str = ""
    stop_reason: str | None = None
    stop_sequence: str | None = None


class WireError(Struct):
    type: str = ""
    message: str = ""


class _Event(Struct):
    """Any stream event: which fields are set depends on ``type``."""

    type: str
    message: WireMessage | None = None
    index: int = 0
    content_block: WireBlock | None = None
    delta: _WireDelta | None = None
    usage: WireUsage | None = None
    error: WireError | None = None


_EVENT_DECODER = msgspec.json.Decoder(_Event)


# --- the parser ----------------------------------------------------------------------------------


class AnthropicStreamParser:
    """Translates one Anthropic event stream; see :class:`proxy.providers.base.StreamParser`.

    ``message_start`` opens the reply: a role chunk carrying the usage it announced as
    ``input_usage``. Each tool-use content block becomes the next tool call (its block index
    mapped to a tool-call index); ``message_delta`` carries the stop reason and cumulative
    usage; ``message_stop`` ends the stream with a usage-only chunk. A body that ends before
    ``message_stop`` was cut.
    """

    __slots__ = ("_id", "_model", "_provider", "_stopped", "_tools", "_usage")

    def __init__(self, provider: AnthropicProvider) -> None:
        self._provider = provider
        self._id = ""
        self._model = ""
        self._usage = WireUsage()
        self._tools: dict[int, int] = {}
        self._stopped = False

    def parse_event(self, event: str, data: bytes) -> Chunk | None:
        """See :meth:`proxy.providers.base.StreamParser.parse_event`."""
        try:
            wire = _EVENT_DECODER.decode(data)
        except msgspec.DecodeError as exc:
            raise malformed(self._provider.name, "stream event", exc) from None
        kind = wire.type
        if kind == "content_block_delta" and wire.delta is not None:
            return self._block_delta(wire.index, wire.delta)
        if kind == "content_block_start" and wire.content_block is not None:
            return self._block_start(wire.index, wire.content_block)
        if kind == "message_start" and wire.message is not None:
            message = wire.message
            self._id = message.id
            self._model = message.model
            chunk = self._chunk(Delta(role="assistant", content=""))
            if message.usage is not None:
                self._usage.update(message.usage)
                chunk.input_usage = self._usage.canonical()
            return chunk
        if kind == "message_delta":
            if wire.usage is not None:
                self._usage.update(wire.usage)
            delta = wire.delta
            if delta is None or not delta.stop_reason:
                return None
            chunk = self._chunk(Delta(), finish_reason(delta.stop_reason))
            chunk.choices[0].stop_sequence = matched_stop(delta.stop_reason, delta.stop_sequence)
            return chunk
        if kind == "message_stop":
            self._stopped = True
            return Chunk(id=self._id, model=self._model, choices=[], usage=self._usage.canonical())
        if kind == "error":
            error = wire.error or WireError()
            status = _STATUS_BY_TYPE.get(error.type, 500)
            raise self._provider.classify(status, error.message)
        return None  # ping, content_block_stop, and event types added later

    def end(self) -> Chunk | None:
        """See :meth:`proxy.providers.base.StreamParser.end`."""
        if not self._stopped:
            raise UpstreamUnavailable(
                "upstream closed the stream before message_stop", provider=self._provider.name
            )
        return None

    def _block_start(self, index: int, block: WireBlock) -> Chunk | None:
        if block.type == "tool_use":
            position = self._tools[index] = len(self._tools)
            call = ToolCallDelta(
                index=position,
                id=block.id,
                type="function",
                function=FunctionCallDelta(name=block.name, arguments=""),
            )
            return self._chunk(Delta(tool_calls=[call]))
        if block.type == "text" and block.text:
            return self._chunk(Delta(content=block.text))
        if block.type == "thinking" and block.thinking:
            return self._chunk(Delta(reasoning_content=block.thinking))
        return None

    def _block_delta(self, index: int, delta: _WireDelta) -> Chunk | None:
        if delta.type == "text_delta":
            return self._chunk(Delta(content=delta.text))
        if delta.type == "input_json_delta":
            position = self._tools.get(index)
            if position is None or not delta.partial_json:
                return None
            fragment = FunctionCallDelta(arguments=delta.partial_json)
            return self._chunk(Delta(tool_calls=[ToolCallDelta(index=position, function=fragment)]))
        if delta.type == "thinking_delta":
            return self._chunk(Delta(reasoning_content=delta.thinking))
        return None  # signature_delta, citations_delta

    def _chunk(self, delta: Delta, finish: FinishReason | None = None) -> Chunk:
        return Chunk(
            id=self._id,
            model=self._model,
            choices=[ChunkChoice(index=0, delta=delta, finish_reason=finish)],
        )


# --- helpers -------------------------------------------------------------------------------------


def matched_stop(stop_reason: str | None, stop_sequence: str | None) -> str | UnsetType:
    """The stop sequence that ended the answer, when Anthropic says one did."""
    if stop_reason == "stop_sequence" and stop_sequence is not None:
        return stop_sequence
    return UNSET


def finish_reason(stop_reason: str | None) -> FinishReason | None:
    if stop_reason is None:
        return None
    return FINISH_REASONS.get(stop_reason, "stop")
