"""proxy/dialects/anthropic.py and anthropic_replies.py: decoding Messages requests, and
encoding messages, stream events and errors that conform to anthropic-messages.openapi.json
(validated with tests/schemas.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from msgspec import UNSET

from proxy.core.canonical import Call, FunctionCall, ImagePart, Message, TextPart, ToolCall, Usage
from proxy.core.errors import (
    AuthenticationFailed,
    BadRequest,
    GatewayError,
    NoReadyDeployment,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    RateLimited,
    RequestTimeout,
    UpstreamError,
    UpstreamOverloaded,
    UpstreamTimeout,
    UpstreamUnavailable,
)
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
from proxy.dialects.anthropic import AnthropicDialect, decode_count_tokens, token_count_json
from proxy.dialects.anthropic_replies import PING_FRAME, message_id, tool_use_id
from tests.schemas import validate_in

SPEC = "anthropic-messages.openapi.json"
DIALECT = AnthropicDialect()
HI = [{"role": "user", "content": "Hi"}]
WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def body(**fields: Any) -> bytes:
    fields.setdefault("model", "claude-sonnet-4-5")
    fields.setdefault("max_tokens", 256)
    fields.setdefault("messages", HI)
    return json.dumps(fields).encode()


def decode(raw: bytes) -> Call:
    return DIALECT.decode(raw, {"x-api-key": "sk-ant-client"}, "req-1", 1.0)


def reply_of(message: Message, finish: str | None = "stop", usage: Usage | None = None) -> Reply:
    response = Response(
        id="msg_1",
        model="claude-x",
        choices=[Choice(index=0, message=message, finish_reason=finish)],  # type: ignore[arg-type]
        usage=usage,
    )
    return Reply(provider="up", model="claude-x", response=response)


def encode(message: Message, **kwargs: Any) -> dict[str, Any]:
    out = json.loads(DIALECT.encode_response(decode(body()), reply_of(message, **kwargs)))
    validate_in(SPEC, "Message", out)
    return out


def named_events(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    """``(event name, payload)`` for every SSE frame; the payload's ``type`` is the name."""
    out = []
    for frame in data.split(b"\n\n"):
        if not frame:
            continue
        name, payload = frame.split(b"\n")
        assert name.startswith(b"event: "), frame
        assert payload.startswith(b"data: "), frame
        event = json.loads(payload[len(b"data: ") :])
        assert event["type"] == name[len(b"event: ") :].decode()
        out.append((event["type"], event))
    return out


# ---------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------


def test_minimal_request() -> None:
    call = decode(body())
    assert call.dialect == "anthropic"
    assert call.model == "claude-sonnet-4-5"
    assert call.stream is False
    assert call.messages == [Message(role="user", content="Hi")]
    assert call.params.max_tokens == 256
    assert call.extra == {}
    assert call.client_headers == {"x-api-key": "sk-ant-client"}


def test_the_spec_example_request() -> None:
    raw = (
        b'{"max_tokens": 1024, "messages": [{"content": "Hello, world", "role": "user"}], '
        b'"model": "claude-opus-4-6"}'
    )
    call = decode(raw)
    assert (call.model, call.params.max_tokens) == ("claude-opus-4-6", 1024)
    assert call.messages == [Message(role="user", content="Hello, world")]


@pytest.mark.parametrize(
    ("system", "expected"),
    [
        ("Be brief.", [Message(role="system", content="Be brief.")]),
        (
            [
                {"type": "text", "text": "A"},
                {"type": "text", "text": "B", "cache_control": {"type": "ephemeral"}},
            ],
            [Message(role="system", content=[TextPart(text="A"), TextPart(text="B")])],
        ),
        ("", []),
    ],
)
def test_system_string_or_blocks(system: Any, expected: list[Message]) -> None:
    assert decode(body(system=system)).messages[:-1] == expected


def test_sampling_parameters_stream_metadata_and_top_k() -> None:
    call = decode(
        body(
            stream=True,
            temperature=0.5,
            top_p=0.9,
            top_k=40,
            stop_sequences=["\n\nHuman:"],
            metadata={"user_id": "u-42"},
        )
    )
    assert call.stream is True
    params = call.params
    assert (params.temperature, params.top_p, params.stop, params.user) == (
        0.5,
        0.9,
        ["\n\nHuman:"],
        "u-42",
    )
    assert {key: bytes(value) for key, value in call.extra.items()} == {"top_k": b"40"}


def test_user_blocks_text_and_images() -> None:
    content = [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"}},
        {"type": "image", "source": {"type": "url", "url": "https://x/cat.jpg"}},
    ]
    (message,) = decode(body(messages=[{"role": "user", "content": content}])).messages
    assert message.role == "user"
    assert isinstance(message.content, list)
    text, b64, url = message.content
    assert text == TextPart(text="What is this?")
    assert isinstance(b64, ImagePart)
    assert isinstance(url, ImagePart)
    assert b64.image_url.url == "data:image/png;base64,QUJD"
    assert url.image_url.url == "https://x/cat.jpg"


def test_tool_use_round_trip_becomes_openai_tool_calls_and_tool_messages() -> None:
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Use the tool.", "signature": "sig"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Let me check."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                    "is_error": True,
                },
                {"type": "tool_result", "tool_use_id": "toolu_3"},
                {"type": "text", "text": "Thanks"},
            ],
        },
    ]
    assert decode(body(messages=messages)).messages == [
        Message(role="user", content="Weather in Paris?"),
        Message(
            role="assistant",
            content="Let me check.",
            reasoning_content="Use the tool.",
            tool_calls=[
                ToolCall(
                    id="toolu_1",
                    function=FunctionCall(name="get_weather", arguments='{"city":"Paris"}'),
                )
            ],
        ),
        Message(role="tool", content="18C", tool_call_id="toolu_1"),
        Message(
            role="tool", content=[TextPart(text="a"), TextPart(text="b")], tool_call_id="toolu_2"
        ),
        Message(role="tool", content="", tool_call_id="toolu_3"),
        Message(role="user", content=[TextPart(text="Thanks")]),
    ]


def test_assistant_blocks_several_texts_or_none() -> None:
    texts = {
        "role": "assistant",
        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
    }
    only_tool = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
    }
    _, first, _, second = decode(body(messages=[*HI, texts, *HI, only_tool])).messages
    assert first.content == [TextPart(text="a"), TextPart(text="b")]
    assert second.content is None
    assert second.tool_calls == [ToolCall(id="t", function=FunctionCall(name="f", arguments="{}"))]


@pytest.mark.parametrize(
    ("choice", "expected", "parallel"),
    [
        ({"type": "auto"}, "auto", None),
        ({"type": "any"}, "required", None),
        ({"type": "none"}, "none", None),
        (
            {"type": "tool", "name": "get_weather"},
            {"type": "function", "function": {"name": "get_weather"}},
            None,
        ),
        ({"type": "auto", "disable_parallel_tool_use": True}, "auto", False),
        ({"type": "any", "disable_parallel_tool_use": False}, "required", None),
    ],
)
def test_tools_and_tool_choice(
    choice: dict[str, Any], expected: Any, parallel: bool | None
) -> None:
    params = decode(
        body(tools=[WEATHER, {**WEATHER, "name": "t2", "type": "custom"}], tool_choice=choice)
    ).params
    assert params.tool_choice == expected
    assert params.parallel_tool_calls == (UNSET if parallel is None else parallel)
    assert params.tools
    first, second = (tool.function for tool in params.tools)
    assert (first.name, first.description, first.parameters) == (
        "get_weather",
        "Weather for a city",
        WEATHER["input_schema"],
    )
    assert second.name == "t2"


@pytest.mark.parametrize(
    ("fields", "effort"),
    [
        ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "low"),
        ({"thinking": {"type": "enabled", "budget_tokens": 8000}}, "medium"),
        ({"thinking": {"type": "enabled", "budget_tokens": 32000}}, "high"),
        ({"thinking": {"type": "adaptive"}}, None),
        ({"thinking": {"type": "disabled"}}, None),
        ({"output_config": {"effort": "max"}}, "high"),
        (
            {
                "output_config": {"effort": "low"},
                "thinking": {"type": "enabled", "budget_tokens": 32000},
            },
            "low",
        ),
    ],
)
def test_thinking_and_effort_map_to_reasoning_effort(
    fields: dict[str, Any], effort: str | None
) -> None:
    assert (decode(body(**fields)).params.reasoning_effort or None) == effort


def test_output_format_becomes_a_json_schema_response_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    params = decode(
        body(output_config={"format": {"type": "json_schema", "schema": schema}})
    ).params
    assert params.response_format == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema},
    }


# ---------------------------------------------------------------------------------------------
# Bad requests: Anthropic's error shape, status 400, the field named
# ---------------------------------------------------------------------------------------------


def user(*blocks: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": list(blocks)}]


BAD_REQUESTS: list[tuple[str, bytes, str]] = [
    ("not json", b"[1,", ""),
    ("missing model", json.dumps({"max_tokens": 5, "messages": HI}).encode(), "model"),
    ("missing max_tokens", json.dumps({"model": "m", "messages": HI}).encode(), "max_tokens"),
    ("missing messages", json.dumps({"model": "m", "max_tokens": 5}).encode(), "messages"),
    ("empty model", body(model=""), "model"),
    ("max_tokens 0", body(max_tokens=0), "max_tokens"),
    ("max_tokens a string", body(max_tokens="5"), "max_tokens"),
    ("empty messages", body(messages=[]), "messages"),
    (
        "system role in messages",
        body(messages=[{"role": "system", "content": "x"}]),
        "messages[0].role",
    ),
    ("content a number", body(messages=[{"role": "user", "content": 5}]), "messages[0].content"),
    (
        "empty content blocks",
        body(messages=[{"role": "user", "content": []}]),
        "messages[0].content",
    ),
    ("unknown block type", body(messages=user({"type": "video"})), "messages[0].content[0].type"),
    (
        "text block without text",
        body(messages=user({"type": "text"})),
        "messages[0].content[0].text",
    ),
    (
        "bad image media type",
        body(
            messages=user(
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/bmp", "data": "x"},
                }
            )
        ),
        "messages[0].content[0].source.media_type",
    ),
    (
        "unknown image source",
        body(messages=user({"type": "image", "source": {"type": "file", "file_id": "f"}})),
        "messages[0].content[0].source.type",
    ),
    (
        "tool_use in a user turn",
        body(messages=user({"type": "tool_use", "id": "t", "name": "f", "input": {}})),
        "messages[0].content[0].type",
    ),
    (
        "tool_result in an assistant turn",
        body(
            messages=[
                {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}
            ]
        ),
        "messages[0].content[0].type",
    ),
    (
        "tool_use input not an object",
        body(
            messages=[
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "x"}],
                }
            ]
        ),
        "messages[0].content[0].input",
    ),
    (
        "image inside a tool_result",
        body(
            messages=user(
                {
                    "type": "tool_result",
                    "tool_use_id": "t",
                    "content": [{"type": "image", "source": {"type": "url", "url": "u"}}],
                }
            )
        ),
        "messages[0].content[0].content[0].type",
    ),
    ("system not text", body(system=[{"type": "image"}]), "system[0].type"),
    ("temperature above 1", body(temperature=1.5), "temperature"),
    ("top_p negative", body(top_p=-0.1), "top_p"),
    ("top_k negative", body(top_k=-1), "top_k"),
    ("stream not a bool", body(stream="true"), "stream"),
    ("stop_sequences not a list", body(stop_sequences="END"), "stop_sequences"),
    ("metadata user_id too long", body(metadata={"user_id": "u" * 513}), "metadata.user_id"),
    ("tool without name", body(tools=[{"input_schema": {"type": "object"}}]), "tools[0].name"),
    ("tool without input_schema", body(tools=[{"name": "f"}]), "tools[0].input_schema"),
    ("server tool", body(tools=[{"name": "bash", "type": "bash_20250124"}]), "tools[0].type"),
    ("unknown tool_choice", body(tool_choice={"type": "function"}), "tool_choice.type"),
    ("tool choice without name", body(tool_choice={"type": "tool"}), "tool_choice.name"),
    (
        "thinking budget too small",
        body(thinking={"type": "enabled", "budget_tokens": 10}),
        "thinking.budget_tokens",
    ),
    ("unknown effort", body(output_config={"effort": "extreme"}), "output_config.effort"),
]


@pytest.mark.parametrize(
    ("raw", "field"), [c[1:] for c in BAD_REQUESTS], ids=[c[0] for c in BAD_REQUESTS]
)
def test_bad_requests_name_the_field(raw: bytes, field: str) -> None:
    with pytest.raises(BadRequest) as info:
        decode(raw)
    error = info.value
    assert error.status == 400
    assert (error.param or "") == field
    if field:
        assert field in error.message
    out = json.loads(DIALECT.encode_error(error, "rid-7"))
    validate_in(SPEC, "ErrorResponse", out)
    assert out == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": error.message},
        "request_id": "rid-7",
    }


@pytest.mark.parametrize(
    ("error", "error_type"),
    [
        (AuthenticationFailed("no key"), "authentication_error"),
        (PermissionDenied("no"), "permission_error"),
        (NotFound("no route"), "not_found_error"),
        (RequestTimeout("slow body"), "timeout_error"),
        (PayloadTooLarge("big"), "request_too_large"),
        (RateLimited("slow down"), "rate_limit_error"),
        (UpstreamError("boom", upstream_status=500), "api_error"),
        (UpstreamUnavailable("refused"), "api_error"),
        (UpstreamOverloaded("busy", upstream_status=529), "overloaded_error"),
        (NoReadyDeployment("none"), "overloaded_error"),
        (UpstreamTimeout("late"), "timeout_error"),
        (GatewayError("teapot", status=418), "invalid_request_error"),
    ],
)
def test_error_types_per_status(error: GatewayError, error_type: str) -> None:
    out = json.loads(DIALECT.encode_error(error, "rid"))
    assert out["error"] == {"type": error_type, "message": error.message}
    if error_type != "request_too_large":  # a real Anthropic type the trimmed spec omits
        validate_in(SPEC, "ErrorResponse", out)


# ---------------------------------------------------------------------------------------------
# Whole responses
# ---------------------------------------------------------------------------------------------


def test_text_message_with_usage_buckets() -> None:
    usage = Usage(input=5, cache_read=2, cache_write=1, output=7, reasoning=3)
    out = encode(Message(role="assistant", content="Hello"), usage=usage)
    assert out == {
        "id": "msg_1",
        "model": "claude-x",
        "content": [{"type": "text", "text": "Hello", "citations": None}],
        "stop_reason": "end_turn",
        "usage": {
            "input_tokens": 5,
            "output_tokens": 10,
            "cache_creation_input_tokens": 1,
            "cache_read_input_tokens": 2,
            "cache_creation": None,
            "inference_geo": None,
            "server_tool_use": None,
            "service_tier": None,
        },
        "type": "message",
        "role": "assistant",
        "stop_sequence": None,
        "stop_details": None,
        "container": None,
    }


@pytest.mark.parametrize(
    ("finish", "stop_reason"),
    [
        ("stop", "end_turn"),
        ("length", "max_tokens"),
        ("tool_calls", "tool_use"),
        ("function_call", "tool_use"),
        ("content_filter", "refusal"),
        (None, "end_turn"),
    ],
)
def test_stop_reasons(finish: str | None, stop_reason: str) -> None:
    assert (
        encode(Message(role="assistant", content="x"), finish=finish)["stop_reason"] == stop_reason
    )


def test_thinking_text_and_tool_use_blocks() -> None:
    message = Message(
        role="assistant",
        content="Checking.",
        reasoning_content="Hmm.",
        tool_calls=[
            ToolCall(id="call_1", function=FunctionCall(name="f", arguments='{"a": 1}')),
            ToolCall(id="call_2", function=FunctionCall(name="g", arguments="")),
            ToolCall(id="call_3", function=FunctionCall(name="h", arguments="[1]")),
            ToolCall(id="call_4", function=FunctionCall(name="i", arguments="{oops")),
        ],
    )
    out = encode(message, finish="tool_calls")
    direct = {"type": "direct"}
    assert out["content"] == [
        {"type": "thinking", "thinking": "Hmm.", "signature": ""},
        {"type": "text", "text": "Checking.", "citations": None},
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}, "caller": direct},
        {"type": "tool_use", "id": "toolu_2", "name": "g", "input": {}, "caller": direct},
        {
            "type": "tool_use",
            "id": "toolu_3",
            "name": "h",
            "input": {"arguments": [1]},
            "caller": direct,
        },
        {
            "type": "tool_use",
            "id": "toolu_4",
            "name": "i",
            "input": {"arguments": "{oops"},
            "caller": direct,
        },
    ]
    assert out["stop_reason"] == "tool_use"


def test_empty_answer_and_missing_usage() -> None:
    out = encode(Message(role="assistant", content=""))
    assert out["content"] == []
    assert out["usage"]["input_tokens"] == out["usage"]["output_tokens"] == 0


def test_request_id_header() -> None:
    assert DIALECT.response_headers(decode(body()), Reply(provider="p", model="m")) == {
        "request-id": "req-1"
    }


# ---------------------------------------------------------------------------------------------
# Streams
# ---------------------------------------------------------------------------------------------


def chunk(
    delta: Delta | None = None, finish: str | None = None, usage: Usage | None = None
) -> Chunk:
    choices = [] if delta is None else [ChunkChoice(index=0, delta=delta, finish_reason=finish)]  # type: ignore[arg-type]
    return Chunk(id="msg_9", model="claude-x", choices=choices, usage=usage)


def run_stream(chunks: list[Chunk]) -> list[tuple[str, dict[str, Any]]]:
    encoder = DIALECT.stream_encoder(
        decode(body(stream=True)), Reply(provider="up", model="claude-x")
    )
    out = named_events(b"".join(encoder.chunk(c) for c in chunks) + encoder.end())
    for _, event in out:
        validate_in(SPEC, "MessageStreamEvent", event)
    return out


def tool(index: int, **fields: Any) -> Delta:
    return Delta(tool_calls=[ToolCallDelta(index=index, **fields)])


def test_text_stream_events() -> None:
    usage = Usage(input=4, cache_read=6, cache_write=2, output=3, reasoning=1)
    out = run_stream(
        [
            chunk(Delta(role="assistant", content="")),
            chunk(Delta(content="Hello")),
            chunk(Delta(content=" world")),
            chunk(Delta(), finish="length"),
            chunk(usage=usage),
        ]
    )
    names = [name for name, _ in out]
    assert names == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = out[0][1]["message"]
    assert (start["id"], start["model"], start["content"], start["stop_reason"]) == (
        "msg_9",
        "claude-x",
        [],
        None,
    )
    assert out[1][1] == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": "", "citations": None},
    }
    assert out[2][1]["delta"] == {"type": "text_delta", "text": "Hello"}
    assert out[4][1] == {"type": "content_block_stop", "index": 0}
    assert out[5][1] == {
        "type": "message_delta",
        "delta": {
            "stop_reason": "max_tokens",
            "stop_sequence": None,
            "stop_details": None,
            "container": None,
        },
        "usage": {
            "input_tokens": 4,
            "output_tokens": 4,
            "cache_creation_input_tokens": 2,
            "cache_read_input_tokens": 6,
            "server_tool_use": None,
        },
    }


INTERLEAVED = [
    chunk(tool(0, id="call_a", function=FunctionCallDelta(name="f", arguments='{"x":'))),
    chunk(tool(1, id="call_b", function=FunctionCallDelta(name="g", arguments='{"y":'))),
    chunk(tool(0, function=FunctionCallDelta(arguments="1"))),
    chunk(Delta(content="Both.")),
    chunk(tool(1, function=FunctionCallDelta(arguments="2}"))),
    chunk(tool(0, function=FunctionCallDelta(arguments="}"))),
    chunk(Delta(), finish="tool_calls"),
]


def test_interleaved_tool_fragments_reach_their_own_open_block() -> None:
    out = run_stream(INTERLEAVED)
    open_blocks: dict[int, dict[str, Any]] = {}
    inputs: dict[int, str] = {}
    for name, event in out:
        if name == "content_block_start":
            assert event["index"] not in open_blocks
            open_blocks[event["index"]] = event["content_block"]
        elif name == "content_block_delta":
            assert event["index"] in open_blocks, "a delta after its block stopped"
            if event["delta"]["type"] == "input_json_delta":
                inputs[event["index"]] = (
                    inputs.get(event["index"], "") + event["delta"]["partial_json"]
                )
        elif name == "content_block_stop":
            block = open_blocks.pop(event["index"])
            if block["type"] == "tool_use":
                assert json.loads(inputs[event["index"]]) is not None  # whole at its stop
    assert not open_blocks
    calls = {block: json.loads(text) for block, text in inputs.items()}
    assert calls == {0: {"x": 1}, 1: {"y": 2}}
    assert out[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_thinking_text_and_tool_use_blocks_get_their_own_indexes() -> None:
    out = run_stream(
        [
            chunk(Delta(reasoning_content="Think")),
            chunk(Delta(content="Calling")),
            chunk(
                tool(
                    0,
                    id="call_1",
                    type="function",
                    function=FunctionCallDelta(name="f", arguments=""),
                )
            ),
            chunk(tool(0, function=FunctionCallDelta(arguments='{"a":'))),
            chunk(tool(0, function=FunctionCallDelta(arguments="1}"))),
            chunk(tool(1, id="call_2", function=FunctionCallDelta(name="g", arguments="{}"))),
            chunk(Delta(), finish="tool_calls"),
        ]
    )
    compact = [
        (
            name,
            event.get("index"),
            (event.get("delta") or event.get("content_block") or {}).get("type"),
        )
        for name, event in out
    ]
    assert compact == [
        ("message_start", None, None),
        ("content_block_start", 0, "thinking"),
        ("content_block_delta", 0, "thinking_delta"),
        ("content_block_stop", 0, None),
        ("content_block_start", 1, "text"),
        ("content_block_delta", 1, "text_delta"),
        ("content_block_stop", 1, None),
        ("content_block_start", 2, "tool_use"),
        ("content_block_delta", 2, "input_json_delta"),
        ("content_block_delta", 2, "input_json_delta"),
        ("content_block_start", 3, "tool_use"),
        ("content_block_delta", 3, "input_json_delta"),
        # A call's block stays open until the answer ends: its arguments may resume later.
        ("content_block_stop", 2, None),
        ("content_block_stop", 3, None),
        ("message_delta", None, None),
        ("message_stop", None, None),
    ]
    assert out[7][1]["content_block"] == {
        "type": "tool_use",
        "id": "toolu_1",  # Anthropic-style: the upstream's call_1 after the prefix
        "name": "f",
        "input": {},
        "caller": {"type": "direct"},
    }
    assert [e["delta"]["partial_json"] for n, e in out[8:10]] == ['{"a":', "1}"]
    assert out[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_stream_without_usage_or_finish_still_closes_properly() -> None:
    out = run_stream([chunk(Delta(content="a"))])
    assert out[-2][1]["delta"]["stop_reason"] == "end_turn"
    assert out[-2][1]["usage"]["output_tokens"] == 0
    assert out[-1][0] == "message_stop"


def test_error_mid_stream_is_an_error_event() -> None:
    encoder = DIALECT.stream_encoder(decode(body(stream=True)), Reply(provider="up", model="m"))
    data = encoder.chunk(chunk(Delta(content="Hel"))) + encoder.error(UpstreamUnavailable("cut"))
    name, event = named_events(data)[-1]
    assert name == "error"
    assert event == {
        "type": "error",
        "error": {"type": "api_error", "message": "cut"},
        "request_id": "req-1",  # the call's, as in a whole error body
    }
    validate_in(SPEC, "ErrorResponse", event)


def test_keepalive_ping() -> None:
    encoder = DIALECT.stream_encoder(decode(body(stream=True)), Reply(provider="up", model="m"))
    assert encoder.keepalive == 15.0
    assert encoder.ping() == PING_FRAME == b'event: ping\ndata: {"type":"ping"}\n\n'
    validate_in(SPEC, "MessageStreamEvent", json.loads(PING_FRAME.split(b"data: ")[1]))


@pytest.mark.parametrize("finish", ["stop", None])
def test_tool_calls_with_a_stop_finish_are_tool_use(finish: str | None) -> None:
    # Some OpenAI-compatible servers (Ollama, older vLLM) say "stop" on a tool-call answer;
    # Anthropic clients run tools only when stop_reason is "tool_use".
    call = ToolCall(id="call_1", function=FunctionCall(name="f", arguments="{}"))
    message = Message(role="assistant", content=None, tool_calls=[call])
    assert encode(message, finish=finish)["stop_reason"] == "tool_use"
    out = run_stream(
        [
            chunk(tool(0, id="call_1", function=FunctionCallDelta(name="f", arguments="{}"))),
            chunk(Delta(), finish=finish),
        ]
    )
    assert out[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_length_with_tool_calls_stays_max_tokens() -> None:
    call = ToolCall(id="call_1", function=FunctionCall(name="f", arguments="{"))
    message = Message(role="assistant", content=None, tool_calls=[call])
    assert encode(message, finish="length")["stop_reason"] == "max_tokens"


# ---------------------------------------------------------------------------------------------
# Anthropic-style ids, the input usage message_start announces, count_tokens requests
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("upstream", "expected"),
    [("msg_01Abc", "msg_01Abc"), ("chatcmpl-9x_Y", "msg_chatcmpl9x_Y"), ("", "msg_req1")],
)
def test_message_ids_are_anthropic_style(upstream: str, expected: str) -> None:
    assert message_id(upstream, "req-1") == expected
    response = Response(
        id=upstream,
        model="m",
        choices=[Choice(index=0, message=Message(role="assistant", content="x"))],
    )
    call = decode(body())
    out = json.loads(
        DIALECT.encode_response(call, Reply(provider="up", model="m", response=response))
    )
    assert out["id"] == message_id(upstream, call.request_id)


@pytest.mark.parametrize(
    ("call_id", "expected"),
    [
        ("toolu_01A", "toolu_01A"),
        ("call_abc", "toolu_abc"),
        ("call-x.1", "toolu_x1"),
        ("fc", "toolu_fc"),
    ],
)
def test_tool_use_ids_are_anthropic_style_whole_and_streamed(call_id: str, expected: str) -> None:
    assert tool_use_id(call_id) == expected
    calls = [ToolCall(id=call_id, function=FunctionCall(name="f", arguments="{}"))]
    whole = encode(Message(role="assistant", content=None, tool_calls=calls), finish="tool_calls")
    assert whole["content"][0]["id"] == expected
    streamed = run_stream([chunk(tool(0, id=call_id, function=FunctionCallDelta(name="f")))])
    assert streamed[1][1]["content_block"]["id"] == expected


def test_message_start_carries_the_input_usage_the_upstream_announced() -> None:
    first = chunk(Delta(role="assistant", content=""))
    first.input_usage = Usage(input=11, cache_read=7, cache_write=5, output=1)
    out = run_stream([first, chunk(Delta(content="Hi")), chunk(usage=Usage(input=11, output=9))])
    assert out[0][1]["message"]["usage"] == {
        "input_tokens": 11,
        "output_tokens": 1,
        "cache_creation_input_tokens": 5,
        "cache_read_input_tokens": 7,
        "cache_creation": None,
        "inference_geo": None,
        "server_tool_use": None,
        "service_tier": None,
    }
    silent = run_stream([chunk(Delta(content="Hi"))])
    assert silent[0][1]["message"]["usage"]["input_tokens"] == 0


def test_a_count_tokens_body_decodes_like_a_messages_request_without_max_tokens() -> None:
    raw = json.dumps(
        {
            "model": "claude-x",
            "system": "Be brief.",
            "messages": HI,
            "tools": [WEATHER],
            "thinking": {"type": "enabled", "budget_tokens": 2048},
        }
    ).encode()
    call = decode_count_tokens(raw, {}, "req-1", 0.0)
    assert [m.role for m in call.messages] == ["system", "user"]
    assert call.params.max_tokens is UNSET
    assert call.params.reasoning_effort == "low"
    assert call.params.tools is not UNSET
    assert call.stream is False
    with pytest.raises(BadRequest) as info:
        decode_count_tokens(b'{"model": "m"}', {}, "r", 0.0)
    assert info.value.param == "messages"
    with pytest.raises(BadRequest) as info:
        decode_count_tokens(
            json.dumps({"model": "m", "messages": [{"role": "system", "content": "x"}]}).encode(),
            {},
            "r",
            0.0,
        )
    assert info.value.param == "messages[0].role"
    assert json.loads(token_count_json(42)) == {"input_tokens": 42}
