"""Conformance adapter for Bifrost text completions (``proxy.dialects.bifrost``).

Whole responses and errors are validated against ``BifrostResponse`` / ``BifrostError`` of
``bifrost-completions.openapi.json``. The spec names no stream frame, so :data:`STREAM_CHUNK`
derives one from it as Bifrost's own code streams: a ``BifrostResponse`` whose choices carry
``delta`` (``BifrostStreamDelta``) instead of ``message``.
"""

from __future__ import annotations

from typing import Any

from tests.proxy.dialects.adapters import (
    ErrorCase,
    OpenAIDeltaAssembler,
    Outcome,
    data_payloads,
    openai_tool_calls,
    openai_usage,
)
from tests.schemas import validate_in, validate_schema

SPEC = "bifrost-completions.openapi.json"
PATH = "/v1/text/completions"

_STRING = {"type": "string"}
_FINISH_REASON = "#/components/schemas/BifrostResponseChoice/properties/finish_reason"
_TOOL_CALL_FRAGMENT = {
    "type": "object",
    "required": ["index"],
    "additionalProperties": False,
    "properties": {
        "index": {"type": "integer"},
        "id": _STRING,
        "type": {"enum": ["function"]},
        "function": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"name": _STRING, "arguments": _STRING},
        },
    },
}
STREAM_CHUNK = {
    "type": "object",
    "required": ["id", "object", "model", "created", "choices", "extra_fields"],
    "properties": {
        "id": _STRING,
        "object": {"enum": ["text.completion.chunk"]},
        "model": _STRING,
        "created": {"type": "integer"},
        "choices": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["index", "delta"],
                "additionalProperties": False,
                "properties": {
                    "index": {"type": "integer"},
                    "finish_reason": {"$ref": _FINISH_REASON},
                    "delta": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "role": {"$ref": "#/components/schemas/MessageRole"},
                            "content": _STRING,
                            "thought": _STRING,
                            "refusal": _STRING,
                            "tool_calls": {"type": "array", "items": _TOOL_CALL_FRAGMENT},
                        },
                    },
                },
            },
        },
        "usage": {"$ref": "#/components/schemas/LLMUsage"},
        "extra_fields": {
            "allOf": [
                {"$ref": "#/components/schemas/BifrostResponseExtraFields"},
                {"required": ["provider", "model_params", "latency"]},
            ]
        },
    },
}


class BifrostAdapter:
    """See :mod:`tests.proxy.dialects.adapters`."""

    dialect = "bifrost"
    supports_tools = True

    def request(
        self, model: str, text: str, *, stream: bool, tools: list[dict[str, Any]] | None = None
    ) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"model": model, "text": text, "stream": stream}
        if tools:
            body["tools"] = tools
        return PATH, body

    def read_response(self, body: dict[str, Any]) -> Outcome:
        validate_in(SPEC, "BifrostResponse", body)
        assert body["object"] == "text.completion"
        extra = body["extra_fields"]
        assert {"provider", "model_params", "latency", "chat_history"} <= extra.keys()
        message = body["choices"][0]["message"]
        prompt, completion = openai_usage(body.get("usage"))
        return Outcome(
            text=message.get("content") or "",
            tool_calls=openai_tool_calls(message.get("tool_calls")),
            input_tokens=prompt,
            output_tokens=completion,
        )

    def read_stream(self, raw: bytes) -> Outcome:
        payloads, error = data_payloads(raw)
        assembler = OpenAIDeltaAssembler()
        usage = None
        for payload in payloads:
            validate_schema(SPEC, STREAM_CHUNK, payload)
            for choice in payload["choices"]:
                assembler.add(choice["delta"])
            usage = payload.get("usage") or usage
        prompt, completion = openai_usage(usage)
        return Outcome(
            text="".join(assembler.text),
            tool_calls=assembler.tool_calls(),
            input_tokens=prompt,
            output_tokens=completion,
            error=self.read_error(error["status_code"], error) if error is not None else None,
        )

    def read_error(self, status: int, body: dict[str, Any]) -> str:
        validate_in(SPEC, "BifrostError", body)
        assert body["is_bifrost_error"] is True
        assert body["status_code"] == status
        return body["error"]["message"]

    def error_cases(self) -> list[ErrorCase]:
        model = "openai/echo"
        return [
            ErrorCase("missing-model", {"text": "hi"}, "model", message="Model is required"),
            ErrorCase(
                "model-not-provider-slash-model",
                {"model": "claude-2.1", "text": "hi"},
                "model",
                message="Model must be in the format of 'provider/model'",
            ),
            ErrorCase(
                "model-empty-provider",
                {"model": "/claude-2.1", "text": "hi"},
                "model",
                message="Model must be in the format of 'provider/model'",
            ),
            ErrorCase(
                "missing-text",
                {"model": model},
                "text",
                message="Text is required for text completion",
            ),
            ErrorCase(
                "empty-text",
                {"model": model, "text": ""},
                "text",
                message="Text is required for text completion",
            ),
            ErrorCase(
                "malformed-fallback",
                {"model": model, "text": "hi", "fallbacks": ["anthropic/claude", "cohere"]},
                "fallback",
                message="Fallback must be in the format of 'provider/model'",
            ),
            ErrorCase("text-wrong-type", {"model": model, "text": 42}, "text"),
            ErrorCase("model-wrong-type", {"model": ["openai/echo"], "text": "hi"}, "model"),
            ErrorCase(
                "fallbacks-not-a-list",
                {"model": model, "text": "hi", "fallbacks": "anthropic/claude"},
                "fallbacks",
            ),
            ErrorCase(
                "max-tokens-zero", {"model": model, "text": "hi", "max_tokens": 0}, "max_tokens"
            ),
            ErrorCase(
                "temperature-out-of-range",
                {"model": model, "text": "hi", "temperature": 2.5},
                "temperature",
            ),
            ErrorCase(
                "stop-sequences-wrong-type",
                {"model": model, "text": "hi", "stop_sequences": "END"},
                "stop_sequences",
            ),
        ]


ADAPTER = BifrostAdapter()
