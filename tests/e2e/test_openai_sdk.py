"""The official openai SDK against the gateway, in front of a real OpenAI-shaped upstream."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest

from tests.e2e.conftest import UPSTREAM_KEY, Running
from tests.e2e.fake_openai import ANSWER, RICH_BODY, RICH_TEXT, rich_frames

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    }
]
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


async def test_async_chat_through_alias(gateway: Running) -> None:
    client = gateway.client()
    raw = await client.chat.completions.with_raw_response.create(
        model="chat", messages=MESSAGES, temperature=0.2, extra_body={"top_k": 5}
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == ANSWER
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == 10
    assert completion.usage.completion_tokens == 5
    assert completion.usage.prompt_tokens_details.cached_tokens == 4
    assert raw.headers["x-crossway-model"] == "up/gpt-test"
    assert raw.headers["x-request-id"]
    sent = gateway.upstream.requests[-1]
    assert sent["model"] == "gpt-test"
    assert sent["temperature"] == 0.2
    assert sent["top_k"] == 5, "unknown fields pass through to the provider"
    assert sent["messages"] == MESSAGES
    assert gateway.upstream.headers[-1]["Authorization"] == f"Bearer {UPSTREAM_KEY}"


async def test_sync_client_in_a_thread(gateway: Running) -> None:
    completion = await asyncio.to_thread(
        gateway.sync_client().chat.completions.create, model="up/gpt-test", messages=MESSAGES
    )
    assert completion.choices[0].message.content == ANSWER


async def test_streaming_with_usage(gateway: Running) -> None:
    client = gateway.client()
    stream = await client.chat.completions.create(
        model="chat",
        messages=MESSAGES,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, usage, finish = "", None, None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    assert text == ANSWER
    assert finish == "stop"
    assert usage is not None
    assert usage.total_tokens == 15
    assert gateway.upstream.requests[-1]["stream_options"] == {"include_usage": True}


async def test_streaming_without_usage_hides_usage_chunk(gateway: Running) -> None:
    client = gateway.client()
    stream = await client.chat.completions.create(model="chat", messages=MESSAGES, stream=True)
    chunks = [chunk async for chunk in stream]
    assert all(chunk.usage is None for chunk in chunks)
    assert all(chunk.choices for chunk in chunks)
    # The gateway still asked the upstream for usage, for its own accounting.
    assert gateway.upstream.requests[-1]["stream_options"] == {"include_usage": True}


async def test_tool_call_round_trip(gateway: Running) -> None:
    client = gateway.client()
    first = await client.chat.completions.create(model="chat", messages=MESSAGES, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris", "days": 3}
    followup = [
        *MESSAGES,
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    second = await client.chat.completions.create(model="chat", messages=followup)
    assert second.choices[0].message.content == ANSWER
    sent = gateway.upstream.requests[-1]["messages"]
    assert sent[-1] == {"role": "tool", "tool_call_id": "call_fake_1", "content": "sunny"}
    assert sent[-2]["tool_calls"][0]["function"]["name"] == "get_weather"


async def test_streamed_tool_call_deltas(gateway: Running) -> None:
    client = gateway.client()
    stream = await client.chat.completions.create(
        model="chat", messages=MESSAGES, tools=TOOLS, stream=True
    )
    name, arguments, finish = "", "", None
    async for chunk in stream:
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                name += (delta.function and delta.function.name) or ""
                arguments += (delta.function and delta.function.arguments) or ""
            finish = choice.finish_reason or finish
    assert name == "get_weather"
    assert json.loads(arguments) == {"city": "Paris", "days": 3}
    assert finish == "tool_calls"


async def test_legacy_completions(gateway: Running) -> None:
    client = gateway.client()
    completion = await client.completions.create(model="chat", prompt="Say hi", max_tokens=20)
    assert completion.choices[0].text == ANSWER
    sent = gateway.upstream.requests[-1]
    assert sent["messages"] == [{"role": "user", "content": "Say hi"}]
    assert sent["max_tokens"] == 20
    stream = await client.completions.create(model="chat", prompt="Say hi", stream=True)
    text = "".join([c.choices[0].text async for c in stream if c.choices])
    assert text == ANSWER


async def test_models_lists_only_ready_models(gateway: Running) -> None:
    models = await gateway.client().models.list()
    ids = {model.id for model in models.data}
    assert {"chat", "up/gpt-test"} <= ids
    assert "offline" not in ids


async def test_models_say_the_mock_takes_any_name_and_list_what_the_readme_uses(
    gateway: Running,
) -> None:
    ids = [model.id for model in (await gateway.client().models.list()).data]
    for mock in ("mock", "mockfast"):  # the ready mock providers of this config
        assert {f"{mock}/echo", f"{mock}/tools", f"{mock}/*"} <= set(ids)
    assert "keyless/*" not in ids
    completion = await gateway.client().chat.completions.create(
        model="mock/*", messages=[{"role": "user", "content": "any name"}]
    )
    assert "any name" in (completion.choices[0].message.content or "")


async def test_mock_provider_offline(gateway: Running) -> None:
    completion = await gateway.client().chat.completions.create(
        model="mock/echo", messages=[{"role": "user", "content": "ping pong"}]
    )
    assert completion.choices[0].message.content == "ping pong"


@pytest.mark.parametrize(
    ("model", "error", "status"),
    [
        ("nope", openai.NotFoundError, 404),
        ("offline", openai.InternalServerError, 503),
        ("up/fail-400", openai.BadRequestError, 400),
        ("up/fail-401", openai.InternalServerError, 502),
        ("up/fail-429", openai.RateLimitError, 429),
        ("up/fail-500", openai.InternalServerError, 502),
        ("up/fail-503", openai.InternalServerError, 503),
        ("up/fail-413", openai.BadRequestError, 400),
        ("up/hang", openai.APIStatusError, 504),
    ],
)
async def test_errors_reach_the_sdk_with_the_right_status(
    gateway: Running, model: str, error: type[Exception], status: int
) -> None:
    with pytest.raises(error) as caught:
        await gateway.client().chat.completions.create(model=model, messages=MESSAGES)
    assert caught.value.status_code == status
    assert UPSTREAM_KEY not in str(caught.value.body)
    assert UPSTREAM_KEY not in gateway.logs.getvalue()


async def test_context_window_error_keeps_its_code(gateway: Running) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await gateway.client().chat.completions.create(model="up/fail-413", messages=MESSAGES)
    assert caught.value.code == "context_length_exceeded"


async def test_retry_after_is_relayed(gateway: Running) -> None:
    with pytest.raises(openai.RateLimitError) as caught:
        await gateway.client().chat.completions.create(model="up/fail-429", messages=MESSAGES)
    assert caught.value.response.headers["retry-after"] == "2"


async def test_trace_header_forwarded_but_client_key_is_not(gateway: Running) -> None:
    await gateway.client(default_headers={"x-trace-id": "trace-123"}).chat.completions.create(
        model="chat", messages=MESSAGES
    )
    headers = {k.lower(): v for k, v in gateway.upstream.headers[-1].items()}
    assert headers["x-trace-id"] == "trace-123"
    assert "client-key" not in json.dumps(headers)


# ---------------------------------------------------------------------------------------------
# What the gateway does not model still reaches OpenAI clients
# ---------------------------------------------------------------------------------------------


async def test_unmodelled_response_fields_reach_the_client_whole(gateway: Running) -> None:
    raw = await gateway.client().chat.completions.with_raw_response.create(
        model="up/gpt-rich", messages=MESSAGES
    )
    assert json.loads(raw.content) == RICH_BODY  # every member, at every level
    completion = raw.parse()
    message = completion.choices[0].message
    assert message.annotations is not None
    assert message.annotations[0].url_citation.url == "https://en.wikipedia.org/wiki/Paris"
    assert message.audio is not None
    assert (message.audio.id, message.audio.transcript) == ("audio_abc", RICH_TEXT)
    usage = completion.usage
    assert usage is not None
    assert usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.audio_tokens == 4
    assert usage.completion_tokens_details.accepted_prediction_tokens == 0
    assert completion.model_extra == {"vendor_trace": {"region": "eu-west", "hops": [1, 2]}}


@pytest.mark.parametrize("include_usage", [True, False])
async def test_unmodelled_stream_fields_reach_the_client(
    gateway: Running, include_usage: bool
) -> None:
    extra = {"stream_options": {"include_usage": True}} if include_usage else {}
    stream = await gateway.client().chat.completions.create(
        model="up/gpt-rich", messages=MESSAGES, stream=True, **extra
    )
    received = [chunk.model_dump(exclude_unset=True) async for chunk in stream]
    assert received == rich_frames(include_usage)
    assert gateway.upstream.requests[-1]["stream_options"] == {"include_usage": True}
