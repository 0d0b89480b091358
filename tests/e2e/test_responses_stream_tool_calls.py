"""A streamed Responses function call read by the official openai SDK's ``responses.stream()``
helper, first from the upstream (arguments in pieces) and then replayed by the cache (the whole
call in one chunk): ``response.output_item.added`` announces the call with empty arguments, the
``function_call_arguments.delta`` events carry them once, and the SDK's snapshot
(``get_final_response()``) holds arguments that parse as one JSON object."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest

from tests.proxy.dialects.adapters.gateway import MOCK_PROVIDERS, serve

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[openai.AsyncOpenAI]:
    async with (
        serve(tmp_path, MOCK_PROVIDERS + "plugins:\n  - cache: {}\n") as url,
        openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="client", max_retries=0) as sdk,
    ):
        yield sdk


async def streamed_call(client: openai.AsyncOpenAI) -> tuple[str, list[str], list[str], str]:
    """The cache header, the arguments ``output_item.added`` announced, the argument deltas,
    and the arguments of the SDK's final snapshot."""
    announced: list[str] = []
    deltas: list[str] = []
    async with client.responses.stream(
        model="mock/tools",
        input="Paris",
        tools=[WEATHER],  # type: ignore[list-item]
    ) as stream:
        cache = stream._response.headers.get("x-crossway-cache", "")
        async for event in stream:
            if event.type == "response.output_item.added" and event.item.type == "function_call":
                announced.append(event.item.arguments)
            if event.type == "response.function_call_arguments.delta":
                deltas.append(event.delta)
        final = await stream.get_final_response()
    (call,) = [item for item in final.output if item.type == "function_call"]
    return cache, announced, deltas, call.arguments


async def test_tool_call_arguments_stream_once_from_upstream_and_from_the_cache(
    client: openai.AsyncOpenAI,
) -> None:
    first = await streamed_call(client)
    replayed = await streamed_call(client)
    assert (first[0], replayed[0]) == ("miss", "hit")
    for _, announced, deltas, arguments in (first, replayed):
        assert announced == [""]
        assert "".join(deltas) == arguments
        assert json.loads(arguments) == {"city": "Paris"}
    assert len(replayed[2]) == 1  # the cache replays the call whole: one delta carries it
