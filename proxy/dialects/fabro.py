"""Fabro completions — ``POST /api/v1/completions``.

Requests carry messages whose content is a list of ``{kind, data}`` parts (``text``, ``image``,
``tool_call``, ``tool_result``, ``thinking``). They map onto the OpenAI-shaped canonical call:

- ``system`` is prepended as a system message; system and developer messages keep only text.
- A ``tool_call`` part becomes an assistant tool call (arguments given as JSON text or as a JSON
  value); a ``thinking`` part becomes the assistant's ``reasoning_content``; each ``tool_result``
  part becomes its own ``tool`` message (its ``content``, as text or JSON text).
- ``model`` may be omitted: the call's model stays ``""`` and the app gives it the router's
  default (:meth:`proxy.router.Router.default_model`: the ``default_model`` of the first ready
  provider, else the first alias with a ready deployment; on the pinned ``provider`` if set).
- ``stream`` defaults to **true**. ``schema`` asks the upstream for a JSON-schema response format,
  turns streaming off, and the answer's text, parsed as JSON, is returned in ``output`` (absent
  when the text is not JSON — the text itself is still in ``message``).
- ``reasoning_effort`` low/medium/high pass through; ``xhigh`` and ``max`` map to ``high``, the
  strongest level OpenAI-compatible upstreams accept.
- ``provider`` pins the provider (``Call.options.provider``). ``provider_options`` must be an
  object: members named like a canonical parameter (``seed``, ``user``, ``presence_penalty`` …)
  are validated as such (top-level fields win), the others are passed to the upstream verbatim as
  extra request fields; ``model``, ``messages``, ``stream`` and ``stream_options`` are refused,
  credential fields are dropped.

Replies are ``CompletionResponse`` objects: the message as parts, ``stop_reason`` (``end_turn``,
``max_tokens``, ``tool_calls``), the five disjoint usage buckets, and ``cost_usd`` with
``cost_source`` when the cost is known: what the ``cost`` plugin charged (``authoritative`` or
``estimated``, see :class:`~proxy.canonical.Accounting`), else, without that plugin, the amount
the provider reported (``authoritative``). Streams frame every
event as ``event: stream_event`` (stream_start, text_*, reasoning_*, tool_call_*, then ``finish``
carrying the whole response, or ``error``), with ``event: ping`` keep-alives every 15 s and no
end marker. Errors are ``{"errors": [{status, title, detail, code}], "request_id"}``.
"""

from __future__ import annotations

import http
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Raw, Struct, UnsetType

from proxy.canonical import (
    MAX_TOKENS_LIMIT,
    Accounting,
    Call,
    Chunk,
    ContentPart,
    FunctionCall,
    FunctionDefinition,
    GatewayOptions,
    ImagePart,
    ImageURL,
    Message,
    Params,
    Reply,
    TextPart,
    Timings,
    Tool,
    ToolCall,
    Usage,
)
from proxy.dialects.base import bad_request
from proxy.dialects.blocks import Block, Change, StreamBlocks
from proxy.dialects.openai_chat import NEVER_FORWARDED
from proxy.errors import BadRequest, GatewayError
from proxy.sse import encode_named_frame

KEEPALIVE_SECONDS = 15.0
SCHEMA_NAME = "output"

# ---------------------------------------------------------------------------------------------
# Request
# ---------------------------------------------------------------------------------------------


class _ImageData(Struct):
    url: str | None = None
    data: str | None = None
    media_type: str | None = None
    detail: str | None = None


class _ToolCallData(Struct):
    id: str
    name: str
    arguments: Any = None
    type: str = "function"


class _ToolResultData(Struct):
    tool_call_id: str
    content: Any = None
    is_error: bool = False


class _ThinkingData(Struct):
    text: str
    signature: str | None = None
    redacted: bool = False


class _TextIn(Struct, tag="text", tag_field="kind"):
    data: str


class _ImageIn(Struct, tag="image", tag_field="kind"):
    data: _ImageData


class _ToolCallIn(Struct, tag="tool_call", tag_field="kind"):
    data: _ToolCallData


class _ToolResultIn(Struct, tag="tool_result", tag_field="kind"):
    data: _ToolResultData


class _ThinkingIn(Struct, tag="thinking", tag_field="kind"):
    data: _ThinkingData | str


_PartIn = _TextIn | _ImageIn | _ToolCallIn | _ToolResultIn | _ThinkingIn


class _MessageIn(Struct):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: list[_PartIn]
    name: str | None = None
    tool_call_id: str | None = None


class _ToolIn(Struct):
    name: Annotated[str, Meta(min_length=1)]
    description: str
    parameters: dict[str, Any]


class _ToolChoiceIn(Struct):
    mode: Literal["auto", "none", "required", "named"]
    tool_name: str | None = None


ReasoningEffort = Literal["low", "medium", "high", "xhigh", "max"]


class _Request(Struct):
    messages: Annotated[list[_MessageIn], Meta(min_length=1)]
    model: str | None = None
    system: str | None = None
    stream: bool | None = None
    tools: list[_ToolIn] | None = None
    tool_choice: _ToolChoiceIn | None = None
    schema: dict[str, Any] | None = None
    temperature: Annotated[float, Meta(ge=0, le=2)] | None = None
    max_tokens: Annotated[int, Meta(ge=1, le=MAX_TOKENS_LIMIT)] | None = None
    top_p: Annotated[float, Meta(ge=0, le=1)] | None = None
    stop_sequences: list[str] | None = None
    reasoning_effort: ReasoningEffort | None = None
    provider: Annotated[str, Meta(min_length=1)] | None = None
    provider_options: dict[str, Raw] | None = None


class _ProviderParams(Struct):
    """``provider_options`` members that are canonical parameters (so errors name the path)."""

    provider_options: Params


_REQUEST = msgspec.json.Decoder(_Request)
_PROVIDER_PARAMS = msgspec.json.Decoder(_ProviderParams)
_ENCODER = msgspec.json.Encoder()
_PARAM_FIELDS = frozenset(Params.__struct_fields__)
_REFUSED_OPTIONS = frozenset({"model", "messages", "stream", "stream_options"})
_EFFORT = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}

# ---------------------------------------------------------------------------------------------
# Response
# ---------------------------------------------------------------------------------------------


class _Part(Struct):
    kind: str
    data: Any


class _MessageOut(Struct):
    role: str
    content: list[_Part]


class FabroUsage(Struct):
    """The five disjoint token buckets, 1:1 with :class:`proxy.canonical.Usage`."""

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


def _invalid(detail: str, param: str) -> BadRequest:
    """A 400 whose message names the field, as :func:`proxy.dialects.base.bad_request` does."""
    return BadRequest(f"Invalid request: {detail} at {param!r}", param=param)


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


class FabroDialect:
    """See the module docstring."""

    name = "fabro"
    paths = ("/api/v1/completions",)

    def decode(
        self, body: bytes, headers: Mapping[str, str], request_id: str, start: float
    ) -> Call:
        """See :meth:`proxy.dialects.base.Dialect.decode`."""
        try:
            request = _REQUEST.decode(body)
        except msgspec.DecodeError as exc:
            raise bad_request(exc) from None
        params, extra = _provider_options(request.provider_options)
        _apply_request_params(params, request)
        messages = [Message(role="system", content=request.system)] if request.system else []
        for index, message in enumerate(request.messages):
            messages.extend(_canonical_messages(message, f"messages[{index}]"))
        return Call(
            request_id=request_id,
            dialect=self.name,
            model=request.model or "",
            messages=messages,
            stream=request.stream is not False and request.schema is None,
            params=params,
            extra=extra,
            options=GatewayOptions(provider=request.provider),
            dialect_state={"schema": request.schema is not None},
            client_headers=headers,
            timings=Timings(start=start),
        )

    def encode_response(self, call: Call, reply: Reply) -> bytes:
        """See :meth:`proxy.dialects.base.Dialect.encode_response`."""
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

    def stream_encoder(self, call: Call, reply: Reply) -> FabroStreamEncoder:
        """See :meth:`proxy.dialects.base.Dialect.stream_encoder`."""
        return FabroStreamEncoder(reply, call.accounting)

    def encode_error(self, error: GatewayError, request_id: str) -> bytes:
        """See :meth:`proxy.dialects.base.Dialect.encode_error`."""
        return _ENCODER.encode(_ErrorBody(errors=[_error_entry(error)], request_id=request_id))

    def response_headers(self, call: Call, reply: Reply) -> dict[str, str]:
        """See :meth:`proxy.dialects.base.Dialect.response_headers`: none beyond the common."""
        return {}

    def error_status(self, error: GatewayError) -> int:
        """See :meth:`proxy.dialects.base.Dialect.error_status`: upstream failures are 502."""
        return fabro_status(error)

    def error_headers(self, error: GatewayError, request_id: str) -> dict[str, str]:
        """See :meth:`proxy.dialects.base.Dialect.error_headers`: none."""
        return {}


# ---------------------------------------------------------------------------------------------
# Decoding helpers
# ---------------------------------------------------------------------------------------------


def _provider_options(options: dict[str, Raw] | None) -> tuple[Params, dict[str, Raw]]:
    """Canonical parameters and pass-through fields from ``provider_options``."""
    if not options:
        return Params(), {}
    for key in options:
        if key in _REFUSED_OPTIONS:
            raise _invalid(
                f"provider_options may not set {key!r}: use the request's own fields",
                f"provider_options.{key}",
            )
    known = {key: value for key, value in options.items() if key in _PARAM_FIELDS}
    extra = {
        key: value
        for key, value in options.items()
        if key not in _PARAM_FIELDS and key not in NEVER_FORWARDED
    }
    if not known:
        return Params(), extra
    try:
        wrapped = _PROVIDER_PARAMS.decode(_ENCODER.encode({"provider_options": known}))
    except msgspec.DecodeError as exc:
        raise bad_request(exc) from None
    return wrapped.provider_options, extra


def _apply_request_params(params: Params, request: _Request) -> None:
    """Set the parameters the request carries at top level (they win over provider_options)."""
    if request.temperature is not None:
        params.temperature = request.temperature
    if request.top_p is not None:
        params.top_p = request.top_p
    if request.max_tokens is not None:
        params.max_tokens = request.max_tokens
    if request.stop_sequences is not None:
        params.stop = request.stop_sequences
    if request.reasoning_effort is not None:
        params.reasoning_effort = _EFFORT[request.reasoning_effort]
    if request.tools is not None:
        params.tools = [
            Tool(
                function=FunctionDefinition(
                    name=tool.name, description=tool.description, parameters=tool.parameters
                )
            )
            for tool in request.tools
        ]
    if request.tool_choice is not None:
        params.tool_choice = _tool_choice(request.tool_choice)
    if request.schema is not None:
        params.response_format = {
            "type": "json_schema",
            "json_schema": {"name": SCHEMA_NAME, "schema": request.schema},
        }


def _tool_choice(choice: _ToolChoiceIn) -> str | dict[str, Any]:
    if choice.mode != "named":
        return choice.mode
    if not choice.tool_name:
        raise _invalid("tool_name is required when mode is 'named'", "tool_choice.tool_name")
    return {"type": "function", "function": {"name": choice.tool_name}}


def _canonical_messages(message: _MessageIn, path: str) -> list[Message]:
    """The canonical messages for one Fabro message (tool results become ``tool`` messages)."""
    role = message.role
    name = message.name if message.name is not None else UNSET
    if role in ("system", "developer"):
        return [Message(role=role, content=_only_text(message, path), name=name)]
    if role == "assistant":
        return [_assistant(message, path, name)]
    results: list[Message] = []
    parts: list[ContentPart] = []
    for index, part in enumerate(message.content):
        where = f"{path}.content[{index}]"
        if isinstance(part, _ToolResultIn):
            results.append(_tool_message(part.data, message.tool_call_id))
        elif isinstance(part, _TextIn) and role == "user":
            parts.append(TextPart(text=part.data))
        elif isinstance(part, _ImageIn) and role == "user":
            parts.append(_image(part.data, f"{where}.data"))
        elif isinstance(part, _TextIn) and role == "tool":
            results.append(_tool_text(part.data, message.tool_call_id, path))
        else:
            raise _invalid(
                f"a {role} message cannot contain a {part.__struct_config__.tag} part",
                f"{where}.kind",
            )
    if parts:
        content: str | list[ContentPart] = (
            parts[0].text if len(parts) == 1 and isinstance(parts[0], TextPart) else parts
        )
        results.append(Message(role="user", content=content, name=name))
    if not results:
        raise _invalid(f"a {role} message needs at least one part", f"{path}.content")
    return results


def _only_text(message: _MessageIn, path: str) -> str:
    texts: list[str] = []
    for index, part in enumerate(message.content):
        if not isinstance(part, _TextIn):
            raise _invalid(
                f"a {message.role} message can only contain text parts",
                f"{path}.content[{index}].kind",
            )
        texts.append(part.data)
    return "".join(texts)


def _assistant(message: _MessageIn, path: str, name: str | UnsetType) -> Message:
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[ToolCall] = []
    for index, part in enumerate(message.content):
        if isinstance(part, _TextIn):
            texts.append(part.data)
        elif isinstance(part, _ToolCallIn):
            data = part.data
            calls.append(
                ToolCall(
                    id=data.id,
                    type=data.type,
                    function=FunctionCall(name=data.name, arguments=_arguments_text(data)),
                )
            )
        elif isinstance(part, _ThinkingIn):
            thinking = part.data
            reasoning.append(thinking if isinstance(thinking, str) else thinking.text)
        else:
            raise _invalid(
                f"an assistant message cannot contain a {part.__struct_config__.tag} part",
                f"{path}.content[{index}].kind",
            )
    return Message(
        role="assistant",
        content="".join(texts) if texts else None,
        name=name,
        tool_calls=calls or UNSET,
        reasoning_content="".join(reasoning) if reasoning else UNSET,
    )


def _arguments_text(data: _ToolCallData) -> str:
    """Tool-call arguments as JSON text (given either as that text or as a JSON value)."""
    if data.arguments is None:
        return "{}"
    if isinstance(data.arguments, str):
        return data.arguments
    return _ENCODER.encode(data.arguments).decode()


def _tool_message(data: _ToolResultData, default_id: str | None) -> Message:
    content = data.content
    if content is None or isinstance(content, str):
        text = content or ""
    else:
        text = _ENCODER.encode(content).decode()
    return Message(role="tool", content=text, tool_call_id=data.tool_call_id or default_id or "")


def _tool_text(text: str, tool_call_id: str | None, path: str) -> Message:
    if not tool_call_id:
        raise _invalid("a tool message with text parts needs tool_call_id", f"{path}.tool_call_id")
    return Message(role="tool", content=text, tool_call_id=tool_call_id)


def _image(data: _ImageData, where: str) -> ImagePart:
    if data.url is not None:
        url = data.url
    elif data.data is not None:
        url = f"data:{data.media_type or 'image/png'};base64,{data.data}"
    else:
        raise _invalid("an image part needs data.url or data.data", where)
    detail = data.detail if data.detail is not None else UNSET
    return ImagePart(image_url=ImageURL(url=url, detail=detail))


# ---------------------------------------------------------------------------------------------
# Encoding helpers
# ---------------------------------------------------------------------------------------------


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
