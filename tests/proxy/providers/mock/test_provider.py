"""proxy/providers/mock/provider.py: the offline provider and its fault models (chosen by model
name)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from proxy.core.canonical import (
    Call,
    FunctionCall,
    FunctionDefinition,
    Message,
    Params,
    Tool,
    ToolCall,
    Usage,
)
from proxy.core.errors import (
    UpstreamAuthError,
    UpstreamClientError,
    UpstreamError,
    UpstreamOverloaded,
    UpstreamRateLimited,
    UpstreamUnavailable,
)
from proxy.core.reply import Chunk, Response
from proxy.providers.base import LocalProvider
from proxy.providers.mock.provider import MockConfig, MockProvider

SHORT = 0.05  # seconds to wait for something that must never happen


def mock(**config: Any) -> MockProvider:
    return MockProvider("mock", MockConfig(**{"faults": True, **config}))


def make_call(text: str = "hello world", *, stream: bool = False, **params: Any) -> Call:
    return Call(
        request_id="req-1",
        dialect="openai",
        model="mock/x",
        messages=[Message(role="user", content=text)],
        stream=stream,
        params=Params(**params),
    )


async def whole(model: str, call: Call | None = None) -> Response:
    result = await mock().complete(call or make_call(), model)
    assert isinstance(result, Response)
    return result


async def streamed(model: str, call: Call | None = None) -> list[Chunk]:
    result = await mock().complete(call or make_call(stream=True), model)
    assert not isinstance(result, Response)
    return [chunk async for chunk in result]


def stream_text(chunks: list[Chunk]) -> str:
    return "".join(
        c.delta.content
        for chunk in chunks
        for c in chunk.choices
        if isinstance(c.delta.content, str)
    )


def test_is_a_ready_local_provider_without_secrets():
    provider = mock()
    assert isinstance(provider, LocalProvider)
    assert provider.ready is True
    assert provider.secrets == ()


# ---------------------------------------------------------------------------------------------
# Normal answers
# ---------------------------------------------------------------------------------------------


async def test_default_answer_quotes_the_last_user_message():
    response = await whole("anything")
    (choice,) = response.choices
    assert choice.message.role == "assistant"
    assert choice.message.content == "This is the Crossway mock provider. You said: hello world"
    assert choice.finish_reason == "stop"
    assert response.model == "anything"
    assert response.id.startswith("chatcmpl-mock-")


async def test_default_answer_quotes_at_most_forty_words():
    words = [f"w{i}" for i in range(60)]
    response = await whole("default", make_call(" ".join(words)))
    assert response.choices[0].message.content.endswith(" ".join(words[:40]))


async def test_echo_returns_the_last_user_message_verbatim():
    call = Call(
        request_id="r",
        dialect="openai",
        model="mock/echo",
        messages=[
            Message(role="system", content="sys"),
            Message(role="user", content="first"),
            Message(role="assistant", content="reply"),
            Message(role="user", content="  the  last one "),
        ],
    )
    response = await whole("echo", call)
    assert response.choices[0].message.content == "  the  last one "
    assert response.choices[0].finish_reason == "stop"


async def test_token_counts():
    # One token per whitespace-separated word; each prompt message costs one more.
    call = Call(
        request_id="r",
        dialect="openai",
        model="m",
        messages=[Message(role="system", content="be nice"), Message(role="user", content="a b c")],
    )
    response = await whole("echo", call)
    assert response.usage == Usage(input=(2 + 1) + (3 + 1), output=3)


async def test_default_answer_token_counts():
    response = await whole("default")
    content = response.choices[0].message.content
    assert response.usage == Usage(input=3, output=len(content.split()))


async def test_n_choices():
    response = await whole("echo", make_call("one two", n=3))
    assert [c.index for c in response.choices] == [0, 1, 2]
    assert {c.message.content for c in response.choices} == {"one two"}
    assert response.usage == Usage(input=3, output=6)


@pytest.mark.parametrize("limit", ["max_tokens", "max_completion_tokens"])
async def test_max_tokens_truncates_with_finish_reason_length(limit: str):
    response = await whole("echo", make_call("one two three four five", **{limit: 2}))
    (choice,) = response.choices
    assert choice.message.content == "one two"
    assert choice.finish_reason == "length"
    assert response.usage.output == 2


async def test_max_tokens_not_reached_stops_normally():
    response = await whole("echo", make_call("one two", max_tokens=2))
    assert response.choices[0].message.content == "one two"
    assert response.choices[0].finish_reason == "stop"


async def test_same_call_same_output():
    first = msgspec.to_builtins(await whole("default"))
    second = msgspec.to_builtins(await whole("default"))
    assert first == second
    assert msgspec.to_builtins(await streamed("default")) == msgspec.to_builtins(
        await streamed("default")
    )


async def test_response_id_depends_on_the_request():
    one = await whole("default", make_call())
    other_call = make_call()
    other_call.request_id = "req-2"
    other = await whole("default", other_call)
    assert one.id != other.id


async def test_latency_setting_still_answers():
    result = await mock(latency_ms=1).complete(make_call(), "echo")
    assert isinstance(result, Response)


# ---------------------------------------------------------------------------------------------
# Streams
# ---------------------------------------------------------------------------------------------


async def test_stream_rebuilds_the_whole_answer():
    chunks = await streamed("default")
    assert stream_text(chunks) == (await whole("default")).choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.finish_reason for chunk in chunks for c in chunk.choices if c.finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].choices == []
    assert chunks[-1].usage == Usage(input=3, output=10)
    assert all(chunk.usage is None for chunk in chunks[:-1])
    assert len({chunk.id for chunk in chunks}) == 1


async def test_stream_with_max_tokens():
    chunks = await streamed("echo", make_call("a b c d", stream=True, max_tokens=3))
    assert stream_text(chunks) == "a b c"
    finishes = [c.finish_reason for chunk in chunks for c in chunk.choices if c.finish_reason]
    assert finishes == ["length"]


async def test_stream_paced_by_tokens_per_second():
    result = await mock(tokens_per_second=10_000).complete(make_call(stream=True), "echo")
    assert stream_text([chunk async for chunk in result]) == "hello world"


# ---------------------------------------------------------------------------------------------
# Tools
# ---------------------------------------------------------------------------------------------


WEATHER = Tool(
    function=FunctionDefinition(
        name="get_weather",
        parameters={
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "celsius": {"type": "boolean"},
                "lat": {"type": "number"},
                "tags": {"type": "array"},
            },
        },
    )
)


async def test_tools_calls_the_first_tool_with_schema_shaped_arguments():
    other = Tool(function=FunctionDefinition(name="other"))
    response = await whole("tools", make_call("Paris", tools=[WEATHER, other]))
    (choice,) = response.choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (tool_call,) = choice.message.tool_calls
    assert tool_call.function.name == "get_weather"
    assert tool_call.id.startswith("call_mock_")
    assert json.loads(tool_call.function.arguments) == {
        "city": "Paris",
        "days": 1,
        "celsius": True,
        "lat": 1.0,
        "tags": None,
    }


async def test_tools_stream_rebuilds_the_call():
    call = make_call("Paris", stream=True, tools=[WEATHER])
    chunks = await streamed("tools", call)
    deltas = [c.delta for chunk in chunks for c in chunk.choices]
    first = deltas[0].tool_calls[0]
    assert first.id.startswith("call_mock_")
    assert first.function.name == "get_weather"
    arguments = "".join(
        tc.function.arguments
        for d in deltas
        if isinstance(d.tool_calls, list)
        for tc in d.tool_calls
        if isinstance(tc.function.arguments, str)
    )
    whole_call = (await whole("tools", make_call("Paris", tools=[WEATHER]))).choices[0]
    assert arguments == whole_call.message.tool_calls[0].function.arguments
    finishes = [c.finish_reason for chunk in chunks for c in chunk.choices if c.finish_reason]
    assert finishes == ["tool_calls"]


async def test_tools_answers_with_the_tool_result_once_there_is_one():
    call = make_call("Paris", tools=[WEATHER])
    call.messages += [
        Message(role="assistant", tool_calls=[ToolCall(id="c", function=FunctionCall("f"))]),
        Message(role="tool", content="18C, sunny", tool_call_id="c"),
    ]
    response = await whole("tools", call)
    (choice,) = response.choices
    assert choice.message.content == "The tool said: 18C, sunny"
    assert choice.finish_reason == "stop"


async def test_tools_model_without_tools_answers_with_text():
    response = await whole("tools")
    assert response.choices[0].message.tool_calls is msgspec.UNSET
    assert response.choices[0].finish_reason == "stop"


# ---------------------------------------------------------------------------------------------
# Faults
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "cls", "client_status"),
    [
        (400, UpstreamClientError, 400),
        (401, UpstreamAuthError, 502),
        (429, UpstreamRateLimited, 429),
        (500, UpstreamError, 502),
        (503, UpstreamOverloaded, 503),
        (529, UpstreamOverloaded, 503),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_error_status(status, cls, client_status, stream):
    with pytest.raises(UpstreamError) as info:
        await mock().complete(make_call(stream=stream), f"error-{status}")
    assert type(info.value) is cls
    assert info.value.status == client_status
    assert info.value.upstream_status == status
    assert info.value.provider == "mock"


async def test_error_429_carries_retry_after():
    with pytest.raises(UpstreamRateLimited) as info:
        await mock().complete(make_call(), "error-429")
    assert info.value.retry_after == 1.0
    assert info.value.response_headers()["Retry-After"] == "1"


async def test_slow_awaits_then_answers():
    task = asyncio.ensure_future(mock().complete(make_call(), "slow-20"))
    await asyncio.sleep(0)
    assert not task.done()  # it is waiting, not answering at once
    result = await task
    assert isinstance(result, Response)
    assert result.choices[0].finish_reason == "stop"


async def test_hang_never_answers():
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(mock().complete(make_call(), "hang"), SHORT)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(mock().complete(make_call(stream=True), "hang"), SHORT)


async def test_cut_streams_n_chunks_then_drops():
    result = await mock().complete(make_call(stream=True), "cut-2")
    assert isinstance(result, AsyncIterator)
    received = [await anext(result), await anext(result)]
    assert all(isinstance(chunk, Chunk) for chunk in received)
    with pytest.raises(UpstreamUnavailable):
        await anext(result)


async def test_cut_zero_fails_before_the_first_chunk():
    result = await mock().complete(make_call(stream=True), "cut-0")
    with pytest.raises(UpstreamUnavailable):
        await anext(result)


async def test_cut_without_stream_fails_at_once():
    with pytest.raises(UpstreamUnavailable):
        await mock().complete(make_call(), "cut-3")


async def test_stall_streams_n_chunks_then_goes_silent():
    result = await mock().complete(make_call(stream=True), "stall-2")
    assert len([await anext(result), await anext(result)]) == 2
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(anext(result), SHORT)
    await result.aclose()


async def test_stall_without_stream_answers_normally():
    result = await mock().complete(make_call(), "stall-1")
    assert isinstance(result, Response)


@pytest.mark.parametrize("model", ["error-", "error-x", "slow", "cut-two", "Error-500", "hang-1"])
async def test_lookalike_names_are_ordinary_models(model: str):
    response = await whole(model)
    assert response.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("model", ["hang", "slow-100000", "error-500", "cut-0", "stall-0"])
async def test_fault_models_are_ordinary_names_unless_faults_are_on(model: str) -> None:
    provider = MockProvider("mock", MockConfig())
    response = await asyncio.wait_for(provider.complete(make_call(), model), timeout=5)
    assert isinstance(response, Response)
    assert response.choices[0].message.content.startswith("This is the Crossway mock provider.")
