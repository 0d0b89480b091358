"""The GenAI attributes of an upstream attempt's span (OpenTelemetry semantic conventions 1.44,
:data:`~proxy.tracing.otel.SCHEMA_URL`), from the canonical call and what came back.

Pure functions over the canonical types: :func:`attempt_name` and :func:`request_attributes`
when the attempt starts, :func:`response_attributes` and :func:`usage_attributes` when it ends,
and — only when the operator opted in (``capture_content``) — :func:`input_content` and
:func:`output_content`, the messages as the conventions' JSON (``gen_ai.input.messages``,
``gen_ai.system_instructions``, ``gen_ai.tool.definitions``, ``gen_ai.output.messages``). The
content is the call as the upstream is sent it and the answer as the upstream gave it: inside
the masking plugin, so a value it masked is a placeholder there. Images, audio and files are
recorded as their kind only, never their bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import msgspec

from proxy.core.canonical import Call, Message, Usage
from proxy.core.reply import Response
from proxy.core.tracing import AttributeValue
from proxy.providers.base import NamesPreset, ProviderConfig

PROVIDER_NAMES: Mapping[str, str] = {
    "openai": "openai",
    "azure": "azure.ai.openai",
    "anthropic": "anthropic",
    "bedrock": "aws.bedrock",
    "gemini": "gcp.gemini",
    "mock": "crossway.mock",
}
"""``gen_ai.provider.name`` by provider ``type`` (the conventions' well-known values)."""

PRESET_NAMES: Mapping[str, str] = {
    "groq": "groq",
    "mistral": "mistral_ai",
    "deepseek": "deepseek",
    "xai": "x_ai",
    "perplexity": "perplexity",
}
"""``gen_ai.provider.name`` of the OpenAI-compatible presets the conventions name; any other
preset is reported as itself."""

_SYSTEM_ROLES = frozenset({"system", "developer"})
_json = msgspec.json.Encoder()


def provider_name(config: ProviderConfig) -> str:
    """The ``gen_ai.provider.name`` of a provider of this config."""
    kind = str(type(config).__struct_config__.tag)
    preset = config.preset if isinstance(config, NamesPreset) else None
    if kind == "openai" and preset:
        return PRESET_NAMES.get(preset, preset)
    return PROVIDER_NAMES.get(kind, kind)


def operation_name(call: Call) -> str:
    """``gen_ai.operation.name``: ``embeddings``, ``text_completion`` (the legacy completions
    route) or ``chat``."""
    if call.embedding is not None:
        return "embeddings"
    if call.dialect == "openai_completions":
        return "text_completion"
    return "chat"


def attempt_name(operation: str, model: str) -> str:
    """The span name the conventions give: ``"{gen_ai.operation.name} {gen_ai.request.model}"``."""
    return f"{operation} {model}"


def request_attributes(
    call: Call, operation: str, provider: str, model: str
) -> dict[str, AttributeValue]:
    """What the attempt asks for: operation, provider, model and the sampling parameters the
    client set (those it left out are left out)."""
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
    }
    if call.embedding is not None:
        return attributes
    attributes["gen_ai.request.stream"] = call.stream
    params = call.params
    max_tokens = params.max_completion_tokens or params.max_tokens
    if isinstance(max_tokens, int):
        attributes["gen_ai.request.max_tokens"] = max_tokens
    for key, value in (
        ("gen_ai.request.temperature", params.temperature),
        ("gen_ai.request.top_p", params.top_p),
        ("gen_ai.request.presence_penalty", params.presence_penalty),
        ("gen_ai.request.frequency_penalty", params.frequency_penalty),
    ):
        if isinstance(value, int | float) and not isinstance(value, bool):
            attributes[key] = float(value)
    if isinstance(params.seed, int):
        attributes["gen_ai.request.seed"] = params.seed
    if isinstance(params.n, int) and params.n != 1:
        attributes["gen_ai.request.choice.count"] = params.n
    stop = params.stop
    if isinstance(stop, str):
        attributes["gen_ai.request.stop_sequences"] = [stop]
    elif isinstance(stop, list):
        attributes["gen_ai.request.stop_sequences"] = list(stop)
    return attributes


def server_attributes(url: str) -> dict[str, AttributeValue]:
    """``server.address`` and ``server.port`` of an upstream URL (the scheme's port when the
    URL names none); nothing for a URL without a host."""
    parts = urlsplit(url)
    if not parts.hostname:
        return {}
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return {"server.address": parts.hostname, "server.port": port}


def response_attributes(response: Response) -> dict[str, AttributeValue]:
    """What a whole answer says about itself: id, model, finish reasons, usage."""
    attributes: dict[str, AttributeValue] = {
        "gen_ai.response.id": response.id,
        "gen_ai.response.model": response.model,
        "gen_ai.response.finish_reasons": [
            choice.finish_reason or "" for choice in response.choices
        ],
    }
    if response.usage is not None:
        attributes.update(usage_attributes(response.usage))
    return attributes


def usage_attributes(usage: Usage) -> dict[str, AttributeValue]:
    """The ``gen_ai.usage.*`` counts: input and output as the conventions count them (input
    includes cache reads and writes, output includes reasoning), and each part."""
    return {
        "gen_ai.usage.input_tokens": usage.prompt_tokens,
        "gen_ai.usage.output_tokens": usage.completion_tokens,
        "gen_ai.usage.cache_read.input_tokens": usage.cache_read,
        "gen_ai.usage.cache_creation.input_tokens": usage.cache_write,
        "gen_ai.usage.reasoning.output_tokens": usage.reasoning,
    }


def input_content(call: Call) -> dict[str, AttributeValue]:
    """The call's messages (``gen_ai.input.messages``), its system and developer turns
    (``gen_ai.system_instructions``) and tools (``gen_ai.tool.definitions``), as JSON text."""
    if call.embedding is not None:
        return {}
    system: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    for message in call.messages:
        parts = _parts(message)
        if message.role in _SYSTEM_ROLES:
            system.extend(parts)
        else:
            messages.append({"role": message.role, "parts": parts})
    attributes: dict[str, AttributeValue] = {
        "gen_ai.input.messages": _json.encode(messages).decode()
    }
    if system:
        attributes["gen_ai.system_instructions"] = _json.encode(system).decode()
    tools = call.params.tools
    if isinstance(tools, list) and tools:
        definitions = [{"type": "function", **msgspec.to_builtins(tool.function)} for tool in tools]
        attributes["gen_ai.tool.definitions"] = _json.encode(definitions).decode()
    return attributes


def output_content(response: Response) -> dict[str, AttributeValue]:
    """The answer's choices as ``gen_ai.output.messages`` (JSON text)."""
    messages = [
        {
            "role": "assistant",
            "parts": _parts(choice.message),
            "finish_reason": choice.finish_reason or "",
        }
        for choice in response.choices
    ]
    return {"gen_ai.output.messages": _json.encode(messages).decode()}


def _parts(message: Message) -> list[dict[str, Any]]:
    """A message's parts as the conventions write them."""
    parts: list[dict[str, Any]] = []
    content = message.content
    if isinstance(content, str):
        parts.append({"type": "text", "content": content})
    elif isinstance(content, list):
        for part in content:
            kind = type(part).__struct_config__.tag
            if kind == "text":
                parts.append({"type": "text", "content": getattr(part, "text", "")})
            elif kind == "refusal":
                parts.append({"type": "text", "content": getattr(part, "refusal", "")})
            else:  # an image, audio or a file: its kind, never its bytes
                parts.append({"type": "blob", "modality": str(kind)})
    reasoning = message.reasoning_content
    if isinstance(reasoning, str) and reasoning:
        parts.append({"type": "reasoning", "content": reasoning})
    tool_calls = message.tool_calls
    if isinstance(tool_calls, list):
        for tool_call in tool_calls:
            parts.append(
                {
                    "type": "tool_call",
                    "id": tool_call.id,
                    "name": tool_call.function.name,
                    "arguments": tool_call.function.arguments,
                }
            )
    tool_call_id = message.tool_call_id
    if message.role == "tool" and isinstance(tool_call_id, str):
        text = " ".join(part.get("content", "") for part in parts if part.get("type") == "text")
        parts = [{"type": "tool_call_response", "id": tool_call_id, "response": text}]
    return parts
