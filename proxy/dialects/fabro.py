"""Fabro completions — ``POST /api/v1/completions``.

Requests carry messages whose content is a list of ``{kind, data}`` parts (``text``, ``image``,
``tool_call``, ``tool_result``, ``thinking``). They map onto the OpenAI-shaped canonical call:

- ``system`` is prepended as a system message; system and developer messages keep only text.
- A ``tool_call`` part becomes an assistant tool call (arguments given as JSON text or as a JSON
  value); a ``thinking`` part becomes the assistant's ``reasoning_content``; each ``tool_result``
  part becomes its own ``tool`` message (its ``content``, as text or JSON text).
- ``model`` may be omitted: the call's model stays ``""`` and the app gives it the router's
  default (:meth:`proxy.upstream.router.Router.default_model`: the ``default_model`` of the first
  ready provider, else the first alias with a ready deployment; on the pinned ``provider`` if set).
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
``estimated``, see :class:`~proxy.core.canonical.Accounting`), else, without that plugin, the amount
the provider reported (``authoritative``). Streams frame every
event as ``event: stream_event`` (stream_start, text_*, reasoning_*, tool_call_*, then ``finish``
carrying the whole response, or ``error``), with ``event: ping`` keep-alives every 15 s and no
end marker. Errors are ``{"errors": [{status, title, detail, code}], "request_id"}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Raw, Struct, UnsetType

from proxy.core.canonical import (
    MAX_TOKENS_LIMIT,
    Call,
    ContentPart,
    FunctionCall,
    FunctionDefinition,
    GatewayOptions,
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
from proxy.dialects.base import REASONING_EFFORT, bad_request, invalid
from proxy.dialects.fabro_replies import (
    FabroStreamEncoder,
    encode_completion,
    encode_error,
    fabro_status,
)
from proxy.dialects.openai_chat import NEVER_FORWARDED

SCHEMA_NAME = "output"


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
        return encode_completion(call, reply)

    def stream_encoder(self, call: Call, reply: Reply) -> FabroStreamEncoder:
        """See :meth:`proxy.dialects.base.Dialect.stream_encoder`."""
        return FabroStreamEncoder(reply, call.accounting)

    def encode_error(self, error: GatewayError, request_id: str) -> bytes:
        """See :meth:`proxy.dialects.base.Dialect.encode_error`."""
        return encode_error(error, request_id)

    def response_headers(self, call: Call, reply: Reply) -> dict[str, str]:
        """See :meth:`proxy.dialects.base.Dialect.response_headers`: none beyond the common."""
        return {}

    def error_status(self, error: GatewayError) -> int:
        """See :meth:`proxy.dialects.base.Dialect.error_status`: upstream failures are 502."""
        return fabro_status(error)

    def error_headers(self, error: GatewayError, request_id: str) -> dict[str, str]:
        """See :meth:`proxy.dialects.base.Dialect.error_headers`: none."""
        return {}


def _provider_options(options: dict[str, Raw] | None) -> tuple[Params, dict[str, Raw]]:
    """Canonical parameters and pass-through fields from ``provider_options``."""
    if not options:
        return Params(), {}
    for key in options:
        if key in _REFUSED_OPTIONS:
            raise invalid(
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
        params.reasoning_effort = REASONING_EFFORT[request.reasoning_effort]
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
        raise invalid("tool_name is required when mode is 'named'", "tool_choice.tool_name")
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
            raise invalid(
                f"a {role} message cannot contain a {part.__struct_config__.tag} part",
                f"{where}.kind",
            )
    if parts:
        content: str | list[ContentPart] = (
            parts[0].text if len(parts) == 1 and isinstance(parts[0], TextPart) else parts
        )
        results.append(Message(role="user", content=content, name=name))
    if not results:
        raise invalid(f"a {role} message needs at least one part", f"{path}.content")
    return results


def _only_text(message: _MessageIn, path: str) -> str:
    texts: list[str] = []
    for index, part in enumerate(message.content):
        if not isinstance(part, _TextIn):
            raise invalid(
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
            raise invalid(
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
        raise invalid("a tool message with text parts needs tool_call_id", f"{path}.tool_call_id")
    return Message(role="tool", content=text, tool_call_id=tool_call_id)


def _image(data: _ImageData, where: str) -> ImagePart:
    if data.url is not None:
        url = data.url
    elif data.data is not None:
        url = f"data:{data.media_type or 'image/png'};base64,{data.data}"
    else:
        raise invalid("an image part needs data.url or data.data", where)
    detail = data.detail if data.detail is not None else UNSET
    return ImagePart(image_url=ImageURL(url=url, detail=detail))
