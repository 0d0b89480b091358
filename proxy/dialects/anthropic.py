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

from proxy.core.canonical import (
    MAX_TOKENS_LIMIT,
    Call,
    ContentPart,
    FunctionCall,
    FunctionDefinition,
    ImagePart,
    ImageURL,
    Message,
    Params,
    TextPart,
    Timings,
    Tool,
    ToolCall,
)
from proxy.core.errors import GatewayError
from proxy.core.reply import Reply
from proxy.dialects.anthropic_replies import (
    AnthropicStreamEncoder,
    encode_message,
    error_json,
    message_id,
)
from proxy.dialects.base import REASONING_EFFORT, bad_request, invalid


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


_CLIENT_TOOL_TYPES = (None, "custom")


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
        return encode_message(call, reply)

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
            params.reasoning_effort = REASONING_EFFORT[output.effort]
        if output.format is not None:
            params.response_format = {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": output.format.schema},
            }
    return params


def _tool(tool: _ToolIn, path: str) -> Tool:
    if tool.type not in _CLIENT_TOOL_TYPES:
        raise invalid(
            f"server tool {tool.type!r} is not supported by the gateway: only client tools",
            f"{path}.type",
        )
    if tool.input_schema is None:
        raise invalid("a client tool needs an input_schema", f"{path}.input_schema")
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
        raise invalid("a message needs at least one content block", f"{path}.content")
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
            raise invalid(
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
            raise invalid(
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
            raise invalid(
                "images inside a tool_result are not supported: send them in a user turn",
                f"{where}.content[{index}].type",
            )
        parts.append(TextPart(text=item.text))
    return Message(role="tool", content=parts, tool_call_id=block.tool_use_id)
