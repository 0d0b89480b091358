"""The official ``anthropic`` SDK against the gateway's ``/v1/messages``, in front of the fake
OpenAI upstream and the mock provider: any provider behind an Anthropic client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from aiohttp import web

from tests.e2e.conftest import UPSTREAM_KEY, start_site
from tests.e2e.dialect_gateway import dialect_config
from tests.e2e.fake_openai import ANSWER, FakeOpenAI
from tests.proxy.dialects.adapters.anthropic import ADAPTER
from tests.proxy.dialects.adapters.gateway import post, serve
from tests.schemas import validate_in

SPEC = "anthropic-messages.openapi.json"
CLIENT_KEY = "sk-ant-client-key"
WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
}
HI = [{"role": "user", "content": "Hi"}]


class Gateway:
    """A running gateway, the fake upstream behind it, and SDK clients for it."""

    def __init__(self, url: str, upstream: FakeOpenAI) -> None:
        self.url = url
        self.upstream = upstream

    def client(self) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(base_url=self.url, api_key=CLIENT_KEY, max_retries=0)


@pytest.fixture
async def gateway(tmp_path: Path, upstream: tuple[FakeOpenAI, str]) -> AsyncIterator[Gateway]:
    fake, upstream_url = upstream
    async with serve(tmp_path, dialect_config(upstream_url)) as url:
        yield Gateway(url, fake)


async def test_the_spec_example_sent_verbatim(gateway: Gateway) -> None:
    raw = (
        b'{"max_tokens": 1024, "messages": [{"content": "Hello, world", "role": "user"}], '
        b'"model": "claude-opus-4-6"}'
    )
    answer = await post(gateway.url, "/v1/messages", raw)
    assert answer.status == 200, answer.body
    assert ADAPTER.read_response(answer.json()).text == ANSWER
    sent = gateway.upstream.requests[-1]
    assert (sent["model"], sent["max_tokens"]) == ("gpt-test", 1024)
    assert sent["messages"] == [{"role": "user", "content": "Hello, world"}]


async def test_create_with_parameters_and_usage(gateway: Gateway) -> None:
    raw = await gateway.client().messages.with_raw_response.create(
        model="chat",
        max_tokens=100,
        system="Be brief.",
        messages=HI,
        stop_sequences=["END"],
        metadata={"user_id": "user-1"},
        # Deprecated by Anthropic and gone from this SDK's signature; older clients send them.
        extra_body={"temperature": 0.2, "top_k": 5},
    )
    message = await raw.parse()
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == ANSWER  # type: ignore[union-attr]
    assert (message.role, message.stop_reason, message.model) == (
        "assistant",
        "end_turn",
        "gpt-test",
    )
    usage = message.usage
    assert (usage.input_tokens, usage.cache_read_input_tokens, usage.output_tokens) == (6, 4, 5)
    assert usage.cache_creation_input_tokens == 0
    assert message._request_id == raw.headers["x-request-id"]
    validate_in(SPEC, "Message", message.to_dict(exclude_none=False))  # type: ignore[arg-type]
    sent = gateway.upstream.requests[-1]
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    expected = {
        "max_tokens": 100,
        "temperature": 0.2,
        "top_k": 5,
        "stop": ["END"],
        "user": "user-1",
    }
    assert {key: sent[key] for key in expected} == expected
    headers = gateway.upstream.headers[-1]
    assert headers["Authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert CLIENT_KEY not in str(headers), "the client's x-api-key never reaches the upstream"


async def test_streaming_text(gateway: Gateway) -> None:
    async with gateway.client().messages.stream(
        model="chat", max_tokens=100, messages=HI
    ) as stream:
        text = "".join([piece async for piece in stream.text_stream])
        message = await stream.get_final_message()
    assert text == ANSWER
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (6, 5)
    assert message.usage.cache_read_input_tokens == 4
    assert gateway.upstream.requests[-1]["stream"] is True


async def test_streaming_raw_events_follow_the_schema(gateway: Gateway) -> None:
    answer = await post(
        gateway.url,
        "/v1/messages",
        {"model": "mock/default", "max_tokens": 3, "messages": HI, "stream": True},
    )
    outcome = ADAPTER.read_stream(answer.body)
    assert outcome.text == "This is the"
    assert b"event: message_delta" in answer.body
    assert b'"stop_reason":"max_tokens"' in answer.body


async def test_tool_use_round_trip(gateway: Gateway) -> None:
    client = gateway.client()
    question = [{"role": "user", "content": "Weather in Paris?"}]
    first = await client.messages.create(
        model="chat",
        max_tokens=200,
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=question,  # type: ignore[arg-type]
    )
    assert first.stop_reason == "tool_use"
    (tool_use,) = first.content
    assert tool_use.type == "tool_use"
    assert (tool_use.id, tool_use.name, tool_use.input) == (
        "toolu_fake_1",  # Anthropic-style, from the upstream's call_fake_1
        "get_weather",
        {"city": "Paris", "days": 3},
    )
    assert gateway.upstream.requests[-1]["tool_choice"] == {
        "type": "function",
        "function": {"name": "get_weather"},
    }
    second = await client.messages.create(
        model="chat",
        max_tokens=200,
        tools=[WEATHER],  # type: ignore[list-item]
        messages=[
            *question,
            {"role": "assistant", "content": first.content},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": tool_use.id, "content": "18C, sunny"}
                ],
            },
        ],  # type: ignore[arg-type]
    )
    assert second.content[0].type == "tool_use", "the fake upstream calls a tool whenever offered"
    sent = gateway.upstream.requests[-1]["messages"]
    assert sent[1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "toolu_fake_1",  # the id the client saw, in call and result alike
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris","days":3}'},
                }
            ],
        },
        {"role": "tool", "content": "18C, sunny", "tool_call_id": "toolu_fake_1"},
    ]


@pytest.mark.parametrize("model", ["chat", "mock/tools"])
async def test_streaming_tool_use(gateway: Gateway, model: str) -> None:
    events: list[str] = []
    async with gateway.client().messages.stream(
        model=model,
        max_tokens=200,
        tools=[WEATHER],  # type: ignore[list-item]
        messages=[{"role": "user", "content": "Paris"}],
    ) as stream:
        async for event in stream:
            events.append(event.type)
        message = await stream.get_final_message()
    assert message.stop_reason == "tool_use"
    (tool_use,) = message.content
    assert tool_use.type == "tool_use"
    assert tool_use.name == "get_weather"
    assert tool_use.input == (
        {"city": "Paris", "days": 3} if model == "chat" else {"city": "Paris", "days": 1}
    )
    assert "input_json" in events


async def test_sync_client_in_a_thread(gateway: Gateway) -> None:
    client = anthropic.Anthropic(base_url=gateway.url, api_key=CLIENT_KEY, max_retries=0)
    message = await asyncio.to_thread(
        client.messages.create, model="mock/echo", max_tokens=50, messages=HI
    )
    assert message.content[0].text == "Hi"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("model", "error", "status", "error_type"),
    [
        ("nope/x", anthropic.NotFoundError, 404, "not_found_error"),
        ("up/fail-429", anthropic.RateLimitError, 429, "rate_limit_error"),
        ("up/fail-500", anthropic.InternalServerError, 502, "api_error"),
        ("mock/error-529", anthropic.InternalServerError, 503, "overloaded_error"),
    ],
)
async def test_errors_reach_the_sdk_as_anthropic_errors(
    gateway: Gateway,
    model: str,
    error: type[anthropic.APIStatusError],
    status: int,
    error_type: str,
) -> None:
    with pytest.raises(error) as info:
        await gateway.client().messages.create(model=model, max_tokens=10, messages=HI)
    assert info.value.status_code == status
    body: Any = info.value.body
    assert body["type"] == "error"
    assert body["error"]["type"] == error_type
    assert UPSTREAM_KEY not in body["error"]["message"]
    validate_in(SPEC, "ErrorResponse", body)


async def test_bad_request_names_the_field(gateway: Gateway) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        await gateway.client().messages.create(
            model="chat", max_tokens=10, messages=HI, extra_body={"temperature": 1.5}
        )
    body: Any = info.value.body
    assert body["error"]["type"] == "invalid_request_error"
    assert "temperature" in body["error"]["message"]


async def test_failure_mid_stream_raises_in_the_sdk(gateway: Gateway) -> None:
    text: list[str] = []

    async def consume() -> None:
        async with gateway.client().messages.stream(
            model="mock/cut-3", max_tokens=50, messages=[{"role": "user", "content": "a b c d"}]
        ) as stream:
            async for piece in stream.text_stream:
                text.append(piece)

    with pytest.raises(anthropic.APIStatusError, match="mock upstream cut the stream"):
        await consume()
    assert "".join(text) == "This is"


# An Anthropic upstream whose answers end at one of the request's stop sequences.
STOP_MESSAGE = {
    "id": "msg_01Stop",
    "type": "message",
    "role": "assistant",
    "model": "claude-upstream",
    "content": [{"type": "text", "text": "One, two"}],
    "stop_reason": "stop_sequence",
    "stop_sequence": ", three",
    "usage": {"input_tokens": 8, "output_tokens": 3},
}


async def stop_sequence_upstream(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    if not body.get("stream"):
        return web.json_response(STOP_MESSAGE)
    start = {**STOP_MESSAGE, "content": [], "stop_reason": None, "stop_sequence": None}
    events = [
        ("message_start", {"type": "message_start", "message": start}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "One, two"},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "stop_sequence", "stop_sequence": ", three"},
                "usage": {"output_tokens": 3},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    response = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await response.prepare(request)
    for name, data in events:
        await response.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
    await response.write_eof()
    return response


async def test_stop_sequence_is_the_stop_reason_when_the_upstream_names_it(
    tmp_path: Path,
) -> None:
    upstream = web.Application()
    upstream.router.add_post("/v1/messages", stop_sequence_upstream)
    runner, upstream_url = await start_site(upstream)
    config = f"""\
server: {{access_log: false}}
providers:
  claude: {{type: anthropic, base_url: "{upstream_url}", api_key: "sk-ant-upstream-0123456789"}}
"""
    try:
        async with serve(tmp_path, config) as url:
            client = anthropic.AsyncAnthropic(base_url=url, api_key=CLIENT_KEY, max_retries=0)
            request = {
                "model": "claude/claude-upstream",
                "max_tokens": 50,
                "messages": HI,
                "stop_sequences": [", three"],
            }
            message = await client.messages.create(**request)  # type: ignore[call-overload]
            async with client.messages.stream(**request) as stream:
                streamed = await stream.get_final_message()
    finally:
        await runner.cleanup()
    for answer in (message, streamed):
        assert (answer.stop_reason, answer.stop_sequence) == ("stop_sequence", ", three")
        assert answer.content[0].text == "One, two"  # type: ignore[union-attr]


async def test_openai_url_citations_become_anthropic_citations(gateway: Gateway) -> None:
    client = gateway.client()
    request = {"model": "up/gpt-rich", "max_tokens": 50, "messages": HI}
    message = await client.messages.create(**request)  # type: ignore[call-overload]
    async with client.messages.stream(**request) as stream:  # type: ignore[arg-type]
        streamed = await stream.get_final_message()
    citation = {
        "type": "web_search_result_location",
        "cited_text": "Paris",
        "url": "https://en.wikipedia.org/wiki/Paris",
        "title": "Paris - Wikipedia",
        "encrypted_index": "",
    }
    blocks = [block.model_dump(exclude_none=True) for block in message.content]
    assert blocks == [
        {"type": "text", "text": "Paris", "citations": [citation]},
        {"type": "text", "text": " is the capital of France."},
    ]
    validate_in(SPEC, "Message", message.to_dict(exclude_none=False))  # type: ignore[arg-type]
    text = "".join(block.text for block in streamed.content if block.type == "text")
    assert text == "Paris is the capital of France."
    cited = [c.model_dump() for block in streamed.content for c in (block.citations or [])]  # type: ignore[union-attr]
    assert cited == [citation]
