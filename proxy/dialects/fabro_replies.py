"""Fabro completion replies: the ``CompletionResponse`` object, the typed stream events, errors.

What :mod:`proxy.dialects.fabro` answers with (its module docstring states the mapping): a
whole reply as a completion (:func:`encode_completion`), a stream as ``stream_event`` frames
(:class:`FabroStreamEncoder`), a failure as ``{"errors": [...]}`` (:func:`encode_error`) with
Fabro's status (:func:`fabro_status`: upstream failures are 502).
"""

from __future__ import annotations

import http
from typing import Any

import msgspec
from msgspec import UNSET, Struct, UnsetType

from proxy.core.canonical import Accounting, Call, Message, Usage
from proxy.core.errors import GatewayError
from proxy.core.reply import Chunk, Reply
from proxy.core.sse import encode_named_frame
from proxy.dialects.blocks import Block, Change, StreamBlocks

KEEPALIVE_SECONDS = 15.0
_ENCODER = msgspec.json.Encoder()


class _Part(Struct):
    kind: str
    data: Any


class _MessageOut(Struct):
    role: str
    content: list[_Part]


class FabroUsage(Struct):
    """The five disjoint token buckets, 1:1 with :class:`proxy.core.canonical.Usage`."""

    input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int

    @classmethod
    def of(cls, usage: Usage | None) -> FabroUsage:
        """The buckets of ``usage`` (all zero when the provider reported none)."""
        usage = usage or Usage()
        return cls(
            input_tokens=usage.input,
            output_tokens=usage.output,
            reasoning_tokens=usage.reasoning,
            cache_read_tokens=usage.cache_read,
            cache_write_tokens=usage.cache_write,
        )


class _Response(Struct, omit_defaults=True):
    id: str
    model: str
    provider: str
    message: _MessageOut
    stop_reason: str
    usage: FabroUsage
    output: Any | UnsetType = UNSET
    cost_usd: float | UnsetType = UNSET
    cost_source: str | UnsetType = UNSET


class _ToolCallOut(Struct):
    id: str
    name: str
    arguments: Any


class _StreamStart(Struct, tag="stream_start", tag_field="type"):
    pass


class _TextStart(Struct, tag="text_start", tag_field="type"):
    text_id: str


class _TextDelta(Struct, tag="text_delta", tag_field="type"):
    delta: str
    text_id: str


class _TextEnd(Struct, tag="text_end", tag_field="type"):
    text_id: str


class _ReasoningStart(Struct, tag="reasoning_start", tag_field="type"):
    pass


class _ReasoningDelta(Struct, tag="reasoning_delta", tag_field="type"):
    delta: str


class _ReasoningEnd(Struct, tag="reasoning_end", tag_field="type"):
    pass


class _ToolCallStart(Struct, tag="tool_call_start", tag_field="type"):
    tool_call: _ToolCallOut


class _ToolCallDelta(Struct, tag="tool_call_delta", tag_field="type"):
    tool_call: _ToolCallOut


class _ToolCallEnd(Struct, tag="tool_call_end", tag_field="type"):
    tool_call: _ToolCallOut


class _Finish(Struct, tag="finish", tag_field="type"):
    finish_reason: str
    usage: FabroUsage
    response: _Response


class _ErrorEntry(Struct, omit_defaults=True):
    status: str
    title: str
    detail: str
    code: str | UnsetType = UNSET


class _ErrorEvent(Struct, tag="error", tag_field="type"):
    error: _ErrorEntry


class _ErrorBody(Struct):
    errors: list[_ErrorEntry]
    request_id: str


_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "function_call": "tool_calls"}


_STREAM_EVENT = "stream_event"


PING_FRAME = encode_named_frame("ping", b'{"type":"ping"}')


def _finish_of(finish_reason: str | None, called_tools: bool) -> str | None:
    """The finish reason to report: a natural end of an answer that called tools is
    ``tool_calls`` whatever the upstream said (some OpenAI-compatible servers say ``stop``)."""
    if called_tools and finish_reason in (None, "stop"):
        return "tool_calls"
    return finish_reason


def stop_reason(finish_reason: str | None) -> str:
    """Fabro's ``stop_reason`` for a canonical finish reason (``None`` counts as a natural end)."""
    if finish_reason is None:
        return "end_turn"
    return _STOP_REASONS.get(finish_reason, finish_reason)


_UPSTREAM_FAILURES = frozenset({"upstream_server", "overloaded", "connection"})


def fabro_status(error: GatewayError) -> int:
    """Fabro answers upstream LLM failures (5xx, overload, unreachable) with 502; others keep
    their status (a 429 stays a 429, a timeout a 504, a rejected request its 4xx)."""
    return 502 if error.kind in _UPSTREAM_FAILURES else error.status


def _error_entry(error: GatewayError) -> _ErrorEntry:
    status = fabro_status(error)
    try:
        title = http.HTTPStatus(status).phrase
    except ValueError:
        title = "Error"
    return _ErrorEntry(status=str(status), title=title, detail=error.message, code=error.code)


def encode_completion(call: Call, reply: Reply) -> bytes:
    """The completion object of a whole reply (choice 0); with a ``schema``, its ``output``."""
    response = reply.response
    assert response is not None
    choice = response.choices[0]
    message = choice.message
    output: Any = UNSET
    if call.dialect_state.get("schema"):
        output = _parse_output(message.text())
    return _ENCODER.encode(
        _completion(
            response_id=response.id,
            reply=reply,
            parts=_parts_of(message),
            finish_reason=_finish_of(choice.finish_reason, bool(message.tool_calls)),
            usage=response.usage,
            accounting=call.accounting,
            output=output,
        )
    )


def encode_error(error: GatewayError, request_id: str) -> bytes:
    """``{"errors": [{status, title, detail, code}], "request_id"}``."""
    return _ENCODER.encode(_ErrorBody(errors=[_error_entry(error)], request_id=request_id))


def _parse_arguments(text: str) -> Any:
    """Tool-call arguments parsed from JSON text; the text itself if it is not JSON."""
    if not text:
        return {}
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return text


def _parse_output(text: str) -> Any:
    """The structured output: the answer parsed as JSON, UNSET if it is not JSON."""
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return UNSET


def _parts_of(message: Message) -> list[_Part]:
    parts: list[_Part] = []
    if message.reasoning_content:
        parts.append(_Part(kind="thinking", data={"text": message.reasoning_content}))
    text = message.text()
    if text:
        parts.append(_Part(kind="text", data=text))
    for call in message.tool_calls or ():
        parts.append(_tool_call_part(call.id, call.function.name, call.function.arguments))
    return parts


def _tool_call_part(call_id: str, name: str, arguments: str) -> _Part:
    return _Part(
        kind="tool_call",
        data={
            "id": call_id,
            "name": name,
            "type": "function",
            "arguments": _parse_arguments(arguments),
        },
    )


def _completion(
    *,
    response_id: str,
    reply: Reply,
    parts: list[_Part],
    finish_reason: str | None,
    usage: Usage | None,
    accounting: Accounting,
    output: Any = UNSET,
) -> _Response:
    cost: float | None
    if accounting.cost_nanos is not None:
        cost, source = accounting.cost_nanos / 1_000_000_000, accounting.cost_source
    else:
        cost, source = (usage.cost_usd if usage is not None else None), "authoritative"
    return _Response(
        id=response_id,
        model=reply.model,
        provider=reply.provider,
        message=_MessageOut(role="assistant", content=parts),
        stop_reason=stop_reason(finish_reason),
        usage=FabroUsage.of(usage),
        output=output,
        cost_usd=cost if cost is not None else UNSET,
        cost_source=source if cost is not None and source is not None else UNSET,
    )


class FabroStreamEncoder:
    """Fabro's typed stream events, each framed as ``event: stream_event``.

    Blocks follow :class:`~proxy.dialects.blocks.StreamBlocks`: one text or reasoning block at
    a time, each tool call open from its first fragment until the answer finishes (so its
    ``tool_call_end`` carries the whole arguments, even when fragments interleave). ``finish``
    is sent by :meth:`end`, after the usage chunk, with the whole response assembled from the
    deltas (choice 0 only). There is no end marker after it.
    """

    __slots__ = (
        "_accounting",
        "_blocks",
        "_finish",
        "_id",
        "_reasoning",
        "_reply",
        "_started",
        "_text",
        "_usage",
    )
    keepalive = KEEPALIVE_SECONDS

    def __init__(self, reply: Reply, accounting: Accounting) -> None:
        self._reply = reply
        self._accounting = accounting
        self._started = False
        self._id = ""
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._blocks = StreamBlocks("call_")
        self._finish: str | None = None
        self._usage: Usage | None = None

    def chunk(self, chunk: Chunk) -> bytes:
        """See :meth:`proxy.dialects.base.StreamEncoder.chunk`."""
        out = bytearray(self._start())
        self._id = self._id or chunk.id
        if chunk.usage is not None:
            self._usage = chunk.usage
        blocks = self._blocks
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta.reasoning_content:
                _, changes = blocks.prose("reasoning")
                out += _changes(changes)
                self._reasoning.append(delta.reasoning_content)
                out += _event(_ReasoningDelta(delta=delta.reasoning_content))
            if delta.content:
                block, changes = blocks.prose("text")
                out += _changes(changes)
                self._text.append(delta.content)
                out += _event(_TextDelta(delta=delta.content, text_id=_text_id(block)))
            for fragment in delta.tool_calls or ():
                block, changes, pieces = blocks.tool_fragment(fragment)
                out += _changes(changes)
                if pieces:
                    call = _ToolCallOut(id=block.call_id, name=block.name, arguments=pieces)
                    out += _event(_ToolCallDelta(tool_call=call))
            if choice.finish_reason is not None:
                self._finish = choice.finish_reason
                out += _changes(blocks.close())
        return bytes(out)

    def end(self) -> bytes:
        """See :meth:`proxy.dialects.base.StreamEncoder.end`: closes blocks, sends ``finish``."""
        out = self._start() + _changes(self._blocks.close())
        parts: list[_Part] = []
        if self._reasoning:
            parts.append(_Part(kind="thinking", data={"text": "".join(self._reasoning)}))
        if self._text:
            parts.append(_Part(kind="text", data="".join(self._text)))
        calls = self._blocks.tool_calls
        for call in calls:
            parts.append(_tool_call_part(call.call_id, call.name, "".join(call.arguments)))
        finish_reason = _finish_of(self._finish, bool(calls))
        response = _completion(
            response_id=self._id,
            reply=self._reply,
            parts=parts,
            finish_reason=finish_reason,
            usage=self._usage,
            accounting=self._accounting,
        )
        finish = _Finish(
            finish_reason=finish_reason or "stop", usage=response.usage, response=response
        )
        return out + _event(finish)

    def ping(self) -> bytes:
        """See :meth:`proxy.dialects.base.StreamEncoder.ping`."""
        return PING_FRAME

    def error(self, error: GatewayError) -> bytes:
        """See :meth:`proxy.dialects.base.StreamEncoder.error`."""
        return self._start() + _event(_ErrorEvent(error=_error_entry(error)))

    def _start(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        return _event(_StreamStart())


def _text_id(block: Block) -> str:
    return f"text_{block.ordinal}"


def _changes(changes: list[Change]) -> bytes:
    """The start and end events of block changes."""
    out = b""
    for opened, block in changes:
        if block.kind == "text":
            text_id = _text_id(block)
            out += _event(_TextStart(text_id=text_id) if opened else _TextEnd(text_id=text_id))
        elif block.kind == "reasoning":
            out += _event(_ReasoningStart() if opened else _ReasoningEnd())
        elif opened:
            call = _ToolCallOut(id=block.call_id, name=block.name, arguments="")
            out += _event(_ToolCallStart(tool_call=call))
        else:
            arguments = _parse_arguments("".join(block.arguments))
            call = _ToolCallOut(id=block.call_id, name=block.name, arguments=arguments)
            out += _event(_ToolCallEnd(tool_call=call))
    return out


def _event(event: Struct) -> bytes:
    return encode_named_frame(_STREAM_EVENT, _ENCODER.encode(event))
