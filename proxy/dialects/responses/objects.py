"""The Responses API's objects as the gateway writes them: the ``response``, its output items,
usage and errors, and the request fields a response repeats (:class:`Envelope`).

Everything here is pure: msgspec Structs and the functions that build them from canonical
values. Output items get ids derived from their response's id and their place in ``output``
(``msg_…``, ``fc_…``, ``rs_…``), so the same reply always renders the same object — whether it
is sent whole, assembled at the end of a stream, or read back from the response store.
"""

from __future__ import annotations

import secrets
import time
from typing import Any, Literal

import msgspec
from msgspec import Struct

from proxy.core.canonical import FinishReason, Tool, Usage
from proxy.core.errors import GatewayError

ENCODER = msgspec.json.Encoder()

Status = Literal["completed", "incomplete", "failed", "in_progress", "queued", "cancelled"]
ItemStatus = Literal["completed", "incomplete", "in_progress"]


def new_response_id() -> str:
    """A fresh ``resp_…`` id: 48 random hex digits, unique enough to key the response store."""
    return "resp_" + secrets.token_hex(24)


def item_id(response_id: str, prefix: str, output_index: int) -> str:
    """The id of output item ``output_index`` of a response: ``{prefix}_{token}_{index}``."""
    return f"{prefix}_{response_id.removeprefix('resp_')}_{output_index}"


# ---------------------------------------------------------------------------------------------
# What a response repeats of its request
# ---------------------------------------------------------------------------------------------


class ReasoningConfig(Struct):
    """``reasoning`` as echoed: the effort and summary asked for (null when not asked)."""

    effort: str | None = None
    summary: str | None = None


class FunctionTool(Struct, tag="function", tag_field="type"):
    """A function tool as echoed in ``tools``."""

    name: str
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    description: str | None = None

    @classmethod
    def of(cls, tool: Tool) -> FunctionTool:
        """The echo of a canonical tool."""
        function = tool.function
        return cls(
            name=function.name,
            parameters=function.parameters or None,
            strict=function.strict if isinstance(function.strict, bool) else None,
            description=function.description or None,
        )


class Envelope(Struct):
    """The request fields every response object (and stream event) of one call repeats.

    Built by the decoder and kept in ``Call.dialect_state``; ``id`` and ``created_at`` are
    fixed there, so every rendering of this response agrees on them. ``model`` is the model the
    request named (the router's default when it named none: the conversation state fills it in
    before the chain runs), and every rendering echoes it, not the upstream's name for it.
    """

    id: str
    created_at: int
    model: str
    background: bool = False
    service_tier: str = "default"
    top_logprobs: int = 0
    max_tool_calls: int | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    store: bool = True
    instructions: str | None = None
    max_output_tokens: int | None = None
    metadata: dict[str, str] = msgspec.field(default_factory=dict)
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    reasoning: ReasoningConfig = msgspec.field(default_factory=ReasoningConfig)
    temperature: float | None = None
    text: dict[str, Any] = msgspec.field(default_factory=lambda: {"format": {"type": "text"}})
    tool_choice: str | dict[str, Any] = "auto"
    tools: list[FunctionTool] = msgspec.field(default_factory=list)
    mcp: list[McpToolSpec] = msgspec.field(default_factory=list)
    """The request's MCP tools (run by the gateway, not the dialect)."""
    mcp_output: list[OutputItem] = msgspec.field(default_factory=list)
    """The ``mcp_list_tools`` and ``mcp_call`` items the gateway made, before the model's."""
    top_p: float | None = None
    truncation: str = "disabled"
    user: str | None = None


# ---------------------------------------------------------------------------------------------
# Output items
# ---------------------------------------------------------------------------------------------


class OutputText(Struct, tag="output_text", tag_field="type"):
    """A text part of an output message."""

    text: str
    annotations: list[Any] = msgspec.field(default_factory=list)
    logprobs: list[Any] = msgspec.field(default_factory=list)


class Refusal(Struct, tag="refusal", tag_field="type"):
    """A refusal part of an output message."""

    refusal: str


class ReasoningText(Struct, tag="reasoning_text", tag_field="type"):
    """The model's reasoning, as the upstream reported it (not a summary)."""

    text: str


class OutputMessage(Struct, tag="message", tag_field="type"):
    """An assistant message item."""

    id: str
    status: ItemStatus
    content: list[OutputText | Refusal]
    role: str = "assistant"


class FunctionCallItem(Struct, tag="function_call", tag_field="type"):
    """A call of a function tool; ``call_id`` is what ``function_call_output`` answers."""

    id: str
    call_id: str
    name: str
    arguments: str
    status: ItemStatus


class ReasoningItem(Struct, tag="reasoning", tag_field="type"):
    """The reasoning that preceded the answer; ``summary`` stays empty (the gateway makes
    none), ``content`` holds the upstream's reasoning text."""

    id: str
    content: list[ReasoningText]
    summary: list[Any] = msgspec.field(default_factory=list)
    status: ItemStatus = "completed"


class McpListToolsItem(Struct, tag="mcp_list_tools", tag_field="type"):
    """The tools of an MCP server the gateway offered the model (``tools``: ``name``,
    ``description``, ``input_schema``, ``annotations``); ``error`` when it could not list
    them."""

    id: str
    server_label: str
    tools: list[dict[str, Any]]
    error: str | None = None


class McpCallItem(Struct, tag="mcp_call", tag_field="type"):
    """A tool call the gateway ran on an MCP server for the model: its ``output`` (the tool's
    text), or its ``error``."""

    id: str
    server_label: str
    name: str
    arguments: str
    output: str | None = None
    error: str | None = None
    status: Literal["completed", "failed"] = "completed"


class McpToolSpec(Struct, frozen=True):
    """A request's ``{"type": "mcp"}`` tool: the server (by ``server_label``, a configured MCP
    server, or by ``server_url``, which must be a configured one's), the tools it may use
    (``allowed_tools``; None: all), ``require_approval`` (only ``never`` is served)."""

    server_label: str
    server_url: str | None = None
    allowed_tools: list[str] | None = None


OutputItem = OutputMessage | FunctionCallItem | ReasoningItem | McpListToolsItem | McpCallItem


def output_text(items: list[OutputItem]) -> str:
    """The SDKs' ``output_text`` convenience: every ``output_text`` part of every message."""
    return "".join(
        part.text
        for item in items
        if isinstance(item, OutputMessage)
        for part in item.content
        if isinstance(part, OutputText)
    )


# ---------------------------------------------------------------------------------------------
# Usage, errors, the response object
# ---------------------------------------------------------------------------------------------


class _InputDetails(Struct):
    cached_tokens: int
    cache_write_tokens: int


class _OutputDetails(Struct):
    reasoning_tokens: int


class ResponsesUsage(Struct):
    """The Responses API's usage: ``input_tokens`` counts cache reads and writes too, and
    ``output_tokens`` includes reasoning, as OpenAI counts them."""

    input_tokens: int
    input_tokens_details: _InputDetails
    output_tokens: int
    output_tokens_details: _OutputDetails
    total_tokens: int

    @classmethod
    def of(cls, usage: Usage) -> ResponsesUsage:
        """The Responses usage of canonical buckets."""
        return cls(
            input_tokens=usage.prompt_tokens,
            input_tokens_details=_InputDetails(
                cached_tokens=usage.cache_read, cache_write_tokens=usage.cache_write
            ),
            output_tokens=usage.completion_tokens,
            output_tokens_details=_OutputDetails(reasoning_tokens=usage.reasoning),
            total_tokens=usage.total_tokens,
        )


class IncompleteDetails(Struct):
    """Why a response stopped early."""

    reason: Literal["max_output_tokens", "content_filter"]


class ResponseError(Struct):
    """The ``error`` of a failed response: one of the API's codes and the gateway's message."""

    code: str
    message: str

    @classmethod
    def of(cls, error: GatewayError) -> ResponseError:
        """Rate limits keep their code; every other failure mid-generation is a server error
        (the message names what went wrong)."""
        code = "rate_limit_exceeded" if error.kind == "rate_limited" else "server_error"
        return cls(code=code, message=error.message)


class ResponseObject(Struct, kw_only=True):
    """The ``response`` object (``object: "response"``)."""

    id: str
    object: str = "response"
    created_at: int
    completed_at: int | None
    status: Status
    background: bool
    error: ResponseError | None
    incomplete_details: IncompleteDetails | None
    instructions: str | None
    max_output_tokens: int | None
    model: str
    output: list[OutputItem]
    output_text: str
    parallel_tool_calls: bool
    previous_response_id: str | None
    reasoning: ReasoningConfig
    store: bool
    temperature: float
    text: dict[str, Any]
    tool_choice: str | dict[str, Any]
    tools: list[FunctionTool]
    top_p: float
    truncation: str
    usage: ResponsesUsage | None
    user: str | None
    metadata: dict[str, str]
    service_tier: str
    top_logprobs: int
    max_tool_calls: int | None
    safety_identifier: str | None
    prompt_cache_key: str | None
    presence_penalty: float
    frequency_penalty: float


def status_of(finish_reason: FinishReason | str | None) -> tuple[Status, IncompleteDetails | None]:
    """The response status for how generation ended: a length or content-filter stop leaves the
    response ``incomplete`` (with the reason), anything else ``completed``."""
    if finish_reason == "length":
        return "incomplete", IncompleteDetails(reason="max_output_tokens")
    if finish_reason == "content_filter":
        return "incomplete", IncompleteDetails(reason="content_filter")
    return "completed", None


def response_object(
    envelope: Envelope,
    *,
    model: str,
    output: list[OutputItem],
    status: Status,
    usage: Usage | None = None,
    incomplete: IncompleteDetails | None = None,
    error: ResponseError | None = None,
    completed_at: int | None = None,
) -> ResponseObject:
    """The response object of ``envelope``'s call with this output and outcome. Its ``model``
    is the envelope's (what the request named), ``model`` only when the envelope names none;
    ``completed_at`` is now when ``status`` is ``completed`` and none is given, else null.
    ``temperature`` and ``top_p`` are numbers, as the Open Responses schema requires: the
    request's, else the API's default (:data:`SAMPLING_DEFAULT`)."""
    if completed_at is None and status == "completed":
        completed_at = int(time.time())
    return ResponseObject(
        id=envelope.id,
        created_at=envelope.created_at,
        completed_at=completed_at if status == "completed" else None,
        status=status,
        background=envelope.background,
        error=error,
        incomplete_details=incomplete,
        instructions=envelope.instructions,
        max_output_tokens=envelope.max_output_tokens,
        model=envelope.model or model,
        output=[*envelope.mcp_output, *output] if envelope.mcp_output else output,
        output_text=output_text(output),
        parallel_tool_calls=envelope.parallel_tool_calls,
        previous_response_id=envelope.previous_response_id,
        reasoning=envelope.reasoning,
        store=envelope.store,
        temperature=_or_default(envelope.temperature),
        text=envelope.text,
        tool_choice=envelope.tool_choice,
        tools=envelope.tools,
        top_p=_or_default(envelope.top_p),
        truncation=envelope.truncation,
        usage=ResponsesUsage.of(usage) if usage is not None else None,
        user=envelope.user,
        metadata=envelope.metadata,
        service_tier=envelope.service_tier,
        top_logprobs=envelope.top_logprobs,
        max_tool_calls=envelope.max_tool_calls,
        safety_identifier=envelope.safety_identifier,
        prompt_cache_key=envelope.prompt_cache_key,
        presence_penalty=envelope.presence_penalty,
        frequency_penalty=envelope.frequency_penalty,
    )


SAMPLING_DEFAULT = 1.0
"""What a response reports for ``temperature`` or ``top_p`` when the request set none: the
default OpenAI's API documents (and reports) for both. The gateway sends neither upstream then,
so the upstream's own default applies."""


def _or_default(value: float | None) -> float:
    return SAMPLING_DEFAULT if value is None else value


class DeletedResponse(Struct):
    """What ``DELETE /v1/responses/{id}`` answers."""

    id: str
    object: str = "response"
    deleted: bool = True
