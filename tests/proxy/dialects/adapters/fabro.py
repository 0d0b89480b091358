"""Conformance adapter for Fabro completions (``proxy.dialects.fabro``).

Whole responses and errors are validated against ``CompletionResponse`` / ``ErrorResponse`` of
fabro-completions.openapi.json. The spec names no stream-event schema, so each event is checked
against :data:`STREAM_EVENT`, derived from the event list in its description (the ``finish``
event's ``usage`` and ``response`` and the ``error`` event's entry reuse the spec's schemas).
"""

from __future__ import annotations

import json
from typing import Any

from tests.proxy.dialects.adapters import ErrorCase, Outcome, ToolCallOut, sse_events
from tests.schemas import validate_in, validate_schema

SPEC = "fabro-completions.openapi.json"
PATH = "/api/v1/completions"
HELLO = [{"role": "user", "content": [{"kind": "text", "data": "hello"}]}]
_STRING = {"type": "string"}
_TOOL_CALL = {
    "type": "object",
    "required": ["id", "name", "arguments"],
    "properties": {"id": _STRING, "name": _STRING, "arguments": {}},
}


def _event(kind: str, **properties: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["type", *properties],
        "properties": {"type": {"const": kind}, **properties},
        "additionalProperties": False,
    }


STREAM_EVENT: dict[str, Any] = {
    "oneOf": [
        _event("stream_start"),
        _event("text_start", text_id=_STRING),
        _event("text_delta", delta=_STRING, text_id=_STRING),
        _event("text_end", text_id=_STRING),
        _event("reasoning_start"),
        _event("reasoning_delta", delta=_STRING),
        _event("reasoning_end"),
        _event("tool_call_start", tool_call=_TOOL_CALL),
        _event("tool_call_delta", tool_call=_TOOL_CALL),
        _event("tool_call_end", tool_call=_TOOL_CALL),
        _event(
            "finish",
            finish_reason=_STRING,
            usage={"$ref": "#/components/schemas/CompletionUsage"},
            response={"$ref": "#/components/schemas/CompletionResponse"},
        ),
        _event("error", error={"$ref": "#/components/schemas/ErrorResponseEntry"}),
    ]
}


def _arguments(value: Any) -> Any:
    return json.loads(value or "{}") if isinstance(value, str) else value


def _totals(usage: dict[str, Any]) -> tuple[int, int]:
    inputs = usage["input_tokens"] + usage["cache_read_tokens"] + usage["cache_write_tokens"]
    return inputs, usage["output_tokens"] + usage["reasoning_tokens"]


def _outcome(response: dict[str, Any]) -> Outcome:
    parts = response["message"]["content"]
    inputs, outputs = _totals(response["usage"])
    return Outcome(
        text="".join(p["data"] for p in parts if p["kind"] == "text"),
        tool_calls=tuple(
            ToolCallOut(p["data"]["name"], _arguments(p["data"]["arguments"]))
            for p in parts
            if p["kind"] == "tool_call"
        ),
        input_tokens=inputs,
        output_tokens=outputs,
    )


class FabroAdapter:
    """See :mod:`tests.proxy.dialects.adapters`."""

    dialect = "fabro"
    supports_tools = True

    def request(
        self, model: str, text: str, *, stream: bool, tools: list[dict[str, Any]] | None = None
    ) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {
            "model": model,
            "messages": [{"role": "user", "content": [{"kind": "text", "data": text}]}],
            "stream": stream,
        }
        if tools:
            body["tools"] = [
                {
                    "name": tool["function"]["name"],
                    "description": tool["function"].get("description", ""),
                    "parameters": tool["function"].get("parameters", {"type": "object"}),
                }
                for tool in tools
            ]
        return PATH, body

    def read_response(self, body: dict[str, Any]) -> Outcome:
        validate_in(SPEC, "CompletionResponse", body)
        return _outcome(body)

    def read_stream(self, raw: bytes) -> Outcome:
        events = [e for e in sse_events(raw) if e.event != "ping"]
        assert events, "empty stream"
        assert all(e.event == "stream_event" for e in events), "every frame is a stream_event"
        payloads = [json.loads(e.data) for e in events]
        for payload in payloads:
            validate_schema(SPEC, STREAM_EVENT, payload)
        assert payloads[0]["type"] == "stream_start"
        last = payloads[-1]
        assert last["type"] in ("finish", "error"), "no end marker: finish or error comes last"
        assert all(p["type"] not in ("finish", "error") for p in payloads[:-1])
        text = "".join(p["delta"] for p in payloads if p["type"] == "text_delta")
        calls = tuple(
            ToolCallOut(p["tool_call"]["name"], _arguments(p["tool_call"]["arguments"]))
            for p in payloads
            if p["type"] == "tool_call_end"
        )
        if last["type"] == "error":
            return Outcome(text=text, tool_calls=calls, error=last["error"]["detail"])
        whole = _outcome(last["response"])
        assert (whole.text, whole.tool_calls) == (text, calls), "finish repeats the deltas"
        inputs, outputs = _totals(last["usage"])
        return Outcome(text=text, tool_calls=calls, input_tokens=inputs, output_tokens=outputs)

    def read_error(self, status: int, body: dict[str, Any]) -> str:
        validate_in(SPEC, "ErrorResponse", body)
        (entry,) = body["errors"]
        assert entry["status"] == str(status)
        return entry["detail"]

    def error_cases(self) -> list[ErrorCase]:
        return [
            ErrorCase("invalid-json", b"{", "json"),
            ErrorCase("missing-messages", {"model": "mock/echo"}, "messages"),
            ErrorCase("empty-messages", {"messages": []}, "messages"),
            ErrorCase("messages-wrong-type", {"messages": "hello"}, "messages"),
            ErrorCase(
                "content-not-parts",
                {"messages": [{"role": "user", "content": "hello"}]},
                "messages[0].content",
            ),
            ErrorCase(
                "unknown-part-kind",
                {"messages": [{"role": "user", "content": [{"kind": "video", "data": "x"}]}]},
                "messages[0].content[0].kind",
            ),
            ErrorCase(
                "bad-role",
                {"messages": [{"role": "robot", "content": HELLO[0]["content"]}]},
                "messages[0].role",
            ),
            ErrorCase("stream-wrong-type", {"messages": HELLO, "stream": "yes"}, "stream"),
            ErrorCase(
                "temperature-out-of-range", {"messages": HELLO, "temperature": 3}, "temperature"
            ),
            ErrorCase("max-tokens-zero", {"messages": HELLO, "max_tokens": 0}, "max_tokens"),
            ErrorCase(
                "unknown-reasoning-effort",
                {"messages": HELLO, "reasoning_effort": "extreme"},
                "reasoning_effort",
            ),
            ErrorCase(
                "unknown-tool-choice-mode",
                {"messages": HELLO, "tool_choice": {"mode": "any"}},
                "tool_choice.mode",
            ),
            ErrorCase(
                "named-tool-choice-without-name",
                {"messages": HELLO, "tool_choice": {"mode": "named"}},
                "tool_choice.tool_name",
            ),
            ErrorCase(
                "tool-without-parameters",
                {"messages": HELLO, "tools": [{"name": "f", "description": "d"}]},
                "tools[0].parameters",
            ),
            ErrorCase("schema-not-an-object", {"messages": HELLO, "schema": "json"}, "schema"),
            ErrorCase(
                "provider-options-set-the-model",
                {"messages": HELLO, "provider_options": {"model": "x"}},
                "provider_options.model",
            ),
        ]


ADAPTER = FabroAdapter()
