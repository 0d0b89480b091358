"""proxy/dialects/fabro.py: decoding Fabro requests, and encoding responses, stream events and
errors that conform to fabro-completions.openapi.json (validated with tests/schemas.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.core.canonical import (
    Accounting,
    Call,
    FunctionCall,
    ImagePart,
    Message,
    TextPart,
    ToolCall,
    Usage,
)
from proxy.core.errors import (
    BadRequest,
    GatewayError,
    NoReadyDeployment,
    UpstreamError,
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
from proxy.dialects.fabro import FabroDialect
from proxy.dialects.fabro_replies import PING_FRAME, FabroStreamEncoder
from tests.schemas import validate_in

SPEC = "fabro-completions.openapi.json"
DIALECT = FabroDialect()
HI = [{"role": "user", "content": [{"kind": "text", "data": "Hi"}]}]


def body(**fields: Any) -> bytes:
    fields.setdefault("messages", HI)
    return json.dumps(fields).encode()


def decode(raw: bytes) -> Call:
    return DIALECT.decode(raw, {}, "req-1", 1.0)


def events(data: bytes) -> list[dict[str, Any]]:
    """The payloads of ``event: stream_event`` frames; any other frame fails the test."""
    out = []
    for frame in data.split(b"\n\n"):
        if not frame:
            continue
        name, payload = frame.split(b"\n")
        assert name == b"event: stream_event", frame
        assert payload.startswith(b"data: ")
        out.append(json.loads(payload[len(b"data: ") :]))
    return out


def reply_of(message: Message, finish: str | None = "stop", usage: Usage | None = None) -> Reply:
    response = Response(
        id="resp-1",
        model="gpt-x",
        choices=[Choice(index=0, message=message, finish_reason=finish)],  # type: ignore[arg-type]
        usage=usage,
    )
    return Reply(provider="up", model="gpt-x", response=response)


def encode(message: Message, *, call: Call | None = None, **kwargs: Any) -> dict[str, Any]:
    call = call or decode(body())
    out = json.loads(DIALECT.encode_response(call, reply_of(message, **kwargs)))
    validate_in(SPEC, "CompletionResponse", out)
    return out


# ---------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------


def test_minimal_request_streams_by_default_and_leaves_the_model_to_the_router() -> None:
    call = decode(body())
    assert call.dialect == "fabro"
    assert call.model == ""
    assert call.stream is True
    assert call.messages == [Message(role="user", content="Hi")]
    assert call.options.provider is None
    assert call.extra == {}


@pytest.mark.parametrize(("stream", "expected"), [(True, True), (False, False), (None, True)])
def test_stream_flag(stream: bool | None, expected: bool) -> None:
    assert decode(body(stream=stream)).stream is expected


def test_sampling_parameters_model_and_provider_pin() -> None:
    call = decode(
        body(
            model="fast",
            temperature=0.3,
            top_p=0.9,
            max_tokens=64,
            stop_sequences=["END"],
            provider="mock",
        )
    )
    assert call.model == "fast"
    assert call.options.provider == "mock"
    params = call.params
    assert (params.temperature, params.top_p, params.max_tokens) == (0.3, 0.9, 64)
    assert params.stop == ["END"]


def test_system_field_and_system_developer_messages_keep_text() -> None:
    call = decode(
        body(
            system="Be brief.",
            messages=[
                {"role": "developer", "content": [{"kind": "text", "data": "Rules"}]},
                {
                    "role": "system",
                    "content": [{"kind": "text", "data": "a"}, {"kind": "text", "data": "b"}],
                },
                {"role": "user", "name": "ann", "content": [{"kind": "text", "data": "Hi"}]},
            ],
        )
    )
    assert call.messages == [
        Message(role="system", content="Be brief."),
        Message(role="developer", content="Rules"),
        Message(role="system", content="ab"),
        Message(role="user", content="Hi", name="ann"),
    ]


@pytest.mark.parametrize(
    ("data", "url", "detail"),
    [
        ({"url": "https://x/cat.png", "detail": "low"}, "https://x/cat.png", "low"),
        ({"data": "QUJD", "media_type": "image/jpeg"}, "data:image/jpeg;base64,QUJD", None),
        ({"data": "QUJD"}, "data:image/png;base64,QUJD", None),
    ],
)
def test_image_parts(data: dict[str, Any], url: str, detail: str | None) -> None:
    content = [{"kind": "text", "data": "What is it?"}, {"kind": "image", "data": data}]
    (message,) = decode(body(messages=[{"role": "user", "content": content}])).messages
    assert isinstance(message.content, list)
    text, image = message.content
    assert text == TextPart(text="What is it?")
    assert isinstance(image, ImagePart)
    assert image.image_url.url == url
    assert (image.image_url.detail or None) == detail


def test_assistant_parts_become_tool_calls_and_reasoning() -> None:
    assistant = {
        "role": "assistant",
        "content": [
            {"kind": "thinking", "data": {"text": "Let me look.", "signature": "sig"}},
            {"kind": "thinking", "data": " More."},
            {"kind": "text", "data": "Checking."},
            {
                "kind": "tool_call",
                "data": {"id": "c1", "name": "weather", "arguments": {"city": "Paris"}},
            },
            {
                "kind": "tool_call",
                "data": {"id": "c2", "name": "time", "type": "function", "arguments": '{"tz":1}'},
            },
        ],
    }
    (_, message) = decode(body(messages=[*HI, assistant])).messages
    assert message == Message(
        role="assistant",
        content="Checking.",
        reasoning_content="Let me look. More.",
        tool_calls=[
            ToolCall(id="c1", function=FunctionCall(name="weather", arguments='{"city":"Paris"}')),
            ToolCall(id="c2", function=FunctionCall(name="time", arguments='{"tz":1}')),
        ],
    )


def test_assistant_with_only_a_tool_call_has_null_content_and_default_arguments() -> None:
    assistant = {
        "role": "assistant",
        "content": [{"kind": "tool_call", "data": {"id": "c", "name": "f"}}],
    }
    (_, message) = decode(body(messages=[*HI, assistant])).messages
    assert message.content is None
    assert message.tool_calls == [ToolCall(id="c", function=FunctionCall(name="f", arguments="{}"))]


def test_tool_results_become_tool_messages_before_the_rest_of_the_turn() -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {"kind": "tool_result", "data": {"tool_call_id": "c1", "content": "18C"}},
                {
                    "kind": "tool_result",
                    "data": {"tool_call_id": "c2", "content": {"t": 1}, "is_error": True},
                },
                {"kind": "text", "data": "Thanks"},
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "c3",
            "content": [{"kind": "tool_result", "data": {"tool_call_id": "", "content": [1]}}],
        },
        {"role": "tool", "tool_call_id": "c4", "content": [{"kind": "text", "data": "ok"}]},
    ]
    assert decode(body(messages=messages)).messages == [
        Message(role="tool", content="18C", tool_call_id="c1"),
        Message(role="tool", content='{"t":1}', tool_call_id="c2"),
        Message(role="user", content="Thanks"),
        Message(role="tool", content="[1]", tool_call_id="c3"),
        Message(role="tool", content="ok", tool_call_id="c4"),
    ]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"mode": "auto"}, "auto"),
        ({"mode": "none"}, "none"),
        ({"mode": "required"}, "required"),
        (
            {"mode": "named", "tool_name": "weather"},
            {"type": "function", "function": {"name": "weather"}},
        ),
    ],
)
def test_tools_and_tool_choice(choice: dict[str, Any], expected: Any) -> None:
    tool = {"name": "weather", "description": "Weather", "parameters": {"type": "object"}}
    params = decode(body(tools=[tool], tool_choice=choice)).params
    assert params.tool_choice == expected
    assert params.tools
    (function,) = [t.function for t in params.tools]
    assert (function.name, function.description, function.parameters) == (
        "weather",
        "Weather",
        {"type": "object"},
    )


@pytest.mark.parametrize(
    ("effort", "upstream"),
    [("low", "low"), ("medium", "medium"), ("high", "high"), ("xhigh", "high"), ("max", "high")],
)
def test_reasoning_effort_maps_to_what_openai_accepts(effort: str, upstream: str) -> None:
    assert decode(body(reasoning_effort=effort)).params.reasoning_effort == upstream


def test_schema_asks_for_json_schema_output_and_turns_streaming_off() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    call = decode(body(schema=schema, stream=True))
    assert call.stream is False
    assert call.params.response_format == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema},
    }
    assert call.dialect_state == {"schema": True}


def test_provider_options_become_parameters_or_pass_through_fields() -> None:
    options = {"seed": 7, "temperature": 0.1, "top_k": 40, "api_key": "sk-smuggled"}
    call = decode(body(temperature=0.5, provider_options=options))
    assert call.params.seed == 7
    assert call.params.temperature == 0.5, "top-level fields win"
    assert {key: bytes(value) for key, value in call.extra.items()} == {"top_k": b"40"}


# ---------------------------------------------------------------------------------------------
# Bad requests: the Fabro error shape, status 400, the field named
# ---------------------------------------------------------------------------------------------

TOOL = {"name": "f", "description": "d", "parameters": {"type": "object"}}
BAD_REQUESTS: list[tuple[str, bytes, str]] = [
    ("not json", b"{nope", ""),
    ("missing messages", b"{}", "messages"),
    ("empty messages", body(messages=[]), "messages"),
    ("messages not a list", body(messages="Hi"), "messages"),
    ("bad role", body(messages=[{"role": "robot", "content": []}]), "messages[0].role"),
    ("missing content", body(messages=[{"role": "user"}]), "messages[0].content"),
    ("string content", body(messages=[{"role": "user", "content": "Hi"}]), "messages[0].content"),
    (
        "unknown part kind",
        body(messages=[{"role": "user", "content": [{"kind": "video", "data": "x"}]}]),
        "messages[0].content[0].kind",
    ),
    (
        "text data not a string",
        body(messages=[{"role": "user", "content": [{"kind": "text", "data": 1}]}]),
        "messages[0].content[0].data",
    ),
    (
        "tool call without a name",
        body(
            messages=[
                {"role": "assistant", "content": [{"kind": "tool_call", "data": {"id": "c"}}]}
            ]
        ),
        "messages[0].content[0].data.name",
    ),
    (
        "image without url or data",
        body(messages=[{"role": "user", "content": [{"kind": "image", "data": {}}]}]),
        "messages[0].content[0].data",
    ),
    (
        "image in a system message",
        body(messages=[{"role": "system", "content": [{"kind": "image", "data": {"url": "u"}}]}]),
        "messages[0].content[0].kind",
    ),
    (
        "tool result in an assistant message",
        body(
            messages=[
                {
                    "role": "assistant",
                    "content": [{"kind": "tool_result", "data": {"tool_call_id": "c"}}],
                }
            ]
        ),
        "messages[0].content[0].kind",
    ),
    (
        "tool call in a user message",
        body(
            messages=[
                {
                    "role": "user",
                    "content": [{"kind": "tool_call", "data": {"id": "c", "name": "f"}}],
                }
            ]
        ),
        "messages[0].content[0].kind",
    ),
    (
        "tool text without tool_call_id",
        body(messages=[{"role": "tool", "content": [{"kind": "text", "data": "x"}]}]),
        "messages[0].tool_call_id",
    ),
    ("empty user message", body(messages=[{"role": "user", "content": []}]), "messages[0].content"),
    ("model not a string", body(model=3), "model"),
    ("empty provider", body(provider=""), "provider"),
    ("stream not a bool", body(stream="yes"), "stream"),
    ("temperature above 2", body(temperature=3), "temperature"),
    ("top_p above 1", body(top_p=1.5), "top_p"),
    ("max_tokens 0", body(max_tokens=0), "max_tokens"),
    ("stop_sequences not strings", body(stop_sequences=[1]), "stop_sequences[0]"),
    ("unknown reasoning effort", body(reasoning_effort="extreme"), "reasoning_effort"),
    ("unknown tool choice mode", body(tool_choice={"mode": "any"}), "tool_choice.mode"),
    ("named choice without a name", body(tool_choice={"mode": "named"}), "tool_choice.tool_name"),
    (
        "tool without description",
        body(tools=[{"name": "f", "parameters": {}}]),
        "tools[0].description",
    ),
    (
        "tool parameters not an object",
        body(tools=[{**TOOL, "parameters": 1}]),
        "tools[0].parameters",
    ),
    ("schema not an object", body(schema="json"), "schema"),
    ("provider_options not an object", body(provider_options=[1]), "provider_options"),
    (
        "provider_options sets the model",
        body(provider_options={"model": "x"}),
        "provider_options.model",
    ),
    (
        "provider_options bad parameter",
        body(provider_options={"seed": "x"}),
        "provider_options.seed",
    ),
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
    out = json.loads(DIALECT.encode_error(error, "rid-9"))
    validate_in(SPEC, "ErrorResponse", out)
    assert out["request_id"] == "rid-9"
    (entry,) = out["errors"]
    assert entry["status"] == "400"
    assert entry["title"] == "Bad Request"
    assert entry["detail"] == error.message
    assert entry["code"] == error.code


@pytest.mark.parametrize(
    ("error", "status", "title"),
    [
        (UpstreamError("boom", upstream_status=500), "502", "Bad Gateway"),
        (UpstreamUnavailable("refused"), "502", "Bad Gateway"),
        (NoReadyDeployment("none"), "503", "Service Unavailable"),
        (GatewayError("odd", status=599), "599", "Error"),
    ],
)
def test_error_entries(error: GatewayError, status: str, title: str) -> None:
    out = json.loads(DIALECT.encode_error(error, "rid"))
    validate_in(SPEC, "ErrorResponse", out)
    assert out["errors"] == [
        {"status": status, "title": title, "detail": error.message, "code": error.code}
    ]


# ---------------------------------------------------------------------------------------------
# Whole responses
# ---------------------------------------------------------------------------------------------


def test_text_response_with_the_five_usage_buckets_and_no_invented_cost() -> None:
    usage = Usage(input=5, cache_read=2, cache_write=1, output=7, reasoning=3)
    out = encode(Message(role="assistant", content="Hello"), usage=usage)
    assert out == {
        "id": "resp-1",
        "model": "gpt-x",
        "provider": "up",
        "message": {"role": "assistant", "content": [{"kind": "text", "data": "Hello"}]},
        "stop_reason": "end_turn",
        "usage": {
            "input_tokens": 5,
            "output_tokens": 7,
            "reasoning_tokens": 3,
            "cache_read_tokens": 2,
            "cache_write_tokens": 1,
        },
    }


def test_provider_reported_cost_is_authoritative() -> None:
    out = encode(Message(role="assistant", content="Hi"), usage=Usage(output=1, cost_usd=0.0012))
    assert out["cost_usd"] == 0.0012
    assert out["cost_source"] == "authoritative"


def test_the_cost_the_cost_plugin_charged_is_reported_with_its_source() -> None:
    call = decode(body())
    call.accounting = Accounting(cost_nanos=245_000, cost_source="estimated")
    out = encode(Message(role="assistant", content="Hi"), call=call, usage=Usage(output=1))
    assert out["cost_usd"] == 0.000245
    assert out["cost_source"] == "estimated"


def test_the_charged_cost_wins_over_the_provider_figure_it_came_from() -> None:
    call = decode(body())
    call.accounting = Accounting(cost_nanos=1_200_000, cost_source="authoritative")
    usage = Usage(output=1, cost_usd=0.0012)
    out = encode(Message(role="assistant", content="Hi"), call=call, usage=usage)
    assert (out["cost_usd"], out["cost_source"]) == (0.0012, "authoritative")


def test_missing_usage_is_zero() -> None:
    out = encode(Message(role="assistant", content="Hi"))
    assert set(out["usage"].values()) == {0}


@pytest.mark.parametrize(
    ("finish", "stop_reason"),
    [
        ("stop", "end_turn"),
        ("length", "max_tokens"),
        ("tool_calls", "tool_calls"),
        ("function_call", "tool_calls"),
        ("content_filter", "content_filter"),
        (None, "end_turn"),
    ],
)
def test_stop_reasons(finish: str | None, stop_reason: str) -> None:
    assert (
        encode(Message(role="assistant", content="x"), finish=finish)["stop_reason"] == stop_reason
    )


def test_reasoning_and_tool_calls_become_parts() -> None:
    message = Message(
        role="assistant",
        content=None,
        reasoning_content="Hmm.",
        tool_calls=[
            ToolCall(id="c1", function=FunctionCall(name="f", arguments='{"a": 1}')),
            ToolCall(id="c2", function=FunctionCall(name="g", arguments="not json")),
            ToolCall(id="c3", function=FunctionCall(name="h", arguments="")),
        ],
    )
    out = encode(message, finish="tool_calls")
    assert out["message"]["content"] == [
        {"kind": "thinking", "data": {"text": "Hmm."}},
        {
            "kind": "tool_call",
            "data": {"id": "c1", "name": "f", "type": "function", "arguments": {"a": 1}},
        },
        {
            "kind": "tool_call",
            "data": {"id": "c2", "name": "g", "type": "function", "arguments": "not json"},
        },
        {
            "kind": "tool_call",
            "data": {"id": "c3", "name": "h", "type": "function", "arguments": {}},
        },
    ]
    assert out["stop_reason"] == "tool_calls"


@pytest.mark.parametrize(
    ("text", "output"),
    [('{"a": [1, 2]}', {"a": [1, 2]}), ("[true]", [True]), ("not json", None)],
)
def test_schema_output_is_the_parsed_answer(text: str, output: Any) -> None:
    call = decode(body(schema={"type": "object"}))
    out = encode(Message(role="assistant", content=text), call=call)
    assert out.get("output") == output
    assert out["message"]["content"] == [{"kind": "text", "data": text}]


def test_no_output_without_schema() -> None:
    assert "output" not in encode(Message(role="assistant", content='{"a": 1}'))


# ---------------------------------------------------------------------------------------------
# Streams
# ---------------------------------------------------------------------------------------------


def chunk(
    delta: Delta | None = None, finish: str | None = None, usage: Usage | None = None
) -> Chunk:
    choices = [] if delta is None else [ChunkChoice(index=0, delta=delta, finish_reason=finish)]  # type: ignore[arg-type]
    return Chunk(id="resp-9", model="gpt-x", choices=choices, usage=usage)


def run_stream(chunks: list[Chunk], accounting: Accounting | None = None) -> list[dict[str, Any]]:
    call = decode(body())
    encoder = DIALECT.stream_encoder(call, Reply(provider="up", model="gpt-x"))
    data = b"".join(encoder.chunk(c) for c in chunks)
    if accounting is not None:  # the cost plugin charges a stream once it has ended
        call.accounting.cost_nanos = accounting.cost_nanos
        call.accounting.cost_source = accounting.cost_source
    data += encoder.end()
    out = events(data)
    finish = out[-1]
    assert finish["type"] == "finish"
    validate_in(SPEC, "CompletionResponse", finish["response"])
    validate_in(SPEC, "CompletionUsage", finish["usage"])
    return out


def test_the_finish_event_carries_the_cost_charged_when_the_stream_ended() -> None:
    charged = Accounting(cost_nanos=3_000, cost_source="estimated")
    out = run_stream(
        [chunk(Delta(content="Hi"), finish="stop"), chunk(usage=Usage(output=1))], charged
    )
    response = out[-1]["response"]
    assert (response["cost_usd"], response["cost_source"]) == (0.000003, "estimated")


def test_text_stream() -> None:
    usage = Usage(input=3, cache_read=1, output=2)
    out = run_stream(
        [
            chunk(Delta(role="assistant", content="")),
            chunk(Delta(content="Hello")),
            chunk(Delta(content=" world")),
            chunk(Delta(), finish="stop"),
            chunk(usage=usage),
        ]
    )
    assert out[:-1] == [
        {"type": "stream_start"},
        {"type": "text_start", "text_id": "text_0"},
        {"type": "text_delta", "delta": "Hello", "text_id": "text_0"},
        {"type": "text_delta", "delta": " world", "text_id": "text_0"},
        {"type": "text_end", "text_id": "text_0"},
    ]
    finish = out[-1]
    assert finish["finish_reason"] == "stop"
    assert finish["usage"] == {
        "input_tokens": 3,
        "output_tokens": 2,
        "reasoning_tokens": 0,
        "cache_read_tokens": 1,
        "cache_write_tokens": 0,
    }
    assert finish["response"] == {
        "id": "resp-9",
        "model": "gpt-x",
        "provider": "up",
        "message": {"role": "assistant", "content": [{"kind": "text", "data": "Hello world"}]},
        "stop_reason": "end_turn",
        "usage": finish["usage"],
    }


def test_reasoning_then_text_then_tool_calls() -> None:
    def tool(index: int, **fields: Any) -> Delta:
        return Delta(tool_calls=[ToolCallDelta(index=index, **fields)])

    out = run_stream(
        [
            chunk(Delta(reasoning_content="Think")),
            chunk(Delta(content="Calling")),
            chunk(
                tool(
                    0, id="c1", type="function", function=FunctionCallDelta(name="f", arguments="")
                )
            ),
            chunk(tool(0, function=FunctionCallDelta(arguments='{"a":'))),
            chunk(tool(0, function=FunctionCallDelta(arguments="1}"))),
            chunk(tool(1, id="c2", function=FunctionCallDelta(name="g", arguments="{}"))),
            chunk(Delta(), finish="tool_calls"),
        ]
    )
    assert [e["type"] for e in out] == [
        "stream_start",
        "reasoning_start",
        "reasoning_delta",
        "reasoning_end",
        "text_start",
        "text_delta",
        "text_end",
        "tool_call_start",
        "tool_call_delta",
        "tool_call_delta",
        "tool_call_start",
        "tool_call_delta",
        # Calls stay open until the answer finishes: their arguments may resume later.
        "tool_call_end",
        "tool_call_end",
        "finish",
    ]
    assert out[7]["tool_call"] == {"id": "c1", "name": "f", "arguments": ""}
    assert out[9]["tool_call"] == {"id": "c1", "name": "f", "arguments": "1}"}
    assert out[12]["tool_call"] == {"id": "c1", "name": "f", "arguments": {"a": 1}}
    assert out[13]["tool_call"] == {"id": "c2", "name": "g", "arguments": {}}
    finish = out[-1]
    assert finish["finish_reason"] == "tool_calls"
    assert finish["response"]["stop_reason"] == "tool_calls"
    assert finish["response"]["message"]["content"] == [
        {"kind": "thinking", "data": {"text": "Think"}},
        {"kind": "text", "data": "Calling"},
        {
            "kind": "tool_call",
            "data": {"id": "c1", "name": "f", "type": "function", "arguments": {"a": 1}},
        },
        {
            "kind": "tool_call",
            "data": {"id": "c2", "name": "g", "type": "function", "arguments": {}},
        },
    ]


def test_interleaved_tool_fragments_reach_their_own_open_call() -> None:
    def tool(index: int, **fields: Any) -> Delta:
        return Delta(tool_calls=[ToolCallDelta(index=index, **fields)])

    out = run_stream(
        [
            chunk(tool(0, id="c1", function=FunctionCallDelta(name="f", arguments='{"x":'))),
            chunk(tool(1, id="c2", function=FunctionCallDelta(name="g", arguments='{"y":'))),
            chunk(tool(0, function=FunctionCallDelta(arguments="1"))),
            chunk(Delta(content="Both.")),
            chunk(tool(1, function=FunctionCallDelta(arguments="2}"))),
            chunk(tool(0, function=FunctionCallDelta(arguments="}"))),
            chunk(Delta(), finish="tool_calls"),
        ]
    )
    open_calls: dict[str, str] = {}
    ended: dict[str, Any] = {}
    for event in out:
        call = event.get("tool_call")
        if event["type"] == "tool_call_start":
            open_calls[call["id"]] = ""
        elif event["type"] == "tool_call_delta":
            assert call["id"] in open_calls, "a fragment after its call ended"
            open_calls[call["id"]] += call["arguments"]
        elif event["type"] == "tool_call_end":
            ended[call["id"]] = call["arguments"]
            assert json.loads(open_calls.pop(call["id"])) == call["arguments"]
    assert ended == {"c1": {"x": 1}, "c2": {"y": 2}}
    assert out[-1]["response"]["message"]["content"][1:] == [
        {
            "kind": "tool_call",
            "data": {"id": "c1", "name": "f", "type": "function", "arguments": {"x": 1}},
        },
        {
            "kind": "tool_call",
            "data": {"id": "c2", "name": "g", "type": "function", "arguments": {"y": 2}},
        },
    ]


def test_text_blocks_get_fresh_ids_and_other_choices_are_ignored() -> None:
    other = Chunk(
        id="resp-9",
        model="gpt-x",
        choices=[ChunkChoice(index=1, delta=Delta(content="ignored"))],
    )
    out = run_stream(
        [
            chunk(Delta(content="a")),
            other,
            chunk(Delta(reasoning_content="r")),
            chunk(Delta(content="b")),
        ]
    )
    texts = [(e["type"], e.get("text_id")) for e in out if e["type"].startswith("text")]
    assert texts == [
        ("text_start", "text_0"),
        ("text_delta", "text_0"),
        ("text_end", "text_0"),
        ("text_start", "text_1"),
        ("text_delta", "text_1"),
        ("text_end", "text_1"),
    ]
    assert out[-1]["finish_reason"] == "stop", "a stream that never said why it stopped"
    assert out[-1]["response"]["message"]["content"][1] == {"kind": "text", "data": "ab"}


def test_error_mid_stream_is_an_error_event_and_nothing_follows() -> None:
    encoder = DIALECT.stream_encoder(decode(body()), Reply(provider="up", model="gpt-x"))
    data = encoder.chunk(chunk(Delta(content="Hel"))) + encoder.error(UpstreamUnavailable("cut"))
    out = events(data)
    assert [e["type"] for e in out] == ["stream_start", "text_start", "text_delta", "error"]
    assert out[-1]["error"] == {
        "status": "502",
        "title": "Bad Gateway",
        "detail": "cut",
        "code": "upstream_unavailable",
    }
    validate_in(SPEC, "ErrorResponseEntry", out[-1]["error"])


def test_error_before_any_chunk_still_starts_the_stream() -> None:
    encoder = FabroStreamEncoder(Reply(provider="up", model="m"), Accounting())
    types = [e["type"] for e in events(encoder.error(UpstreamUnavailable("x")))]
    assert types == ["stream_start", "error"]


def test_keepalive_ping_every_15_seconds() -> None:
    encoder = FabroStreamEncoder(Reply(provider="up", model="m"), Accounting())
    assert encoder.keepalive == 15.0
    assert encoder.ping() == PING_FRAME == b'event: ping\ndata: {"type":"ping"}\n\n'


def test_no_response_headers_of_its_own() -> None:
    assert DIALECT.response_headers(decode(body()), Reply(provider="p", model="m")) == {}


@pytest.mark.parametrize("finish", ["stop", None])
def test_tool_calls_with_a_stop_finish_report_tool_calls(finish: str | None) -> None:
    # Some OpenAI-compatible servers (Ollama, older vLLM) say "stop" on a tool-call answer.
    call = ToolCall(id="c1", function=FunctionCall(name="f", arguments="{}"))
    out = encode(Message(role="assistant", content=None, tool_calls=[call]), finish=finish)
    assert out["stop_reason"] == "tool_calls"
    fragment = ToolCallDelta(index=0, id="c1", function=FunctionCallDelta(name="f", arguments="{}"))
    streamed = run_stream([chunk(Delta(tool_calls=[fragment])), chunk(Delta(), finish=finish)])
    assert streamed[-1]["finish_reason"] == "tool_calls"
    assert streamed[-1]["response"]["stop_reason"] == "tool_calls"
