"""proxy/dialects/bifrost.py (``/v1/text/completions``) and Bifrost's ``fallbacks`` on the chat
route: decoding, encoding against bifrost-completions.openapi.json, errors, and Bifrost's own
example requests sent verbatim through the HTTP server."""

from __future__ import annotations

import json
import textwrap
import time
import types
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from proxy.core.canonical import Call, FunctionCall, Message, ToolCall, Usage
from proxy.core.errors import BadRequest, UpstreamUnavailable
from proxy.core.reply import Choice, Chunk, ChunkChoice, Delta, Reply, Response
from proxy.dialects import bifrost as bifrost_module
from proxy.dialects.bifrost import BifrostDialect
from proxy.dialects.openai_chat import OpenAIChatDialect
from proxy.providers.openai.provider import OpenAIConfig, OpenAIProvider
from tests.e2e.conftest import start_site
from tests.e2e.fake_openai import FakeOpenAI
from tests.proxy.dialects.adapters import data_payloads
from tests.proxy.dialects.adapters.bifrost import ADAPTER, STREAM_CHUNK
from tests.proxy.dialects.adapters.gateway import MOCK_PROVIDERS, post, serve
from tests.schemas import validate_in, validate_schema

SPEC = "bifrost-completions.openapi.json"
DIALECT = BifrostDialect()
CHAT = OpenAIChatDialect()

# The request examples of bifrost-completions.openapi.json (DIALECTS.md section 3), verbatim.
SIMPLE_TEXT = {
    "model": "anthropic/claude-2.1",
    "text": "The future of artificial intelligence is",
    "max_tokens": 100,
    "temperature": 0.7,
}
WITH_STOP_SEQUENCES = {
    "provider": "anthropic",
    "model": "claude-2.1",
    "text": "Write a short story about a robot:",
    "max_tokens": 200,
    "temperature": 0.8,
    "stop_sequences": ["\n\n", "THE END"],
}
CHAT_EXAMPLES = {
    "simple_chat": {
        "model": "openai/gpt-4o",
        "messages": [{"role": "user", "content": "Hello, how are you?"}],
    },
    "tool_calling": {
        "model": "openai/gpt-4o",
        "messages": [{"role": "user", "content": "What's the weather in San Francisco?"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Get current weather for a location",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "location": {
                                "type": "string",
                                "description": "The city and state, e.g. San Francisco, CA",
                            }
                        },
                        "required": ["location"],
                    },
                },
            }
        ],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    },
    "with_fallbacks": {
        "model": "openai/gpt-4o",
        "messages": [{"role": "user", "content": "Explain quantum computing"}],
        "fallbacks": ["anthropic/claude-3-sonnet-20240229", "cohere/command"],
    },
    "structured_content": {
        "model": "openai/gpt-4o",
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "text",
                        "text": "What's happening in this image? What's the weather like?",
                    },
                    {
                        "type": "image_url",
                        "image_url": {
                            "url": "https://example.com/weather-photo.jpg",
                            "detail": "high",
                        },
                    },
                ],
            }
        ],
        "max_tokens": 1000,
        "temperature": 0.7,
    },
}


def decode(body: dict[str, Any], start: float | None = None) -> Call:
    raw = json.dumps(body).encode()
    return DIALECT.decode(raw, {}, "req-1", time.perf_counter() if start is None else start)


def rejection(body: dict[str, Any] | bytes) -> BadRequest:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with pytest.raises(BadRequest) as caught:
        DIALECT.decode(raw, {}, "req-1", time.perf_counter())
    return caught.value


def answer(text: str | None = "It is bright.", **fields: Any) -> Response:
    message = Message(role="assistant", content=text, **fields)
    finish = "tool_calls" if fields.get("tool_calls") else "stop"
    return Response(
        id="cmpl-789",
        model="claude-2.1",
        created=1677652288,
        choices=[Choice(index=0, message=message, finish_reason=finish)],
        usage=Usage(input=6, cache_read=2, output=30, reasoning=2),
    )


def encoded(call: Call, response: Response, provider: str = "anthropic") -> dict[str, Any]:
    body = json.loads(
        DIALECT.encode_response(call, Reply(provider, "claude-2.1", response=response))
    )
    validate_in(SPEC, "BifrostResponse", body)
    return body


# ---------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------


def test_simple_example_decodes_to_one_user_turn() -> None:
    call = decode(SIMPLE_TEXT)
    assert call.dialect == "bifrost"
    assert call.model == "anthropic/claude-2.1"
    assert call.messages == [Message(role="user", content=SIMPLE_TEXT["text"])]
    assert call.params.max_tokens == 100
    assert call.params.temperature == 0.7
    assert call.stream is False
    assert call.extra == {}
    assert call.options.fallbacks is None


def test_legacy_provider_and_model_pair_and_stop_sequences() -> None:
    call = decode(WITH_STOP_SEQUENCES)
    assert call.model == "anthropic/claude-2.1"
    assert call.params.stop == ["\n\n", "THE END"]
    assert call.params.max_tokens == 200


@pytest.mark.parametrize(
    ("provider", "model", "target"),
    [
        ("anthropic", "anthropic/claude-2.1", "anthropic/claude-2.1"),
        ("openrouter", "meta-llama/llama-3-8b", "openrouter/meta-llama/llama-3-8b"),
    ],
)
def test_legacy_pair_is_not_prefixed_twice(provider: str, model: str, target: str) -> None:
    assert decode({"provider": provider, "model": model, "text": "x"}).model == target


def test_unknown_fields_pass_through_raw_and_known_parameters_are_typed() -> None:
    call = decode(
        {
            "model": "openai/gpt-4o",
            "text": "hi",
            "top_k": 40,
            "top_p": 0.9,
            "presence_penalty": 0.5,
            "user": "u-1",
            "api_key": "sk-client-smuggled",
            "metadata": {"team": "a"},
        }
    )
    assert {key: json.loads(bytes(value)) for key, value in call.extra.items()} == {
        "top_k": 40,
        "metadata": {"team": "a"},
    }
    assert call.params.top_p == 0.9
    assert call.params.presence_penalty == 0.5
    assert call.params.user == "u-1"


def test_extra_params_reach_the_upstream_request_verbatim() -> None:
    call = decode({"model": "openai/gpt-4o", "text": "hi", "top_k": 40, "fallbacks": ["a/b"]})
    provider = OpenAIProvider("openai", OpenAIConfig(api_key="sk-x"))
    sent = json.loads(provider.build_request(call, "gpt-4o").body)
    assert sent["top_k"] == 40
    assert sent["messages"] == [{"role": "user", "content": "hi"}]
    assert "fallbacks" not in sent
    assert "text" not in sent


def test_fallbacks_become_call_options_in_order() -> None:
    call = decode({**SIMPLE_TEXT, "fallbacks": ["openai/gpt-4o-mini", "cohere/command"]})
    assert call.options.fallbacks == ["openai/gpt-4o-mini", "cohere/command"]
    assert "fallbacks" not in call.extra


def test_stream_asks_for_usage() -> None:
    call = decode({**SIMPLE_TEXT, "stream": True})
    assert call.stream is True
    assert call.include_usage is True


@pytest.mark.parametrize(
    ("body", "message", "param"),
    [
        ({"text": "hi"}, "Model is required", "model"),
        ({"model": "", "text": "hi"}, "Model is required", "model"),
        ({"provider": "anthropic", "text": "hi"}, "Model is required", "model"),
        (
            {"model": "claude-2.1", "text": "hi"},
            "Model must be in the format of 'provider/model'",
            "model",
        ),
        (
            {"model": "anthropic/", "text": "hi"},
            "Model must be in the format of 'provider/model'",
            "model",
        ),
        ({"model": "a/b"}, "Text is required for text completion", "text"),
        ({"model": "a/b", "text": ""}, "Text is required for text completion", "text"),
        (
            {"model": "a/b", "text": "x", "fallbacks": ["c/d", "gpt-4o"]},
            "Fallback must be in the format of 'provider/model'",
            "fallbacks[1]",
        ),
    ],
)
def test_bifrosts_own_400_messages(body: dict[str, Any], message: str, param: str) -> None:
    error = rejection(body)
    assert (error.status, error.message, error.param) == (400, message, param)
    payload = json.loads(DIALECT.encode_error(error, "req-1"))
    validate_in(SPEC, "BifrostError", payload)
    assert payload == {
        "is_bifrost_error": True,
        "status_code": 400,
        "error": {
            "type": "invalid_request_error",
            "code": "invalid_request",
            "message": message,
            "param": param,
        },
    }


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "a/b", "text": 42}, "text"),
        ({"model": 7, "text": "x"}, "model"),
        ({"model": "a/b", "text": "x", "max_tokens": 0}, "max_tokens"),
        ({"model": "a/b", "text": "x", "max_tokens": "ten"}, "max_tokens"),
        ({"model": "a/b", "text": "x", "temperature": 2.1}, "temperature"),
        ({"model": "a/b", "text": "x", "top_p": 1.5}, "top_p"),
        ({"model": "a/b", "text": "x", "stop_sequences": "END"}, "stop_sequences"),
        ({"model": "a/b", "text": "x", "stop_sequences": [1]}, "stop_sequences[0]"),
        ({"model": "a/b", "text": "x", "fallbacks": "c/d"}, "fallbacks"),
        ({"model": "a/b", "text": "x", "stream": "yes"}, "stream"),
    ],
)
def test_invalid_fields_are_named(body: dict[str, Any], param: str) -> None:
    error = rejection(body)
    assert error.status == 400
    assert error.param == param
    assert repr(param) in error.message


def test_malformed_json_is_a_bifrost_400() -> None:
    error = rejection(b'{"model": "a/b", "text": ')
    assert error.status == 400
    validate_in(SPEC, "BifrostError", json.loads(DIALECT.encode_error(error, "req-1")))


# ---------------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------------


def test_response_is_a_bifrost_text_completion_with_extra_fields(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    call = decode({**SIMPLE_TEXT, "stop_sequences": ["END"]}, start=1000.0)
    # The dialect's clock, pinned: the answer is encoded 1.5 s after the request arrived.
    clock = types.SimpleNamespace(perf_counter=lambda: 1001.5, time=time.time)
    monkeypatch.setattr(bifrost_module, "time", clock)
    body = encoded(call, answer(), provider="anthropic")
    assert body["object"] == "text.completion"
    assert body["id"] == "cmpl-789"
    assert body["model"] == "claude-2.1"
    assert body["created"] == 1677652288
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "It is bright."},
            "finish_reason": "stop",
        }
    ]
    assert body["usage"]["prompt_tokens"] == 8
    assert body["usage"]["completion_tokens"] == 32
    assert body["usage"]["total_tokens"] == 40
    assert body["usage"]["completion_tokens_details"] == {"reasoning_tokens": 2}
    extra = body["extra_fields"]
    assert extra["provider"] == "anthropic"
    assert extra["model_params"] == {
        "max_tokens": 100,
        "temperature": 0.7,
        "stop_sequences": ["END"],
    }
    assert extra["latency"] == pytest.approx(1.5)
    assert extra["chat_history"] == [
        {"role": "user", "content": SIMPLE_TEXT["text"]},
        {"role": "assistant", "content": "It is bright."},
    ]


def test_extra_fields_provider_is_the_one_that_served() -> None:
    call = decode({**SIMPLE_TEXT, "fallbacks": ["openai/gpt-4o"]})
    assert encoded(call, answer(), provider="openai")["extra_fields"]["provider"] == "openai"


def test_tool_call_message_omits_content_and_carries_the_calls() -> None:
    call_ = ToolCall(id="call_1", function=FunctionCall(name="get_weather", arguments='{"c":1}'))
    body = encoded(decode(SIMPLE_TEXT), answer(None, tool_calls=[call_]))
    message = body["choices"][0]["message"]
    assert "content" not in message
    assert message["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"c":1}'}
    assert body["choices"][0]["finish_reason"] == "tool_calls"


def test_reasoning_is_bifrosts_thought() -> None:
    body = encoded(decode(SIMPLE_TEXT), answer("4", reasoning_content="2+2"))
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "4", "thought": "2+2"}


@pytest.mark.parametrize(("attempts", "retries"), [(1, "0"), (3, "2")])
def test_x_bf_retries_counts_attempts_beyond_the_first(attempts: int, retries: str) -> None:
    reply = Reply("anthropic", "claude-2.1", response=answer(), attempts=attempts)
    assert DIALECT.response_headers(decode(SIMPLE_TEXT), reply) == {"x-bf-retries": retries}


def _stream(call: Call, chunks: list[Chunk]) -> bytes:
    encoder = DIALECT.stream_encoder(call, Reply("anthropic", "claude-2.1", response=answer()))
    assert encoder.keepalive is None
    return b"".join(encoder.chunk(chunk) for chunk in chunks) + encoder.end()


def _chunk(delta: Delta | None, finish: str | None = None, usage: Usage | None = None) -> Chunk:
    choices = [] if delta is None else [ChunkChoice(0, delta, finish_reason=finish)]  # type: ignore[arg-type]
    return Chunk(id="cmpl-1", model="claude-2.1", created=1, choices=choices, usage=usage)


def test_stream_frames_are_bifrost_chunks_then_done() -> None:
    raw = _stream(
        decode({**SIMPLE_TEXT, "stream": True}),
        [
            _chunk(Delta(role="assistant", content="")),
            _chunk(Delta(content="It")),
            _chunk(Delta()),  # carries nothing: no frame
            _chunk(Delta(content=" is.")),
            _chunk(Delta(), finish="stop"),
            _chunk(None, usage=Usage(input=3, output=2)),
        ],
    )
    assert raw.endswith(b"data: [DONE]\n\n")
    payloads, error = data_payloads(raw)
    assert error is None
    for payload in payloads:
        validate_schema(SPEC, STREAM_CHUNK, payload)
        assert payload["extra_fields"]["provider"] == "anthropic"
        assert payload["extra_fields"]["model_params"] == {"max_tokens": 100, "temperature": 0.7}
    assert [p["choices"] for p in payloads] == [
        [{"index": 0, "delta": {"role": "assistant"}}],
        [{"index": 0, "delta": {"content": "It"}}],
        [{"index": 0, "delta": {"content": " is."}}],
        [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        [],
    ]
    assert payloads[-1]["usage"]["total_tokens"] == 5
    assert ADAPTER.read_stream(raw).text == "It is."


def test_stream_failure_is_one_bifrost_error_frame_without_done() -> None:
    encoder = DIALECT.stream_encoder(
        decode(SIMPLE_TEXT), Reply("anthropic", "m", response=answer())
    )
    frame = encoder.error(UpstreamUnavailable("upstream cut the stream", provider="anthropic"))
    assert frame.startswith(b"data: ")
    assert frame.endswith(b"\n\n")
    payload = json.loads(frame.removeprefix(b"data: "))
    validate_in(SPEC, "BifrostError", payload)
    assert payload["status_code"] == 502
    assert payload["error"]["message"] == "upstream cut the stream"


# ---------------------------------------------------------------------------------------------
# Bifrost's fallbacks on the chat route
# ---------------------------------------------------------------------------------------------


def test_chat_route_takes_fallbacks_as_options_not_as_upstream_fields() -> None:
    body = json.dumps(CHAT_EXAMPLES["with_fallbacks"]).encode()
    call = CHAT.decode(body, {}, "req-1", time.perf_counter())
    assert call.options.fallbacks == ["anthropic/claude-3-sonnet-20240229", "cohere/command"]
    assert "fallbacks" not in call.extra


def test_chat_route_without_fallbacks_has_none() -> None:
    call = CHAT.decode(json.dumps(CHAT_EXAMPLES["simple_chat"]).encode(), {}, "r", 0.0)
    assert call.options.fallbacks is None


@pytest.mark.parametrize(("fallbacks", "param"), [("a/b", "fallbacks"), ([""], "fallbacks[0]")])
def test_chat_route_rejects_malformed_fallbacks(fallbacks: Any, param: str) -> None:
    body = json.dumps({**CHAT_EXAMPLES["simple_chat"], "fallbacks": fallbacks}).encode()
    with pytest.raises(BadRequest) as caught:
        CHAT.decode(body, {}, "req-1", time.perf_counter())
    assert caught.value.param == param


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[FakeOpenAI, str]]:
    fake = FakeOpenAI()
    runner, url = await start_site(fake.app())
    yield fake, url
    await runner.cleanup()


async def test_chat_fallbacks_never_reach_the_upstream_and_no_extra_fields_come_back(
    tmp_path: Path, upstream: tuple[FakeOpenAI, str]
) -> None:
    fake, url = upstream
    config = f'providers:\n  up: {{type: openai, base_url: "{url}/v1", api_key: "sk-up"}}\n'
    body = {**CHAT_EXAMPLES["with_fallbacks"], "model": "up/gpt-test"}
    async with serve(tmp_path, config) as gateway:
        reply = await post(gateway, "/v1/chat/completions", body)
    assert reply.status == 200, reply.body
    assert "fallbacks" not in fake.requests[-1]
    assert fake.requests[-1]["messages"] == body["messages"]
    assert "extra_fields" not in reply.json()
    assert reply.headers["x-crossway-provider"] == "up"


# ---------------------------------------------------------------------------------------------
# End to end: Bifrost's examples verbatim, and fallbacks honoured
# ---------------------------------------------------------------------------------------------


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[str]:
    async with serve(tmp_path) as url:
        yield url


@pytest.mark.parametrize("example", [SIMPLE_TEXT, WITH_STOP_SEQUENCES], ids=["simple", "stop"])
async def test_text_examples_verbatim_succeed(gateway: str, example: dict[str, Any]) -> None:
    reply = await post(gateway, "/v1/text/completions", example)
    assert reply.status == 200, reply.body
    assert reply.headers["x-bf-retries"] == "0"
    body = reply.json()
    outcome = ADAPTER.read_response(body)
    assert outcome.text == f"This is the Crossway mock provider. You said: {example['text']}"
    assert body["model"] == "claude-2.1"
    extra = body["extra_fields"]
    assert extra["provider"] == "anthropic"
    assert extra["model_params"]["max_tokens"] == example["max_tokens"]
    assert extra["model_params"]["temperature"] == example["temperature"]
    assert extra["latency"] >= 0


async def test_text_example_streamed(gateway: str) -> None:
    reply = await post(gateway, "/v1/text/completions", {**SIMPLE_TEXT, "stream": True})
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("text/event-stream")
    outcome = ADAPTER.read_stream(reply.body)
    assert outcome.text.endswith(SIMPLE_TEXT["text"])
    assert outcome.output_tokens == len(outcome.text.split())


@pytest.mark.parametrize("name", list(CHAT_EXAMPLES))
async def test_chat_examples_verbatim_succeed(gateway: str, name: str) -> None:
    reply = await post(gateway, "/v1/chat/completions", CHAT_EXAMPLES[name])
    assert reply.status == 200, reply.body
    assert reply.json()["choices"][0]["message"]["role"] == "assistant"


async def test_bifrost_errors_over_http_keep_bifrosts_shape(gateway: str) -> None:
    reply = await post(gateway, "/v1/text/completions", {"model": "claude-2.1", "text": "x"})
    assert reply.status == 400
    assert (
        ADAPTER.read_error(400, reply.json()) == "Model must be in the format of 'provider/model'"
    )


FALLBACK_CONFIG = MOCK_PROVIDERS + textwrap.dedent(
    """\
    plugins:
      - fallback: {}
    """
)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_request_fallbacks_serve_when_the_primary_fails(tmp_path: Path, stream: bool) -> None:
    body = {"model": "openai/error-503", "text": "rescue me", "fallbacks": ["anthropic/echo"]}
    async with serve(tmp_path, FALLBACK_CONFIG) as url:
        reply = await post(url, "/v1/text/completions", {**body, "stream": stream})
    assert reply.status == 200, reply.body
    assert reply.headers["x-bf-retries"] == "1"
    assert reply.headers["x-crossway-provider"] == "anthropic"
    if stream:
        assert ADAPTER.read_stream(reply.body).text == "rescue me"
        return
    assert ADAPTER.read_response(reply.json()).text == "rescue me"
    assert reply.json()["extra_fields"]["provider"] == "anthropic"


@pytest.mark.parametrize("given", [{}, {"temperature": None, "max_tokens": None}])
def test_model_params_echo_only_what_was_given(given: dict[str, Any]) -> None:
    body = encoded(decode({"model": "a/b", "text": "x", **given}), answer())
    assert body["extra_fields"]["model_params"] == {}
