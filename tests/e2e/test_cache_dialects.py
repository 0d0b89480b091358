"""A cached answer serves every dialect, whole or streamed, whichever way it was stored.

The dialect conformance adapters (``tests/proxy/dialects/adapters``) build each dialect's
request and read its answers, validating every body and stream event against the dialect's
schema and framing; here the second request of each pair is answered by the cache.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from proxy.dialects import all_dialects
from tests.proxy.dialects.adapters import load_adapters
from tests.proxy.dialects.adapters.gateway import MOCK_PROVIDERS, Answer, post, serve

ADAPTERS = load_adapters()
DIALECTS = sorted(dialect.name for dialect in all_dialects())
WITH_TOOLS = [name for name in DIALECTS if ADAPTERS[name].supports_tools]
TEXT = "the cache says hello"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[str]:
    async with serve(tmp_path, MOCK_PROVIDERS + "plugins:\n  - cache: {}\n") as url:
        yield url


async def ask(gateway: str, dialect: str, model: str, *, stream: bool, tools=None) -> Answer:
    path, body = ADAPTERS[dialect].request(model, TEXT, stream=stream, tools=tools)
    answer = await post(gateway, path, body)
    assert answer.status == 200, answer.body
    return answer


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_whole_answer_replays_as_a_valid_stream(gateway: str, dialect: str) -> None:
    adapter = ADAPTERS[dialect]
    whole = await ask(gateway, dialect, "openai/echo", stream=False)
    assert whole.headers["x-crossway-cache"] == "miss"
    streamed = await ask(gateway, dialect, "openai/echo", stream=True)
    assert streamed.headers["x-crossway-cache"] == "hit"
    assert adapter.read_stream(streamed.body) == adapter.read_response(whole.json())


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_stored_stream_answers_a_whole_request(gateway: str, dialect: str) -> None:
    adapter = ADAPTERS[dialect]
    streamed = await ask(gateway, dialect, "openai/echo", stream=True)
    assert streamed.headers["x-crossway-cache"] == "miss"
    whole = await ask(gateway, dialect, "openai/echo", stream=False)
    assert whole.headers["x-crossway-cache"] == "hit"
    assert adapter.read_response(whole.json()) == adapter.read_stream(streamed.body)
    again = await ask(gateway, dialect, "openai/echo", stream=True)
    assert again.headers["x-crossway-cache"] == "hit"
    assert adapter.read_stream(again.body) == adapter.read_stream(streamed.body)


@pytest.mark.parametrize("dialect", WITH_TOOLS)
@pytest.mark.parametrize("stream_first", [False, True], ids=["whole-first", "stream-first"])
async def test_tool_calls_replay_in_every_dialect(
    gateway: str, dialect: str, stream_first: bool
) -> None:
    adapter = ADAPTERS[dialect]
    first = await ask(gateway, dialect, "openai/tools", stream=stream_first, tools=TOOLS)
    second = await ask(gateway, dialect, "openai/tools", stream=not stream_first, tools=TOOLS)
    assert (first.headers["x-crossway-cache"], second.headers["x-crossway-cache"]) == (
        "miss",
        "hit",
    )
    whole, streamed = (second, first) if stream_first else (first, second)
    outcome = adapter.read_response(whole.json())
    assert outcome.tool_calls
    assert adapter.read_stream(streamed.body) == outcome
