"""Anthropic Messages — ``POST /v1/messages`` — so Anthropic clients reach any provider.

Requests follow the Messages API (``model``, ``max_tokens`` and ``messages`` required). The
``x-api-key`` and ``anthropic-version`` headers are accepted and not interpreted here. Content
blocks map onto the OpenAI-shaped canonical call:

- ``system`` (a string or text blocks) becomes the first, system, message.
- User ``text`` and ``image`` blocks (base64 → a ``data:`` URL, or a URL) become content parts;
  each ``tool_result`` block becomes its own ``tool`` message, placed before the rest of the turn
  (``is_error`` has no OpenAI equivalent and is not carried). Images inside a tool result are
  refused with a 400: OpenAI-shaped tool messages carry text only.
- Assistant ``text`` blocks become the content, ``tool_use`` blocks tool calls (``input`` as
  JSON text), ``thinking`` blocks ``reasoning_content``; ``redacted_thinking`` is dropped.
- ``tool_choice`` auto/any/tool/none becomes auto/required/the named function/none, and
  ``disable_parallel_tool_use`` turns ``parallel_tool_calls`` off. Only client tools (no
  ``type``, or ``custom``) are accepted; server tools are a 400.
- ``stop_sequences`` → ``stop``; ``metadata.user_id`` → ``user``; ``top_k`` is passed to the
  upstream as an extra field. ``thinking`` maps to ``reasoning_effort`` by budget (< 4096 low,
  < 16384 medium, else high; ``adaptive`` and ``disabled`` set none); ``output_config.effort``
  maps low/medium/high as is and xhigh/max to high (it wins over ``thinking``);
  ``output_config.format`` becomes a JSON-schema ``response_format``. Other fields
  (``cache_control``, ``service_tier``, ``container`` …) are ignored.

Replies are ``message`` objects: a ``thinking`` block (empty signature: the gateway has none to
give), the text, then ``tool_use`` blocks. OpenAI ``url_citation`` annotations of the answer
become ``web_search_result_location`` citations: the cited spans become text blocks of their own
carrying them (in streams, ``citations_delta`` events in the open text block); other annotation
types, and an upstream's fields the canonical types do not model (``audio`` …), are lost.
Stop reasons: stop → ``end_turn``, length → ``max_tokens``, tool calls (or a natural end after
tool calls) → ``tool_use``, content filter → ``refusal``, and a natural end at a stop sequence
the upstream named (``Choice.stop_sequence``: an Anthropic upstream says which one matched;
OpenAI-compatible ones do not) → ``stop_sequence``, with that sequence. Usage:
``input_tokens`` is the uncached input, ``cache_read_input_tokens`` and
``cache_creation_input_tokens`` the cache buckets, ``output_tokens`` output plus reasoning.
Streams use Anthropic's named events (``message_start``, ``content_block_start`` / ``_delta`` /
``_stop``, ``message_delta`` with the stop reason and cumulative usage, ``message_stop``),
``ping`` keep-alives every 15 s, and an in-band ``error`` event for a failure mid-stream. Errors are
``{"type": "error", "error": {"type", "message"}, "request_id"}`` with Anthropic's type names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Raw, Struct

from proxy.canonical import (
    MAX_TOKENS_LIMIT,
    Call,
    Chunk,
    ContentPart,
    FunctionCall,
    FunctionDefinition,
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
from proxy.errors import BadRequest, GatewayError
from proxy.sse import encode_named_frame

KEEPALIVE_SECONDS = 15.0

# ---------------------------------------------------------------------------------------------
# Request
# ---------------------------------------------------------------------------------------------


class _Text(Struct, tag="text", tag_field="type"):
    text: str


class _Base64Source(Struct, tag="base64", tag_field="type"):
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    data: str


class _URLSource(Struct, tag="url", tag_field="type"):
    url: str


class _Image(Struct, tag="image", tag_field="type"):
    source: _Base64Source | _URLSource


class _ToolUse(Struct, tag="tool_use", tag_field="type"):
    id: str
    name: str
    input: dict[str, Any]


class _ToolResult(Struct, tag="tool_result", tag_field="type"):
    tool_use_id: str
    content: str | list[_Text | _Image] | None = None
    is_error: bool = False


class _Thinking(Struct, tag="thinking", tag_field="type"):
    thinking: str
    signature: str = ""


class _RedactedThinking(Struct, tag="redacted_thinking", tag_field="type"):
    data: str


_Block = _Text | _Image | _ToolUse | _ToolResult | _Thinking | _RedactedThinking


class _MessageIn(Struct):
    role: Literal["user", "assistant"]
    content: str | list[_Block]


class _ToolIn(Struct):
    name: Annotated[str, Meta(min_length=1)]
    input_schema: dict[str, Any] | None = None
    description: str | None = None
    type: str | None = None


class _ChoiceAuto(Struct, tag="auto", tag_field="type"):
    disable_parallel_tool_use: bool = False


class _ChoiceAny(Struct, tag="any", tag_field="type"):
    disable_parallel_tool_use: bool = False


class _ChoiceTool(Struct, tag="tool", tag_field="type"):
    name: str
    disable_parallel_tool_use: bool = False


class _ChoiceNone(Struct, tag="none", tag_field="type"):
    pass


class _Metadata(Struct):
    user_id: Annotated[str, Meta(max_length=512)] | None = None


class _ThinkingEnabled(Struct, tag="enabled", tag_field="type"):
    budget_tokens: Annotated[int, Meta(ge=1024)]


class _ThinkingDisabled(Struct, tag="disabled", tag_field="type"):
    pass


class _ThinkingAdaptive(Struct, tag="adaptive", tag_field="type"):
    pass


class _JsonFormat(Struct, tag="json_schema", tag_field="type"):
    schema: dict[str, Any]


Effort = Literal["low", "medium", "high", "xhigh", "max"]


class _OutputConfig(Struct):
    effort: Effort | None = None
    format: _JsonFormat | None = None


class _Request(Struct):
    model: Annotated[str, Meta(min_length=1)]
    max_tokens: Annotated[int, Meta(ge=1, le=MAX_TOKENS_LIMIT)]
    messages: Annotated[list[_MessageIn], Meta(min_length=1)]
    system: str | list[_Text] | None = None
    stream: bool | None = None
    tools: list[_ToolIn] | None = None
    tool_choice: _ChoiceAuto | _ChoiceAny | _ChoiceTool | _ChoiceNone | None = None
    stop_sequences: list[str] | None = None
    temperature: Annotated[float, Meta(ge=0, le=1)] | None = None
    top_p: Annotated[float, Meta(ge=0, le=1)] | None = None
    top_k: Annotated[int, Meta(ge=0)] | None = None
    metadata: _Metadata | None = None
    thinking: _ThinkingEnabled | _ThinkingDisabled | _ThinkingAdaptive | None = None
    output_config: _OutputConfig | None = None


class _CountRequest(Struct):
    """``POST /v1/messages/count_tokens``: what a Messages request sends, without generation
    settings (no ``max_tokens``)."""

    model: Annotated[str, Meta(min_length=1)]
    messages: Annotated[list[_MessageIn], Meta(min_length=1)]
    system: str | list[_Text] | None = None
    tools: list[_ToolIn] | None = None
    tool_choice: _ChoiceAuto | _ChoiceAny | _ChoiceTool | _ChoiceNone | None = None
    thinking: _ThinkingEnabled | _ThinkingDisabled | _ThinkingAdaptive | None = None
    output_config: _OutputConfig | None = None


_REQUEST = msgspec.json.Decoder(_Request)
_COUNT_REQUEST = msgspec.json.Decoder(_CountRequest)
_ENCODER = msgspec.json.Encoder()
_EFFORT = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}
_CLIENT_TOOL_TYPES = (None, "custom")

# ---------------------------------------------------------------------------------------------
# Response
# ---------------------------------------------------------------------------------------------


class _WebCitation(Struct, tag="web_search_result_location", tag_field="type"):
    cited_text: str
    url: str
    title: str | None
    encrypted_index: str = ""  # Anthropic's own reference into its search results: none here


class _TextOut(Struct, tag="text", tag_field="type"):
    text: str
    citations: list[_WebCitation] | None = None


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


_BlockOut = _TextOut | _ThinkingOut | _ToolUseOut


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
    citation: _WebCitation


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


def _invalid(detail: str, param: str) -> BadRequest:
    """A 400 whose message names the field, as :func:`proxy.dialects.base.bad_request` does."""
    return BadRequest(f"Invalid request: {detail} at {param!r}", param=param)


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


class AnthropicDialect:
    """See the module docstring."""

    name = "anthropic"
    paths = ("/v1/messages",)

    def decode(
        self, body: bytes, headers: Mapping[str, str], request_id: str, start: float
    ) -> Call:
        """See :meth:`proxy.dialects.base.Dialect.decode`."""
        try:
            request = _REQUEST.decode(body)
        except msgspec.DecodeError as exc:
            raise bad_request(exc) from None
        return _call(request, headers, request_id, start)

    def encode_response(self, call: Call, reply: Reply) -> bytes:
        """See :meth:`proxy.dialects.base.Dialect.encode_response`."""
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

    def stream_encoder(self, call: Call, reply: Reply) -> AnthropicStreamEncoder:
        """See :meth:`proxy.dialects.base.Dialect.stream_encoder`."""
        return AnthropicStreamEncoder(
            fallback_id=message_id("", call.request_id),
            model=reply.model,
            request_id=call.request_id,
        )

    def encode_error(self, error: GatewayError, request_id: str) -> bytes:
        """See :meth:`proxy.dialects.base.Dialect.encode_error`."""
        return error_json(error, request_id)

    def response_headers(self, call: Call, reply: Reply) -> dict[str, str]:
        """``request-id``, where Anthropic's SDKs look for it."""
        return {"request-id": call.request_id}

    def error_status(self, error: GatewayError) -> int:
        """See :meth:`proxy.dialects.base.Dialect.error_status`: the error's own."""
        return error.status

    def error_headers(self, error: GatewayError, request_id: str) -> dict[str, str]:
        """See :meth:`proxy.dialects.base.Dialect.error_headers`: ``request-id`` for the SDKs."""
        return {"request-id": request_id}


def decode_count_tokens(
    body: bytes, headers: Mapping[str, str], request_id: str, start: float
) -> Call:
    """The call whose input a ``POST /v1/messages/count_tokens`` body asks about: decoded as a
    Messages request is (same fields, same 400s), without ``max_tokens``; never streamed."""
    try:
        count = _COUNT_REQUEST.decode(body)
    except msgspec.DecodeError as exc:
        raise bad_request(exc) from None
    request = _Request(
        model=count.model,
        max_tokens=1,
        messages=count.messages,
        system=count.system,
        tools=count.tools,
        tool_choice=count.tool_choice,
        thinking=count.thinking,
        output_config=count.output_config,
    )
    call = _call(request, headers, request_id, start)
    call.params.max_tokens = UNSET
    return call


def token_count_json(input_tokens: int) -> bytes:
    """``{"input_tokens": N}``: what ``count_tokens`` answers."""
    return _ENCODER.encode({"input_tokens": input_tokens})


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


# ---------------------------------------------------------------------------------------------
# Decoding helpers
# ---------------------------------------------------------------------------------------------


def _call(request: _Request, headers: Mapping[str, str], request_id: str, start: float) -> Call:
    messages = _system(request.system)
    for index, message in enumerate(request.messages):
        messages.extend(_canonical_messages(message, f"messages[{index}]"))
    extra: dict[str, Raw] = {}
    if request.top_k is not None:
        extra["top_k"] = Raw(_ENCODER.encode(request.top_k))
    return Call(
        request_id=request_id,
        dialect=AnthropicDialect.name,
        model=request.model,
        messages=messages,
        stream=bool(request.stream),
        params=_params(request),
        extra=extra,
        client_headers=headers,
        timings=Timings(start=start),
    )


def _system(system: str | list[_Text] | None) -> list[Message]:
    if not system:
        return []
    if isinstance(system, str):
        return [Message(role="system", content=system)]
    return [Message(role="system", content=[TextPart(text=block.text) for block in system])]


def _params(request: _Request) -> Params:
    params = Params(max_tokens=request.max_tokens)
    if request.temperature is not None:
        params.temperature = request.temperature
    if request.top_p is not None:
        params.top_p = request.top_p
    if request.stop_sequences is not None:
        params.stop = request.stop_sequences
    if request.metadata is not None and request.metadata.user_id is not None:
        params.user = request.metadata.user_id
    if request.tools is not None:
        params.tools = [_tool(tool, f"tools[{i}]") for i, tool in enumerate(request.tools)]
    choice = request.tool_choice
    if choice is not None:
        params.tool_choice = _tool_choice(choice)
        if not isinstance(choice, _ChoiceNone) and choice.disable_parallel_tool_use:
            params.parallel_tool_calls = False
    thinking = request.thinking
    if isinstance(thinking, _ThinkingEnabled):
        budget = thinking.budget_tokens
        params.reasoning_effort = "low" if budget < 4096 else "medium" if budget < 16384 else "high"
    output = request.output_config
    if output is not None:
        if output.effort is not None:
            params.reasoning_effort = _EFFORT[output.effort]
        if output.format is not None:
            params.response_format = {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": output.format.schema},
            }
    return params


def _tool(tool: _ToolIn, path: str) -> Tool:
    if tool.type not in _CLIENT_TOOL_TYPES:
        raise _invalid(
            f"server tool {tool.type!r} is not supported by the gateway: only client tools",
            f"{path}.type",
        )
    if tool.input_schema is None:
        raise _invalid("a client tool needs an input_schema", f"{path}.input_schema")
    description = tool.description if tool.description is not None else UNSET
    return Tool(
        function=FunctionDefinition(
            name=tool.name, description=description, parameters=tool.input_schema
        )
    )


def _tool_choice(
    choice: _ChoiceAuto | _ChoiceAny | _ChoiceTool | _ChoiceNone,
) -> str | dict[str, Any]:
    if isinstance(choice, _ChoiceTool):
        return {"type": "function", "function": {"name": choice.name}}
    if isinstance(choice, _ChoiceAny):
        return "required"
    if isinstance(choice, _ChoiceNone):
        return "none"
    return "auto"


def _canonical_messages(message: _MessageIn, path: str) -> list[Message]:
    """One Anthropic turn as canonical messages (tool results split off as ``tool`` messages)."""
    content = message.content
    if isinstance(content, str):
        return [Message(role=message.role, content=content)]
    if not content:
        raise _invalid("a message needs at least one content block", f"{path}.content")
    if message.role == "assistant":
        return [_assistant(content, path)]
    results: list[Message] = []
    parts: list[ContentPart] = []
    for index, block in enumerate(content):
        where = f"{path}.content[{index}]"
        if isinstance(block, _Text):
            parts.append(TextPart(text=block.text))
        elif isinstance(block, _Image):
            parts.append(_image(block))
        elif isinstance(block, _ToolResult):
            results.append(_tool_message(block, where))
        else:
            raise _invalid(
                f"a user message cannot contain a {block.__struct_config__.tag} block",
                f"{where}.type",
            )
    if parts:
        results.append(Message(role="user", content=parts))
    return results


def _assistant(blocks: list[_Block], path: str) -> Message:
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[ToolCall] = []
    for index, block in enumerate(blocks):
        if isinstance(block, _Text):
            texts.append(block.text)
        elif isinstance(block, _ToolUse):
            arguments = _ENCODER.encode(block.input).decode()
            calls.append(
                ToolCall(id=block.id, function=FunctionCall(name=block.name, arguments=arguments))
            )
        elif isinstance(block, _Thinking):
            reasoning.append(block.thinking)
        elif not isinstance(block, _RedactedThinking):
            raise _invalid(
                f"an assistant message cannot contain a {block.__struct_config__.tag} block",
                f"{path}.content[{index}].type",
            )
    content: str | list[ContentPart] | None = None
    if len(texts) == 1:
        content = texts[0]
    elif texts:
        content = [TextPart(text=text) for text in texts]
    return Message(
        role="assistant",
        content=content,
        tool_calls=calls or UNSET,
        reasoning_content="".join(reasoning) if reasoning else UNSET,
    )


def _image(block: _Image) -> ImagePart:
    source = block.source
    if isinstance(source, _URLSource):
        return ImagePart(image_url=ImageURL(url=source.url))
    return ImagePart(image_url=ImageURL(url=f"data:{source.media_type};base64,{source.data}"))


def _tool_message(block: _ToolResult, where: str) -> Message:
    content = block.content
    if content is None or isinstance(content, str):
        return Message(role="tool", content=content or "", tool_call_id=block.tool_use_id)
    parts: list[ContentPart] = []
    for index, item in enumerate(content):
        if not isinstance(item, _Text):
            raise _invalid(
                "images inside a tool_result are not supported: send them in a user turn",
                f"{where}.content[{index}].type",
            )
        parts.append(TextPart(text=item.text))
    return Message(role="tool", content=parts, tool_call_id=block.tool_use_id)


# ---------------------------------------------------------------------------------------------
# Encoding helpers
# ---------------------------------------------------------------------------------------------


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
        blocks.extend(_cited_text(text, message.annotations or ()))
    for call in message.tool_calls or ():
        blocks.append(
            _ToolUseOut(
                id=tool_use_id(call.id),
                name=call.function.name,
                input=_tool_input(call.function.arguments),
            )
        )
    return blocks


def _url_citation(annotation: Any) -> dict[str, Any] | None:
    """An OpenAI ``url_citation`` annotation's body, or None for anything else."""
    if not isinstance(annotation, dict) or annotation.get("type") != "url_citation":
        return None
    body = annotation.get("url_citation")
    if not isinstance(body, dict) or not isinstance(body.get("url"), str) or not body["url"]:
        return None
    return body


def _span(body: dict[str, Any], length: int) -> tuple[int, int] | None:
    start, end = body.get("start_index"), body.get("end_index")
    if isinstance(start, int) and isinstance(end, int) and 0 <= start < end <= length:
        return start, end
    return None


def _citation(body: dict[str, Any], text: str) -> _WebCitation:
    """Anthropic's web citation for an OpenAI ``url_citation`` of ``text`` (the whole answer)."""
    title = body.get("title")
    span = _span(body, len(text))
    return _WebCitation(
        cited_text=text[span[0] : span[1]] if span is not None else "",
        url=body["url"],
        title=title if isinstance(title, str) and title else None,
    )


def _cited_text(text: str, annotations: Any) -> list[_TextOut]:
    """``text`` as Anthropic text blocks: each span OpenAI's ``url_citation`` annotations cite
    becomes a block of its own carrying those citations (overlapping spans share one), the
    rest plain blocks; a citation without a usable span goes to the last block."""
    spans: list[tuple[int, int, _WebCitation]] = []
    loose: list[_WebCitation] = []
    for annotation in annotations:
        body = _url_citation(annotation)
        if body is None:
            continue
        span = _span(body, len(text))
        if span is None:
            loose.append(_citation(body, text))
        else:
            spans.append((*span, _citation(body, text)))
    if not spans and not loose:
        return [_TextOut(text=text)]
    blocks: list[_TextOut] = []
    position = 0
    spans.sort(key=lambda span: span[0])
    groups: list[tuple[int, int, list[_WebCitation]]] = []
    for start, end, citation in spans:
        if groups and start < groups[-1][1]:
            first, last, cited = groups[-1]
            groups[-1] = (first, max(last, end), [*cited, citation])
        else:
            groups.append((start, end, [citation]))
    for start, end, cited in groups:
        if start > position:
            blocks.append(_TextOut(text=text[position:start]))
        blocks.append(_TextOut(text=text[start:end], citations=cited))
        position = end
    if position < len(text):
        blocks.append(_TextOut(text=text[position:]))
    if loose:
        last = blocks[-1]
        last.citations = [*(last.citations or ()), *loose]
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
            body = _url_citation(annotation)
            if body is None:
                continue
            block, changes = self._blocks.prose("text")
            citation = _citation(body, "".join(self._text))
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
            content = _TextOut(text="")
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
