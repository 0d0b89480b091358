"""Conformance adapter for Anthropic Messages (``proxy.dialects.anthropic``).

Whole responses are validated against ``Message``, every stream event against
``MessageStreamEvent`` (an in-band ``error`` event against ``ErrorResponse``), and errors against
``ErrorResponse`` of anthropic-messages.openapi.json — except ``request_too_large`` (413), a real
Anthropic error type that the trimmed spec does not list.
"""

from __future__ import annotations

import json
from typing import Any

from tests.proxy.dialects.adapters import ErrorCase, Outcome, ToolCallOut, sse_events
from tests.schemas import validate_in

SPEC = "anthropic-messages.openapi.json"
PATH = "/v1/messages"
MAX_TOKENS = 4096
HELLO = [{"role": "user", "content": "hello"}]


def _totals(usage: dict[str, Any]) -> tuple[int, int]:
    cached = (usage.get("cache_read_input_tokens") or 0) + (
        usage.get("cache_creation_input_tokens") or 0
    )
    return usage["input_tokens"] + cached, usage["output_tokens"]


def _error_body(body: dict[str, Any]) -> str:
    if body["error"]["type"] != "request_too_large":
        validate_in(SPEC, "ErrorResponse", body)
    assert body["type"] == "error"
    return body["error"]["message"]


class AnthropicAdapter:
    """See :mod:`tests.proxy.dialects.adapters`."""

    dialect = "anthropic"
    supports_tools = True

    def request(
        self, model: str, text: str, *, stream: bool, tools: list[dict[str, Any]] | None = None
    ) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {
            "model": model,
            "max_tokens": MAX_TOKENS,
            "messages": [{"role": "user", "content": text}],
            "stream": stream,
        }
        if tools:
            body["tools"] = [
                {
                    "name": tool["function"]["name"],
                    "description": tool["function"].get("description", ""),
                    "input_schema": tool["function"].get("parameters", {"type": "object"}),
                }
                for tool in tools
            ]
        return PATH, body

    def read_response(self, body: dict[str, Any]) -> Outcome:
        validate_in(SPEC, "Message", body)
        blocks = body["content"]
        inputs, outputs = _totals(body["usage"])
        return Outcome(
            text="".join(b["text"] for b in blocks if b["type"] == "text"),
            tool_calls=tuple(
                ToolCallOut(b["name"], b["input"]) for b in blocks if b["type"] == "tool_use"
            ),
            input_tokens=inputs,
            output_tokens=outputs,
        )

    def read_stream(self, raw: bytes) -> Outcome:
        events = [e for e in sse_events(raw) if e.event != "ping"]
        assert events, "empty stream"
        payloads = [json.loads(e.data) for e in events]
        for event, payload in zip(events, payloads, strict=True):
            assert payload["type"] == event.event, "the event name is the payload's type"
        assert payloads[0]["type"] == "message_start"
        text: list[str] = []
        tools: dict[int, tuple[str, list[str]]] = {}
        usage: dict[str, Any] | None = None
        for position, payload in enumerate(payloads):
            last = position == len(payloads) - 1
            kind = payload["type"]
            if kind == "error":
                assert last, "events after an in-band error"
                return Outcome(text="".join(text), error=_error_body(payload))
            validate_in(SPEC, "MessageStreamEvent", payload)
            assert (kind == "message_stop") == last, "message_stop comes last, and only there"
            if kind == "content_block_start" and payload["content_block"]["type"] == "tool_use":
                tools[payload["index"]] = (payload["content_block"]["name"], [])
            elif kind == "content_block_delta":
                delta = payload["delta"]
                if delta["type"] == "text_delta":
                    text.append(delta["text"])
                elif delta["type"] == "input_json_delta":
                    tools[payload["index"]][1].append(delta["partial_json"])
            elif kind == "message_delta":
                usage = payload["usage"]
        assert usage is not None, "no message_delta"
        inputs, outputs = _totals(usage)
        return Outcome(
            text="".join(text),
            tool_calls=tuple(
                ToolCallOut(name, json.loads("".join(pieces) or "{}"))
                for _, (name, pieces) in sorted(tools.items())
            ),
            input_tokens=inputs,
            output_tokens=outputs,
        )

    def read_error(self, status: int, body: dict[str, Any]) -> str:
        return _error_body(body)

    def error_cases(self) -> list[ErrorCase]:
        model = "mock/echo"
        base = {"model": model, "max_tokens": 16, "messages": HELLO}
        return [
            ErrorCase("invalid-json", b'{"model": ', "json"),
            ErrorCase("missing-model", {"max_tokens": 16, "messages": HELLO}, "model"),
            ErrorCase("missing-max-tokens", {"model": model, "messages": HELLO}, "max_tokens"),
            ErrorCase("missing-messages", {"model": model, "max_tokens": 16}, "messages"),
            ErrorCase("empty-messages", {**base, "messages": []}, "messages"),
            ErrorCase(
                "system-role-in-messages",
                {**base, "messages": [{"role": "system", "content": "x"}]},
                "messages[0].role",
            ),
            ErrorCase(
                "unknown-block-type",
                {**base, "messages": [{"role": "user", "content": [{"type": "video"}]}]},
                "messages[0].content[0].type",
            ),
            ErrorCase("max-tokens-wrong-type", {**base, "max_tokens": "many"}, "max_tokens"),
            ErrorCase("temperature-out-of-range", {**base, "temperature": 1.5}, "temperature"),
            ErrorCase("top-k-negative", {**base, "top_k": -1}, "top_k"),
            ErrorCase(
                "unknown-tool-choice", {**base, "tool_choice": {"type": "function"}}, "tool_choice"
            ),
            ErrorCase(
                "server-tool",
                {**base, "tools": [{"name": "bash", "type": "bash_20250124"}]},
                "tools[0].type",
            ),
        ]


ADAPTER = AnthropicAdapter()
