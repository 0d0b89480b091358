"""proxy/dialects/openai_chat.py: decoding requests, and encoding replies, streams and errors
that conform to OpenAI's published schemas (validated with tests/schemas.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from proxy.core.canonical import (
    Call,
    FunctionCall,
    FunctionDefinition,
    ImagePart,
    Message,
    Params,
    TextPart,
    Tool,
    ToolCall,
    Usage,
)
from proxy.core.errors import (
    BadRequest,
    ContextWindowExceeded,
    GatewayError,
    ModelNotFound,
    UpstreamRateLimited,
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
from proxy.dialects.openai_chat import DONE_FRAME, STORE, OpenAIChatDialect
from proxy.providers.mock.provider import MockConfig, MockProvider
from tests.schemas import validate

DIALECT = OpenAIChatDialect()


def body(**fields: Any) -> bytes:
    fields.setdefault("model", "gpt-4o")
    fields.setdefault("messages", [{"role": "user", "content": "Hello"}])
    return json.dumps(fields).encode()


def decode(raw: bytes, headers: dict[str, str] | None = None) -> Call:
    return DIALECT.decode(raw, headers or {}, "req-1", 123.0)


def bad(raw: bytes) -> BadRequest:
    with pytest.raises(BadRequest) as info:
        decode(raw)
    assert info.value.status == 400
    return info.value


def frames(data: bytes) -> list[Any]:
    """The JSON payloads of SSE frames (``"[DONE]"`` kept as a string)."""
    out = []
    for frame in data.split(b"\n\n"):
        if not frame:
            continue
        assert frame.startswith(b"data: "), frame
        payload = frame[len(b"data: ") :]
        out.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
    return out


# ---------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------


def test_routes():
    assert "/v1/chat/completions" in DIALECT.paths
    assert DIALECT.name == "openai"


def test_decode_good_body():
    headers = {"x-trace-id": "t-1"}
    call = decode(
        body(
            model="fast",
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi", "name": "ann"},
            ],
            temperature=0.5,
            max_tokens=10,
            stop=["\n"],
            seed=1,
        ),
        headers,
    )
    assert call.request_id == "req-1"
    assert call.dialect == "openai"
    assert call.model == "fast"
    assert call.messages == [
        Message(role="system", content="Be brief."),
        Message(role="user", content="Hi", name="ann"),
    ]
    assert call.stream is False
    assert call.include_usage is False
    assert call.params == Params(temperature=0.5, max_tokens=10, stop=["\n"], seed=1)
    assert call.extra == {}
    assert call.client_headers is headers
    assert call.timings.start == 123.0


def test_decode_stream_with_usage():
    call = decode(body(stream=True, stream_options={"include_usage": True}))
    assert call.stream is True
    assert call.include_usage is True
    call = decode(body(stream=True))
    assert (call.stream, call.include_usage) == (True, False)
    assert decode(body(stream=None)).stream is False


def test_decode_multi_part_content_and_tools():
    call = decode(
        body(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
                    ],
                }
            ],
            tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
            tool_choice={"type": "function", "function": {"name": "f"}},
        )
    )
    content = call.messages[0].content
    assert isinstance(content[0], TextPart)
    assert isinstance(content[1], ImagePart)
    assert call.messages[0].text() == "What is this?"
    assert call.params.tools[0].function.name == "f"
    assert call.params.tool_choice == {"type": "function", "function": {"name": "f"}}


def test_missing_model():
    error = bad(json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode())
    assert error.param == "model"


@pytest.mark.parametrize("model", ["", None])
def test_empty_or_null_model(model):
    assert bad(body(model=model)).param == "model"


def test_missing_messages():
    assert bad(json.dumps({"model": "m"}).encode()).param == "messages"


def test_empty_messages():
    assert bad(body(messages=[])).param == "messages"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"messages": [{"role": 5, "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 42}]}, "messages[0].content"),
        ({"messages": "hello"}, "messages"),
        ({"temperature": "hot"}, "temperature"),
        ({"max_tokens": "ten"}, "max_tokens"),
        ({"stream": "yes"}, "stream"),
        ({"n": 1.5}, "n"),
        ({"tools": [{"type": "function"}]}, "tools[0].function"),
    ],
)
def test_wrong_type_names_the_field(fields, param):
    error = bad(body(**fields))
    assert error.param == param
    assert error.code == "invalid_request"
    assert param.split("[")[0] in error.message


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"temperature": 2.5}, "temperature"),
        ({"temperature": -0.1}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"max_tokens": -1}, "max_tokens"),
        ({"max_completion_tokens": -1}, "max_completion_tokens"),
        ({"n": 0}, "n"),
        ({"presence_penalty": 3}, "presence_penalty"),
        ({"top_logprobs": 21}, "top_logprobs"),
        ({"seed": 2**63}, "seed"),  # OpenAI's schema: an int64
        ({"seed": -(2**63) - 1}, "seed"),
        ({"seed": 2**70}, "seed"),
    ],
)
def test_out_of_range_names_the_field(fields, param):
    assert bad(body(**fields)).param == param


def test_boundaries_are_accepted():
    call = decode(body(temperature=0, top_p=1, max_tokens=1, n=128, frequency_penalty=-2))
    assert call.params.temperature == 0
    assert call.params.n == 128
    assert decode(body(seed=2**63 - 1)).params.seed == 2**63 - 1
    assert decode(body(seed=-(2**63))).params.seed == -(2**63)


def test_nulls_are_accepted():
    call = decode(body(temperature=None, max_tokens=None, stop=None, tools=None))
    assert call.params.temperature is None


@pytest.mark.parametrize("raw", [b"{not json", b"", b'{"model": "m", "messages": [', b"\xff\xfe"])
def test_invalid_json(raw: bytes):
    error = bad(raw)
    assert error.code == "invalid_json"
    assert error.param is None


@pytest.mark.parametrize("raw", [b"[]", b'"text"', b"42", b"null"])
def test_json_that_is_not_an_object(raw: bytes):
    error = bad(raw)
    assert error.code in ("invalid_request", "invalid_json")


def test_unknown_fields_are_kept_raw_in_extra():
    raw = (
        b'{"model": "m", "messages": [{"role": "user", "content": "x"}],'
        b' "top_k": 40, "provider": {"order": ["a", "b"]}, "labels": {"k":  "v"}}'
    )
    call = decode(raw)
    assert set(call.extra) == {"top_k", "provider", "labels"}
    assert all(isinstance(value, msgspec.Raw) for value in call.extra.values())
    assert bytes(call.extra["top_k"]) == b"40"
    assert bytes(call.extra["provider"]) == b'{"order": ["a", "b"]}'
    assert bytes(call.extra["labels"]) == b'{"k":  "v"}'  # verbatim, spacing included


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_a_zero_token_limit_is_accepted_as_the_schema_allows(field: str):
    assert getattr(decode(body(**{field: 0})).params, field) == 0


def test_store_and_metadata_are_the_gateways_and_never_sent_upstream():
    call = decode(body(store=True, metadata={"ticket": "T-1"}))
    assert call.dialect_state[STORE] == {"ticket": "T-1"}
    assert not call.extra
    assert STORE not in decode(body(store=False, metadata={"a": "b"}, top_k=1)).dialect_state
    assert "metadata" not in decode(body(metadata={"a": "b"}, top_k=1)).extra


@pytest.mark.parametrize(
    "metadata",
    [
        {f"k{i}": "v" for i in range(17)},
        {"k" * 65: "v"},
        {"k": "v" * 513},
        {"k": 1},
    ],
)
def test_metadata_beyond_openais_bounds_names_the_field(metadata: dict[str, object]):
    assert bad(body(store=True, metadata=metadata)).param.startswith("metadata")


@pytest.mark.parametrize("field", ["api_key", "api_base", "base_url"])
def test_credentials_and_endpoints_in_the_body_are_dropped(field: str):
    call = decode(body(**{field: "sk-smuggled-0123456789abcdef", "top_k": 1}))
    assert field not in call.extra
    assert "top_k" in call.extra


def test_known_fields_are_not_duplicated_in_extra():
    call = decode(body(temperature=1, stream=False, stream_options=None, tools=None))
    assert call.extra == {}


# ---------------------------------------------------------------------------------------------
# Whole responses
# ---------------------------------------------------------------------------------------------


def reply_of(response: Response) -> Reply:
    return Reply(provider="p", model="m", response=response)


def encoded(response: Response, call: Call | None = None) -> dict[str, Any]:
    call = call or decode(body())
    out = json.loads(DIALECT.encode_response(call, reply_of(response)))
    validate("CreateChatCompletionResponse", out)
    return out


def test_text_response_conforms():
    response = Response(
        id="chatcmpl-1",
        model="gpt-4o",
        created=1_700_000_000,
        choices=[
            Choice(index=0, message=Message(role="assistant", content="Hi!"), finish_reason="stop")
        ],
        usage=Usage(input=70, cache_read=30, output=30, reasoning=20),
        system_fingerprint="fp_1",
    )
    out = encoded(response)
    assert out["object"] == "chat.completion"
    assert out["created"] == 1_700_000_000
    assert out["choices"][0]["message"] == {"role": "assistant", "content": "Hi!", "refusal": None}
    assert response.choices[0].message.refusal is msgspec.UNSET, (
        "encoding changes no answer in place"
    )
    assert out["choices"][0]["logprobs"] is None
    assert out["usage"] == {
        "prompt_tokens": 100,
        "completion_tokens": 50,
        "total_tokens": 150,
        "prompt_tokens_details": {"cached_tokens": 30},
        "completion_tokens_details": {"reasoning_tokens": 20},
    }
    assert out["system_fingerprint"] == "fp_1"


def test_response_without_created_gets_the_current_time():
    message = Message(role="assistant", content="x")
    response = Response(id="c", model="m", choices=[Choice(0, message, "stop")])
    out = encoded(response)
    assert isinstance(out["created"], int)
    assert out["created"] > 1_600_000_000
    assert "usage" not in out


def test_tool_call_response_conforms():
    message = Message(
        role="assistant",
        content=None,
        tool_calls=[
            ToolCall(id="call_1", function=FunctionCall(name="get_weather", arguments='{"c":1}'))
        ],
    )
    out = encoded(Response(id="c", model="m", choices=[Choice(0, message, "tool_calls")]))
    tool_call = out["choices"][0]["message"]["tool_calls"][0]
    assert tool_call["type"] == "function"
    assert tool_call["function"] == {"name": "get_weather", "arguments": '{"c":1}'}


def test_tool_call_with_empty_arguments_conforms():
    message = Message(
        role="assistant",
        content=None,
        tool_calls=[ToolCall(id="call_1", function=FunctionCall(name="ping"))],
    )
    out = encoded(Response(id="c", model="m", choices=[Choice(0, message, "tool_calls")]))
    assert out["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == ""


def test_several_choices_conform():
    choices = [
        Choice(i, Message(role="assistant", content=f"answer {i}"), "stop") for i in range(3)
    ]
    out = encoded(Response(id="c", model="m", choices=choices, usage=Usage(input=1, output=3)))
    assert [c["index"] for c in out["choices"]] == [0, 1, 2]


WEATHER = Tool(
    function=FunctionDefinition(
        name="get_weather",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}},
    )
)


@pytest.mark.parametrize("model", ["default", "echo", "tools"])
async def test_mock_provider_responses_conform(model: str):
    call = decode(body(tools=[msgspec.to_builtins(WEATHER)], n=2, max_tokens=50))
    response = await MockProvider("mock", MockConfig()).complete(call, model)
    out = encoded(response, call)
    assert len(out["choices"]) == 2


# ---------------------------------------------------------------------------------------------
# Streams
# ---------------------------------------------------------------------------------------------


async def encode_stream(call: Call, chunks: AsyncIterator[Chunk] | list[Chunk]) -> bytes:
    reply = Reply(provider="p", model="m", stream=None)
    encoder = DIALECT.stream_encoder(call, reply)
    out = b""
    if isinstance(chunks, list):
        for chunk in chunks:
            out += encoder.chunk(chunk)
    else:
        async for chunk in chunks:
            out += encoder.chunk(chunk)
    return out + encoder.end()


def validate_stream(data: bytes) -> list[dict[str, Any]]:
    assert data.endswith(DONE_FRAME)
    payloads = frames(data)
    assert payloads[-1] == "[DONE]"
    assert "[DONE]" not in payloads[:-1]
    for payload in payloads[:-1]:
        validate("CreateChatCompletionStreamResponse", payload)
        assert payload["object"] == "chat.completion.chunk"
    return payloads[:-1]


@pytest.mark.parametrize("include_usage", [False, True])
async def test_mock_text_stream_conforms(include_usage: bool):
    call = decode(body(stream=True, stream_options={"include_usage": include_usage}))
    stream = await MockProvider("mock", MockConfig()).complete(call, "echo")
    payloads = validate_stream(await encode_stream(call, stream))
    text = "".join(p["choices"][0]["delta"].get("content") or "" for p in payloads if p["choices"])
    assert text == "Hello"
    usage = [p["usage"] for p in payloads if p.get("usage")]
    if include_usage:
        assert payloads[-1]["choices"] == []
        assert usage == [
            {
                "prompt_tokens": 2,
                "completion_tokens": 1,
                "total_tokens": 3,
                "prompt_tokens_details": {"cached_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0},
            }
        ]
    else:
        assert usage == []
        assert all(p["choices"] for p in payloads)


async def test_mock_tool_stream_conforms():
    call = decode(body(stream=True, tools=[msgspec.to_builtins(WEATHER)]))
    stream = await MockProvider("mock", MockConfig()).complete(call, "tools")
    payloads = validate_stream(await encode_stream(call, stream))
    first = payloads[0]["choices"][0]["delta"]["tool_calls"][0]
    assert first["function"]["name"] == "get_weather"
    assert payloads[-1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_hand_built_stream_conforms():
    call = decode(body(stream=True))
    chunks = [
        Chunk(id="c", model="m", choices=[ChunkChoice(0, Delta(role="assistant", content=""))]),
        Chunk(id="c", model="m", choices=[ChunkChoice(0, Delta(content="Hi"))]),
        Chunk(
            id="c",
            model="m",
            choices=[
                ChunkChoice(
                    0,
                    Delta(
                        tool_calls=[
                            ToolCallDelta(
                                index=0,
                                id="call_1",
                                type="function",
                                function=FunctionCallDelta(name="f", arguments=""),
                            )
                        ]
                    ),
                )
            ],
        ),
        Chunk(id="c", model="m", choices=[ChunkChoice(0, Delta(), finish_reason="stop")]),
        Chunk(id="c", model="m", choices=[], usage=Usage(input=1, output=1)),
    ]
    payloads = validate_stream(await encode_stream(call, chunks))
    assert len(payloads) == 4  # the usage-only chunk is dropped: the client did not ask
    assert payloads[0]["choices"][0]["finish_reason"] is None
    assert all(isinstance(p["created"], int) and p["created"] > 0 for p in payloads)


async def test_usage_on_a_chunk_with_choices_is_stripped_unless_asked():
    call = decode(body(stream=True))
    chunk = Chunk(
        id="c",
        model="m",
        choices=[ChunkChoice(0, Delta(content="x"), finish_reason="stop")],
        usage=Usage(input=1, output=1),
    )
    (payload,) = validate_stream(await encode_stream(call, [chunk]))
    assert "usage" not in payload or payload["usage"] is None


async def test_the_matched_stop_sequence_is_not_an_openai_field():
    message = Message(role="assistant", content="One, two")
    response = Response(
        id="c", model="m", choices=[Choice(0, message, "stop", stop_sequence=", three")]
    )
    assert "stop_sequence" not in encoded(response)["choices"][0]
    last = Chunk(
        id="c",
        model="m",
        choices=[ChunkChoice(0, Delta(), finish_reason="stop", stop_sequence=", three")],
    )
    (payload,) = validate_stream(await encode_stream(decode(body(stream=True)), [last]))
    assert "stop_sequence" not in payload["choices"][0]


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------

ERRORS = [
    BadRequest("Invalid request: bad", param="temperature"),
    BadRequest("Invalid JSON body", code="invalid_json"),
    ModelNotFound("no such model", param="model"),
    UpstreamRateLimited("slow down", upstream_status=429, retry_after=2),
    ContextWindowExceeded("too long", upstream_status=400, status=400),
    UpstreamUnavailable("unreachable"),
    GatewayError("internal"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_error_body_conforms(error: GatewayError):
    out = json.loads(DIALECT.encode_error(error, "req-1"))
    validate("ErrorResponse", out)
    assert out["error"] == {
        "message": error.message,
        "type": error.type,
        "param": error.param,
        "code": error.code,
    }


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_in_stream_error_frame_conforms(error: GatewayError):
    encoder = DIALECT.stream_encoder(decode(body(stream=True)), Reply(provider="p", model="m"))
    data = encoder.error(error)
    (payload,) = frames(data)
    validate("ErrorResponse", payload)
    assert DONE_FRAME not in data


def test_the_one_pass_decode_reads_every_parameter_as_the_parameters_decoder_does():
    """A body without unmodelled fields is decoded in one pass (the module docstring): its
    parameters are exactly what decoding them alone gives, whichever are set."""
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "Hi"}],
        "temperature": 0.5,
        "top_p": 0.9,
        "max_tokens": 10,
        "max_completion_tokens": 11,
        "n": 2,
        "stop": ["x"],
        "seed": 7,
        "presence_penalty": 0.1,
        "frequency_penalty": 0.2,
        "logit_bias": {"1": 1.0},
        "logprobs": True,
        "top_logprobs": 3,
        "user": "u",
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "response_format": {"type": "json_object"},
        "reasoning_effort": "low",
    }
    assert set(body) - {"model", "messages"} == set(Params.__struct_fields__)
    raw = json.dumps(body).encode()
    call = OpenAIChatDialect().decode(raw, {}, "r", 0.0)
    assert call.params == msgspec.json.decode(raw, type=Params)
    assert type(call.params) is Params
    assert call.extra == {}
    with_extra = OpenAIChatDialect().decode(raw[:-1] + b', "vendor": 1}', {}, "r", 0.0)
    assert with_extra.params == call.params
    assert bytes(with_extra.extra["vendor"]) == b"1"
