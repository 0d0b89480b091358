"""Conformance adapter for the OpenAI Responses API (``proxy.dialects.responses``).

Whole responses are validated against ``Response``, every stream event against its own event
schema, and errors against ``ErrorResponse`` of tests/specs/openai-responses.openapi.json.
Streams are checked beyond the schema: event names equal their ``type``, ``sequence_number``
counts from 0 without gaps, ``response.created`` then ``response.in_progress`` open it, one
terminal event (``response.completed``, ``response.incomplete`` or ``response.failed``) ends it,
every item added is done before a normal end, and the terminal response says what the deltas
said.
"""

from __future__ import annotations

import json
from typing import Any

from tests.proxy.dialects.adapters import ErrorCase, Outcome, ToolCallOut, sse_events
from tests.schemas import validate_in

SPEC = "openai-responses.openapi.json"
PATH = "/v1/responses"
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
EVENT_SCHEMAS = {
    "response.created": "ResponseCreatedEvent",
    "response.in_progress": "ResponseInProgressEvent",
    "response.completed": "ResponseCompletedEvent",
    "response.incomplete": "ResponseIncompleteEvent",
    "response.failed": "ResponseFailedEvent",
    "response.output_item.added": "ResponseOutputItemAddedEvent",
    "response.output_item.done": "ResponseOutputItemDoneEvent",
    "response.content_part.added": "ResponseContentPartAddedEvent",
    "response.content_part.done": "ResponseContentPartDoneEvent",
    "response.output_text.delta": "ResponseTextDeltaEvent",
    "response.output_text.done": "ResponseTextDoneEvent",
    "response.refusal.delta": "ResponseRefusalDeltaEvent",
    "response.refusal.done": "ResponseRefusalDoneEvent",
    "response.reasoning_text.delta": "ResponseReasoningTextDeltaEvent",
    "response.reasoning_text.done": "ResponseReasoningTextDoneEvent",
    "response.function_call_arguments.delta": "ResponseFunctionCallArgumentsDeltaEvent",
    "response.function_call_arguments.done": "ResponseFunctionCallArgumentsDoneEvent",
    "error": "ResponseErrorEvent",
}


def validate_event(payload: dict[str, Any]) -> None:
    """Validate one stream event against the schema of its ``type`` (unknown types fail)."""
    schema = EVENT_SCHEMAS.get(payload.get("type", ""))
    assert schema is not None, f"unexpected event type {payload.get('type')!r}"
    validate_in(SPEC, schema, payload)
    validate_in(SPEC, "ResponseStreamEvent", payload)


def stream_payloads(raw: bytes) -> list[dict[str, Any]]:
    """Every event of a Responses stream, validated (schema, names, sequence numbers)."""
    events = sse_events(raw)
    assert events, "empty stream"
    payloads = [json.loads(event.data) for event in events]
    for position, (event, payload) in enumerate(zip(events, payloads, strict=True)):
        assert event.event == payload["type"], "the event name is the payload's type"
        assert payload["sequence_number"] == position, "sequence numbers count from 0, no gaps"
        validate_event(payload)
    return payloads


def read_output(output: list[dict[str, Any]]) -> tuple[str, tuple[ToolCallOut, ...]]:
    """The text and tool calls of ``output`` items."""
    text = "".join(
        part["text"]
        for item in output
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )
    calls = tuple(
        ToolCallOut(item["name"], json.loads(item["arguments"] or "{}"))
        for item in output
        if item["type"] == "function_call"
    )
    return text, calls


def _usage(usage: dict[str, Any] | None) -> tuple[int | None, int | None]:
    if usage is None:
        return None, None
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    return usage["input_tokens"], usage["output_tokens"]


class ResponsesAdapter:
    """See :mod:`tests.proxy.dialects.adapters`."""

    dialect = "responses"
    supports_tools = True

    def request(
        self, model: str, text: str, *, stream: bool, tools: list[dict[str, Any]] | None = None
    ) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"model": model, "input": text, "stream": stream}
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "name": tool["function"]["name"],
                    "description": tool["function"].get("description", ""),
                    "parameters": tool["function"].get("parameters", {"type": "object"}),
                }
                for tool in tools
            ]
        return PATH, body

    def read_response(self, body: dict[str, Any]) -> Outcome:
        validate_in(SPEC, "Response", body)
        assert body["status"] in ("completed", "incomplete")
        text, calls = read_output(body["output"])
        assert body["output_text"] == text
        inputs, outputs = _usage(body["usage"])
        return Outcome(text=text, tool_calls=calls, input_tokens=inputs, output_tokens=outputs)

    def read_stream(self, raw: bytes) -> Outcome:
        payloads = stream_payloads(raw)
        assert [p["type"] for p in payloads[:2]] == ["response.created", "response.in_progress"]
        response_id = payloads[0]["response"]["id"]
        text: list[str] = []
        calls: dict[int, tuple[str, list[str]]] = {}
        open_items: set[int] = set()
        for position, payload in enumerate(payloads):
            kind = payload["type"]
            last = position == len(payloads) - 1
            assert (kind in TERMINAL) == last, "one terminal event, and it comes last"
            if "response" in payload:
                assert payload["response"]["id"] == response_id, "one response id throughout"
            if kind == "response.output_item.added":
                assert payload["output_index"] not in open_items
                open_items.add(payload["output_index"])
                if payload["item"]["type"] == "function_call":
                    calls[payload["output_index"]] = (payload["item"]["name"], [])
            elif kind == "response.output_item.done":
                open_items.discard(payload["output_index"])
            elif kind == "response.output_text.delta":
                text.append(payload["delta"])
            elif kind == "response.function_call_arguments.delta":
                calls[payload["output_index"]][1].append(payload["delta"])
        terminal = payloads[-1]
        streamed = "".join(text)
        assembled = tuple(
            ToolCallOut(name, json.loads("".join(pieces) or "{}"))
            for _, (name, pieces) in sorted(calls.items())
        )
        if terminal["type"] == "response.failed":
            response = terminal["response"]
            assert response["status"] == "failed"
            assert response["error"]["message"]
            return Outcome(text=streamed, error=response["error"]["message"])
        assert not open_items, "every item added is done before the stream completes"
        final_text, final_calls = read_output(terminal["response"]["output"])
        assert (final_text, final_calls) == (streamed, assembled), "the final response agrees"
        inputs, outputs = _usage(terminal["response"]["usage"])
        return Outcome(
            text=streamed, tool_calls=assembled, input_tokens=inputs, output_tokens=outputs
        )

    def read_error(self, status: int, body: dict[str, Any]) -> str:
        validate_in(SPEC, "ErrorResponse", body)
        return body["error"]["message"]

    def error_cases(self) -> list[ErrorCase]:
        model = "mock/echo"
        base: dict[str, Any] = {"model": model, "input": "hi"}
        function = {"type": "function", "name": "f", "parameters": {"type": "object"}}
        return [
            ErrorCase("invalid-json", b'{"model": ', "json"),
            ErrorCase("missing-model", {"input": "hi"}, "model"),
            ErrorCase("missing-input", {"model": model}, "input"),
            ErrorCase("input-wrong-type", {**base, "input": 5}, "input"),
            ErrorCase(
                "unknown-role",
                {**base, "input": [{"role": "robot", "content": "x"}]},
                "input[0].role",
            ),
            ErrorCase(
                "unknown-part",
                {**base, "input": [{"role": "user", "content": [{"type": "input_video"}]}]},
                "input[0].content[0].type",
            ),
            ErrorCase(
                "built-in-item",
                {**base, "input": [{"type": "web_search_call", "id": "ws_1"}]},
                "input[0].type",
            ),
            ErrorCase(
                "item-reference",
                {**base, "input": [{"type": "item_reference", "id": "msg_1"}]},
                "input[0].type",
            ),
            ErrorCase(
                "output-without-call-id",
                {**base, "input": [{"type": "function_call_output", "output": "x"}]},
                "input[0].call_id",
            ),
            ErrorCase(
                "image-by-file-id",
                {
                    **base,
                    "input": [
                        {"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}
                    ],
                },
                "input[0].content[0].image_url",
            ),
            ErrorCase(
                "built-in-tool", {**base, "tools": [{"type": "web_search"}]}, "tools[0].type"
            ),
            ErrorCase(
                "tool-without-name", {**base, "tools": [{"type": "function"}]}, "tools[0].name"
            ),
            ErrorCase(
                "bad-tool-choice",
                {**base, "tools": [function], "tool_choice": "often"},
                "tool_choice",
            ),
            ErrorCase(
                "built-in-tool-choice",
                {**base, "tool_choice": {"type": "file_search"}},
                "tool_choice.type",
            ),
            ErrorCase("temperature-out-of-range", {**base, "temperature": 3}, "temperature"),
            ErrorCase(
                "max-output-tokens-zero", {**base, "max_output_tokens": 0}, "max_output_tokens"
            ),
            ErrorCase(
                "schema-without-name",
                {**base, "text": {"format": {"type": "json_schema", "schema": {}}}},
                "text.format.name",
            ),
            ErrorCase(
                "too-much-metadata",
                {**base, "metadata": {f"k{i}": "v" for i in range(17)}},
                "metadata",
            ),
            ErrorCase(  # a background response is stored: store false cannot go with it
                "background-unstored", {**base, "background": True, "store": False}, "store"
            ),
            ErrorCase(  # OpenAI's wording names the id (``param`` is previous_response_id)
                "unknown-previous-response",
                {**base, "previous_response_id": "resp_nowhere"},
                "resp_nowhere",
                message="Previous response with id 'resp_nowhere' not found.",
            ),
        ]


ADAPTER = ResponsesAdapter()
