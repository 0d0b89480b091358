"""Responses API requests into canonical calls.

``input`` is a string (one user turn) or a list of items:

- messages (``{"role", "content"}``, with or without ``"type": "message"``): roles ``user``,
  ``system``, ``developer`` and ``assistant``; content a string or parts — ``input_text``,
  ``input_image`` (``image_url``: an http(s) or ``data:`` URL), ``input_file`` (``file_data`` or
  ``file_id``), and in assistant messages ``output_text`` / ``refusal``;
- ``function_call`` items (the model's earlier calls) join the assistant turn before them, and
  ``function_call_output`` items become ``tool`` messages answering their ``call_id``;
- ``reasoning`` items become the reasoning of the assistant turn they precede (the text of
  their ``content``, else of their ``summary``).

``instructions`` is the first, system, message. ``tools`` are function tools; a built-in tool
(``web_search``, ``file_search``, ``computer_use_preview``, ``code_interpreter``, ``mcp`` …), a
built-in tool's item, ``item_reference``, an image or file given by ``file_id`` only where the
gateway cannot resolve it, ``background: true``, ``conversation`` and ``prompt`` are 400s naming
the field: the gateway cannot do them, and ignoring them would answer something else.
``tool_choice`` auto/none/required/a named function, ``parallel_tool_calls``,
``max_output_tokens`` (→ ``max_completion_tokens``), ``temperature``, ``top_p``, ``user``,
``reasoning.effort`` (→ ``reasoning_effort``) and ``text.format`` (json_schema or json_object →
``response_format``) are translated. ``store`` (default true), ``previous_response_id``,
``metadata`` (at most 16 pairs), ``truncation`` and ``reasoning.summary`` are the gateway's or
are repeated in the response (:class:`~proxy.dialects.responses.objects.Envelope`);
``truncation: auto`` is accepted but not applied (an over-long prompt gets the upstream's
context-window error). Other fields (``include``, ``service_tier``, ``prompt_cache_key``,
``stream_options`` …) are accepted and ignored.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeGuard

import msgspec
from msgspec import UNSET, Meta, Struct

from proxy.core.canonical import (
    MAX_TOKENS_LIMIT,
    Call,
    ContentPart,
    FilePart,
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
from proxy.core.errors import BadRequest
from proxy.dialects.base import bad_request, invalid
from proxy.dialects.responses.objects import Envelope, FunctionTool, ReasoningConfig

MAX_METADATA_PAIRS = 16

# ---------------------------------------------------------------------------------------------
# The request, as msgspec decodes it
# ---------------------------------------------------------------------------------------------


class _InputText(Struct, tag="input_text", tag_field="type"):
    text: str


class _OutputText(Struct, tag="output_text", tag_field="type"):
    text: str


class _Refusal(Struct, tag="refusal", tag_field="type"):
    refusal: str


class _InputImage(Struct, tag="input_image", tag_field="type"):
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["low", "high", "auto", "original"] | None = None


class _InputFile(Struct, tag="input_file", tag_field="type"):
    file_data: str | None = None
    file_id: str | None = None
    file_url: str | None = None
    filename: str | None = None


class _ReasoningText(Struct, tag="reasoning_text", tag_field="type"):
    text: str


class _SummaryText(Struct, tag="summary_text", tag_field="type"):
    text: str


_Part = _InputText | _OutputText | _Refusal | _InputImage | _InputFile | _ReasoningText


class _Item(Struct):
    """Any input item: which fields matter depends on ``type`` (a message may omit it)."""

    type: str = "message"
    role: str | None = None
    content: str | list[_Part] | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | list[_Part] | None = None
    summary: list[_SummaryText] | None = None


class _ToolSpec(Struct):
    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class _Reasoning(Struct):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


class _FormatText(Struct, tag="text", tag_field="type"):
    pass


class _FormatJsonObject(Struct, tag="json_object", tag_field="type"):
    pass


class _FormatJsonSchema(Struct, tag="json_schema", tag_field="type"):
    name: Annotated[str, Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
    schema: dict[str, Any]
    description: str | None = None
    strict: bool | None = None


class _TextConfig(Struct):
    format: _FormatText | _FormatJsonObject | _FormatJsonSchema | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class _Request(Struct):
    model: Annotated[str, Meta(min_length=1)]
    input: str | list[_Item] | None = None
    instructions: str | None = None
    tools: list[_ToolSpec] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: Annotated[int, Meta(ge=1, le=MAX_TOKENS_LIMIT)] | None = None
    temperature: Annotated[float, Meta(ge=0, le=2)] | None = None
    top_p: Annotated[float, Meta(ge=0, le=1)] | None = None
    reasoning: _Reasoning | None = None
    text: _TextConfig | None = None
    metadata: (
        dict[Annotated[str, Meta(max_length=64)], Annotated[str, Meta(max_length=512)]] | None
    ) = None
    user: str | None = None
    stream: bool | None = None
    store: bool | None = None
    previous_response_id: Annotated[str, Meta(min_length=1, max_length=256)] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    background: bool | None = None
    conversation: Any = None
    prompt: Any = None


_REQUEST = msgspec.json.Decoder(_Request)
_ENCODER = msgspec.json.Encoder()
_TOOL_CHOICES = frozenset({"auto", "none", "required"})
_ROLES = frozenset({"user", "system", "developer", "assistant"})
_MessageRole = Literal["user", "system", "developer", "assistant"]


def _is_message_role(role: str | None) -> TypeGuard[_MessageRole]:
    """Whether ``role`` is one a message item may have (one of :data:`_ROLES`)."""
    return role in _ROLES


# ---------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------


def decode_request(
    body: bytes,
    headers: Mapping[str, str],
    request_id: str,
    start: float,
    *,
    dialect: str,
    response_id: str,
) -> Call:
    """The canonical call for a Responses request body; its :class:`Envelope` (with
    ``response_id``) is ``call.dialect_state["envelope"]``. Raises :class:`BadRequest` naming the
    offending field (see the module docstring)."""
    try:
        request = _REQUEST.decode(body)
    except msgspec.DecodeError as exc:
        raise bad_request(exc) from None
    _refuse_unsupported(request)
    messages = (
        [Message(role="system", content=request.instructions)] if request.instructions else []
    )
    if isinstance(request.input, str):
        messages.append(Message(role="user", content=request.input))
    elif request.input:
        messages.extend(_conversation(request.input))
    elif request.previous_response_id is None:
        raise BadRequest("Missing required parameter: 'input'", param="input")
    params = _params(request)
    envelope = Envelope(
        id=response_id,
        created_at=int(time.time()),
        model=request.model,
        store=request.store is not False,
        instructions=request.instructions,
        max_output_tokens=request.max_output_tokens,
        metadata=request.metadata or {},
        parallel_tool_calls=request.parallel_tool_calls is not False,
        previous_response_id=request.previous_response_id,
        reasoning=_reasoning_echo(request.reasoning),
        temperature=request.temperature,
        text=_text_echo(request.text),
        tool_choice=request.tool_choice if request.tool_choice is not None else "auto",
        tools=[FunctionTool.of(tool) for tool in params.tools or ()],
        top_p=request.top_p,
        truncation=request.truncation or "disabled",
        user=request.user,
    )
    return Call(
        request_id=request_id,
        dialect=dialect,
        model=request.model,
        messages=messages,
        stream=bool(request.stream),
        params=params,
        dialect_state={"envelope": envelope},
        client_headers=headers,
        timings=Timings(start=start),
    )


def _refuse_unsupported(request: _Request) -> None:
    if request.background:
        raise invalid("background responses are not supported by the gateway", "background")
    if request.conversation is not None:
        raise invalid(
            "conversations are not supported by the gateway: use previous_response_id",
            "conversation",
        )
    if request.prompt is not None:
        raise invalid("stored prompts are not supported by the gateway", "prompt")
    if request.metadata is not None and len(request.metadata) > MAX_METADATA_PAIRS:
        raise invalid(f"at most {MAX_METADATA_PAIRS} metadata pairs are allowed", "metadata")


def _params(request: _Request) -> Params:
    params = Params()
    if request.max_output_tokens is not None:
        params.max_completion_tokens = request.max_output_tokens
    if request.temperature is not None:
        params.temperature = request.temperature
    if request.top_p is not None:
        params.top_p = request.top_p
    if request.user is not None:
        params.user = request.user
    if request.parallel_tool_calls is not None:
        params.parallel_tool_calls = request.parallel_tool_calls
    if request.tools:
        params.tools = [_tool(tool, f"tools[{i}]") for i, tool in enumerate(request.tools)]
    if request.tool_choice is not None:
        params.tool_choice = _tool_choice(request.tool_choice)
    if request.reasoning is not None and request.reasoning.effort is not None:
        params.reasoning_effort = request.reasoning.effort
    if request.text is not None:
        response_format = _response_format(request.text.format)
        if response_format is not None:
            params.response_format = response_format
    return params


def _tool(tool: _ToolSpec, path: str) -> Tool:
    if tool.type != "function":
        raise invalid(
            f"built-in tool {tool.type!r} is not supported by the gateway: only function tools",
            f"{path}.type",
        )
    if not tool.name:
        raise invalid("a function tool needs a name", f"{path}.name")
    function = FunctionDefinition(
        name=tool.name,
        description=tool.description if tool.description is not None else UNSET,
        parameters=tool.parameters if tool.parameters is not None else UNSET,
        strict=tool.strict if tool.strict is not None else UNSET,
    )
    return Tool(function=function)


def _tool_choice(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    if isinstance(choice, str):
        if choice not in _TOOL_CHOICES:
            raise invalid("expected 'auto', 'none', 'required' or a function", "tool_choice")
        return choice
    kind = choice.get("type")
    name = choice.get("name")
    if kind == "function" and isinstance(name, str) and name:
        return {"type": "function", "function": {"name": name}}
    if kind == "function":
        raise invalid("a function tool choice needs a name", "tool_choice.name")
    raise invalid(
        f"tool choice {kind!r} is not supported by the gateway: only function tools",
        "tool_choice.type",
    )


def _response_format(
    format: _FormatText | _FormatJsonObject | _FormatJsonSchema | None,
) -> dict[str, Any] | None:
    if isinstance(format, _FormatJsonSchema):
        spec: dict[str, Any] = {"name": format.name, "schema": format.schema}
        if format.description is not None:
            spec["description"] = format.description
        if format.strict is not None:
            spec["strict"] = format.strict
        return {"type": "json_schema", "json_schema": spec}
    if isinstance(format, _FormatJsonObject):
        return {"type": "json_object"}
    return None


def _reasoning_echo(reasoning: _Reasoning | None) -> ReasoningConfig:
    if reasoning is None:
        return ReasoningConfig()
    return ReasoningConfig(
        effort=reasoning.effort, summary=reasoning.summary or reasoning.generate_summary
    )


def _text_echo(text: _TextConfig | None) -> dict[str, Any]:
    echo: dict[str, Any] = {"format": {"type": "text"}}
    if text is None:
        return echo
    if text.format is not None:
        echo["format"] = msgspec.to_builtins(text.format)
    if text.verbosity is not None:
        echo["verbosity"] = text.verbosity
    return echo


# ---------------------------------------------------------------------------------------------
# Input items → canonical messages
# ---------------------------------------------------------------------------------------------


def _conversation(items: list[_Item]) -> list[Message]:
    """Canonical messages for input items (see the module docstring)."""
    messages: list[Message] = []
    for index, item in enumerate(items):
        path = f"input[{index}]"
        kind = item.type
        if kind == "message":
            _message(item, path, messages)
        elif kind == "function_call":
            _function_call(item, path, messages)
        elif kind == "function_call_output":
            messages.append(_function_output(item, path))
        elif kind == "reasoning":
            _reasoning(item, messages)
        elif kind == "item_reference":
            raise invalid(
                "item references are not supported by the gateway: send the items, or "
                "previous_response_id",
                f"{path}.type",
            )
        else:
            raise invalid(
                f"input item {kind!r} is not supported by the gateway (only messages, "
                "function calls and their outputs, and reasoning)",
                f"{path}.type",
            )
    return messages


def _open_assistant(messages: list[Message]) -> Message | None:
    """The last message if it is an assistant turn still being assembled from items."""
    if messages and messages[-1].role == "assistant":
        return messages[-1]
    return None


def _message(item: _Item, path: str, messages: list[Message]) -> None:
    role = item.role
    if not _is_message_role(role):
        raise invalid("expected one of 'user', 'system', 'developer', 'assistant'", f"{path}.role")
    content = item.content
    if content is None:
        raise invalid("a message needs content", f"{path}.content")
    if role == "assistant":
        _assistant_message(content, path, messages)
        return
    if isinstance(content, str):
        messages.append(Message(role=role, content=content))
        return
    parts = [_part(part, f"{path}.content[{i}]") for i, part in enumerate(content)]
    messages.append(Message(role=role, content=parts))


def _assistant_message(content: Any, path: str, messages: list[Message]) -> None:
    texts: list[str] = []
    refusals: list[str] = []
    if isinstance(content, str):
        texts.append(content)
    else:
        for i, part in enumerate(content):
            if isinstance(part, (_OutputText, _InputText)):
                texts.append(part.text)
            elif isinstance(part, _Refusal):
                refusals.append(part.refusal)
            else:
                raise invalid(
                    "an assistant message carries output_text and refusal parts only",
                    f"{path}.content[{i}].type",
                )
    open_turn = _open_assistant(messages)
    if open_turn is not None and open_turn.content is None and not open_turn.tool_calls:
        target = open_turn  # the text of a turn whose reasoning came first
    else:
        target = Message(role="assistant")
        messages.append(target)
    target.content = "".join(texts)
    if refusals:
        target.refusal = "".join(refusals)


def _function_call(item: _Item, path: str, messages: list[Message]) -> None:
    if not item.call_id:
        raise invalid("a function_call needs a call_id", f"{path}.call_id")
    if not item.name:
        raise invalid("a function_call needs a name", f"{path}.name")
    call = ToolCall(
        id=item.call_id, function=FunctionCall(name=item.name, arguments=item.arguments or "")
    )
    turn = _open_assistant(messages)
    if turn is None:
        turn = Message(role="assistant", content=None)
        messages.append(turn)
    if turn.tool_calls:
        turn.tool_calls.append(call)
    else:
        turn.tool_calls = [call]


def _function_output(item: _Item, path: str) -> Message:
    if not item.call_id:
        raise invalid("a function_call_output needs a call_id", f"{path}.call_id")
    output = item.output
    if output is None:
        raise invalid("a function_call_output needs an output", f"{path}.output")
    if isinstance(output, str):
        return Message(role="tool", content=output, tool_call_id=item.call_id)
    parts = [_part(part, f"{path}.output[{i}]") for i, part in enumerate(output)]
    return Message(role="tool", content=parts, tool_call_id=item.call_id)


def _reasoning(item: _Item, messages: list[Message]) -> None:
    content = item.content if isinstance(item.content, list) else []
    text = "".join(part.text for part in content if isinstance(part, _ReasoningText))
    if not text:
        text = "".join(part.text for part in item.summary or ())
    if not text:
        return  # an encrypted or empty reasoning item carries nothing the upstream can use
    turn = _open_assistant(messages)
    if turn is not None and turn.content is None and not turn.tool_calls:
        turn.reasoning_content = (turn.reasoning_content or "") + text
    else:
        messages.append(Message(role="assistant", content=None, reasoning_content=text))


def _part(part: Any, path: str) -> ContentPart:
    if isinstance(part, (_InputText, _OutputText)):
        return TextPart(text=part.text)
    if isinstance(part, _InputImage):
        if part.image_url:
            detail = part.detail if part.detail not in (None, "auto") else UNSET
            return ImagePart(image_url=ImageURL(url=part.image_url, detail=detail))
        raise invalid(
            "an input_image needs an image_url (an http(s) or data: URL); file_id images "
            "are not supported by the gateway",
            f"{path}.image_url",
        )
    if isinstance(part, _InputFile):
        if part.file_data:
            file: dict[str, Any] = {"file_data": part.file_data}
            if part.filename:
                file["filename"] = part.filename
            return FilePart(file=file)
        if part.file_id:
            return FilePart(file={"file_id": part.file_id})
        raise invalid("an input_file needs file_data or file_id", f"{path}.file_data")
    tag = type(part).__struct_config__.tag
    raise invalid(f"a {tag} part is not allowed here", f"{path}.type")
