"""proxy/dialects/responses/{output,stream}.py: whole output items, the stream's events, and the
final response — validated against tests/specs/openai-responses.openapi.json, and read back by
the openai SDK's own stream accumulator."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from openai import omit
from openai._models import construct_type
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import ResponseStreamEvent

from proxy.core.canonical import FunctionCall, Message, ToolCall, Usage
from proxy.core.errors import RateLimited, UpstreamUnavailable
from proxy.core.reply import (
    Choice,
    Chunk,
    ChunkChoice,
    Delta,
    FunctionCallDelta,
    Reply,
    Response,
    ToolCallDelta,
)
from proxy.core.sse import SSEDecoder
from proxy.dialects.responses import ResponsesDialect
from tests.proxy.dialects.adapters.responses import stream_payloads
from tests.schemas import validate_in

SPEC = "openai-responses.openapi.json"
DIALECT = ResponsesDialect()
USAGE = Usage(input=10, cache_read=4, cache_write=2, output=5, reasoning=3)


def call_for(**fields: Any):  # type: ignore[no-untyped-def]
    fields.setdefault("model", "mock/echo")
    fields.setdefault("input", "hi")
    return DIALECT.decode(json.dumps(fields).encode(), {}, "req-1", time.perf_counter())


async def _unused() -> AsyncIterator[Chunk]:
    yield Chunk(id="unused", model="m", choices=[])


def whole(message: Message, finish: str = "stop", **fields: Any) -> dict[str, Any]:
    call = call_for(**fields)
    response = Response(
        id="up-1",
        model="gpt-x",
        choices=[Choice(index=0, message=message, finish_reason=finish)],  # type: ignore[arg-type]
        usage=USAGE,
    )
    body = json.loads(DIALECT.encode_response(call, Reply("p", "gpt-x", response=response)))
    validate_in(SPEC, "Response", body)
    return body


def chunk(delta: Delta, finish: str | None = None) -> Chunk:
    return Chunk(
        id="up-1",
        model="gpt-x",
        choices=[ChunkChoice(index=0, delta=delta, finish_reason=finish)],  # type: ignore[arg-type]
    )


def fragment(index: int, arguments: str, *, call_id: str = "", name: str = "") -> Delta:
    function = (
        FunctionCallDelta(name=name, arguments=arguments)
        if name
        else FunctionCallDelta(arguments=arguments)
    )
    head = {"id": call_id, "type": "function"} if call_id else {}
    return Delta(tool_calls=[ToolCallDelta(index=index, function=function, **head)])


def encode_stream(chunks: list[Chunk], **fields: Any) -> tuple[bytes, Any]:
    call = call_for(**fields)
    encoder = DIALECT.stream_encoder(call, Reply("p", "gpt-x", stream=_unused()))
    return b"".join(encoder.chunk(c) for c in chunks) + encoder.end(), encoder


def sdk_final_response(raw: bytes):  # type: ignore[no-untyped-def]
    """What the openai SDK's ``responses.stream`` helper assembles from these bytes."""
    decoder = SSEDecoder()
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    for event in decoder.feed(raw) + decoder.close():
        parsed = construct_type(type_=ResponseStreamEvent, value=json.loads(event.data))
        state.handle_event(parsed)  # type: ignore[arg-type]
    return state._completed_response


def test_whole_reply_items_in_order_with_derived_ids() -> None:
    message = Message(
        role="assistant",
        content="Checking.",
        reasoning_content="Think.",
        tool_calls=[
            ToolCall(id="call_1", function=FunctionCall(name="f", arguments='{"a":1}')),
            ToolCall(id="call_2", function=FunctionCall(name="g", arguments="{}")),
        ],
    )
    body = whole(message, "tool_calls")
    token = body["id"].removeprefix("resp_")
    assert [(item["type"], item["id"]) for item in body["output"]] == [
        ("reasoning", f"rs_{token}_0"),
        ("message", f"msg_{token}_1"),
        ("function_call", f"fc_{token}_2"),
        ("function_call", f"fc_{token}_3"),
    ]
    reasoning, text, first, second = body["output"]
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "Think."}]
    assert reasoning["summary"] == []
    assert text["content"][0]["text"] == "Checking."
    assert (first["call_id"], first["name"], first["arguments"]) == ("call_1", "f", '{"a":1}')
    assert second["call_id"] == "call_2"
    assert (body["status"], body["incomplete_details"], body["output_text"]) == (
        "completed",
        None,
        "Checking.",
    )
    assert body["model"] == "mock/echo"  # what the request named, not the upstream's name


def test_usage_counts_cache_and_reasoning_as_openai_does() -> None:
    usage = whole(Message(role="assistant", content="x"))["usage"]
    assert usage == {
        "input_tokens": 16,
        "input_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 2},
        "output_tokens": 8,
        "output_tokens_details": {"reasoning_tokens": 3},
        "total_tokens": 24,
    }


def test_length_and_content_filter_stops_are_incomplete() -> None:
    body = whole(Message(role="assistant", content="cut"), "length", max_output_tokens=1)
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["max_output_tokens"] == 1
    filtered = whole(Message(role="assistant", content=""), "content_filter")
    assert filtered["incomplete_details"] == {"reason": "content_filter"}


def test_tool_only_replies_have_no_message_and_empty_ones_an_empty_message() -> None:
    calls = [ToolCall(id="c", function=FunctionCall(name="f", arguments="{}"))]
    body = whole(Message(role="assistant", content=None, tool_calls=calls), "tool_calls")
    assert [item["type"] for item in body["output"]] == ["function_call"]
    empty = whole(Message(role="assistant", content=""))
    assert [item["type"] for item in empty["output"]] == ["message"]
    assert empty["output"][0]["content"] == [
        {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    ]


def test_refusal_is_a_refusal_part() -> None:
    body = whole(Message(role="assistant", content=None, refusal="No."))
    assert body["output"][0]["content"] == [{"type": "refusal", "refusal": "No."}]


def test_the_request_is_repeated_in_the_response() -> None:
    body = whole(
        Message(role="assistant", content="x"),
        instructions="Be brief.",
        temperature=0.5,
        metadata={"k": "v"},
        store=False,
        tools=[{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        tool_choice="required",
        reasoning={"effort": "high"},
    )
    assert (body["instructions"], body["temperature"], body["metadata"], body["store"]) == (
        "Be brief.",
        0.5,
        {"k": "v"},
        False,
    )
    assert body["tools"] == [
        {
            "type": "function",
            "name": "f",
            "parameters": {"type": "object"},
            "strict": None,
            "description": None,
        }
    ]
    assert (body["tool_choice"], body["reasoning"]) == (
        "required",
        {"effort": "high", "summary": None},
    )


def test_a_stream_of_reasoning_text_and_interleaved_calls() -> None:
    chunks = [
        chunk(Delta(role="assistant", content="")),
        chunk(Delta(reasoning_content="Hm")),
        chunk(Delta(reasoning_content="m.")),
        chunk(Delta(content="Let me ")),
        chunk(Delta(content="check.")),
        chunk(fragment(0, "", call_id="call_a", name="f")),
        chunk(fragment(1, "", call_id="call_b", name="g")),
        chunk(fragment(0, '{"x":')),
        chunk(fragment(1, "{}")),
        chunk(fragment(0, "1}")),
        chunk(Delta(), "tool_calls"),
        Chunk(id="up-1", model="gpt-x", choices=[], usage=USAGE),
    ]
    raw, _ = encode_stream(chunks)
    payloads = stream_payloads(raw)  # schema, names, sequence numbers
    kinds = [p["type"] for p in payloads]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",  # reasoning 0
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",  # message 1
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",  # call 2
        "response.output_item.added",  # call 3
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    final = payloads[-1]["response"]
    assert final["status"] == "completed"
    assert [item["type"] for item in final["output"]] == [
        "reasoning",
        "message",
        "function_call",
        "function_call",
    ]
    assert final["output"][2]["arguments"] == '{"x":1}'
    assert final["output"][3]["arguments"] == "{}"
    assert final["usage"]["total_tokens"] == USAGE.total_tokens
    assert payloads[0]["response"]["status"] == "in_progress"
    assert payloads[0]["response"]["output"] == []

    sdk = sdk_final_response(raw)
    assert sdk is not None
    assert sdk.output_text == "Let me check."
    assert [item.type for item in sdk.output] == [
        "reasoning",
        "message",
        "function_call",
        "function_call",
    ]


def test_a_length_stop_ends_with_response_incomplete() -> None:
    raw, _ = encode_stream(
        [chunk(Delta(content="a b")), chunk(Delta(), "length")], max_output_tokens=2
    )
    payloads = stream_payloads(raw)
    assert payloads[-1]["type"] == "response.incomplete"
    assert payloads[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_an_empty_stream_still_has_one_message() -> None:
    raw, _ = encode_stream([chunk(Delta(role="assistant", content="")), chunk(Delta(), "stop")])
    final = stream_payloads(raw)[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["message"]
    assert final["output_text"] == ""


def test_a_failure_mid_stream_is_response_failed_with_the_output_so_far() -> None:
    call = call_for()
    encoder = DIALECT.stream_encoder(call, Reply("p", "gpt-x", stream=_unused()))
    raw = encoder.chunk(chunk(Delta(content="Half")))
    raw += encoder.chunk(chunk(fragment(0, '{"a"', call_id="c", name="f")))
    raw += encoder.error(UpstreamUnavailable("mock upstream cut the stream"))
    payloads = stream_payloads(raw)
    failed = payloads[-1]
    assert failed["type"] == "response.failed"
    response = failed["response"]
    assert response["status"] == "failed"
    assert response["error"] == {"code": "server_error", "message": "mock upstream cut the stream"}
    assert [(item["type"], item["status"]) for item in response["output"]] == [
        ("message", "completed"),
        ("function_call", "incomplete"),
    ]
    assert response["output"][1]["arguments"] == '{"a"'

    limited = DIALECT.stream_encoder(call, Reply("p", "gpt-x", stream=_unused()))
    payload = stream_payloads(limited.error(RateLimited("slow down")))[-1]
    assert payload["type"] == "response.failed"
    assert payload["response"]["error"]["code"] == "rate_limit_exceeded"


def test_keepalive_is_an_sse_comment() -> None:
    encoder = DIALECT.stream_encoder(call_for(), Reply("p", "gpt-x", stream=_unused()))
    assert encoder.keepalive == 15.0
    assert SSEDecoder().feed(encoder.ping()) == []


def test_a_tool_call_arriving_whole_is_announced_empty_and_its_arguments_sent_once() -> None:
    whole_call = fragment(0, '{"city":"Paris"}', call_id="call_w", name="get_weather")
    raw, _ = encode_stream([chunk(whole_call), chunk(Delta(), "tool_calls")])
    payloads = stream_payloads(raw)
    added = [p for p in payloads if p["type"] == "response.output_item.added"]
    assert [p["item"]["arguments"] for p in added] == [""]
    deltas = [p["delta"] for p in payloads if p["type"] == "response.function_call_arguments.delta"]
    assert deltas == ['{"city":"Paris"}']
    done = [p for p in payloads if p["type"] == "response.function_call_arguments.done"]
    assert done[0]["arguments"] == '{"city":"Paris"}'

    sdk = sdk_final_response(raw)
    assert sdk is not None
    (item,) = sdk.output
    assert json.loads(item.arguments) == {"city": "Paris"}
