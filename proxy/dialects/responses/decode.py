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

``instructions`` is the first, system, message. ``tools`` are function tools, and ``mcp``
tools (``server_label``, ``server_url``, ``allowed_tools``; ``require_approval`` only
``never``), kept in the envelope for the gateway's MCP loop (:mod:`proxy.mcp.responses_loop`);
another built-in tool (``web_search``, ``file_search``, ``computer_use_preview``,
``code_interpreter`` …), a
built-in tool's item, ``item_reference``, an image or file given by ``file_id`` only where the
gateway cannot resolve it, ``conversation`` and ``prompt`` are 400s naming the field: the
gateway cannot do them, and ignoring them would answer something else. ``background: true`` is
kept in the envelope (the route runs the response in the background,
:mod:`proxy.stored.background`); with ``store: false`` it is a 400 naming ``store``.
``tool_choice`` auto/none/required/a named function, ``parallel_tool_calls``,
``max_output_tokens`` (→ ``max_completion_tokens``), ``temperature``, ``top_p``, ``user``,
``reasoning.effort`` (→ ``reasoning_effort``) and ``text.format`` (json_schema or json_object →
``response_format``) are translated. ``store`` (default true), ``previous_response_id``,
``metadata`` (at most 16 pairs), ``truncation`` and ``reasoning.summary`` are the gateway's or
are repeated in the response (:class:`~proxy.dialects.responses.objects.Envelope`);
``truncation: auto`` is accepted but not applied (an over-long prompt gets the upstream's
context-window error). ``presence_penalty`` and ``frequency_penalty`` are translated too.
``model`` may be left out (a stored prompt may name it in OpenAI's API): the route then uses
the router's default model, and only when there is none is it a 400 naming ``model``.
``service_tier`` (echoed as asked, ``default`` when not), ``top_logprobs`` (echoed; the
gateway returns no logprobs), ``max_tool_calls`` (it bounds the MCP tool calls the gateway
runs), ``safety_identifier`` and ``prompt_cache_key`` are checked against the
schema's bounds and repeated in the response. Other fields (``include``,
``stream_options`` …) are accepted and ignored.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Struct

from proxy.core.canonical import (
    MAX_TOKENS_LIMIT,
    Call,
    FunctionDefinition,
    Message,
    Params,
    Timings,
    Tool,
)
from proxy.core.errors import BadRequest
from proxy.dialects.base import bad_request, invalid
from proxy.dialects.responses.input_items import Item, conversation
from proxy.dialects.responses.objects import Envelope, FunctionTool, McpToolSpec, ReasoningConfig

MAX_METADATA_PAIRS = 16

# ---------------------------------------------------------------------------------------------
# The request, as msgspec decodes it
# ---------------------------------------------------------------------------------------------


class _ToolSpec(Struct):
    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    server_label: str | None = None
    server_url: str | None = None
    allowed_tools: list[str] | dict[str, Any] | None = None
    require_approval: str | dict[str, Any] | None = None


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
    model: str = ""
    input: str | list[Item] | None = None
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
    service_tier: (
        Literal["auto", "default", "flex", "scale", "priority", "fast", "ultrafast"] | None
    ) = None
    top_logprobs: Annotated[int, Meta(ge=0, le=20)] | None = None
    max_tool_calls: int | None = None
    safety_identifier: Annotated[str, Meta(max_length=64)] | None = None
    prompt_cache_key: str | None = None
    presence_penalty: Annotated[float, Meta(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Meta(ge=-2, le=2)] | None = None


_REQUEST = msgspec.json.Decoder(_Request)
_ENCODER = msgspec.json.Encoder()
_TOOL_CHOICES = frozenset({"auto", "none", "required"})


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
        messages.extend(conversation(request.input))
    elif request.previous_response_id is None:
        raise BadRequest("Missing required parameter: 'input'", param="input")
    params = _params(request)
    envelope = Envelope(
        id=response_id,
        created_at=int(time.time()),
        model=request.model,
        store=request.store is not False,
        background=bool(request.background),
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
        mcp=[
            _mcp_tool(tool, f"tools[{i}]")
            for i, tool in enumerate(request.tools or ())
            if tool.type == "mcp"
        ],
        top_p=request.top_p,
        truncation=request.truncation or "disabled",
        user=request.user,
        service_tier=request.service_tier or "default",
        top_logprobs=request.top_logprobs or 0,
        max_tool_calls=request.max_tool_calls,
        safety_identifier=request.safety_identifier,
        prompt_cache_key=request.prompt_cache_key,
        presence_penalty=request.presence_penalty or 0.0,
        frequency_penalty=request.frequency_penalty or 0.0,
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
    if request.background and request.store is False:
        raise invalid("a background response must be stored: background needs store", "store")
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
    if request.presence_penalty is not None:
        params.presence_penalty = request.presence_penalty
    if request.frequency_penalty is not None:
        params.frequency_penalty = request.frequency_penalty
    if request.parallel_tool_calls is not None:
        params.parallel_tool_calls = request.parallel_tool_calls
    if request.tools:
        params.tools = [
            _tool(tool, f"tools[{i}]") for i, tool in enumerate(request.tools) if tool.type != "mcp"
        ]
    if request.tool_choice is not None:
        params.tool_choice = _tool_choice(request.tool_choice)
    if request.reasoning is not None and request.reasoning.effort is not None:
        params.reasoning_effort = request.reasoning.effort
    if request.text is not None:
        response_format = _response_format(request.text.format)
        if response_format is not None:
            params.response_format = response_format
    return params


def _mcp_tool(tool: _ToolSpec, path: str) -> McpToolSpec:
    """An ``mcp`` tool, run by the gateway (its server is checked against the config there)."""
    if not tool.server_label:
        raise invalid("an mcp tool needs a server_label", f"{path}.server_label")
    if tool.require_approval not in (None, "never"):
        raise invalid(
            'require_approval: only "never" is supported by the gateway (it runs the calls)',
            f"{path}.require_approval",
        )
    allowed = tool.allowed_tools
    if isinstance(allowed, dict):
        names = allowed.get("tool_names")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise invalid("allowed_tools: expected a list of names", f"{path}.allowed_tools")
        allowed = names
    return McpToolSpec(
        server_label=tool.server_label, server_url=tool.server_url, allowed_tools=allowed
    )


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
