"""Anthropic Messages replies: the ``message`` object, the named stream events, and errors.

What :mod:`proxy.dialects.anthropic` answers with (its module docstring states the mapping):
a whole reply as a ``message`` (:func:`encode_message`), a stream as Anthropic's events
(:class:`AnthropicStreamEncoder`), a failure as ``{"type": "error", ...}`` (:func:`error_json`,
also used for errors outside the dialect), and the ``msg_`` / ``toolu_`` id style.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import Struct

from proxy.core.canonical import Call, Message, Usage
from proxy.core.errors import GatewayError
from proxy.core.reply import Chunk, Reply
from proxy.core.sse import encode_named_frame
from proxy.dialects.anthropic_citations import (
    TextOut,
    WebCitation,
    citation_of,
    cited_text,
    url_citation,
)
from proxy.dialects.blocks import Block, Change, StreamBlocks

KEEPALIVE_SECONDS = 15.0
_ENCODER = msgspec.json.Encoder()


class _ThinkingOut(Struct, tag="thinking", tag_field="type"):
    thinking: str
    signature: str = ""


class _Caller(Struct):
    type: str = "direct"


class _ToolUseOut(Struct, tag="tool_use", tag_field="type"):
    id: str
    name: str
    input: Any
    caller: _Caller = msgspec.field(default_factory=_Caller)


_BlockOut = TextOut | _ThinkingOut | _ToolUseOut


class AnthropicUsage(Struct):
    """Anthropic's usage object: uncached input, the two cache buckets, output + reasoning."""

    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    cache_creation: None = None
    inference_geo: None = None
    server_tool_use: None = None
    service_tier: None = None

    @classmethod
    def of(cls, usage: Usage | None) -> AnthropicUsage:
        """Anthropic's buckets for canonical usage (all zero when none was reported)."""
        usage = usage or Usage()
        return cls(
            input_tokens=usage.input,
            output_tokens=usage.completion_tokens,
            cache_creation_input_tokens=usage.cache_write,
            cache_read_input_tokens=usage.cache_read,
        )


class _DeltaUsage(Struct):
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    server_tool_use: None = None


class _MessageOut(Struct):
    id: str
    model: str
    content: list[_BlockOut]
    stop_reason: str | None
    usage: AnthropicUsage
    type: str = "message"
    role: str = "assistant"
    stop_sequence: str | None = None
    stop_details: None = None
    container: None = None


class _MessageStart(Struct, tag="message_start", tag_field="type"):
    message: _MessageOut


class _BlockStart(Struct, tag="content_block_start", tag_field="type"):
    index: int
    content_block: _BlockOut


class _TextDelta(Struct, tag="text_delta", tag_field="type"):
    text: str


class _ThinkingDelta(Struct, tag="thinking_delta", tag_field="type"):
    thinking: str


class _JsonDelta(Struct, tag="input_json_delta", tag_field="type"):
    partial_json: str


class _CitationsDelta(Struct, tag="citations_delta", tag_field="type"):
    citation: WebCitation


class _BlockDelta(Struct, tag="content_block_delta", tag_field="type"):
    index: int
    delta: _TextDelta | _ThinkingDelta | _JsonDelta | _CitationsDelta


class _BlockStop(Struct, tag="content_block_stop", tag_field="type"):
    index: int


class _StopDelta(Struct):
    stop_reason: str
    stop_sequence: str | None = None
    stop_details: None = None
    container: None = None


class _MessageDelta(Struct, tag="message_delta", tag_field="type"):
    delta: _StopDelta
    usage: _DeltaUsage


class _ErrorBody(Struct):
    type: str
    message: str


class _ErrorEnvelope(Struct, tag="error", tag_field="type"):
    error: _ErrorBody
    request_id: str | None = None


_STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


PING_FRAME = encode_named_frame("ping", b'{"type":"ping"}')


_MESSAGE_STOP = encode_named_frame("message_stop", b'{"type":"message_stop"}')


def stop_reason(
    finish_reason: str | None, called_tools: bool = False, stop_sequence: str | None = None
) -> str:
    """Anthropic's stop reason for a canonical finish reason (``None`` is a natural end).

    A natural end of an answer that called tools is ``tool_use`` whatever the upstream said
    (some OpenAI-compatible servers say ``stop``): Anthropic clients run tools only on it. A
    natural end at a known ``stop_sequence`` is ``stop_sequence``.
    """
    if finish_reason is None or finish_reason == "stop":
        if called_tools:
            return "tool_use"
        return "end_turn" if stop_sequence is None else "stop_sequence"
    return _STOP_REASONS.get(finish_reason, "end_turn")


def error_type(status: int) -> str:
    """Anthropic's error type name for an HTTP status."""
    known = _ERROR_TYPES.get(status)
    if known is not None:
        return known
    return "invalid_request_error" if 400 <= status < 500 else "api_error"


def error_json(error: GatewayError, request_id: str | None) -> bytes:
    """``{"type": "error", "error": {"type", "message"}, "request_id"}``."""
    body = _ErrorBody(type=error_type(error.status), message=error.message)
    return _ENCODER.encode(_ErrorEnvelope(error=body, request_id=request_id))


def message_id(upstream_id: str, request_id: str) -> str:
    """An Anthropic-style ``msg_…`` id: the upstream's when it is one, else ``msg_`` and the
    letters and digits of the upstream's id (of the request id when the upstream gave none)."""
    return _styled("msg_", upstream_id or request_id)


def tool_use_id(call_id: str) -> str:
    """An Anthropic-style ``toolu_…`` id for a tool call: the call's own when it is one, else
    ``toolu_`` and the letters and digits of the call's id after any ``call`` prefix. The same
    id always maps to the same ``toolu_`` id, so a tool result the client sends back with it
    answers the same call in the conversation the upstream sees."""
    if call_id.startswith("toolu_"):
        return call_id
    return _styled("toolu_", call_id.removeprefix("call_").removeprefix("call-"))


def _styled(prefix: str, value: str) -> str:
    if value.startswith(prefix):
        return value
    return prefix + "".join(c for c in value[:64] if c.isascii() and (c.isalnum() or c == "_"))


def encode_message(call: Call, reply: Reply) -> bytes:
    """The ``message`` object of a whole reply (choice 0)."""
    response = reply.response
    assert response is not None
    choice = response.choices[0]
    called_tools = bool(choice.message.tool_calls)
    matched = choice.stop_sequence or None
    reason = stop_reason(choice.finish_reason, called_tools, matched)
    return _ENCODER.encode(
        _MessageOut(
            id=message_id(response.id, call.request_id),
            model=response.model or reply.model,
            content=_blocks(choice.message),
            stop_reason=reason,
            stop_sequence=matched if reason == "stop_sequence" else None,
            usage=AnthropicUsage.of(response.usage),
        )
    )


def _tool_input(arguments: str) -> Any:
    """A tool call's ``input`` object; non-object JSON text is kept under ``"arguments"``."""
    if not arguments:
        return {}
    try:
        value = msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"arguments": value}


def _blocks(message: Message) -> list[_BlockOut]:
    blocks: list[_BlockOut] = []
    if message.reasoning_content:
        blocks.append(_ThinkingOut(thinking=message.reasoning_content))
    text = message.text()
    if text:
        blocks.extend(cited_text(text, message.annotations or ()))
    for call in message.tool_calls or ():
        blocks.append(
            _ToolUseOut(
                id=tool_use_id(call.id),
                name=call.function.name,
                input=_tool_input(call.function.arguments),
            )
        )
    return blocks


def _frame(event: Struct) -> bytes:
    tag = event.__struct_config__.tag
    assert isinstance(tag, str)
    return encode_named_frame(tag, _ENCODER.encode(event))


class AnthropicStreamEncoder:
    """Anthropic's named stream events for one reply (choice 0).

    ``message_start`` goes out with the first chunk, with the usage the upstream announced
    before its first delta (``Chunk.input_usage``; zero when it announced none); the counts of
    the last chunk are sent, cumulative, in ``message_delta``. Content blocks follow
    :class:`~proxy.dialects.blocks.StreamBlocks`: one text or thinking block at a time, each
    tool call in its own block from its first fragment to the end of the answer.
    """

    __slots__ = (
        "_blocks",
        "_fallback_id",
        "_finish",
        "_matched",
        "_model",
        "_request_id",
        "_started",
        "_text",
        "_usage",
    )
    keepalive = KEEPALIVE_SECONDS

    def __init__(self, *, fallback_id: str, model: str, request_id: str | None = None) -> None:
        """``request_id`` goes into an in-band error frame, as in Anthropic's error bodies."""
        self._fallback_id = fallback_id
        self._model = model
        self._request_id = request_id
        self._started = False
        self._blocks = StreamBlocks("toolu_")
        self._finish: str | None = None
        self._matched: str | None = None
        self._usage: Usage | None = None
        self._text: list[str] = []  # the answer so far, for the text a citation quotes

    def chunk(self, chunk: Chunk) -> bytes:
        """See :meth:`proxy.dialects.base.StreamEncoder.chunk`."""
        out = bytearray(self._start(chunk.id, chunk.model, chunk.input_usage))
        if chunk.usage is not None:
            self._usage = chunk.usage
        blocks = self._blocks
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta.reasoning_content:
                block, changes = blocks.prose("reasoning")
                out += _changes(changes)
                out += _delta(block, _ThinkingDelta(thinking=delta.reasoning_content))
            if delta.content:
                block, changes = blocks.prose("text")
                out += _changes(changes)
                out += _delta(block, _TextDelta(text=delta.content))
                self._text.append(delta.content)
            if delta.annotations:
                out += self._citations(delta.annotations)
            for fragment in delta.tool_calls or ():
                block, changes, pieces = blocks.tool_fragment(fragment)
                out += _changes(changes)
                if pieces:
                    out += _delta(block, _JsonDelta(partial_json=pieces))
            if choice.finish_reason is not None:
                self._finish = choice.finish_reason
                self._matched = choice.stop_sequence or None
        return bytes(out)

    def end(self) -> bytes:
        """See :meth:`proxy.dialects.base.StreamEncoder.end`."""
        usage = self._usage or Usage()
        reason = stop_reason(self._finish, bool(self._blocks.tool_calls), self._matched)
        matched = self._matched if reason == "stop_sequence" else None
        delta = _MessageDelta(
            delta=_StopDelta(stop_reason=reason, stop_sequence=matched),
            usage=_DeltaUsage(
                input_tokens=usage.input,
                output_tokens=usage.completion_tokens,
                cache_creation_input_tokens=usage.cache_write,
                cache_read_input_tokens=usage.cache_read,
            ),
        )
        closing = _changes(self._blocks.close())
        return self._start("", "") + closing + _frame(delta) + _MESSAGE_STOP

    def ping(self) -> bytes:
        """See :meth:`proxy.dialects.base.StreamEncoder.ping`."""
        return PING_FRAME

    def error(self, error: GatewayError) -> bytes:
        """See :meth:`proxy.dialects.base.StreamEncoder.error`."""
        return encode_named_frame("error", error_json(error, self._request_id))

    def _citations(self, annotations: list[dict[str, Any]]) -> bytes:
        """``citations_delta`` events, in the open text block (one is opened if none is), for
        the ``url_citation`` annotations of a delta (spans index the whole answer)."""
        out = b""
        for annotation in annotations:
            body = url_citation(annotation)
            if body is None:
                continue
            block, changes = self._blocks.prose("text")
            citation = citation_of(body, "".join(self._text))
            out += _changes(changes) + _delta(block, _CitationsDelta(citation=citation))
        return out

    def _start(self, upstream_id: str, model: str, usage: Usage | None = None) -> bytes:
        if self._started:
            return b""
        self._started = True
        message = _MessageOut(
            id=_styled("msg_", upstream_id) if upstream_id else self._fallback_id,
            model=model or self._model,
            content=[],
            stop_reason=None,
            usage=AnthropicUsage.of(usage),
        )
        return _frame(_MessageStart(message=message))


def _changes(changes: list[Change]) -> bytes:
    """``content_block_start`` / ``content_block_stop`` events for block changes."""
    out = b""
    for opened, block in changes:
        if not opened:
            out += _frame(_BlockStop(index=block.index))
            continue
        content: _BlockOut
        if block.kind == "text":
            content = TextOut(text="")
        elif block.kind == "reasoning":
            content = _ThinkingOut(thinking="")
        else:
            content = _ToolUseOut(id=tool_use_id(block.call_id), name=block.name, input={})
        out += _frame(_BlockStart(index=block.index, content_block=content))
    return out


def _delta(
    block: Block, delta: _TextDelta | _ThinkingDelta | _JsonDelta | _CitationsDelta
) -> bytes:
    return _frame(_BlockDelta(index=block.index, delta=delta))
